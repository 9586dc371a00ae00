"""What a trained seed hands on: its result, its ``run_summary.json`` and the multi-seed summary (no torch)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from rtscore.config.pipeline import ModelConfig
from rtscore.models import CheckpointError
from rtscore.storage import StorageError

METRIC = "val_realistic_pr_auc_geomean"


class SeedResult(BaseModel):
    """What a seed's training hands to the next stage."""

    seed: int = Field(..., description="Training seed.")
    seed_dir: str = Field(..., description="Directory with best_deployment.pth, resume checkpoints, metrics.")
    best_epoch: int = Field(..., description="Epoch of the best smoothed validation metric.")
    best_metric: float = Field(..., description=f"Best smoothed {METRIC}.")
    epochs_run: int = Field(..., description="Last epoch trained.")
    stopped_early: bool = Field(..., description="Whether early stopping ended the run.")
    mlflow_run_id: str | None = Field(None, description="The seed's MLflow run.")


class SeedSummary(BaseModel):
    """``seeds/seed_<n>/run_summary.json``: how a seed's training went (written by ``write_seed_outputs``)."""

    seed: int = Field(..., description="Training seed.")
    epochs_run: int = Field(..., description="Last epoch in metrics.jsonl (0: none).")
    stopped_early: bool = Field(..., description="Whether early stopping ended the run.")
    best_epoch: int = Field(..., description="Epoch of the best smoothed validation metric (0: none yet).")
    best_val_realistic_pr_auc_geomean_smoothed: float | None = Field(
        ..., description=f"Best smoothed {METRIC} (null: not validated yet)."
    )
    last_validation: dict[str, Any] = Field(..., description="The last metrics.jsonl row with validation metrics.")
    overfitting: dict[str, Any] = Field(..., description="The overfitting indicators of guide §10.5, with flags.")
    model: ModelConfig = Field(..., description="The model section of the config the seed was trained with.")
    mlflow_run_id: str | None = Field(..., description="The seed's MLflow run.")

    def to_result(self, seed_dir: str) -> SeedResult:
        """The seed's result, for the seed directory ``seed_dir`` (a missing best metric is nan)."""
        best = self.best_val_realistic_pr_auc_geomean_smoothed
        return SeedResult(
            seed=self.seed,
            seed_dir=seed_dir,
            best_epoch=self.best_epoch,
            best_metric=math.nan if best is None else best,
            epochs_run=self.epochs_run,
            stopped_early=self.stopped_early,
            mlflow_run_id=self.mlflow_run_id,
        )


def read_seed_summary(path: Path) -> SeedSummary:
    """A seed's ``run_summary.json``; StorageError naming the file when it is missing or invalid."""
    if not path.is_file():
        raise StorageError(f"seed summary not found: {path}; train the seed first")
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise StorageError(f"invalid seed summary {path}: not JSON ({err})") from None
    try:
        return SeedSummary.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in err.errors())
        raise StorageError(f"invalid seed summary {path}: {problems}") from None


# The model fields the trained weights' shapes depend on (encoder_weights and head_prior only initialise them).
ARCHITECTURE_FIELDS = ("architecture", "backbone", "decoder_channels")


def check_trained_model(summary: SeedSummary, model: ModelConfig, weights: Path) -> None:
    """Refuse, before ``weights`` are loaded, a config whose model section describes another architecture than the
    one the seed was trained as (its ``run_summary.json`` records it): a seed trained with model ``--overrides``
    and calibrated, evaluated or packaged without them. Names each differing field, both values, and the overrides
    that give the trained model back.

    Raises:
        CheckpointError: the fields of :data:`ARCHITECTURE_FIELDS` that differ.
    """
    trained = summary.model
    differ = [f for f in ARCHITECTURE_FIELDS if getattr(trained, f) != getattr(model, f)]
    if not differ:
        return
    fields = "; ".join(f"model.{f}: {getattr(trained, f)!r} when trained, {getattr(model, f)!r} now" for f in differ)
    overrides = json.dumps({f"model.{f}": getattr(trained, f) for f in differ})
    raise CheckpointError(
        f"seed {summary.seed}: {weights} was trained as another model than this config describes ({fields}); "
        f"pass the config or the --overrides the seed was trained with, e.g. --overrides '{overrides}'"
    )


class MultiSeedSummary(BaseModel):
    """``seeds/summary.json``: every seed's result and the mean ± std of their best validation metric."""

    seeds: list[SeedResult] = Field(..., description="Per-seed results, in training order.")
    best_val_realistic_pr_auc_geomean_mean: float | None = Field(
        ..., description=f"Mean over seeds of the best smoothed {METRIC} (null: no seeds)."
    )
    best_val_realistic_pr_auc_geomean_std: float | None = Field(
        ..., description="Sample standard deviation over seeds (null: undefined for fewer than two seeds)."
    )
    parent_mlflow_run_id: str | None = Field(..., description="The parent MLflow run the seed runs hang under.")
