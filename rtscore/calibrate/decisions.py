"""Post-training decisions from cached statistics (guide §10.4 steps 2-5): TTA gate, scale gate, threshold.

Every function here takes histograms, never a model: the gates, the temperature and the thresholds of a
100,000-tile validation pool are decided in seconds from the cache of one inference pass. They read only a
pool's class sums (`ClassSums`, streamed from the cache chunk by chunk, :meth:`LogitCache.sums`), so their
memory does not grow with the number of tiles; per-tile `TileHistograms` are accepted too, with the same result.

Gain and drop criteria are relative: a TTA configuration passes with PR-AUC >= (1 + min_gain) x the 'none'
PR-AUC and precision >= (1 - max_drop) x the baseline precision, both at the prevalence ratio
`calibration.ratio`. Precision and FP rate are compared at the *baseline's* operating threshold (the one
the no-TTA, native-scale model reaches the target precision with), so a candidate cannot buy PR-AUC with
false alarms the current threshold would let through. Across seeds the decision uses the mean of the
per-seed gains and drops, so one lucky seed does not change the deployment.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.special import expit

from rtscore.calibrate.cache import CachedSums
from rtscore.config.post_training import CalibrationConfig
from rtscore.inference.numerics import TTA_TRANSFORMS
from rtscore.metrics import (
    ConfusionCounts,
    HistogramPool,
    LogitBins,
    pr_auc,
    precision_recall_curve_from_hist,
    threshold_for_precision,
    weighted_hist,
)


def confusion_at_logit(pos: np.ndarray, neg: np.ndarray, bins: LogitBins, threshold_logit: float) -> ConfusionCounts:
    """Confusion counts of (weighted) histograms calling `logit >= threshold_logit` positive (bin-edge exact)."""
    k = 0 if threshold_logit == -math.inf else bins.threshold_index(threshold_logit)
    return ConfusionCounts(
        tp=float(pos[k:].sum()), fp=float(neg[k:].sum()), fn=float(pos[:k].sum()), tn=float(neg[:k].sum())
    )


@dataclass(frozen=True)
class Operating:
    """An operating threshold in logits (before temperature) and what it reaches on the pool."""

    threshold_logit: float
    precision: float
    recall: float
    target_reached: bool


def operating_threshold(h: HistogramPool, ratio: float, target_precision: float) -> Operating:
    """Lowest threshold reaching `target_precision` at 1:`ratio` (guide §12.2); if none does, the max-F1 one.

    The threshold never goes below the lowest finite bin edge, so it maps to a probability in (0, 1).
    """
    op = threshold_for_precision(h, ratio, target_precision)
    if op is not None:
        t = max(op.threshold_logit, float(h.bins.edges[1]))
        c = confusion_at_logit(*weighted_hist(h, ratio), h.bins, t)
        return Operating(t, c.precision, c.recall, True)
    curve = precision_recall_curve_from_hist(*weighted_hist(h, ratio), h.bins)
    f1 = 2 * curve.precision * curve.recall / np.maximum(curve.precision + curve.recall, 1e-300)
    i = int(np.nanargmax(f1))
    t = max(float(curve.thresholds_logit[i]), float(h.bins.edges[1]))
    c = confusion_at_logit(*weighted_hist(h, ratio), h.bins, t)
    return Operating(t, c.precision, c.recall, False)


def best_precision(h: HistogramPool, ratio: float) -> Operating:
    """The highest precision any threshold reaches at 1:`ratio` (with recall > 0), and where: what a target
    precision that cannot be reached falls short of."""
    curve = precision_recall_curve_from_hist(*weighted_hist(h, ratio), h.bins)
    ok = curve.recall > 0
    if not ok.any():
        return Operating(math.inf, math.nan, 0.0, False)
    precision = np.where(ok, curve.precision, -np.inf)
    i = int(np.nanargmax(precision))
    return Operating(float(curve.thresholds_logit[i]), float(curve.precision[i]), float(curve.recall[i]), False)


def _rel(new: float, old: float) -> float:
    """Relative change (new - old) / old; inf when old is 0 and new is not, 0 when both are 0."""
    if old == 0:
        return 0.0 if new == 0 else math.inf
    return (new - old) / old


@dataclass
class GateRow:
    """One candidate of a gate, averaged over seeds (per-seed values kept for the report)."""

    name: str
    cost: float
    metric_mean: float
    gain_mean: float
    side_mean: float
    passes: bool
    per_seed: list[dict[str, float]] = field(default_factory=list)


@dataclass
class GateDecision:
    """What a gate chose and why."""

    gate: str
    chosen: str
    reason: str
    rows: list[GateRow]
    baseline_threshold_logit: list[float]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.fmean(vals) if vals else math.nan


def tta_gate(per_seed: Sequence[Mapping[str, CachedSums]], cal: CalibrationConfig) -> GateDecision:
    """Cheapest TTA gaining >= `tta_min_pr_auc_gain` PR-AUC and losing <= `tta_max_precision_drop` precision.

    Args:
        per_seed: Per seed, the native-scale histograms of each TTA configuration, keyed by TTA name.
        cal: Gate thresholds, ratio and target precision.
    """
    r, target = cal.ratio, cal.target_precision
    order = sorted(per_seed[0], key=lambda t: len(TTA_TRANSFORMS[t]))
    base_ops = [operating_threshold(s["none"].hist, r, target) for s in per_seed]
    rows = []
    for t in order:
        seeds = []
        for s, op in zip(per_seed, base_ops, strict=True):
            base, cand = s["none"].hist, s[t].hist
            ap_b, ap_c = pr_auc(base, r), pr_auc(cand, r)
            p_b = confusion_at_logit(*weighted_hist(base, r), base.bins, op.threshold_logit).precision
            p_c = confusion_at_logit(*weighted_hist(cand, r), cand.bins, op.threshold_logit).precision
            seeds.append({"pr_auc": ap_c, "gain": _rel(ap_c, ap_b), "precision": p_c, "drop": -_rel(p_c, p_b)})
        gain, drop = _mean([d["gain"] for d in seeds]), _mean([d["drop"] for d in seeds])
        ok = t == "none" or (gain >= cal.tta_min_pr_auc_gain and drop <= cal.tta_max_precision_drop)
        rows.append(GateRow(t, len(TTA_TRANSFORMS[t]), _mean([d["pr_auc"] for d in seeds]), gain, drop, ok, seeds))
    chosen = next((row for row in rows if row.name != "none" and row.passes), None)
    if chosen is None:
        reason = (
            f"no TTA configuration gains >= {cal.tta_min_pr_auc_gain:.1%} PR-AUC at 1:{r} with a precision drop "
            f"<= {cal.tta_max_precision_drop:.1%}; 'none' ships"
        )
        name = "none"
    else:
        name = chosen.name
        reason = (
            f"'{name}' is the cheapest configuration passing: PR-AUC {chosen.gain_mean:+.2%} "
            f"(>= {cal.tta_min_pr_auc_gain:.1%}), precision drop {chosen.side_mean:.2%} "
            f"(<= {cal.tta_max_precision_drop:.1%}) at 1:{r}"
        )
    return GateDecision("tta", name, reason, rows, [op.threshold_logit for op in base_ops])


def fp_rate(h: HistogramPool, ratio: float, threshold_logit: float) -> float:
    """Global pixel false-positive rate FP / (FP + TN) at 1:`ratio`."""
    c = confusion_at_logit(*weighted_hist(h, ratio), h.bins, threshold_logit)
    return c.fp / (c.fp + c.tn) if c.fp + c.tn > 0 else math.nan


def scale_gate(per_seed: Sequence[Mapping[str, CachedSums]], baseline: str, cal: CalibrationConfig) -> GateDecision:
    """Ship multi-scale only if large-RTS PR-AUC gains >= `scale_min_large_pr_auc_gain` and the FP rate at the
    baseline threshold rises <= `scale_max_fp_rate_increase` (guide §8.3).

    Args:
        per_seed: Per seed, histograms keyed by configuration name: `baseline` (native scale) and each
            multi-scale candidate (e.g. 'weighted_mean', 'max', 'consensus').
        baseline: Key of the native-scale configuration.
        cal: Gate thresholds, ratio and target precision.
    """
    r, target = cal.ratio, cal.target_precision
    base_ops = [operating_threshold(s[baseline].hist, r, target) for s in per_seed]
    if not all(s[baseline].has_large for s in per_seed):
        reason = (
            f"no large RTS (bounding box > {cal.large_rts_bbox_m:g} m) in the validation pool of every seed: "
            "multi-scale cannot be shown to help; [1.0] ships"
        )
        return GateDecision("scales", baseline, reason, [], [op.threshold_logit for op in base_ops])
    rows = []
    for name in per_seed[0]:
        seeds = []
        for s, op in zip(per_seed, base_ops, strict=True):
            base, cand = s[baseline], s[name]
            ap_b, ap_c = pr_auc(base.large, r), pr_auc(cand.large, r)
            fp_b, fp_c = fp_rate(base.hist, r, op.threshold_logit), fp_rate(cand.hist, r, op.threshold_logit)
            seeds.append({"large_pr_auc": ap_c, "gain": _rel(ap_c, ap_b), "fp_rate": fp_c, "fp_rise": _rel(fp_c, fp_b)})
        gain, rise = _mean([d["gain"] for d in seeds]), _mean([d["fp_rise"] for d in seeds])
        ok = name == baseline or (gain >= cal.scale_min_large_pr_auc_gain and rise <= cal.scale_max_fp_rate_increase)
        rows.append(GateRow(name, 0.0, _mean([d["large_pr_auc"] for d in seeds]), gain, rise, ok, seeds))
    passing = [row for row in rows if row.name != baseline and row.passes]
    if not passing:
        reason = (
            f"no fusion gains >= {cal.scale_min_large_pr_auc_gain:.1%} large-RTS PR-AUC with an FP-rate rise "
            f"<= {cal.scale_max_fp_rate_increase:.0%} at 1:{r}; [1.0] ships"
        )
        return GateDecision("scales", baseline, reason, rows, [op.threshold_logit for op in base_ops])
    best = max(passing, key=lambda row: row.gain_mean)
    reason = (
        f"'{best.name}' passes with the largest large-RTS PR-AUC gain {best.gain_mean:+.2%} "
        f"(>= {cal.scale_min_large_pr_auc_gain:.1%}), FP-rate rise {best.side_mean:+.2%} "
        f"(<= {cal.scale_max_fp_rate_increase:.0%}) at 1:{r}"
    )
    return GateDecision("scales", best.name, reason, rows, [op.threshold_logit for op in base_ops])


@dataclass(frozen=True)
class RatioThreshold:
    """The threshold chosen at one prevalence ratio, as a calibrated probability, and what it reaches."""

    ratio: int
    threshold: float
    threshold_logit: float
    precision: float
    recall: float
    target_reached: bool


def thresholds_at_ratios(
    h: HistogramPool, ratios: Sequence[int], target_precision: float, temperature: float
) -> list[RatioThreshold]:
    """Per ratio, the operating threshold as a probability of the calibrated model: sigmoid(t_logit / T)."""
    out = []
    for r in ratios:
        op = operating_threshold(h, r, target_precision)
        p = float(expit(op.threshold_logit / temperature))
        out.append(RatioThreshold(r, p, op.threshold_logit, op.precision, op.recall, op.target_reached))
    return out
