from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rtscore.metrics import (
    ConfusionCounts,
    LogitBins,
    PixelConfusion,
    TileHistogramAccumulator,
    confusion_counts,
    confusion_from_hist,
    pixel_confusion,
    pixel_metrics_at_ratios,
    prob_to_logit,
)


def direct(logits: np.ndarray, labels: np.ndarray, t_logit: float = 0.0) -> tuple[int, int, int, int]:
    called = logits >= t_logit
    return (
        int(np.sum(called & (labels == 1))),
        int(np.sum(called & (labels == 0))),
        int(np.sum(~called & (labels == 1))),
        int(np.sum(~called & (labels == 0))),
    )


def random_batch(seed: int, b: int = 6, size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = (rng.random((b, size, size)) < 0.1).astype(np.uint8)
    labels[rng.random(labels.shape) < 0.1] = 255
    logits = np.where(labels == 1, rng.normal(1.0, 2.0, labels.shape), rng.normal(-2.0, 2.0, labels.shape))
    return logits.astype(np.float32), labels


def test_hand_counts_at_half() -> None:
    # Row by row: (logit, label) -> pixels with logit >= 0 are called positive; 255 ignored.
    logits = np.array([[[2.0, 0.0, -1.0], [3.0, -0.5, 5.0], [-2.0, 1.0, -3.0]]], np.float32)
    labels = np.array([[[1, 1, 1], [0, 0, 255], [0, 0, 1]]], np.uint8)
    # TP: (2,1) (0,1) -> 2;  FP: (3,0) (1,0) -> 2;  FN: (-1,1) (-3,1) -> 2;  TN: (-0.5,0) (-2,0) -> 2
    c = confusion_counts(logits, labels)
    assert c == ConfusionCounts(tp=2, fp=2, fn=2, tn=2)
    assert c.iou == pytest.approx(2 / 6) and c.f1 == pytest.approx(4 / 8)
    assert c.precision == 0.5 and c.recall == 0.5
    acc = TileHistogramAccumulator()
    acc.add_batch(logits, labels, [0])
    assert pixel_confusion(acc.result(), None) == c


@pytest.mark.parametrize("seed", [0, 1])
def test_hist_and_streaming_match_numpy(seed: int) -> None:
    logits, labels = random_batch(seed)
    tp, fp, fn, tn = direct(logits, labels)
    acc = TileHistogramAccumulator()
    stream = PixelConfusion()
    for s in range(0, 6, 2):
        acc.add_batch(logits[s : s + 2], labels[s : s + 2], [s, s + 1])
        stream.update(torch.from_numpy(logits[s : s + 2, None]), torch.from_numpy(labels[s : s + 2]))
    expected = ConfusionCounts(tp, fp, fn, tn)
    assert pixel_confusion(acc.result(), None) == expected
    assert stream.compute() == expected
    assert stream.compute().iou == pytest.approx(tp / (tp + fp + fn))
    assert stream.compute().f1 == pytest.approx(2 * tp / (2 * tp + fp + fn))
    stream.reset()
    assert stream.compute() == ConfusionCounts()


def test_threshold_on_a_bin_edge_is_exact() -> None:
    bins = LogitBins()
    edge = float(bins.edges[bins.zero_index + 76])  # an exact edge at 76/64 logits
    threshold = 1 / (1 + math.exp(-edge))
    # Pixels exactly on the edge are positive, the next float below is not.
    logits = np.array([[[edge, np.nextafter(edge, -1, dtype=np.float32), 0.0, -np.float32(1e-30)]]], np.float32)
    labels = np.array([[[1, 1, 0, 0]]], np.uint8)
    acc = TileHistogramAccumulator(bins)
    acc.add_batch(logits, labels, [0])
    h = acc.result()
    assert pixel_confusion(h, None, threshold) == ConfusionCounts(tp=1, fp=0, fn=1, tn=2)
    assert pixel_confusion(h, None, 0.5) == ConfusionCounts(tp=2, fp=1, fn=0, tn=1)  # logit 0 >= 0, -1e-30 not
    assert confusion_counts(logits, labels, 0.5) == ConfusionCounts(tp=2, fp=1, fn=0, tn=1)


def test_threshold_off_an_edge_is_nearest_edge() -> None:
    logits, labels = random_batch(2)
    bins = LogitBins()
    t_logit = prob_to_logit(0.8)  # 1.386..., not an edge
    k = bins.threshold_index(t_logit)
    assert abs(bins.edges[k] - t_logit) <= bins.width / 2
    near = np.abs(logits - t_logit) <= bins.width
    labels[near] = 255  # the approximation only moves pixels within half a bin of the threshold
    acc = TileHistogramAccumulator(bins)
    acc.add_batch(logits, labels, list(range(6)))
    assert pixel_confusion(acc.result(), None, 0.8) == ConfusionCounts(*direct(logits, labels, t_logit))
    assert confusion_counts(logits, labels, 0.8) == ConfusionCounts(*direct(logits, labels, t_logit))


def test_ratio_weights_false_positives_on_negative_tiles() -> None:
    logits, labels = random_batch(3, b=4)
    labels[2:][labels[2:] == 1] = 0  # tiles 2, 3 negative
    acc = TileHistogramAccumulator()
    acc.add_batch(logits, labels, list(range(4)))
    h = acc.result()
    pos_tiles = direct(logits[:2], labels[:2])
    neg_tiles = direct(logits[2:], labels[2:])
    c = pixel_confusion(h, 200)  # w = 200 × 2 / 2
    assert c.tp == pos_tiles[0] and c.fn == pos_tiles[2]
    assert c.fp == pytest.approx(pos_tiles[1] + 200 * neg_tiles[1])
    assert c.tn == pytest.approx(pos_tiles[3] + 200 * neg_tiles[3])
    out = pixel_metrics_at_ratios(h, [200, 500])
    assert out["val_realistic_iou_rts_1_200"] == pytest.approx(c.iou)
    assert out["val_realistic_f1_rts_1_500"] < out["val_realistic_f1_rts_1_200"] < out["val_balanced_f1_rts"]


def test_undefined_reductions_are_nan_and_bad_labels_raise() -> None:
    c = confusion_counts(np.full((1, 2, 2), -3.0), np.zeros((1, 2, 2), np.uint8))
    assert c == ConfusionCounts(tn=4) and math.isnan(c.iou) and math.isnan(c.f1) and math.isnan(c.precision)
    with pytest.raises(ValueError, match="labels"):
        confusion_counts(np.zeros((1, 2, 2)), np.full((1, 2, 2), 3))
    with pytest.raises(ValueError, match="labels"):
        PixelConfusion().update(torch.zeros(1, 2, 2), torch.full((1, 2, 2), 2))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        prob_to_logit(1.0)
    assert confusion_from_hist(
        np.array([1.0, 2.0]), np.array([3.0, 4.0]), LogitBins(2, -1, 1, tail_octaves=0)
    ) == ConfusionCounts(tp=2, fp=4, fn=1, tn=3)
