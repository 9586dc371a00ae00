"""Stage multi-seed-train's summary: the parent MLflow run of a multi-seed training and, once every seed is
in, ``seeds/summary.json`` (best metric per seed, mean ± std).

Not cached on its own (it summarises the seeds' results once they are all in), so the registry lists it beside
the cached stages (``registry.SUMMARIES``), not among them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from rtscore.config.base import config_hash
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages.spec import TRAINING_CONFIG, ArtifactRef, StageSpec, record
from rtscore.stages.train import TrainResult
from rtscore.storage import RunDir, RunLayout, atomic_write_json
from rtscore.tracking import Tracker
from rtscore.train.result import MultiSeedSummary


def start_multiseed(
    run_dir: str,
    cfg: PipelineConfig,
    seeds: list[int],
    parent_run_id: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> str | None:
    """The parent MLflow run of a multi-seed training (nested seed runs hang under it), itself nested under
    ``parent_run_id`` when given (a sweep's run: one child per variant, whose ``overrides`` it logs as params)."""
    tracker = Tracker(cfg.mlflow, RunDir(run_dir).root)
    name = f"variant-{PurePosixPath(run_dir.rstrip('/')).name}" if parent_run_id else "multi-seed"
    tags = {"rts.seeds": ",".join(map(str, seeds)), "rts.config_hash": config_hash(cfg)}
    # A sweep's variant has one run under the sweep's, also when the sweep is run again (its cached seeds stay there).
    found = tracker.find_run(name, parent_run_id) if parent_run_id else None
    run_id = found or tracker.start_run(name, parent_run_id=parent_run_id, tags=tags)
    params: dict[str, Any] = {"seeds": seeds, "model": cfg.model.backbone, "architecture": cfg.model.architecture}
    params.update({f"override.{k}": v for k, v in (overrides or {}).items()})
    tracker.log_params(run_id, params)
    return run_id


def finish_multiseed(
    run_dir: str, cfg: PipelineConfig, parent_run_id: str | None, results: list[TrainResult]
) -> ArtifactRef:
    """``seeds/summary.json``: best metric per seed and mean ± std (std undefined for one seed); logged on the
    parent MLflow run."""
    run = RunDir(run_dir)
    values = [r.result.best_metric for r in results]
    summary = MultiSeedSummary(
        seeds=[r.result for r in results],
        best_val_realistic_pr_auc_geomean_mean=statistics.fmean(values) if values else None,
        best_val_realistic_pr_auc_geomean_std=statistics.stdev(values) if len(values) > 1 else None,
        parent_mlflow_run_id=parent_run_id,
    )
    rel = RunLayout.SEEDS_SUMMARY.at()
    atomic_write_json(run.path(rel), summary.model_dump(mode="python"))
    tracker = Tracker(cfg.mlflow, run.root)
    figures = summary.model_dump(
        include={"best_val_realistic_pr_auc_geomean_mean", "best_val_realistic_pr_auc_geomean_std"}
    )
    tracker.log_metrics(parent_run_id, {k: v for k, v in figures.items() if isinstance(v, float)}, step=0)
    tracker.end_run(parent_run_id)
    return record(SPEC, run, rel, cfg)


SPEC = StageSpec(
    name="multi-seed-train",
    fn=finish_multiseed,
    inputs=(RunLayout.SEED_SUMMARY,),
    outputs=(RunLayout.SEEDS_SUMMARY,),
    config=TRAINING_CONFIG,
    params=("seeds",),
    description="Mean ± std of the seeds' best validation metric under one parent MLflow run.",
)
