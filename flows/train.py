"""Training flows: train-seed (one seed) and multi-seed-train (seeds [42, 43, 44] by default, in sequence)."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.common import load_config
from rtscore.stages import TrainResult
from tasks import train as t


@flow(name="train-seed")
def train_seed(
    config: str, run_dir: str, seed: int = 42, fresh: bool = False, parent_run_id: str | None = None
) -> TrainResult:
    """Train one seed from the run's datasets and stats; re-running resumes from resume_latest.pth."""
    cfg = load_config(config)
    result = t.train_seed.with_options(refresh_cache=fresh)(run_dir, cfg, seed, fresh, parent_run_id)
    _table(f"train-seed-{seed}", [result])
    return result


@flow(name="multi-seed-train")
def multi_seed_train(
    config: str, run_dir: str, seeds: list[int] | None = None, fresh: bool = False
) -> list[TrainResult]:
    """Train every seed (training.seeds by default) under one parent MLflow run; report mean +- std."""
    cfg = load_config(config)
    seeds = seeds or cfg.training.seeds
    parent = t.start_multiseed(run_dir, cfg, seeds)
    results = [t.train_seed.with_options(refresh_cache=fresh)(run_dir, cfg, s, fresh, parent) for s in seeds]
    t.finish_multiseed(run_dir, cfg, parent, results)
    _table("multi-seed-train", results)
    return results


def _table(key: str, results: list[TrainResult]) -> None:
    rows = [
        {
            "seed": r.result.seed,
            "best_epoch": r.result.best_epoch,
            "best_val_realistic_pr_auc_geomean": round(r.result.best_metric, 4),
            "epochs_run": r.result.epochs_run,
            "stopped_early": r.result.stopped_early,
            "mlflow_run_id": r.result.mlflow_run_id or "",
        }
        for r in results
    ]
    create_table_artifact(key=key, table=rows, description="Per-seed training results")
