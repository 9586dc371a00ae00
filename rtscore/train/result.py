"""The small result model a trained seed hands on (light import: no torch)."""

from __future__ import annotations

from pydantic import BaseModel, Field

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
