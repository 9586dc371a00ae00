"""After-training flows: calibrate (logit caches, gates, temperature, threshold), evaluate-test, package."""

from __future__ import annotations

from prefect import flow

from flows import ui
from flows.common import flow_run_scope, load_config, run_stage
from flows.params import SeedStageParams
from rtscore.stages import ArtifactRef, CalibrationResult, TestResult, calibrated_seeds, trained_seeds
from rtscore.storage import RunDir
from tasks import stages as t


@flow(name="calibrate")
def calibrate(params: SeedStageParams) -> CalibrationResult:
    """Cache Val-Realistic logit statistics per seed, gate TTA and scales, fit temperature and threshold.

    Seeds: ``params.seeds``, else every seed trained in the run (a single-seed run needs no --seeds)."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = trained_seeds(RunDir(params.run_dir), params.seeds)
        caches = [run_stage(t.logit_cache, params.run_dir, cfg, s, refresh=params.refresh) for s in seeds]
        result: CalibrationResult = run_stage(t.calibrate, params.run_dir, cfg, seeds, refresh=params.refresh)
        ui.publish_calibration(params.run_dir, caches, result)
        return result


@flow(name="evaluate-test")
def evaluate_test(params: SeedStageParams) -> TestResult:
    """Test-Realistic with each seed's frozen deployment config; mean ± std across seeds (``params.seeds``,
    else the seeds of the last calibration)."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or calibrated_seeds(RunDir(params.run_dir))
        result: TestResult = run_stage(t.evaluate_test, params.run_dir, cfg, seeds, refresh=params.refresh)
        ui.publish_test_report(params.run_dir, result)
        return result


@flow(name="package")
def package(params: SeedStageParams) -> ArtifactRef:
    """Assemble the deployment package of the shipped seed under `<run_dir>/package/` (``params.seeds``: the
    seeds calibrated together; default those of the last calibration)."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or calibrated_seeds(RunDir(params.run_dir))
        ref: ArtifactRef = run_stage(t.package, params.run_dir, cfg, seeds, refresh=params.refresh)
        ui.publish_package(params.run_dir, ref)
        return ref
