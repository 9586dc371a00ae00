"""After-training flows: logit-cache (one seed), calibrate (logit caches, gates, temperature, threshold),
evaluate-test, package.

A distributed pipeline runs logit-cache (once per seed) and evaluate-test as their own flow runs on the GPU pool
and only the calibration decision (:func:`decide`) and package in its own run (flows/fanout.py).
"""

from __future__ import annotations

from flows import ui
from flows.common import flow_run_scope, load_config, run_stage
from flows.failures import flow
from flows.params import LogitCacheParams, SeedStageParams
from rtscore.stages import ArtifactRef, CalibrationResult, TestResult, calibrated_seeds, trained_seeds
from rtscore.storage import RunDir
from tasks import stages as t


@flow(name="logit-cache")
def logit_cache(params: LogitCacheParams) -> ArtifactRef:
    """Cache one seed's Val-Realistic logit statistics (one pass per scale and TTA transform): the GPU part of
    calibration, run once per seed on the GPU pool by a distributed pipeline."""
    with flow_run_scope():
        cfg = load_config(params)
        ref: ArtifactRef = run_stage(t.logit_cache, params.run_dir, cfg, params.seed, refresh=params.refresh)
        ui.publish_links(params.run_dir, [ref])
        return ref


@flow(name="calibrate")
def calibrate(params: SeedStageParams) -> CalibrationResult:
    """Cache Val-Realistic logit statistics per seed, gate TTA and scales, fit temperature and threshold.

    Seeds: ``params.seeds``, else every seed trained in the run (a single-seed run needs no --seeds)."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = trained_seeds(RunDir(params.run_dir), params.seeds)
        caches = [run_stage(t.logit_cache, params.run_dir, cfg, s, refresh=params.refresh) for s in seeds]
        return decide(params, seeds, caches)


def decide(params: SeedStageParams, seeds: list[int], caches: list[ArtifactRef]) -> CalibrationResult:
    """The calibration decision from the seeds' recorded logit caches (TTA and scale gates, temperature,
    threshold), as a task of the calling flow run; publishes the calibration summary."""
    cfg = load_config(params)
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
