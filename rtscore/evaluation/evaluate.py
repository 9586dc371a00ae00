"""Test-Realistic evaluation with the frozen deployment config, per seed and as mean ± std (guide §10.4, §13).

The test set is run through exactly the deployment numerics (`inference.numerics.predict_logits`, then
temperature and threshold from `deployment_config.yaml`), once per seed. Pixel counts at the threshold are
exact per tile (not binned), then re-weighted to each prevalence ratio like every validation metric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, computed_field

from rtscore.config.base import ConfigError, load_config
from rtscore.config.deployment import DeploymentConfig, ThresholdSource, require_calibrated
from rtscore.config.pipeline import PipelineConfig
from rtscore.errors import PipelineError
from rtscore.inference.numerics import predict_logits, prepare_model
from rtscore.metrics import (
    ConfusionCounts,
    LogitBins,
    ObjectCounter,
    TileHistogramAccumulator,
    TileHistograms,
    negative_weight,
    object_metrics,
    pr_auc,
    ratio_tag,
    recall_by_area,
    size_bin_label,
    weighted_hist,
)
from rtscore.metrics.objects import iou_tag
from rtscore.metrics.pixel import prob_to_logit

REPORT_IOU = 0.3  # object recall beside the main table (by area, group, object) is at IoU 0.3 when it is matched


class EvaluationError(PipelineError):
    """Test evaluation cannot run (e.g. the deployment config is not frozen yet)."""


def frozen_deployment(path: Path) -> DeploymentConfig:
    """The calibrated deployment config; refuses one calibration did not freeze (threshold or temperature null)
    and one whose numerics were edited after calibration (:func:`~rtscore.config.deployment.require_calibrated`,
    guide §4.6): test evaluation uses the frozen deployment config only (guide §10.4 step 6)."""
    if not path.is_file():
        raise EvaluationError(f"deployment config not found: {path}; run calibrate first")
    try:
        return require_calibrated(load_config(DeploymentConfig, path), str(path))
    except ConfigError as err:
        raise EvaluationError(str(err)) from None


@dataclass
class SeedEvaluation:
    """Everything one seed's test pass leaves: calibrated-logit histograms, exact tile confusions, objects."""

    hist: TileHistograms
    tile_confusion: np.ndarray  # (T, 4) tp, fp, fn, tn at the operating threshold(s)
    is_positive: np.ndarray
    objects: ObjectCounter
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    recall_by_size: list[SizeBin] = field(default_factory=list)
    tile_ids: list[str] = field(default_factory=list)  # the tiles in the order ``objects`` counted them
    # per tile with inventory object pixels: the GT object (0-based in the tile, -1: none) holding each of them
    point_gt: dict[str, np.ndarray] = field(default_factory=dict)


class TilePoints(Protocol):
    """Pixels of a tile to name its GT objects by (``rtscore.evaluation.groups.TestTiles``)."""

    def points(self, tile_id: str) -> np.ndarray | None: ...


def run_test_pass(
    model: Any,
    loader: Any,
    cfg: PipelineConfig,
    dep: DeploymentConfig,
    *,
    progress: bool = False,
    tiles: TilePoints | None = None,
) -> SeedEvaluation:
    """One pass over the test loader with the frozen deployment numerics; with ``tiles``, the GT object holding
    each of a tile's inventory pixels too (``SeedEvaluation.point_gt``, by the components the objects are
    matched as)."""
    import torch

    assert dep.threshold is not None and dep.temperature is not None
    m = cfg.metrics
    acc = TileHistogramAccumulator(LogitBins(core_bins=m.pr_bins))
    objects = ObjectCounter.for_metrics(m, dep.threshold)
    run_model = prepare_model(model, dep.torch_compile)
    device = next(model.parameters()).device
    confusion: list[np.ndarray] = []
    tile_ids: list[str] = []
    point_gt: dict[str, np.ndarray] = {}
    it = loader
    if progress:
        from tqdm import tqdm

        it = tqdm(loader, desc="test evaluation")
    with torch.inference_mode():
        for batch in it:
            x = batch["image"].to(device)
            ctx = batch["context"].to(device) if "context" in batch else None  # the 0.5x input, by tile id
            z = predict_logits(
                run_model,
                x,
                tta=dep.tta,
                scales=dep.scales,
                fusion=dep.fusion,
                precision=dep.precision,
                context=ctx,
            ) / float(dep.temperature)
            z_np = z.float().cpu().numpy()
            y = batch["label"].numpy()
            acc.add_batch(z_np, y, list(batch["tile_id"]))
            thr = float(dep.threshold)
            for i in range(len(z_np)):
                called = z_np[i] >= prob_to_logit(thr)
                pos, neg = y[i] == 1, y[i] == 0
                tp, fp = int((called & pos).sum()), int((called & neg).sum())
                confusion.append(np.array([tp, fp, int(pos.sum()) - tp, int(neg.sum()) - fp], np.int64))
                # each tile's own ground pixel: the minimum object area in its pixels, and the size bins
                tid = str(batch["tile_id"][i])
                points = None if tiles is None else tiles.points(tid)
                matched = objects.add_tile(z_np[i], y[i], float(batch["pixel_area_m2"][i]), points)
                tile_ids.append(tid)
                if points is not None:
                    point_gt[tid] = matched.point_gt
    hist = acc.result()
    return SeedEvaluation(hist, np.stack(confusion), hist.is_positive, objects, tile_ids=tile_ids, point_gt=point_gt)


def pixel_confusion_at_ratio(ev: SeedEvaluation, ratio: float) -> ConfusionCounts:
    """Exact pixel counts at the operating threshold, negative tiles re-weighted to 1:`ratio`."""
    w = negative_weight(ratio, int(ev.is_positive.sum()), int((~ev.is_positive).sum()))
    weights = np.where(ev.is_positive, 1.0, w)
    tp, fp, fn, tn = (weights[:, None] * ev.tile_confusion).sum(axis=0)
    return ConfusionCounts(tp=float(tp), fp=float(fp), fn=float(fn), tn=float(tn))


def summarize_seed(ev: SeedEvaluation, cfg: PipelineConfig) -> SeedEvaluation:
    """Fill `ev.metrics` (per ratio tag) and `ev.recall_by_size` (object ground areas from each tile's pixel
    area, so tiles of different pixel size or latitude share the m² bins)."""
    for r in cfg.metrics.ratios:
        c = pixel_confusion_at_ratio(ev, r)
        pos, neg = weighted_hist(ev.hist, r)
        row: dict[str, float] = {
            "iou_rts": c.iou,
            "f1_rts": c.f1,
            "pr_auc": pr_auc(ev.hist, r),
            "precision": c.precision,
            "recall": c.recall,
            "no_skill_pr_auc": float(pos.sum() / (pos.sum() + neg.sum())),
        }
        for thr, s in object_metrics(ev.objects, r).items():
            row[f"object_precision_{iou_tag(thr)}"] = s.precision
            row[f"object_recall_{iou_tag(thr)}"] = s.recall
            row[f"object_f1_{iou_tag(thr)}"] = s.f1
        ev.metrics[ratio_tag(r)] = row
    ev.recall_by_size = size_bins(ev.objects, cfg.evaluation.size_bins_m2)
    return ev


def report_iou(iou_thresholds: Sequence[float]) -> float:
    """The IoU threshold of the report's object recall beside other figures (by area, region, latitude band,
    the per-object table): 0.3 when it is matched, else the first threshold."""
    return REPORT_IOU if REPORT_IOU in iou_thresholds else float(iou_thresholds[0])


def size_bins(objects: ObjectCounter, edges_m2: Sequence[float]) -> list[SizeBin]:
    """Object recall per RTS ground-area bin (m²) at IoU 0.3 (else the first threshold matched): each object's
    area is its pixels times its own tile's ground pixel area, never an assumed pixel size."""
    edges = np.asarray(edges_m2, np.float64)
    iou = report_iou(objects.iou_thresholds)
    n, recall = recall_by_area(objects, edges, iou)
    return [
        SizeBin(area_m2_from=float(lo), area_m2_to=float(hi), n_objects=int(k), recall=float(rc), iou=iou)
        for lo, hi, k, rc in zip(edges[:-1], edges[1:], n, recall, strict=True)
    ]


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation over seeds; nan values are left out. The std of one value is
    undefined (nan), not 0: one seed says nothing about the spread."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return math.nan, math.nan
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else math.nan


def fmt(mean: float, std: float) -> str:
    """The guide's format: ``0.723 ± 0.012``; ``0.723 (1 seed)`` where the std is undefined."""
    if math.isnan(mean):
        return "n/a"
    if math.isnan(std):
        return f"{mean:.3f} (1 seed)"
    return f"{mean:.3f} ± {std:.3f}"


class ReportModel(BaseModel):
    """A report model whose JSON keeps NaN (an undefined metric) as NaN, so that it reads back unchanged."""

    model_config = ConfigDict(ser_json_inf_nan="constants")


class MetricSummary(ReportModel):
    """One metric over seeds."""

    mean: float = Field(..., description="Mean over seeds (nan: undefined for every seed).")
    std: float = Field(..., description="Sample standard deviation over seeds (nan for one seed).")
    text: str = Field(..., description="The guide's format, e.g. 0.723 ± 0.012.")


class SizeBin(ReportModel):
    """Object recall of one RTS area bin."""

    area_m2_from: float = Field(..., description="Lower bound of the bin (m²).")
    area_m2_to: float = Field(..., description="Upper bound of the bin (m²).")
    n_objects: int = Field(..., description="Ground-truth objects in the bin.")
    recall: float = Field(..., description="Object recall in the bin.")
    iou: float = Field(..., description="Object-matching IoU threshold.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        """The bin as ``rts map`` labels its objects' ``size_bin``: ``2000-10000``, ``50000+`` for the open last
        bin (written to the JSON; ignored when a report is read back)."""
        return size_bin_label(self.area_m2_from, self.area_m2_to)


GroupBy = Literal["region", "latitude"]


class GroupFigures(ReportModel):
    """One seed's figures on one region or latitude band of the test tiles (``rtscore.evaluation.groups``)."""

    by: GroupBy = Field(..., description="What the tiles are grouped by.")
    name: str = Field(..., description="The region, or the band (60-64 °N, outside bands, latitude unknown).")
    n_tiles: int = Field(..., description="Test tiles of the group.")
    n_positive_tiles: int = Field(..., description="Of them, tiles with an RTS.")
    n_negative_tiles: int = Field(..., description="Of them, tiles without.")
    n_objects: int = Field(..., description="Ground-truth objects of the group's tiles.")
    pr_auc: float = Field(..., description="PR-AUC at the first ratio, negatives re-weighted within the group.")
    object_recall: float = Field(..., description="Object recall at the report's IoU (nan without objects).")


class GroupResult(ReportModel):
    """A region or latitude band over seeds: its counts, and its figures when it has enough positive tiles."""

    name: str = Field(..., description="The region, or the band (60-64 °N, outside bands, latitude unknown).")
    n_tiles: int = Field(..., description="Test tiles of the group.")
    n_positive_tiles: int = Field(..., description="Of them, tiles with an RTS.")
    n_objects: int = Field(..., description="Ground-truth objects of the group's tiles.")
    measured: bool = Field(..., description="Whether its figures are reported (enough positive and any negative tile).")
    reason: str | None = Field(None, description="Why it is not measured (null when it is).")
    pr_auc: MetricSummary | None = Field(None, description="PR-AUC over seeds (null when not measured).")
    object_recall: MetricSummary | None = Field(None, description="Object recall over seeds (null when not measured).")


class GroupTable(ReportModel):
    """The test tiles per region or per latitude band (guide §8.3, Phase 3), from each seed's per-tile results."""

    by: GroupBy = Field(..., description="What the tiles are grouped by.")
    ratio: str = Field(..., description="Ratio tag of the PR-AUC column (metrics.ratios[0], e.g. 1_200).")
    iou: float = Field(..., description="IoU threshold of the object recall column.")
    min_positive_tiles: int = Field(..., description="evaluation.min_group_positive_tiles when it was made.")
    groups: list[GroupResult] = Field(..., description="Regions sorted; bands in order, then outside, unknown.")
    note: str | None = Field(None, description="Why the table has no rows (a store without latitudes).")


class SeedTestResult(ReportModel):
    """One seed on Test-Realistic with its frozen deployment config."""

    seed: int = Field(..., description="Training seed.")
    threshold: float = Field(..., description="The seed's frozen operating threshold.")
    temperature: float = Field(..., description="The seed's frozen temperature.")
    threshold_source: ThresholdSource = Field(
        "target_precision", description="Where the threshold comes from (max_f1_fallback: target not reachable)."
    )
    metrics: dict[str, dict[str, float]] = Field(..., description="Per ratio tag (1_200, ...) and metric.")
    recall_by_size: list[SizeBin] = Field(..., description="Object recall by RTS area.")
    n_pos_tiles: int = Field(..., description="Test tiles with an RTS.")
    n_neg_tiles: int = Field(..., description="Test tiles without.")
    groups: list[GroupFigures] = Field(
        default_factory=list,
        description="The seed's figures per region and latitude band (empty in reports written before them).",
    )


class TestReport(ReportModel):
    """``evaluation/test_report.json``: per seed and mean ± std over seeds; written and read as this model.

    The report itself is the canonical 1x Test-Realistic result (guide §4.6: evaluate_test is the 1x-only
    contract, scales [1.0]); when the shipped deployment config has other scales, ``multiscale`` holds that
    configuration's result beside it."""

    __test__ = False  # not a pytest class

    seeds: list[int] = Field(..., description="Evaluated seeds.")
    tta: str = Field(..., description="TTA of the frozen deployment config.")
    scales: list[float] = Field(..., description="Scales of the frozen deployment config.")
    fusion: str | None = Field(None, description="Multi-scale fusion (null at one scale).")
    object_iou_thresholds: list[float] = Field(..., description="IoU thresholds of the object metrics.")
    aggregate: dict[str, dict[str, MetricSummary]] = Field(..., description="Per ratio tag and metric over seeds.")
    per_seed: list[SeedTestResult] = Field(..., description="Each seed's metrics.")
    multiscale: TestReport | None = Field(
        None,
        description="Beside the canonical 1x result, not instead of it: the shipped deployment config's when its "
        "scales are not [1.0] (its 0.5x input from the test tiles' context store); null when the deployment is 1x.",
    )
    by_region: GroupTable | None = Field(
        None, description="The canonical result per region (null: a report written before it, or the multi-scale one)."
    )
    by_latitude: GroupTable | None = Field(
        None,
        description="The canonical result per latitude band (no rows and a note when the test store records no "
        "latitudes; null: a report written before it, or the multi-scale one).",
    )

    @classmethod
    def from_seeds(
        cls, per_seed: list[SeedTestResult], dep: DeploymentConfig, object_iou_thresholds: Sequence[float]
    ) -> TestReport:
        """The report of these seeds' results, with mean ± std per ratio tag and metric."""
        first = per_seed[0].metrics
        agg: dict[str, dict[str, MetricSummary]] = {}
        for tag, row in first.items():
            agg[tag] = {}
            for name in row:
                mu, sd = mean_std([p.metrics[tag][name] for p in per_seed])
                agg[tag][name] = MetricSummary(mean=mu, std=sd, text=fmt(mu, sd))
        return cls(
            seeds=[p.seed for p in per_seed],
            tta=dep.tta,
            scales=list(dep.scales),
            fusion=dep.fusion if len(dep.scales) > 1 else None,
            object_iou_thresholds=list(object_iou_thresholds),
            aggregate=agg,
            per_seed=per_seed,
        )

    @property
    def fallback_seeds(self) -> list[int]:
        """Seeds whose threshold is the max-F1 fallback (calibration.allow_max_f1_fallback), not the target's."""
        return [s.seed for s in self.per_seed if s.threshold_source == "max_f1_fallback"]

    def fallback_warning(self) -> str | None:
        """The warning line of a report with fallback thresholds, else None."""
        if not self.fallback_seeds:
            return None
        return (
            f"WARNING: seeds {self.fallback_seeds} run at a max-F1 fallback threshold: the target precision was not "
            "reachable on Val-Realistic (threshold_source: max_f1_fallback in deployment_config.yaml)"
        )

    @property
    def configuration(self) -> str:
        """The evaluated configuration in words, e.g. ``tta none, scales [1.0]``."""
        fusion = f", fusion {self.fusion}" if self.fusion else ""
        return f"tta {self.tta}, scales {self.scales}{fusion}"
