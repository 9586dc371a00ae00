"""Validation noise floor (guide §10.1): repeat validation on one checkpoint, compare subsampling with re-weighting.

The guide's definition, computed as such: the std of PR-AUC at 1:200 over 5 validations of one checkpoint with
augmentation off, and ``early_stopping.min_delta = 2 x std``. The guide validated on a random negative subset, which
moves between validations; this project's PR-AUC at 1:N is the exact expected value at that prevalence (re-weighted,
no subsampling), which does not, so the guide's std here is numerical noise only: ~0 by construction, unable to
calibrate min_delta. Beside it the report gives two quantities that are not zero by construction: the std the
guide's random subsampling has on the same checkpoint (twice it is the min_delta the guide's rule would have set,
and the sweep's margin, :mod:`rtscore.sweep.noise`), and the tile-bootstrap std of the validation pool (its sampling
uncertainty).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.loading.dataset import build_dataset
from rtscore.data.loading.loader import val_loader
from rtscore.data.normalization.stats import load_normalization_stats
from rtscore.metrics import bootstrap_pr_auc, geometric_mean, pr_auc, random_subsample_pr_auc
from rtscore.models import load_model
from rtscore.runtime import select_device
from rtscore.storage import RunLayout, atomic_write_json
from rtscore.train.result import check_trained_model, read_seed_summary
from rtscore.train.validate import collect

# Written next to the seed's checkpoints (a diagnostic, not a stage artifact of rtscore.storage.layout).
NOISE_FLOOR = "noise_floor.json"
GUIDE_REPEATS = 5  # guide §10.1: "Run validation 5x on same checkpoint"


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
    ratio: int = Field(
        ...,
        description="The prevalence 1:N of the guide's definition (its 1:200): metrics.ratios[0], the first ratio "
        "of the config. A file written before this field had it as its first ratio.",
    )

    @model_validator(mode="before")
    @classmethod
    def _first_ratio(cls, data: Any) -> Any:
        """A report written before ``ratio`` existed: its first ratio (metrics.ratios[0] then as now)."""
        if isinstance(data, dict) and "ratio" not in data and isinstance(data.get("metrics"), dict):
            first = next((k for k in data["metrics"] if k != "geomean"), None)
            if first is not None:
                return {**data, "ratio": int(first)}
        return data

    @property
    def at_ratio(self) -> NoiseFloorRow:
        """The row of the guide's definition: PR-AUC at 1:``ratio``."""
        return self.metrics[str(self.ratio)]


def _seed_model(run: Path, seed: int, cfg: PipelineConfig, device: Any) -> Any:
    """The seed's best weights in the config's model, once the config is checked to describe the model the seed
    was trained as (its run summary, when it has one: :func:`~rtscore.train.result.check_trained_model`)."""
    weights = run / RunLayout.BEST_WEIGHTS.at(seed=seed)
    summary = run / RunLayout.SEED_SUMMARY.at(seed=seed)
    if summary.is_file():
        check_trained_model(read_seed_summary(summary), cfg.model, weights)
    return load_model(weights, cfg, device)


def measure_noise_floor(
    cfg: PipelineConfig, run_dir: str | Path, seed: int, *, repeats: int = 5, draws_per_run: int = 4
) -> NoiseFloorReport:
    """Validation ``repeats`` times (the guide: 5) on ``best_deployment.pth`` (no augmentation); PR-AUC spread
    both ways at every ratio of ``metrics.ratios`` (the guide's definition: the first) and their geomean.
    Random subsampling (the guide's original method) draws a new negative subset per validation, so its spread
    is what early stopping saw; the expected-value re-weighting is fixed given the model's outputs, so its spread
    is only numerical non-determinism. The tile bootstrap shows the sampling uncertainty of the validation pool."""
    run = Path(run_dir)
    device = select_device(cfg)
    model = _seed_model(run, seed, cfg, device)
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
        checkpoint=str(run / RunLayout.BEST_WEIGHTS.at(seed=seed)),
        repeats=repeats,
        draws_per_run=draws_per_run,
        n_pos_tiles=hist.n_pos_tiles,
        n_neg_tiles=hist.n_neg_tiles,
        metrics=rows,
        configured_min_delta=cfg.training.early_stopping.min_delta,
        ratio=ratios[0],
    )
    atomic_write_json(run / RunLayout.SEED_DIR.at(seed=seed) / NOISE_FLOOR, report.model_dump())
    return report


def _headline(report: NoiseFloorReport) -> list[str]:
    """The guide's §10.1 definition as such, what it means under re-weighting, and what stands in for it."""
    r, n = report.at_ratio, report.repeats
    at = f"1:{report.ratio}"
    guide_n = "" if n == GUIDE_REPEATS else f" (the guide runs {GUIDE_REPEATS})"
    boot = "" if r.bootstrap_std is None else f"{r.bootstrap_std:.4f}"
    return [
        f"Guide §10.1: std of PR-AUC at {at} (metrics.ratios[0]) over {n} validations{guide_n} of this checkpoint, "
        f"augmentation off: {r.reweighted_std:.2e}; suggested early_stopping.min_delta = 2 x std = "
        f"{r.suggested_min_delta_reweighted:.2e} (configured: {report.configured_min_delta})",
        f"Here PR-AUC at {at} is the exact expected value at that prevalence (re-weighted, no random negative "
        "subsampling): one checkpoint gives the same value every time up to numerical noise, so this std is ~0 by "
        "construction and cannot calibrate min_delta.",
        f"Not zero by construction: the std of PR-AUC at {at} under the guide's random negative subsampling, "
        f"{r.subsampled_std:.4f} (2 x std = {r.suggested_min_delta_subsampled:.4f}: the min_delta the guide's rule "
        "gives for the noise its validation had, and the margin a sweep uses); the tile-bootstrap std of the "
        f"validation pool at {at}, {boot or 'n/a'} (how far apart two checkpoints must be to differ on this pool).",
    ]


def render_noise_floor(report: NoiseFloorReport) -> str:
    """The guide's definition first (:func:`_headline`), then every ratio's spread both ways and the bootstrap."""
    lines = [
        f"Validation noise floor, seed {report.seed}: {report.repeats} validations of {report.checkpoint}",
        f"({report.n_pos_tiles} positive / {report.n_neg_tiles} negative tiles; "
        f"{report.draws_per_run} random negative subsets per validation)",
        "",
        *_headline(report),
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
    return "\n".join(lines)
