"""Pixel confusion counts at a threshold (IoU_RTS, F1_RTS, guide §6.1): from histograms or streamed from batches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rtscore.data.tiles import IGNORE_INDEX
from rtscore.metrics.histograms import ArrayLike, LogitBins, TileHistograms, as_tile_batch
from rtscore.metrics.prauc import weighted_hist
from rtscore.metrics.prevalence import ratio_pools


def prob_to_logit(threshold: float) -> float:
    """The logit of a probability threshold in (0, 1); 0.5 maps to exactly 0.0."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"probability threshold must be in (0, 1); got {threshold}")
    return math.log(threshold) - math.log1p(-threshold)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


@dataclass(frozen=True)
class ConfusionCounts:
    """Pixel confusion counts (possibly prevalence-weighted, hence floats); ignore pixels are never counted.

    Reductions return nan when their denominator is 0 (e.g. IoU of a batch with no positive pixel and no
    positive prediction), so an undefined value is never reported as perfect or as zero.
    """

    tp: float = 0.0
    fp: float = 0.0
    fn: float = 0.0
    tn: float = 0.0

    def __add__(self, other: ConfusionCounts) -> ConfusionCounts:
        return ConfusionCounts(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn, self.tn + other.tn)

    @property
    def iou(self) -> float:
        """IoU_RTS = TP / (TP + FP + FN)."""
        return _ratio(self.tp, self.tp + self.fp + self.fn)

    @property
    def f1(self) -> float:
        """F1_RTS = 2TP / (2TP + FP + FN)."""
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def precision(self) -> float:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float:
        return _ratio(self.tp, self.tp + self.fn)


def confusion_from_hist(
    pos_hist: np.ndarray, neg_hist: np.ndarray, bins: LogitBins, threshold: float = 0.5
) -> ConfusionCounts:
    """Confusion counts of (weighted) histograms, calling pixels with logit >= logit(threshold) positive.

    Exact when logit(threshold) is a bin edge (p = 0.5 always is); otherwise the nearest edge is used (see
    `LogitBins.threshold_index`).
    """
    k = bins.threshold_index(prob_to_logit(threshold))
    p, n = np.asarray(pos_hist, np.float64), np.asarray(neg_hist, np.float64)
    return ConfusionCounts(tp=float(p[k:].sum()), fp=float(n[k:].sum()), fn=float(p[:k].sum()), tn=float(n[:k].sum()))


def pixel_confusion(h: TileHistograms, ratio: float | None, threshold: float = 0.5) -> ConfusionCounts:
    """Confusion counts of the pool at 1:`ratio` (negative tiles weighted as in `weighted_hist`)."""
    return confusion_from_hist(*weighted_hist(h, ratio), h.bins, threshold)


def pixel_metrics_at_ratios(
    h: TileHistograms,
    ratios: Sequence[float] = (200, 500, 1000),
    *,
    threshold: float = 0.5,
    balanced: bool = True,
    prefix: str = "val",
) -> dict[str, float]:
    """IoU_RTS and F1_RTS at 1:1 and each 1:N, keyed like `val_realistic_iou_rts_1_200`, `val_balanced_f1_rts`."""
    out: dict[str, float] = {}
    for pool, suffix, r in ratio_pools(ratios, balanced):
        c = pixel_confusion(h, r, threshold)
        out[f"{prefix}_{pool}_iou_rts{suffix}"] = c.iou
        out[f"{prefix}_{pool}_f1_rts{suffix}"] = c.f1
    return out


def confusion_counts(logits: ArrayLike, target: ArrayLike, threshold: float = 0.5) -> ConfusionCounts:
    """Pixel confusion counts of one batch, calling logit >= logit(threshold) positive (exact at any threshold).

    Args:
        logits: (B,H,W) or (B,1,H,W) logits, numpy or torch (reduced on the tensor's device).
        target: Same shape, labels in {0, 1, 255}; 255 is ignored.
        threshold: Probability threshold in (0, 1).

    Raises:
        ValueError: Shape mismatch or labels outside {0, 1, 255}.
    """
    t_logit = prob_to_logit(threshold)
    logits, target = as_tile_batch(logits, target)
    if isinstance(logits, torch.Tensor):
        t = torch.as_tensor(target, device=logits.device)
        called = logits.detach() >= t_logit
        gt_pos, gt_neg = t == 1, t == 0
        stacked = torch.stack(
            [(called & gt_pos).sum(), (called & gt_neg).sum(), gt_pos.sum(), gt_neg.sum(), (t == IGNORE_INDEX).sum()]
        )
        tp, fp, n_pos, n_neg, n_ign = stacked.tolist()  # one host sync
    else:
        x, y = np.asarray(logits), np.asarray(target)
        hit = x >= t_logit
        y_pos, y_neg = y == 1, y == 0
        tp, fp = int(np.count_nonzero(hit & y_pos)), int(np.count_nonzero(hit & y_neg))
        n_pos, n_neg = int(np.count_nonzero(y_pos)), int(np.count_nonzero(y_neg))
        n_ign = int(np.count_nonzero(y == IGNORE_INDEX))
    if n_pos + n_neg + n_ign != math.prod(target.shape):
        raise ValueError(f"labels must be in {{0, 1, {IGNORE_INDEX}}}; found other values in the target batch")
    return ConfusionCounts(tp=float(tp), fp=float(fp), fn=float(n_pos - tp), tn=float(n_neg - fp))


class PixelConfusion:
    """Streams confusion counts batch by batch (e.g. training-set IoU) without histograms."""

    def __init__(self, threshold: float = 0.5) -> None:
        prob_to_logit(threshold)  # validate early
        self.threshold = threshold
        self.counts = ConfusionCounts()

    def update(self, logits: ArrayLike, target: ArrayLike) -> ConfusionCounts:
        """Add a batch; returns that batch's own counts."""
        batch = confusion_counts(logits, target, self.threshold)
        self.counts = self.counts + batch
        return batch

    def compute(self) -> ConfusionCounts:
        """The counts accumulated since the last reset."""
        return self.counts

    def reset(self) -> None:
        self.counts = ConfusionCounts()
