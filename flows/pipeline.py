"""The full pipeline flow: data stages, then multi-seed training (later stages join as they land)."""

from __future__ import annotations

from prefect import flow

from flows.data import data_pipeline
from flows.train import multi_seed_train
from rtscore.stages import ArtifactRef, TrainResult


@flow(name="rts-pipeline")
def pipeline(
    config: str, run_dir: str, seeds: list[int] | None = None, refresh: bool = False
) -> dict[str, ArtifactRef | list[TrainResult]]:
    """generate -> normalization stats -> validation -> seeded multi-seed training; cached stages are skipped."""
    refs: dict[str, ArtifactRef | list[TrainResult]] = dict(data_pipeline(config, run_dir, refresh=refresh))
    refs["training"] = multi_seed_train(config, run_dir, seeds=seeds, fresh=refresh)
    return refs
