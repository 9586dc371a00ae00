"""Training tasks: one seed (with a per-epoch progress artifact), and the parent bookkeeping of a multi-seed run."""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from prefect import task
from prefect.artifacts import update_progress_artifact

from rtscore import stages
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages import ArtifactRef, TrainResult
from rtscore.stages.train import SPEC
from tasks.artifacts import create_progress_artifact
from tasks.stages import stage_task


def _train_seed(
    run_dir: str, cfg: PipelineConfig, seed: int, fresh: bool = False, parent_run_id: str | None = None
) -> TrainResult:
    # Prefect types its sync/async-dispatching functions as `T | Coroutine[..., T]`; called sync, it is T.
    bar = cast(
        UUID, create_progress_artifact(0.0, key=f"train-seed-{seed}-progress", description=f"seed {seed}: epochs")
    )

    def epoch_done(epoch: int, metrics: dict[str, float]) -> None:
        geomean = metrics.get("val_realistic_pr_auc_geomean")
        note = f"; val_realistic_pr_auc_geomean {geomean:.4f}" if geomean is not None else ""
        pct = min(100.0, 100.0 * epoch / cfg.training.max_epochs)
        update_progress_artifact(bar, pct, description=f"seed {seed}: epoch {epoch}/{cfg.training.max_epochs}{note}")

    return stages.train_seed(
        run_dir, cfg, seed, fresh=fresh, parent_run_id=parent_run_id, progress=True, on_epoch_end=epoch_done
    )


train_seed = stage_task(SPEC, _train_seed)


@task(name="start-multi-seed", task_run_name="start-multi-seed")
def start_multiseed(
    run_dir: str,
    cfg: PipelineConfig,
    seeds: list[int],
    parent_run_id: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> str | None:
    return stages.start_multiseed(run_dir, cfg, seeds, parent_run_id, overrides)


@task(name="finish-multi-seed", task_run_name="finish-multi-seed")
def finish_multiseed(
    run_dir: str, cfg: PipelineConfig, parent_run_id: str | None, results: list[TrainResult]
) -> ArtifactRef:
    return stages.finish_multiseed(run_dir, cfg, parent_run_id, results)
