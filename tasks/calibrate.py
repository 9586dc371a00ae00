"""After-training tasks: logit cache per seed, calibration, test evaluation, deployment package."""

from __future__ import annotations

from prefect import task

from rtscore import stages
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages import ArtifactRef, CalibrationResult, TestReport
from tasks.caching import stage_cache_key

WEIGHTS = "seeds/seed_{seed}/best_deployment.pth"
CACHE = "calibration/seed_{seed}/logit_cache.zarr"
FROZEN = "calibration/seed_{seed}/deployment_config.yaml"


@task(
    name="logit-cache",
    cache_key_fn=stage_cache_key("logit-cache", ("datasets/val.zarr", "normalization_stats.json", WEIGHTS), ("seed",)),
    persist_result=True,
)
def logit_cache(run_dir: str, cfg: PipelineConfig, seed: int) -> ArtifactRef:
    return stages.logit_cache(run_dir, cfg, seed, progress=True)


@task(name="calibrate", cache_key_fn=stage_cache_key("calibrate", (WEIGHTS, CACHE), ("seeds",)), persist_result=True)
def calibrate(run_dir: str, cfg: PipelineConfig, seeds: list[int]) -> CalibrationResult:
    return stages.calibrate(run_dir, cfg, seeds)


@task(
    name="evaluate-test",
    cache_key_fn=stage_cache_key(
        "evaluate-test", ("datasets/test.zarr", "normalization_stats.json", WEIGHTS, FROZEN), ("seeds",)
    ),
    persist_result=True,
)
def evaluate_test(run_dir: str, cfg: PipelineConfig, seeds: list[int]) -> TestReport:
    return stages.evaluate_test(run_dir, cfg, seeds)


@task(
    name="package",
    cache_key_fn=stage_cache_key(
        "package", ("normalization_stats.json", "calibration/deployment_config.yaml", WEIGHTS, FROZEN), ("seeds",)
    ),
    persist_result=True,
)
def package(run_dir: str, cfg: PipelineConfig, seeds: list[int]) -> ArtifactRef:
    return stages.package(run_dir, cfg)
