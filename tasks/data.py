"""Data-stage tasks: generate a split, normalization stats, validation."""

from __future__ import annotations

from prefect import task

from rtscore import stages
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages import ArtifactRef
from tasks.caching import stage_cache_key


@task(name="generate-dataset", cache_key_fn=stage_cache_key("generate-dataset"), persist_result=True)
def generate_dataset(run_dir: str, cfg: PipelineConfig, split: str) -> ArtifactRef:
    return stages.generate_dataset(run_dir, cfg, split)


@task(
    name="normalization-stats",
    cache_key_fn=stage_cache_key("normalization-stats", ("datasets/train.zarr",)),
    persist_result=True,
)
def normalization_stats(run_dir: str, cfg: PipelineConfig) -> ArtifactRef:
    return stages.normalization_stats(run_dir, cfg)


@task(
    name="validate-data",
    cache_key_fn=stage_cache_key(
        "validate-data",
        ("datasets/train.zarr", "datasets/val.zarr", "datasets/test.zarr", "normalization_stats.json"),
    ),
    persist_result=True,
)
def validate_data(run_dir: str, cfg: PipelineConfig) -> ArtifactRef:
    return stages.validate_data(run_dir, cfg)
