"""The full pipeline flow: data stages, multi-seed training, calibration, test evaluation, deployment package."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.cache_policies import INPUTS, RUN_ID

from flows import ui
from flows.calibrate import calibrate, evaluate_test, package
from flows.common import flow_run_scope, load_config
from flows.data import data_pipeline
from flows.fanout import distributed_train
from flows.params import PipelineParams
from flows.train import multi_seed_train
from rtscore.stages import TrainResult
from tasks import train as t

STEPS = ["data", "training", "calibrate", "evaluate-test", "package"]


@flow(name="rts-pipeline")
def pipeline(params: PipelineParams) -> dict[str, Any]:
    """generate -> stats -> validation -> multi-seed training -> calibrate -> evaluate-test -> package.

    Every stage is cached on (code, the config sections it uses, its inputs' fingerprints): a retry re-runs
    only what failed and what depends on it. ``execution: distributed`` trains each seed in its own
    train-seed flow run on ``distributed.deployment`` (see flows/fanout.py).
    """
    with flow_run_scope() as flow_run_id:
        progress = ui.Progress(
            "rts-pipeline-progress", STEPS, f"{params.run_dir}: {' -> '.join(STEPS)} ({params.execution})"
        )
        out: dict[str, Any] = dict(data_pipeline(params.data()))
        progress.advance("data")
        if params.execution == "distributed":
            training = _distributed_training(params, flow_run_id)
        else:
            training = multi_seed_train(params.multi_seed())
        trained = [r.result.seed for r in training]
        out["training"] = training
        progress.advance("training")
        out["calibration"] = calibrate(params.stage(trained))
        progress.advance("calibrate")
        out["test"] = evaluate_test(params.stage(trained))
        progress.advance("evaluate-test")
        out["package"] = package(params.stage(trained))
        progress.advance("package")
        ui.publish_pipeline(params.run_dir, out["calibration"], out["test"], out["package"])
        return out


def _distributed_training(params: PipelineParams, flow_run_id: str | None) -> list[TrainResult]:
    """One train-seed flow run per seed on the GPU deployment, under one parent MLflow run."""
    if flow_run_id is None:
        raise RuntimeError("execution 'distributed' needs a Prefect flow run (its id keys the seeds' runs)")
    cfg = load_config(params)
    seeds = params.seeds or cfg.training.seeds
    # One parent MLflow run per pipeline flow run, also across its retries (the seeds' runs are reused too).
    start = t.start_multiseed.with_options(cache_policy=RUN_ID + INPUTS, persist_result=True)
    parent = start(params.run_dir, cfg, seeds)
    results = distributed_train(params, flow_run_id, seeds, parent)
    t.finish_multiseed(params.run_dir, cfg, parent, results)
    ui.publish_training(params.run_dir, cfg, results, "multi-seed-train", parent_run_id=parent)
    return results
