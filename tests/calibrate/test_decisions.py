from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from rtscore.calibrate.cache import CachedSums
from rtscore.calibrate.decisions import (
    confusion_at_logit,
    operating_threshold,
    scale_gate,
    thresholds_at_ratios,
    tta_gate,
)
from rtscore.config.post_training import CalibrationConfig
from rtscore.metrics import (
    ClassSums,
    LogitBins,
    TileHistogramAccumulator,
    TileHistograms,
    pr_auc,
    weighted_hist,
)


def _pool(shift: float, noise: float = 1.0, seed: int = 0, n_pos: int = 6, n_neg: int = 30) -> tuple:
    """Tiles of 16x16: positive tiles hold a 6x6 RTS; logits separate the classes by `shift`."""
    rng = np.random.default_rng(seed)
    labels = np.zeros((n_pos + n_neg, 16, 16), np.uint8)
    labels[:n_pos, 4:10, 4:10] = 1
    logits = rng.normal(-2.0, noise, labels.shape) + shift * labels
    return logits.astype(np.float32), labels


def _tiles(logits: np.ndarray, labels: np.ndarray) -> TileHistograms:
    acc = TileHistogramAccumulator(LogitBins())
    acc.add_batch(logits, labels, list(range(len(labels))))
    return acc.result()


def _hist(logits: np.ndarray, labels: np.ndarray, large: np.ndarray | None = None) -> CachedSums:
    h = _tiles(logits, labels)
    return CachedSums.of_tiles(h, h.pos if large is None else large)


def test_threshold_matches_a_brute_force_scan() -> None:
    logits, labels = _pool(3.0, noise=1.5, seed=3)
    h = _hist(logits, labels).hist
    ratio, target = 200, 0.8
    op = operating_threshold(h, ratio, target)
    # Brute force over every bin edge: weighted precision of `logit >= edge`, pixel by pixel.
    w = weighted_hist(h, ratio)  # only for the weight: negatives of negative tiles count w times
    n_pos_t, n_neg_t = h.n_pos_tiles, h.n_neg_tiles
    tile_w = np.where(labels.reshape(len(labels), -1).max(axis=1) == 1, 1.0, ratio * n_pos_t / n_neg_t)
    bins = h.bins
    best = None
    for edge in bins.edges[1:-1]:
        called = logits >= edge
        tp = (tile_w[:, None, None] * (called & (labels == 1))).sum()
        fp = (tile_w[:, None, None] * (called & (labels == 0))).sum()
        if tp + fp > 0 and tp / (tp + fp) >= target:
            best = edge
            break
    assert best is not None and w[0].sum() > 0
    # Bins without pixels give no new threshold: the chosen edge calls exactly the pixels the scan's does.
    assert op.target_reached and np.array_equal(logits >= op.threshold_logit, logits >= best)
    called = logits >= best
    tp = (tile_w[:, None, None] * (called & (labels == 1))).sum()
    assert op.recall == pytest.approx(tp / (labels == 1).sum())
    [rt] = thresholds_at_ratios(h, [ratio], target, temperature=2.0)
    assert rt.threshold == pytest.approx(expit(op.threshold_logit / 2.0))  # a probability of the calibrated model


def test_unreachable_precision_falls_back_to_max_f1() -> None:
    logits, labels = _pool(0.0, seed=1)  # no skill
    op = operating_threshold(_hist(logits, labels).hist, 1000, 0.99)
    assert not op.target_reached and 0.0 <= op.precision < 0.99


def test_confusion_at_logit_counts_the_bins_above() -> None:
    bins = LogitBins(core_bins=4, lo=-2.0, hi=2.0, tail_octaves=0)
    c = confusion_at_logit(np.array([0, 1, 2, 3.0]), np.array([4, 3, 2, 1.0]), bins, 0.0)
    assert (c.tp, c.fp, c.fn, c.tn) == (5.0, 3.0, 1.0, 7.0)
    assert confusion_at_logit(np.ones(4), np.ones(4), bins, -np.inf).tp == 4.0


CAL = CalibrationConfig()


def _seed(shifts: dict[str, float], seed: int = 0) -> dict[str, CachedSums]:
    out = {}
    for name, shift in shifts.items():
        logits, labels = _pool(shift, seed=seed)
        out[name] = _hist(logits, labels)
    return out


def test_tta_gate_picks_the_cheapest_configuration_that_passes() -> None:
    seeds = [_seed({"none": 2.0, "minimal": 2.0, "standard": 3.5, "full": 4.5}, seed=s) for s in (0, 1)]
    d = tta_gate(seeds, CAL)
    assert d.chosen == "standard", d.reason  # minimal gains nothing; full gains more but costs 8 passes
    assert [r.name for r in d.rows] == ["none", "minimal", "standard", "full"]
    seeds = [_seed({"none": 2.0, "minimal": 3.0, "standard": 3.5, "full": 4.5})]
    assert tta_gate(seeds, CAL).chosen == "minimal"


def test_default_tta_candidates_are_minimal_first_standard_only_if_necessary() -> None:
    """Guide §11.1: 'full' (8 passes) is offered only when a config lists it; calibration caches and gates
    exactly `calibration.tta_candidates`, so by default even a winning 'full' never ships."""
    assert CAL.tta_candidates == ["none", "minimal", "standard"]
    shifts = {"none": 2.0, "minimal": 2.0, "standard": 2.0, "full": 4.5}  # only full would pass
    offered = [_seed({t: shifts[t] for t in CAL.tta_candidates}, seed=s) for s in (0, 1)]
    assert tta_gate(offered, CAL).chosen == "none"
    shifts["standard"] = 3.5  # minimal fails: standard is necessary and ships
    offered = [_seed({t: shifts[t] for t in CAL.tta_candidates}, seed=s) for s in (0, 1)]
    assert tta_gate(offered, CAL).chosen == "standard"


def test_tta_gate_refuses_a_gain_that_costs_precision_at_the_threshold() -> None:
    base = _seed({"none": 2.5})["none"]
    logits, labels = _pool(2.5)
    noisy = logits.copy()
    noisy[labels == 0] += 0.6  # every negative moves up: more false alarms at the baseline threshold
    noisy[labels == 1] += 3.0  # positives move up more: PR-AUC improves
    cand = _hist(noisy, labels)
    assert pr_auc(cand.hist, 200) > pr_auc(base.hist, 200) * 1.01
    d = tta_gate([{"none": base, "minimal": cand}], CAL)
    assert d.chosen == "none" and d.rows[1].side_mean > CAL.tta_max_precision_drop


def _large_only(logits: np.ndarray, labels: np.ndarray, large_rows: int) -> CachedSums:
    """Histograms where the RTS of the first `large_rows` tiles count as large."""
    h = _tiles(logits, labels)
    pos_large = h.pos.copy()
    pos_large[large_rows:] = 0
    return CachedSums.of_tiles(h, pos_large)


def test_scale_gate_ships_multiscale_only_with_large_rts_gain_and_few_new_false_alarms() -> None:
    logits, labels = _pool(2.0)
    base = _large_only(logits, labels, 3)
    better = logits.copy()
    better[:3][labels[:3] == 1] += 3.0  # large RTS found much better
    good = _large_only(better, labels, 3)
    noisy = better.copy()
    noisy[labels == 0] += 1.5  # ... but everything else lights up
    bad = _large_only(noisy, labels, 3)
    d = scale_gate([{"1.0": base, "max": bad, "weighted_mean": good}], "1.0", CAL)
    assert d.chosen == "weighted_mean", d.reason
    rows = {r.name: r for r in d.rows}
    assert not rows["max"].passes and rows["max"].side_mean > CAL.scale_max_fp_rate_increase
    assert scale_gate([{"1.0": base, "max": bad}], "1.0", CAL).chosen == "1.0"


def test_scale_gate_does_not_ship_without_large_rts() -> None:
    logits, labels = _pool(2.0)
    none_large = _large_only(logits, labels, 0)
    d = scale_gate([{"1.0": none_large, "max": none_large}], "1.0", CAL)
    assert d.chosen == "1.0" and "no large RTS" in d.reason


def test_decisions_from_class_sums_equal_those_from_tile_histograms() -> None:
    logits, labels = _pool(2.5, noise=1.5, seed=5)
    tiles = _tiles(logits, labels)
    sums = _hist(logits, labels).hist
    assert isinstance(sums, ClassSums) and sums.n_pos_tiles == tiles.n_pos_tiles
    for ratio in (None, 1, 200):
        for a, b in zip(weighted_hist(tiles, ratio), weighted_hist(sums, ratio), strict=True):
            assert np.array_equal(a, b)
    assert operating_threshold(tiles, 200, 0.7) == operating_threshold(sums, 200, 0.7)
    assert thresholds_at_ratios(tiles, [1, 200], 0.7, 1.3) == thresholds_at_ratios(sums, [1, 200], 0.7, 1.3)
