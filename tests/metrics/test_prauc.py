from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, precision_recall_curve

from rtscore.metrics import (
    ClassSumAccumulator,
    LogitBins,
    TileHistogramAccumulator,
    TileHistograms,
    average_precision_from_hist,
    bootstrap_pr_auc,
    geometric_mean,
    negative_weight,
    pr_auc,
    pr_auc_at_ratios,
    precision_recall_curve_from_hist,
    random_subsample_pr_auc,
    ratio_tag,
    threshold_for_precision,
    weighted_hist,
)
from rtscore.metrics.counts import _tile_counts_numpy, _tile_counts_torch


def make_pool(
    rng: np.random.Generator, n_pos: int, n_neg: int, size: int = 32, ignore_frac: float = 0.02
) -> tuple[np.ndarray, np.ndarray]:
    """Tiles of logits and labels: positive tiles hold a ~1% slump patch; a few negatives hold hard negatives."""
    t = n_pos + n_neg
    labels = np.zeros((t, size, size), np.uint8)
    for i in range(n_pos):
        r, c = rng.integers(0, size - 4, 2)
        labels[i, r : r + rng.integers(1, 4), c : c + rng.integers(1, 4)] = 1
    labels[rng.random(labels.shape) < ignore_frac] = 255
    logits = np.where(labels == 1, rng.normal(1.5, 2.0, labels.shape), rng.normal(-5.0, 2.5, labels.shape))
    hard = rng.random(labels.shape) < 0.003
    logits[hard] = rng.normal(1.0, 1.5, int(hard.sum()))
    return logits.astype(np.float32), labels


def accumulate(
    logits: np.ndarray, labels: np.ndarray, bins: LogitBins | None = None, batch: int = 16
) -> TileHistograms:
    acc = TileHistogramAccumulator(bins)
    for s in range(0, len(logits), batch):
        acc.add_batch(logits[s : s + batch], labels[s : s + batch], list(range(s, min(s + batch, len(logits)))))
    return acc.result()


def sk_ap(logits: np.ndarray, labels: np.ndarray, weight: np.ndarray | None = None) -> float:
    valid = labels != 255
    w = None if weight is None else weight[valid]
    return float(average_precision_score(labels[valid], logits[valid], sample_weight=w))


# --------------------------------------------------------------------------- binning and accumulation
def test_bins_put_zero_on_an_edge_and_index_by_arithmetic() -> None:
    bins = LogitBins()
    t = bins.n_tail  # 5 octaves x 128 tail bins + 1 overflow bin on each side of the 2048-bin core
    assert bins.width == 1 / 64 and t == 641 and bins.n_bins == 2048 + 2 * 641 and bins.zero_index == t + 1024
    assert bins.edges[bins.zero_index] == 0.0 and bins.edges[t] == -16.0 and bins.edges[t + 2048] == 16.0
    x = np.array([-1e-30, -0.0, 0.0, 1e-30, 1 / 64, -100.0, 100.0, np.inf, -np.inf, 512.0, -512.0], np.float32)
    z = bins.zero_index
    idx = bins.index(x)
    np.testing.assert_array_equal(idx[:5], [z - 1, z, z, z, z + 1])
    assert (
        bins.edges[idx[5]] <= -100.0 < bins.edges[idx[5] + 1] and bins.edges[idx[6]] <= 100.0 < bins.edges[idx[6] + 1]
    )
    np.testing.assert_array_equal(idx[7:], [bins.n_bins - 1, 0, bins.n_bins - 1, 1])  # overflow: >= 512, < -512
    centres = bins.centres
    np.testing.assert_array_equal(bins.index(centres), np.arange(bins.n_bins))
    np.testing.assert_array_equal(bins.index(bins.edges[:-1]), np.arange(bins.n_bins))
    np.testing.assert_array_equal(bins.index(torch.tensor(centres[:5])), np.arange(5))


def test_tail_bins_are_exact_at_every_edge_in_every_float_width() -> None:
    """Each finite edge starts its bin and the float just below it belongs to the bin before, in float32 and
    float64, on the numpy and the torch kernel alike; tail bins are 0.4-0.8 % of their logit wide."""
    bins = LogitBins()
    inner = bins.edges[1:-1]
    for dtype in (np.float32, np.float64):
        e = inner.astype(dtype)
        assert np.array_equal(e.astype(np.float64), inner)  # every edge is representable
        below = np.nextafter(e, dtype(-np.inf))
        np.testing.assert_array_equal(bins.index(e), np.arange(1, bins.n_bins))
        np.testing.assert_array_equal(bins.index(below), np.arange(0, bins.n_bins - 1))
        x = np.concatenate([e, below, [np.inf, -np.inf, dtype(1e30), dtype(-1e30)]])[None, None]
        y = np.zeros(x.shape, np.uint8)
        ref = _tile_counts_numpy(x, y, bins, [0])
        np.testing.assert_array_equal(ref, _tile_counts_torch(torch.from_numpy(x), torch.from_numpy(y), bins, [0]))
    tail = bins.edges[bins.n_tail + 2048 : -1]
    rel = np.diff(tail) / tail[:-1]
    assert tail[0] == 16.0 and tail[-1] == bins.top == 512.0
    assert rel.min() > 0.0038 and rel.max() < 0.0079


def test_bins_reject_zero_off_an_edge_and_nan() -> None:
    with pytest.raises(ValueError, match="even core_bins"):
        LogitBins(core_bins=2047)
    with pytest.raises(ValueError, match="lo < 0 < hi"):
        LogitBins(lo=1.0, hi=2.0)
    with pytest.raises(ValueError, match="power of two"):
        LogitBins(core_bins=240, lo=-15.0, hi=15.0)
    with pytest.raises(ValueError, match="NaN"):
        LogitBins().index(np.array([0.0, np.nan]))


def test_threshold_index_exact_at_edges_nearest_otherwise() -> None:
    bins = LogitBins()
    z = bins.zero_index
    assert bins.threshold_index(0.0) == z
    assert bins.threshold_index(1 / 64) == z + 1
    assert bins.threshold_index(0.3 / 64) == z  # nearest edge
    assert bins.threshold_index(20.0) == z + 1024 + 32 and bins.edges[z + 1024 + 32] == 20.0  # 16 x (1 + 32/128)
    assert bins.threshold_index(-1e9) == 0 and bins.threshold_index(1e9) == bins.n_bins
    assert bins.threshold_index(512.0) == bins.n_bins - 1  # exactly the overflow bin


def test_ignore_pixels_never_counted() -> None:
    rng = np.random.default_rng(0)
    logits, labels = make_pool(rng, 3, 3, ignore_frac=0.3)
    h = accumulate(logits, labels)
    bins = h.bins
    for i in range(6):
        valid = labels[i] != 255
        np.testing.assert_array_equal(h.n_valid[i], valid.sum())
        ref_pos = np.bincount(bins.index(logits[i][labels[i] == 1]), minlength=bins.n_bins)
        ref_neg = np.bincount(bins.index(logits[i][labels[i] == 0]), minlength=bins.n_bins)
        np.testing.assert_array_equal(h.pos[i], ref_pos)
        np.testing.assert_array_equal(h.neg[i], ref_neg)
    # Relabelling every ignore pixel as positive changes nothing while they stay 255.
    all_ignore = np.full_like(labels, 255)
    empty = accumulate(logits, all_ignore)
    assert empty.pos.sum() == 0 and empty.neg.sum() == 0 and not empty.is_positive.any()


def test_memory_is_tiles_times_bins() -> None:
    rng = np.random.default_rng(1)
    logits, labels = make_pool(rng, 10, 90, size=16)
    bins = LogitBins(core_bins=512, lo=-8.0, hi=8.0)
    assert bins.tail_per_octave == 32 and bins.n_bins == 512 + 2 * (5 * 32 + 1)  # the tails scale with the core
    acc = TileHistogramAccumulator(bins)
    for s in range(0, 100, 7):
        acc.add_batch(logits[s : s + 7], labels[s : s + 7], [f"t{i}" for i in range(s, min(s + 7, 100))])
    h = acc.result()
    assert h.pos.shape == h.neg.shape == (100, bins.n_bins)
    assert h.pos.dtype == np.uint32
    assert acc.nbytes == h.nbytes == 100 * bins.n_bins * 2 * 4
    assert h.tile_ids[:2] == ("t0", "t1") and h.n_pos_tiles == 10 and h.n_neg_tiles == 90


def test_repeated_tile_ids_accumulate_and_channel_dim_accepted() -> None:
    rng = np.random.default_rng(2)
    logits, labels = make_pool(rng, 2, 0)
    acc = TileHistogramAccumulator()
    acc.add_batch(logits[:, None, :16], labels[:, None, :16], ["a", "b"])
    acc.add_batch(logits[:, 16:], labels[:, 16:], np.array(["a", "b"]))
    h = acc.result()
    whole = accumulate(logits, labels)
    assert h.tile_ids == ("a", "b")
    np.testing.assert_array_equal(h.pos, whole.pos)
    np.testing.assert_array_equal(h.neg, whole.neg)


def test_torch_inputs_and_device_kernel_match_numpy() -> None:
    rng = np.random.default_rng(3)
    logits, labels = make_pool(rng, 3, 3)
    bins = LogitBins()
    ref = _tile_counts_numpy(logits, labels, bins, list(range(6)))
    dev = _tile_counts_torch(torch.from_numpy(logits), torch.from_numpy(labels).long(), bins, list(range(6)))
    np.testing.assert_array_equal(ref, dev)
    acc = TileHistogramAccumulator()
    acc.add_batch(torch.from_numpy(logits).half(), torch.from_numpy(labels).long(), torch.arange(6))
    half = _tile_counts_numpy(logits.astype(np.float16), labels, bins, list(range(6)))
    np.testing.assert_array_equal(acc.result().pos, half[:, 1])


@pytest.mark.parametrize("bad", ["nan", "label"])
def test_bad_inputs_name_the_tile(bad: str) -> None:
    logits, labels = np.zeros((2, 4, 4), np.float32), np.zeros((2, 4, 4), np.uint8)
    if bad == "nan":
        logits[1, 0, 0] = np.nan
    else:
        labels[1, 0, 0] = 7
    acc = TileHistogramAccumulator()
    with pytest.raises(ValueError, match="tile 'b'"):
        acc.add_batch(logits, labels, ["a", "b"])
    with pytest.raises(ValueError, match="NaN" if bad == "nan" else "labels"):
        _tile_counts_torch(torch.from_numpy(logits), torch.from_numpy(labels), LogitBins(), ["a", "b"])
    with pytest.raises(ValueError, match="same"):
        acc.add_batch(logits, labels[:, :2], ["a", "b"])
    with pytest.raises(ValueError, match="tile ids"):
        acc.add_batch(np.zeros((2, 4, 4)), np.zeros((2, 4, 4), np.int64), ["a"])


# --------------------------------------------------------------------------- average precision
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_ap_matches_sklearn_on_random_pixels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 100_000
    y = (rng.random(n) < rng.uniform(0.001, 0.01)).astype(np.uint8)
    x = np.where(y == 1, rng.normal(2.0, 2.5, n), rng.normal(-5.0, 3.0, n))
    hard = (rng.random(n) < 0.01) & (y == 0)
    x[hard] = rng.normal(1.0, 1.0, int(hard.sum()))
    x = x.astype(np.float32).reshape(4, 250, 100)
    y = y.reshape(4, 250, 100)
    h = accumulate(x, y)
    assert pr_auc(h, None) == pytest.approx(sk_ap(x, y), abs=0.005)


def test_ap_exact_when_logits_sit_on_bin_centres() -> None:
    rng = np.random.default_rng(4)
    bins = LogitBins()
    idx = np.clip(rng.normal(1024, 300, 40_000).astype(int), 0, 2047)
    x = bins.centres[idx].astype(np.float32).reshape(4, 100, 100)  # many ties inside each bin, as in sklearn
    y = ((rng.random(x.shape) < 0.05) | (x > 3)).astype(np.uint8)
    y[rng.random(x.shape) < 0.05] = 255
    h = accumulate(x, y)
    assert pr_auc(h, None) == pytest.approx(sk_ap(x, y), abs=1e-9)


def test_ap_hand_case_and_no_positive_is_nan() -> None:
    # Top bin: 1 pos, 1 neg -> P = 1/2 at R = 1/2; next bin: 1 pos -> P = 2/3 at R = 1. AP = 1/4 + 1/3.
    assert average_precision_from_hist([0, 1, 1], [0, 0, 1]) == pytest.approx(0.25 + 1 / 3, abs=1e-15)
    assert math.isnan(average_precision_from_hist([0, 0, 0], [3, 1, 0]))
    with pytest.raises(ValueError, match="equal length"):
        average_precision_from_hist([1, 0], [1])


# --------------------------------------------------------------------------- prevalence ratios
def test_reweighting_equals_duplicating_negative_tiles() -> None:
    rng = np.random.default_rng(5)
    logits, labels = make_pool(rng, 8, 24)
    h = accumulate(logits, labels)
    k = 5
    neg = ~h.is_positive
    dup_logits = np.concatenate([logits[h.is_positive]] + [logits[neg]] * k)
    dup_labels = np.concatenate([labels[h.is_positive]] + [labels[neg]] * k)
    natural_dup = pr_auc(accumulate(dup_logits, dup_labels), None)
    ratio = k * h.n_neg_tiles / h.n_pos_tiles  # w = ratio × n_pos / n_neg = k
    assert negative_weight(ratio, h.n_pos_tiles, h.n_neg_tiles) == pytest.approx(k)
    assert pr_auc(h, ratio) == pytest.approx(natural_dup, rel=1e-12)
    # The same expected value through sklearn's sample weights (ties grouped identically only to ~1e-3).
    weights = np.where(np.arange(len(logits))[:, None, None] < 8, 1.0, float(k)) * np.ones_like(logits)
    assert pr_auc(h, ratio) == pytest.approx(sk_ap(logits, labels, weights), abs=0.005)


def test_class_sums_of_blocks_in_any_order_equal_the_pool() -> None:
    rng = np.random.default_rng(11)
    logits, labels = make_pool(rng, 5, 37)
    h = accumulate(logits, labels)
    acc = ClassSumAccumulator(h.bins)
    order = rng.permutation(h.n_tiles)
    for block in np.array_split(order, 6):  # uneven blocks, shuffled tiles
        acc.add(h.pos[block], h.neg[block], h.is_positive[block])
    sums = acc.result()
    for a, b in zip(sums.class_sums, h.class_sums, strict=True):
        assert a.dtype == np.int64 and np.array_equal(a, b)
    assert (sums.n_pos_tiles, sums.n_neg_tiles) == (h.n_pos_tiles, h.n_neg_tiles)
    for ratio in (None, 1, 200):
        assert pr_auc(sums, ratio) == pr_auc(h, ratio)
    with pytest.raises(ValueError, match="shape"):
        acc.add(h.pos[:3], h.neg[:3], h.is_positive[:2])


def test_weighted_hist_mass_matches_the_ratio() -> None:
    rng = np.random.default_rng(6)
    logits, labels = make_pool(rng, 4, 40)
    h = accumulate(logits, labels)
    pos, neg = weighted_hist(h, 200)
    _, neg_on_pos, neg_on_neg = h.class_sums
    w = 200 * 4 / 40
    np.testing.assert_allclose(neg, neg_on_pos + w * neg_on_neg)
    assert pos.sum() == h.pos.sum()
    # Negative mass per negative-tile pixel equals 200 negatives per positive tile on average.
    assert (neg.sum() - neg_on_pos.sum()) / (neg_on_neg.sum() / 40) == pytest.approx(200 * 4)


def test_pr_auc_at_ratios_keys_weights_and_geomean() -> None:
    rng = np.random.default_rng(7)
    h = accumulate(*make_pool(rng, 5, 100))
    out = pr_auc_at_ratios(h, [200, 500, 1000], prefix="test")
    aps = [out[f"test_realistic_pr_auc_1_{r}"] for r in (200, 500, 1000)]
    assert aps[0] > aps[1] > aps[2] > 0  # more negatives, lower precision
    assert out["test_realistic_pr_auc_geomean"] == pytest.approx(float(np.prod(aps)) ** (1 / 3))
    assert out["test_balanced_pr_auc"] > aps[0]
    assert out["test_realistic_neg_weight_1_200"] == pytest.approx(200 * 5 / 100)  # 10: pool smaller than asked
    assert out["test_realistic_n_neg_tiles_1_200"] == 1000
    assert out["test_realistic_effective_neg_tiles_1_200"] == 100
    assert out["test_realistic_n_pos_tiles_1_500"] == 5
    assert out["test_balanced_neg_weight"] == pytest.approx(0.05)
    assert "val_balanced_pr_auc" not in pr_auc_at_ratios(h, [200], balanced=False)


def test_geometric_mean_and_ratio_helpers() -> None:
    assert geometric_mean([0.5, 0.125]) == pytest.approx(0.25)
    assert geometric_mean([0.5, 0.0]) == 0.0
    assert math.isnan(geometric_mean([0.5, math.nan])) and math.isnan(geometric_mean([]))
    with pytest.raises(ValueError, match="non-negative"):
        geometric_mean([-0.1])
    assert ratio_tag(200) == "1_200" and ratio_tag(2.5) == "1_2.5"
    assert negative_weight(None, 3, 0) == 1.0 and negative_weight(10, 0, 5) == 0.0
    with pytest.raises(ValueError, match="no.*negative|none"):
        negative_weight(200, 3, 0)


def test_pool_without_positive_pixels_gives_nan() -> None:
    rng = np.random.default_rng(8)
    h = accumulate(*make_pool(rng, 0, 10))
    out = pr_auc_at_ratios(h, [200])
    assert math.isnan(out["val_realistic_pr_auc_1_200"]) and math.isnan(out["val_realistic_pr_auc_geomean"])
    assert all(math.isnan(v) for v in bootstrap_pr_auc(h, 200, 10, seed=0))


# --------------------------------------------------------------------------- noise: bootstrap and the old subsampling
def test_bootstrap_contains_estimate_shrinks_and_is_seeded() -> None:
    rng = np.random.default_rng(9)
    small = accumulate(*make_pool(rng, 6, 60, size=24))
    large = accumulate(*make_pool(rng, 60, 600, size=24), batch=64)
    for h in (small, large):
        low, high, std = bootstrap_pr_auc(h, 200, 200, seed=42)
        assert low <= pr_auc(h, 200) <= high and std > 0
    assert bootstrap_pr_auc(small, 200, 200, seed=42) == bootstrap_pr_auc(small, 200, 200, seed=42)
    assert bootstrap_pr_auc(small, 200, 200, seed=42) != bootstrap_pr_auc(small, 200, 200, seed=43)
    lo_s, hi_s, _ = bootstrap_pr_auc(small, 200, 200, seed=1)
    lo_l, hi_l, _ = bootstrap_pr_auc(large, 200, 200, seed=1)
    assert hi_l - lo_l < 0.6 * (hi_s - lo_s)  # 10× the tiles: ~1/sqrt(10) the width


def test_random_subsample_varies_while_reweighted_is_fixed() -> None:
    rng = np.random.default_rng(10)
    h = accumulate(*make_pool(rng, 4, 400, size=24), batch=64)
    draws = [random_subsample_pr_auc(h, 20, np.random.default_rng(s)) for s in range(8)]
    assert np.std(draws) > 0.005
    assert pr_auc(h, 20) == pr_auc(h, 20)
    assert min(draws) < pr_auc(h, 20) < max(draws)
    # Same generator state, same draw.
    assert random_subsample_pr_auc(h, 20, np.random.default_rng(3)) == draws[3]


# --------------------------------------------------------------------------- PR curve and threshold selection
def test_pr_curve_matches_sklearn_on_bin_centres() -> None:
    rng = np.random.default_rng(11)
    bins = LogitBins(core_bins=256, lo=-8.0, hi=8.0)
    x = bins.centres[rng.integers(0, bins.n_bins, 20_000)].reshape(2, 100, 100)
    y = ((rng.random(x.shape) < 0.02) | (x > 4)).astype(np.uint8)
    h = accumulate(x, y, bins)
    curve = precision_recall_curve_from_hist(h.pos.sum(0), h.neg.sum(0), bins)
    p_ref, r_ref, t_ref = precision_recall_curve(y.ravel(), x.ravel())
    np.testing.assert_allclose(curve.precision, p_ref[:-1], rtol=1e-12)
    np.testing.assert_allclose(curve.recall, r_ref[:-1], rtol=1e-12)
    np.testing.assert_array_equal(bins.index(t_ref), np.flatnonzero((h.pos + h.neg).sum(0)))
    assert curve.thresholds_logit[0] == -np.inf and curve.thresholds_prob[0] == 0.0


def test_threshold_for_precision_is_the_highest_recall_point() -> None:
    rng = np.random.default_rng(12)
    labels = (rng.random((8, 32, 32)) < 0.05).astype(np.uint8)
    labels[rng.random(labels.shape) < 0.02] = 255
    logits = np.where(labels == 1, rng.normal(3.0, 1.5, labels.shape), rng.normal(-2.0, 2.0, labels.shape))
    h = accumulate(logits, labels)
    op = threshold_for_precision(h, None, 0.8)
    assert op is not None and op.precision >= 0.8
    assert op.threshold_prob == pytest.approx(1 / (1 + math.exp(-op.threshold_logit)))
    called = logits >= op.threshold_logit
    tp = np.count_nonzero(called & (labels == 1))
    assert op.precision == pytest.approx(tp / np.count_nonzero(called & (labels != 255)))
    assert op.recall == pytest.approx(tp / np.count_nonzero(labels == 1))
    curve = precision_recall_curve_from_hist(*weighted_hist(h, None), h.bins)
    assert (curve.precision[curve.thresholds_logit < op.threshold_logit] < 0.8).all()
    logits[0, 0, 0], labels[0, 0, 0] = 20.0, 0  # a negative above every positive: precision < 1 everywhere
    assert threshold_for_precision(accumulate(logits, labels), None, 1.0) is None
    with pytest.raises(ValueError, match="target_precision"):
        threshold_for_precision(h, None, 0.0)
