"""The full pipeline flow: data stages, multi-seed training, calibration, test evaluation, deployment package.

``execution: local`` runs every stage in this flow run (subflows). ``execution: distributed`` runs the GPU
stages as their own flow runs on the GPU pool's deployments (flows/fanout.py): train-seed and logit-cache once
per seed, evaluate-test once; this run (on the CPU pool) waits for them, decides the calibration from the
recorded caches and assembles the package.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect.cache_policies import INPUTS, RUN_ID

from flows import ui
from flows.calibrate import calibrate, decide, evaluate_test, package
from flows.common import flow_run_scope, load_config, run_namer
from flows.data import data_pipeline
from flows.failures import flow
from flows.fanout import absolute, distributed_evaluate_test, distributed_logit_caches, distributed_train
from flows.params import PipelineParams
from flows.train import multi_seed_train
from rtscore.stages import CalibrationResult, PipelineResult, TestResult, TrainResult
from tasks import train as t

STEPS = ["data", "training", "calibrate", "evaluate-test", "package"]


@flow(name="rts-pipeline", flow_run_name=run_namer("rts-pipeline", PipelineParams, ("run_dir",)))
def pipeline(params: PipelineParams) -> PipelineResult:
    """generate -> stats -> validation -> multi-seed training -> calibrate -> evaluate-test -> package.

    Every stage is cached on (code, the config sections it uses, its inputs' fingerprints): a retry re-runs
    only what failed and what depends on it, and the run's cards are those of its last attempt (flows/ui.py); the
    progress card names the stage that failed, if one did. ``execution: distributed`` trains each seed and builds
    its logit cache in flow runs of ``distributed.deployment`` and ``distributed.logit_cache_deployment``, and
    evaluates the test split in a run of ``distributed.evaluate_test_deployment`` (see flows/fanout.py).
    """
    with flow_run_scope() as flow_run_id:
        progress = ui.Progress(
            "rts-pipeline-progress", STEPS, f"{params.run_dir}: {' -> '.join(STEPS)} ({params.execution})"
        )
        with progress.failing():
            data = data_pipeline(params.data())
            progress.advance("data")
            gpu = Distributed(params, _parent_id(flow_run_id)) if params.execution == "distributed" else Local(params)
            training = gpu.train()
            trained = [r.result.seed for r in training]
            progress.advance("training")
            calibration = gpu.calibrate(trained)
            progress.advance("calibrate")
            test = gpu.evaluate_test(trained)
            progress.advance("evaluate-test")
            pkg = package(params.stage(trained))
            progress.advance("package")
        ui.publish_pipeline(params.run_dir, calibration, test, pkg)
        return PipelineResult(data=data, training=training, calibration=calibration, test=test, package=pkg)


@dataclass(frozen=True)
class Local:
    """The GPU stages as subflows of the pipeline run."""

    params: PipelineParams

    def train(self) -> list[TrainResult]:
        return multi_seed_train(self.params.multi_seed())

    def calibrate(self, seeds: list[int]) -> CalibrationResult:
        return calibrate(self.params.stage(seeds))

    def evaluate_test(self, seeds: list[int]) -> TestResult:
        return evaluate_test(self.params.stage(seeds))


@dataclass(frozen=True)
class Distributed:
    """The GPU stages as flow runs of their deployments (flows/fanout.py), keyed by the pipeline's flow run."""

    params: PipelineParams
    flow_run_id: str

    def train(self) -> list[TrainResult]:
        """One train-seed flow run per seed on the GPU deployment, under one parent MLflow run."""
        params = self.params
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        # One parent MLflow run per pipeline flow run, also across its retries (the seeds' runs are reused too).
        start = t.start_multiseed.with_options(cache_policy=RUN_ID + INPUTS, persist_result=True)
        parent = start(absolute(params.run_dir), cfg, seeds)  # keyed by the run's location, not the path as typed
        results = distributed_train(params, self.flow_run_id, seeds, parent)
        t.finish_multiseed(params.run_dir, cfg, parent, results)
        ui.publish_training(params.run_dir, cfg, results, "multi-seed-train", parent_run_id=parent)
        return results

    def calibrate(self, seeds: list[int]) -> CalibrationResult:
        """One logit-cache flow run per seed; the decision from their recorded caches, in this run."""
        caches = distributed_logit_caches(self.params, self.flow_run_id, seeds)
        return decide(self.params.stage(seeds), seeds, caches)

    def evaluate_test(self, seeds: list[int]) -> TestResult:
        """One evaluate-test flow run over all seeds (it publishes the report)."""
        return distributed_evaluate_test(self.params, self.flow_run_id, seeds)


def _parent_id(flow_run_id: str | None) -> str:
    if flow_run_id is None:
        raise RuntimeError("execution 'distributed' needs a Prefect flow run (its id keys the child runs)")
    return flow_run_id
