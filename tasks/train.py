"""Training tasks: one seed, and the parent bookkeeping of a multi-seed run."""

from __future__ import annotations

from prefect import task

from rtscore import stages
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages import ArtifactRef, TrainResult
from tasks.caching import stage_cache_key

TRAIN_INPUTS = ("datasets/train.zarr", "datasets/val.zarr", "normalization_stats.json")


@task(name="train-seed", cache_key_fn=stage_cache_key("train-seed", TRAIN_INPUTS, ("seed",)), persist_result=True)
def train_seed(
    run_dir: str, cfg: PipelineConfig, seed: int, fresh: bool = False, parent_run_id: str | None = None
) -> TrainResult:
    return stages.train_seed(run_dir, cfg, seed, fresh=fresh, parent_run_id=parent_run_id, progress=True)


@task(name="start-multi-seed")
def start_multiseed(run_dir: str, cfg: PipelineConfig, seeds: list[int]) -> str | None:
    return stages.start_multiseed(run_dir, cfg, seeds)


@task(name="finish-multi-seed")
def finish_multiseed(
    run_dir: str, cfg: PipelineConfig, parent_run_id: str | None, results: list[TrainResult]
) -> ArtifactRef:
    return stages.finish_multiseed(run_dir, cfg, parent_run_id, results)
