"""The full pipeline flow: data stages, multi-seed training, calibration, test evaluation, deployment package.

``execution: local`` runs every stage in this flow run (subflows). ``execution: distributed`` runs the GPU
stages as their own flow runs on the GPU pool's deployments (flows/fanout.py): train-seed and logit-cache once
per seed, evaluate-test once; this run (on the CPU pool) waits for them, decides the calibration from the
recorded caches and assembles the package.
"""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import INPUTS, RUN_ID

from flows import ui
from flows.calibrate import calibrate, decide, evaluate_test, package
from flows.common import flow_run_scope, load_config
from flows.data import data_pipeline
from flows.failures import flow
from flows.fanout import absolute, distributed_evaluate_test, distributed_logit_caches, distributed_train
from flows.params import PipelineParams
from flows.train import multi_seed_train
from rtscore.stages import CalibrationResult, TestResult, TrainResult
from tasks import train as t

STEPS = ["data", "training", "calibrate", "evaluate-test", "package"]


@flow(name="rts-pipeline")
def pipeline(params: PipelineParams) -> dict[str, Any]:
    """generate -> stats -> validation -> multi-seed training -> calibrate -> evaluate-test -> package.

    Every stage is cached on (code, the config sections it uses, its inputs' fingerprints): a retry re-runs
    only what failed and what depends on it. ``execution: distributed`` trains each seed and builds its logit
    cache in flow runs of ``distributed.deployment`` and ``distributed.logit_cache_deployment``, and evaluates
    the test split in a run of ``distributed.evaluate_test_deployment`` (see flows/fanout.py).
    """
    with flow_run_scope() as flow_run_id:
        progress = ui.Progress(
            "rts-pipeline-progress", STEPS, f"{params.run_dir}: {' -> '.join(STEPS)} ({params.execution})"
        )
        out: dict[str, Any] = dict(data_pipeline(params.data()))
        progress.advance("data")
        distributed = params.execution == "distributed"
        if distributed:
            training = _distributed_training(params, _parent_id(flow_run_id))
        else:
            training = multi_seed_train(params.multi_seed())
        trained = [r.result.seed for r in training]
        out["training"] = training
        progress.advance("training")
        calibration: CalibrationResult
        test: TestResult
        if distributed:
            caches = distributed_logit_caches(params, _parent_id(flow_run_id), trained)
            calibration = decide(params.stage(trained), trained, caches)
        else:
            calibration = calibrate(params.stage(trained))
        out["calibration"] = calibration
        progress.advance("calibrate")
        if distributed:
            test = distributed_evaluate_test(params, _parent_id(flow_run_id), trained)  # it publishes the report
        else:
            test = evaluate_test(params.stage(trained))
        out["test"] = test
        progress.advance("evaluate-test")
        out["package"] = package(params.stage(trained))
        progress.advance("package")
        ui.publish_pipeline(params.run_dir, out["calibration"], out["test"], out["package"])
        return out


def _parent_id(flow_run_id: str | None) -> str:
    if flow_run_id is None:
        raise RuntimeError("execution 'distributed' needs a Prefect flow run (its id keys the child runs)")
    return flow_run_id


def _distributed_training(params: PipelineParams, flow_run_id: str) -> list[TrainResult]:
    """One train-seed flow run per seed on the GPU deployment, under one parent MLflow run."""
    cfg = load_config(params)
    seeds = params.seeds or cfg.training.seeds
    # One parent MLflow run per pipeline flow run, also across its retries (the seeds' runs are reused too).
    start = t.start_multiseed.with_options(cache_policy=RUN_ID + INPUTS, persist_result=True)
    parent = start(absolute(params.run_dir), cfg, seeds)  # keyed by the run's location, not the path as typed
    results = distributed_train(params, flow_run_id, seeds, parent)
    t.finish_multiseed(params.run_dir, cfg, parent, results)
    ui.publish_training(params.run_dir, cfg, results, "multi-seed-train", parent_run_id=parent)
    return results
