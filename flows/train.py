"""Training flows: train-seed (one seed) and multi-seed-train (seeds [42, 43, 44] by default, in sequence)."""

from __future__ import annotations

import math
import statistics

from prefect import flow

from flows.common import flow_run_scope, load_config
from flows.params import MultiSeedParams, TrainSeedParams
from flows.ui import publish_files, publish_links, publish_mlflow_link, publish_summary, publish_table
from rtscore.config import PipelineConfig
from rtscore.stages import TrainResult
from tasks import train as t


@flow(name="train-seed")
def train_seed(params: TrainSeedParams) -> TrainResult:
    """Train one seed from the run's datasets and stats; re-running resumes from resume_latest.pth."""
    with flow_run_scope():
        cfg = load_config(params)
        result = t.train_seed.with_options(refresh_cache=params.fresh)(
            params.run_dir, cfg, params.seed, params.fresh, params.parent_run_id
        )
        publish_training(params.run_dir, cfg, [result], f"train-seed-{params.seed}")
        return result


@flow(name="multi-seed-train")
def multi_seed_train(params: MultiSeedParams) -> list[TrainResult]:
    """Train every seed (training.seeds by default) under one parent MLflow run; report mean +- std."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        parent = t.start_multiseed(params.run_dir, cfg, seeds)
        results = [
            t.train_seed.with_options(refresh_cache=params.fresh)(params.run_dir, cfg, s, params.fresh, parent)
            for s in seeds
        ]
        t.finish_multiseed(params.run_dir, cfg, parent, results)
        publish_training(params.run_dir, cfg, results, "multi-seed-train", parent_run_id=parent)
        return results


def publish_training(
    run_dir: str, cfg: PipelineConfig, results: list[TrainResult], key: str, *, parent_run_id: str | None = None
) -> None:
    """Per-seed table, a summary with mean ± std, links to the seeds' artifacts, curves and MLflow runs."""
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
    publish_table(key, rows, "Per-seed training results")
    values = [r.result.best_metric for r in results if math.isfinite(r.result.best_metric)]
    figures = "\n".join(
        f"- seed {r.result.seed}: best val_realistic_pr_auc_geomean {r.result.best_metric:.4f} at epoch "
        f"{r.result.best_epoch} of {r.result.epochs_run}{' (stopped early)' if r.result.stopped_early else ''}"
        for r in results
    )
    if len(values) > 1:
        figures += (
            f"\n\n**mean ± std over {len(values)} seeds: "
            f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}**"
        )
    refs = [ref for r in results for ref in r.artifacts]
    publish_summary(f"{key}-summary", f"Training: {key}", refs, lambda: figures + "\n", links=False)
    publish_links([ref for ref in refs if not ref.path.endswith(".png")])
    publish_files(run_dir, "train-seed", [f"seeds/seed_{r.result.seed}/curves.png" for r in results])
    publish_mlflow_link(cfg.mlflow.tracking_uri, parent_run_id, "multi-seed parent run")
    for r in results:
        publish_mlflow_link(cfg.mlflow.tracking_uri, r.result.mlflow_run_id, f"seed {r.result.seed}")
