"""After-training flows: calibrate (logit caches, gates, temperature, threshold), evaluate-test, package."""

from __future__ import annotations

from prefect import flow

from flows import ui
from flows.common import flow_run_scope, load_config, run_stage
from flows.params import SeedStageParams
from rtscore.stages import ArtifactRef, CalibrationResult, TestResult
from tasks import stages as t


@flow(name="calibrate")
def calibrate(params: SeedStageParams) -> CalibrationResult:
    """Cache Val-Realistic logit statistics per seed, gate TTA and scales, fit temperature and threshold."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        caches = [run_stage(t.logit_cache, params.run_dir, cfg, s, refresh=params.refresh) for s in seeds]
        result: CalibrationResult = run_stage(t.calibrate, params.run_dir, cfg, seeds, refresh=params.refresh)
        ui.publish_calibration(params.run_dir, caches, result)
        return result


@flow(name="evaluate-test")
def evaluate_test(params: SeedStageParams) -> TestResult:
    """Test-Realistic with each seed's frozen deployment config; mean ± std across seeds."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        result: TestResult = run_stage(t.evaluate_test, params.run_dir, cfg, seeds, refresh=params.refresh)
        ui.publish_test_report(params.run_dir, result)
        return result


@flow(name="package")
def package(params: SeedStageParams) -> ArtifactRef:
    """Assemble the deployment package of the shipped seed under `<run_dir>/package/`."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        ref: ArtifactRef = run_stage(t.package, params.run_dir, cfg, seeds, refresh=params.refresh)
        ui.publish_package(params.run_dir, ref)
        return ref
