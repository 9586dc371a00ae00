"""After-training flows: logit-cache (one seed), calibrate (logit caches, gates, temperature, threshold),
evaluate-test, package; all but calibrate built from their stage spec.

A distributed pipeline runs logit-cache (once per seed) and evaluate-test as their own flow runs on the GPU pool
and only the calibration decision (:func:`decide`) and package in its own run (flows/fanout.py).
"""

from __future__ import annotations

from flows import ui
from flows.common import flow_run_scope, load_config, run_namer, run_stage, selected_seeds
from flows.failures import flow
from flows.params import LogitCacheParams, SeedStageParams
from flows.stage_flow import stage_flow
from rtscore.stages import ArtifactRef, CalibrationResult, TestResult
from rtscore.stages.calibrate import SPEC as CALIBRATE
from rtscore.stages.evaluate_test import SPEC as EVALUATE_TEST
from rtscore.stages.logit_cache import SPEC as LOGIT_CACHE
from rtscore.stages.package import SPEC as PACKAGE
from rtscore.storage import RunDir
from tasks import stages as t

logit_cache = stage_flow(
    LOGIT_CACHE,
    LogitCacheParams,
    ArtifactRef,
    lambda params, cfg, ref: ui.publish_links(params.run_dir, [ref]),
    module=__name__,
    description="Cache one seed's Val-Realistic logit statistics (one pass per scale and TTA transform): the GPU "
    "part of calibration, run once per seed on the GPU pool by a distributed pipeline.",
)
evaluate_test = stage_flow(
    EVALUATE_TEST,
    SeedStageParams,
    TestResult,
    lambda params, cfg, result: ui.publish_test_report(params.run_dir, result),
    module=__name__,
    description="Test-Realistic with each seed's frozen deployment config; mean ± std across seeds (``params.seeds``, "
    "else the seeds of the last calibration).",
)
package = stage_flow(
    PACKAGE,
    SeedStageParams,
    ArtifactRef,
    lambda params, cfg, ref: ui.publish_package(params.run_dir, ref),
    module=__name__,
    description="Assemble the deployment package of the shipped seed under `<run_dir>/package/` (``params.seeds``: "
    "the seeds calibrated together; default those of the last calibration).",
)


@flow(name=CALIBRATE.name, flow_run_name=run_namer(CALIBRATE.name, SeedStageParams, ("seeds",)))
def calibrate(params: SeedStageParams) -> CalibrationResult:
    """Cache Val-Realistic logit statistics per seed, gate TTA and scales, fit temperature and threshold.

    Seeds: ``params.seeds``, else every seed trained in the run (a single-seed run needs no --seeds)."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = selected_seeds(CALIBRATE, params, cfg, RunDir(params.run_dir))
        caches = [run_stage(t.logit_cache, params.run_dir, cfg, s, refresh=params.refresh) for s in seeds]
        return decide(params, seeds, caches)


def decide(params: SeedStageParams, seeds: list[int], caches: list[ArtifactRef]) -> CalibrationResult:
    """The calibration decision from the seeds' recorded logit caches (TTA and scale gates, temperature,
    threshold), as a task of the calling flow run; publishes the calibration summary."""
    cfg = load_config(params)
    result = run_stage(t.calibrate, params.run_dir, cfg, seeds, refresh=params.refresh)
    ui.publish_calibration(params.run_dir, caches, result)
    return result
