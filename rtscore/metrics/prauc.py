"""PR-AUC (average precision) and PR curves from tile histograms, at prevalence ratios, with bootstrap intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from rtscore.metrics.histograms import HistogramPool, LogitBins, TileHistograms
from rtscore.metrics.prevalence import geometric_mean, negative_weight, ratio_tag

# Tiles per float64 block when histograms are combined by matrix product: bounds the float copy to
# block × n_bins × 8 bytes (16 MB at 2048 bins) whatever the pool size.
_TILE_BLOCK = 1024


def _ap_rows(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Average precision of each row of (R, n_bins) weighted histograms ordered by ascending logit."""
    tp = np.cumsum(pos[:, ::-1], axis=1)
    fp = np.cumsum(neg[:, ::-1], axis=1)
    n_pos = tp[:, -1]
    called = tp + fp
    # Bins with no pixels add no recall (ΔR = 0), so their 0/0 precision is never used; 0 keeps it finite.
    precision = np.divide(tp, called, out=np.zeros_like(tp), where=called > 0)
    safe = np.where(n_pos > 0, n_pos, 1.0)
    ap = (pos[:, ::-1] * precision).sum(axis=1) / safe  # Σ (R_k − R_{k−1}) · P_k with ΔR_k = pos_k / P
    return np.where(n_pos > 0, ap, np.nan)


def _check_hist_pair(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p, n = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    if p.ndim != 1 or p.shape != n.shape:
        raise ValueError(f"pos and neg histograms must be 1-D of equal length; got {p.shape} and {n.shape}")
    if (p < 0).any() or (n < 0).any():
        raise ValueError("histogram counts must be non-negative")
    return p, n


def average_precision_from_hist(pos_hist: np.ndarray, neg_hist: np.ndarray) -> float:
    """Average precision from positive / negative counts per logit bin (ascending logits).

    Each non-empty bin is one threshold step, from the top bin down: TP and FP are the cumulative counts,
    precision TP / (TP + FP), recall TP / P, and AP = Σ (R_k − R_{k−1}) · P_k, the step definition of
    `sklearn.metrics.average_precision_score` (no interpolation). Pixels sharing a bin are tied scores.
    Counts may be weighted (floats).

    Returns:
        AP in [0, 1]; nan when there are no positive pixels (P = 0: recall is undefined).
    """
    p, n = _check_hist_pair(pos_hist, neg_hist)
    return float(_ap_rows(p[None], n[None])[0])


def tile_weights(h: TileHistograms, ratio: float | None) -> np.ndarray:
    """(T,) weight per tile at 1:`ratio`: 1 for positive tiles, `negative_weight` for negative tiles."""
    w = negative_weight(ratio, h.n_pos_tiles, h.n_neg_tiles)
    return np.where(h.is_positive, 1.0, w)


def weighted_hist(h: HistogramPool, ratio: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Pool histograms (pos, neg) as float64 (n_bins,) at prevalence 1:`ratio` (None: the natural pool).

    Only the pool's class sums are read, so per-tile histograms and their streamed `ClassSums` give the same
    (bit-identical) result.

    Negative tiles are weighted by `ratio × n_pos / n_neg`: the expected value of drawing `ratio × n_pos`
    negative tiles at random, without the draw's noise. Positive tiles (and their label-0 pixels) weigh 1.

    Raises:
        ValueError: A ratio asked of a pool without negative tiles (see `negative_weight`).
    """
    pos, neg_on_pos, neg_on_neg = h.class_sums
    w = negative_weight(ratio, h.n_pos_tiles, h.n_neg_tiles)
    return pos.astype(np.float64), neg_on_pos + w * neg_on_neg.astype(np.float64)


def pr_auc(h: HistogramPool, ratio: float | None) -> float:
    """PR-AUC (average precision) of the pool at 1:`ratio`; nan without positive pixels."""
    return average_precision_from_hist(*weighted_hist(h, ratio))


def _pool_stats(h: HistogramPool, ratio: float, name: str) -> dict[str, float]:
    n_pos, n_neg = h.n_pos_tiles, h.n_neg_tiles
    return {
        f"{name}_n_pos_tiles": float(n_pos),
        f"{name}_n_neg_tiles": float(ratio * n_pos),  # the negatives the ratio stands for
        f"{name}_effective_neg_tiles": float(n_neg),  # the real tiles behind them
        f"{name}_neg_weight": negative_weight(ratio, n_pos, n_neg),  # > 1: pool smaller than the ratio asks
    }


def pr_auc_at_ratios(
    h: HistogramPool,
    ratios: Sequence[float] = (200, 500, 1000),
    *,
    balanced: bool = True,
    prefix: str = "val",
) -> dict[str, float]:
    """PR-AUC at Val-Balanced 1:1 and each Val-Realistic 1:N from one inference pass (guide §10.3).

    Keys (prefix "val"): `val_balanced_pr_auc`, `val_realistic_pr_auc_1_200`, ...,
    `val_realistic_pr_auc_geomean` (geometric mean over `ratios`, see `geometric_mean`), and per pool
    `<pool>_n_pos_tiles`, `<pool>_n_neg_tiles` (ratio × n_pos, the negatives the ratio stands for),
    `<pool>_effective_neg_tiles` (the real negative tiles, n_neg) and `<pool>_neg_weight`, where <pool> is
    `val_balanced` or `val_realistic_..._1_N` with the ratio suffix last, e.g. `val_realistic_neg_weight_1_200`.

    Raises:
        ValueError: Ratios asked of a pool without negative tiles.
    """
    out: dict[str, float] = {}
    if balanced:
        out[f"{prefix}_balanced_pr_auc"] = pr_auc(h, 1.0)
        out.update(_pool_stats(h, 1.0, f"{prefix}_balanced"))
    realistic = []
    for r in ratios:
        tag = ratio_tag(r)
        ap = pr_auc(h, r)
        realistic.append(ap)
        out[f"{prefix}_realistic_pr_auc_{tag}"] = ap
        for key, value in _pool_stats(h, r, f"{prefix}_realistic").items():
            out[f"{key}_{tag}"] = value
    out[f"{prefix}_realistic_pr_auc_geomean"] = geometric_mean(realistic)
    return out


def _weighted_rows(weights: np.ndarray, hist: np.ndarray) -> np.ndarray:
    """(R, T) tile weights @ (T, n_bins) uint32 histograms -> (R, n_bins) float64, in tile blocks."""
    out = np.zeros((weights.shape[0], hist.shape[1]), np.float64)
    for s in range(0, hist.shape[0], _TILE_BLOCK):
        out += weights[:, s : s + _TILE_BLOCK] @ hist[s : s + _TILE_BLOCK].astype(np.float64)
    return out


def bootstrap_pr_auc(
    h: TileHistograms,
    ratio: float | None,
    n_boot: int,
    seed: int | np.random.Generator,
    *,
    confidence: float = 0.95,
    block: int = 64,
) -> tuple[float, float, float]:
    """Tile bootstrap of the PR-AUC at 1:`ratio`: percentile interval and standard deviation.

    Positive and negative tiles are resampled separately with replacement (keeping n_pos and n_neg, hence the
    ratio weight, fixed). Each resample is a vector of multinomial tile counts, so a block of resamples is one
    matrix product with the tile histograms.

    Returns:
        (low, high, std): the `confidence` percentile interval and the std of the resampled PR-AUCs;
        all nan when `n_boot` is 0 or the pool has no positive tile.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    n_pos, n_neg = h.n_pos_tiles, h.n_neg_tiles
    if n_boot <= 0 or n_pos == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    w = negative_weight(ratio, n_pos, n_neg)
    pos_idx, neg_idx = np.flatnonzero(h.is_positive), np.flatnonzero(~h.is_positive)
    aps = []
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        weights = np.zeros((b, h.n_tiles))
        weights[:, pos_idx] = rng.multinomial(n_pos, np.full(n_pos, 1.0 / n_pos), size=b)
        if n_neg:
            weights[:, neg_idx] = w * rng.multinomial(n_neg, np.full(n_neg, 1.0 / n_neg), size=b)
        aps.append(_ap_rows(_weighted_rows(weights, h.pos), _weighted_rows(weights, h.neg)))
    ap = np.concatenate(aps)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(ap, [tail, 100.0 - tail])
    return float(low), float(high), float(ap.std(ddof=1)) if ap.size > 1 else 0.0


def random_subsample_pr_auc(h: TileHistograms, ratio: float, rng: np.random.Generator) -> float:
    """The old estimator, kept only to measure its noise floor: PR-AUC of all positive tiles plus
    round(ratio × n_pos) negative tiles drawn at random (without replacement when the pool has enough)."""
    n_pos, n_neg = h.n_pos_tiles, h.n_neg_tiles
    n_draw = round(ratio * n_pos)
    if n_neg == 0 or n_draw == 0:
        return pr_auc(h, None)
    neg_idx = np.flatnonzero(~h.is_positive)
    drawn = rng.choice(neg_idx, size=n_draw, replace=n_draw > n_neg)
    weights = h.is_positive.astype(np.float64) + np.bincount(drawn, minlength=h.n_tiles)
    return float(_ap_rows(_weighted_rows(weights[None], h.pos), _weighted_rows(weights[None], h.neg))[0])


@dataclass(frozen=True, eq=False)
class PRCurve:
    """Precision and recall at each non-empty bin's threshold, thresholds ascending (as sklearn orders them).

    A pixel is called positive when its logit >= the threshold; the lowest threshold is -inf (everything).

    Attributes:
        thresholds_logit: (K,) logit thresholds (bin lower edges).
        thresholds_prob: (K,) the same as probabilities, sigmoid(threshold).
        precision: (K,) TP / (TP + FP) at each threshold.
        recall: (K,) TP / P at each threshold.
    """

    thresholds_logit: np.ndarray
    thresholds_prob: np.ndarray
    precision: np.ndarray
    recall: np.ndarray


def precision_recall_curve_from_hist(pos_hist: np.ndarray, neg_hist: np.ndarray, bins: LogitBins) -> PRCurve:
    """The PR curve of (possibly weighted) histograms; exact at bin edges, the only thresholds it offers.

    Raises:
        ValueError: Histograms that do not match `bins`, or no positive pixels.
    """
    p, n = _check_hist_pair(pos_hist, neg_hist)
    if p.shape[0] != bins.n_bins:
        raise ValueError(f"histograms have {p.shape[0]} bins but the binning has {bins.n_bins}")
    if p.sum() <= 0:
        raise ValueError("PR curve needs at least one positive pixel; recall is undefined without")
    tp = np.cumsum(p[::-1])[::-1]  # at threshold k: everything in bins k..
    fp = np.cumsum(n[::-1])[::-1]
    keep = (p + n) > 0
    t = bins.thresholds[keep]
    return PRCurve(
        thresholds_logit=t,
        thresholds_prob=expit(t),
        precision=tp[keep] / (tp[keep] + fp[keep]),
        recall=tp[keep] / tp[0],
    )


@dataclass(frozen=True)
class OperatingPoint:
    """A threshold and the precision / recall it reaches on the pool it was chosen on."""

    threshold_logit: float
    threshold_prob: float
    precision: float
    recall: float


def threshold_for_precision(h: HistogramPool, ratio: float | None, target_precision: float) -> OperatingPoint | None:
    """Lowest bin-edge threshold (hence highest recall) whose precision at 1:`ratio` is >= target (guide §12.2).

    Returns:
        The operating point, or None when no threshold reaches the target precision.
    """
    if not 0.0 < target_precision <= 1.0:
        raise ValueError(f"target_precision must be in (0, 1]; got {target_precision}")
    curve = precision_recall_curve_from_hist(*weighted_hist(h, ratio), h.bins)
    ok = np.flatnonzero(curve.precision >= target_precision)
    if ok.size == 0:
        return None
    i = int(ok[0])  # thresholds ascend, recall descends: the first qualifying one has the most recall
    return OperatingPoint(
        threshold_logit=float(curve.thresholds_logit[i]),
        threshold_prob=float(curve.thresholds_prob[i]),
        precision=float(curve.precision[i]),
        recall=float(curve.recall[i]),
    )
