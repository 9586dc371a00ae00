"""Validation noise floor (guide §10.1): repeat validation on one checkpoint, compare subsampling with re-weighting."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.loading.dataset import build_dataset
from rtscore.data.loading.loader import val_loader
from rtscore.data.normalization.stats import load_normalization_stats
from rtscore.metrics import bootstrap_pr_auc, geometric_mean, pr_auc, random_subsample_pr_auc
from rtscore.models import load_model
from rtscore.runtime import select_device
from rtscore.storage import RunLayout, atomic_write_json
from rtscore.train.validate import collect

# Written next to the seed's checkpoints (a diagnostic, not a stage artifact of rtscore.storage.layout).
NOISE_FLOOR = "noise_floor.json"


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


class NoiseFloorRow(BaseModel):
    """One PR-AUC (at a prevalence ratio, or their geomean) over the repeated validations."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reweighted_mean: float = Field(..., description="Mean of the expected-value (re-weighted) PR-AUC.")
    reweighted_std: float = Field(..., description="Its std: numerical non-determinism only.")
    subsampled_mean: float = Field(..., description="Mean of the random-negative-subset PR-AUC.")
    subsampled_std: float = Field(..., description="Its std: what early stopping saw with subsampling.")
    subsampled_min: float = Field(..., description="Its smallest draw.")
    subsampled_max: float = Field(..., description="Its largest draw.")
    bootstrap_std: float | None = Field(..., description="Tile-bootstrap std at this ratio (None: the geomean).")
    suggested_min_delta_subsampled: float = Field(..., description="2 x subsampled_std.")
    suggested_min_delta_reweighted: float = Field(..., description="2 x reweighted_std.")


class NoiseFloorReport(BaseModel):
    """``noise_floor.json`` of a seed: the spread of repeated validations of its best checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(..., description="The seed whose checkpoint was validated.")
    checkpoint: str = Field(..., description="The checkpoint's path.")
    repeats: int = Field(..., description="Validations run.")
    draws_per_run: int = Field(..., description="Random negative subsets drawn per validation.")
    n_pos_tiles: int = Field(..., description="Positive tiles of the validation pool.")
    n_neg_tiles: int = Field(..., description="Negative tiles of the validation pool.")
    metrics: dict[str, NoiseFloorRow] = Field(
        ..., description="By prevalence ratio (its string, e.g. '200'), then 'geomean'."
    )
    configured_min_delta: float = Field(..., description="training.early_stopping.min_delta.")


def measure_noise_floor(
    cfg: PipelineConfig, run_dir: str | Path, seed: int, *, repeats: int = 5, draws_per_run: int = 4
) -> NoiseFloorReport:
    """Validation ``repeats`` times on ``best_deployment.pth`` (no augmentation); PR-AUC spread both ways.

    Random subsampling (the guide's original method) draws a new negative subset per validation, so its
    spread is what early stopping saw; the expected-value re-weighting is fixed given the model's outputs,
    so its spread is only numerical non-determinism. The tile bootstrap shows the sampling uncertainty of
    the validation pool itself, which no min_delta can remove.
    """
    run = Path(run_dir)
    weights = run / RunLayout.BEST_WEIGHTS.at(seed=seed)
    device = select_device(cfg)
    model = load_model(weights, cfg, device)
    stats = load_normalization_stats(run / RunLayout.NORMALIZATION_STATS.at(), [c.name for c in cfg.channels.extra])
    loader = val_loader(cfg, build_dataset(cfg, run / RunLayout.DATASET.at(split="val"), stats, train=False))
    rng = np.random.default_rng(seed)
    ratios = list(cfg.metrics.ratios)
    reweighted: dict[str, list[float]] = {str(r): [] for r in [*ratios, "geomean"]}
    subsampled: dict[str, list[float]] = {str(r): [] for r in [*ratios, "geomean"]}
    hist = None
    for _ in range(repeats):
        hist = collect(model, loader, cfg, device).hist
        values = [pr_auc(hist, r) for r in ratios]
        for r, v in zip(ratios, values, strict=True):
            reweighted[str(r)].append(v)
        reweighted["geomean"].append(geometric_mean(values))
        for _ in range(draws_per_run):
            drawn = [random_subsample_pr_auc(hist, r, rng) for r in ratios]
            for r, v in zip(ratios, drawn, strict=True):
                subsampled[str(r)].append(v)
            subsampled["geomean"].append(geometric_mean(drawn))
    assert hist is not None
    boot = {str(r): bootstrap_pr_auc(hist, r, max(cfg.metrics.bootstrap_samples, 100), seed)[2] for r in ratios}
    rows = {}
    for key in reweighted:
        rw, rs = reweighted[key], subsampled[key]
        rows[key] = NoiseFloorRow(
            reweighted_mean=statistics.fmean(rw),
            reweighted_std=_std(rw),
            subsampled_mean=statistics.fmean(rs),
            subsampled_std=_std(rs),
            subsampled_min=min(rs),
            subsampled_max=max(rs),
            bootstrap_std=boot.get(key),
            suggested_min_delta_subsampled=2 * _std(rs),
            suggested_min_delta_reweighted=2 * _std(rw),
        )
    report = NoiseFloorReport(
        seed=seed,
        checkpoint=str(weights),
        repeats=repeats,
        draws_per_run=draws_per_run,
        n_pos_tiles=hist.n_pos_tiles,
        n_neg_tiles=hist.n_neg_tiles,
        metrics=rows,
        configured_min_delta=cfg.training.early_stopping.min_delta,
    )
    atomic_write_json(run / RunLayout.SEED_DIR.at(seed=seed) / NOISE_FLOOR, report.model_dump())
    return report


def render_noise_floor(report: NoiseFloorReport) -> str:
    lines = [
        f"Validation noise floor, seed {report.seed}: {report.repeats} validations of {report.checkpoint}",
        f"({report.n_pos_tiles} positive / {report.n_neg_tiles} negative tiles; "
        f"{report.draws_per_run} random negative subsets per validation)",
        "",
        f"{'PR-AUC at':>10} | {'re-weighted (ours)':>22} | {'random subsampling':>30} | {'tile bootstrap':>14}",
        f"{'':>10} | {'mean':>9} {'std':>12} | {'mean':>9} {'std':>9} {'range':>10} | {'std':>14}",
    ]
    for key, r in report.metrics.items():
        name = "geomean" if key == "geomean" else f"1:{key}"
        boot = "" if r.bootstrap_std is None else f"{r.bootstrap_std:.4f}"
        lines.append(
            f"{name:>10} | {r.reweighted_mean:9.4f} {r.reweighted_std:12.2e} | {r.subsampled_mean:9.4f} "
            f"{r.subsampled_std:9.4f} {r.subsampled_min:.2f}-{r.subsampled_max:.2f} | {boot:>14}"
        )
    g = report.metrics["geomean"]
    lines += [
        "",
        f"suggested early_stopping.min_delta (2 x std of the geomean): random subsampling "
        f"{g.suggested_min_delta_subsampled:.4f}, re-weighting {g.suggested_min_delta_reweighted:.2e} "
        f"(configured: {report.configured_min_delta})",
        "With re-weighting the metric does not move between validations of one checkpoint; min_delta then only "
        "needs to exceed numerical noise, while the tile bootstrap std says how far apart two checkpoints must be "
        "to differ on this validation pool.",
    ]
    return "\n".join(lines)
