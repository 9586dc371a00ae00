from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rtscore.metrics import ObjectCounter, match_objects, object_metrics, object_metrics_at_ratios, recall_by_size

SIZE = 48
LOW, HIGH = -4.0, 4.0


def canvas() -> tuple[np.ndarray, np.ndarray]:
    return np.full((SIZE, SIZE), LOW, np.float32), np.zeros((SIZE, SIZE), np.uint8)


def counts(tile) -> list[tuple[int, int, int]]:  # (TP, FP, FN) per IoU threshold 0.1, 0.3, 0.5
    return [(int(a), int(b), int(c)) for a, b, c in zip(tile.tp, tile.fp, tile.fn, strict=True)]


def test_one_to_one_perfect_match() -> None:
    logits, target = canvas()
    target[10:20, 10:20] = 1
    logits[10:20, 10:20] = HIGH
    tile = match_objects(logits, target)
    assert counts(tile) == [(1, 0, 0)] * 3
    assert tile.gt_area.tolist() == [100] and tile.is_positive_tile


def test_shifted_prediction_matches_only_at_low_iou() -> None:
    logits, target = canvas()
    target[10:20, 10:20] = 1
    logits[10:20, 17:27] = HIGH
    # Overlap: 10 rows × 3 columns (17..19) = 30 px; union = 100 + 100 - 30 = 170; IoU = 30/170 ≈ 0.176.
    tile = match_objects(logits, target)
    assert counts(tile) == [(1, 0, 0), (0, 1, 1), (0, 1, 1)]


def test_split_two_predictions_on_one_gt() -> None:
    logits, target = canvas()
    target[10:30, 10:20] = 1  # 200 px
    logits[10:20, 10:20] = 1.0  # A: 100 px, IoU 100/200 = 0.5, mean p ≈ 0.73
    logits[21:30, 10:20] = 3.0  # B: 90 px (row 20 apart), IoU 90/200 = 0.45, mean p ≈ 0.95
    tile = match_objects(logits, target)
    assert counts(tile) == [(1, 1, 0)] * 3
    b = int(np.argmax(tile.pred_mean_prob))
    a = 1 - b
    assert tile.pred_area[b] == 90
    # At 0.1 and 0.3 the more confident B matches although A has the higher IoU; A is the FP.
    assert tile.pred_match[:2, b].tolist() == [0, 0] and tile.pred_match[:2, a].tolist() == [-1, -1]
    # At 0.5 B (0.45) fails, and A (0.5) takes the still-unmatched GT.
    assert tile.pred_match[2].tolist() == [0 if i == a else -1 for i in range(2)]


def test_merge_one_prediction_over_two_gts() -> None:
    logits, target = canvas()
    target[10:20, 10:20] = 1  # G1: 100 px
    target[10:20, 22:26] = 1  # G2: 40 px, two columns apart
    logits[10:20, 10:26] = HIGH  # 160 px: IoU(G1) = 100/160 = 0.625, IoU(G2) = 40/160 = 0.25
    tile = match_objects(logits, target)
    assert counts(tile) == [(1, 0, 1)] * 3
    assert tile.gt_area.tolist() == [100, 40]
    assert tile.gt_matched.tolist() == [[True, False]] * 3


def two_predictions_whose_best_gt_is_one() -> tuple[np.ndarray, np.ndarray]:
    """Issue 35 (4): predictions A (more confident) and B both have GT0 as their highest-IoU object and overlap GT1
    too. IoU A/GT0 100/260 = 0.385, A/GT1 50/210 = 0.238; B/GT0 80/248 = 0.323, B/GT1 40/188 = 0.213."""
    logits, target = canvas()
    target[10:20, 10:30] = 1  # GT0: 200 px
    target[10:20, 32:42] = 1  # GT1: 100 px, two columns apart
    logits[10:15, 10:42] = HIGH  # A: 160 px, mean p 0.98
    logits[16:20, 10:42] = 2.0  # B: 128 px (row 15 apart), mean p 0.88
    return logits, target


def test_guide_matching_counts_a_second_prediction_on_a_matched_gt_as_fp() -> None:
    """Guide §6.2 step 4: B's highest-IoU GT object (GT0) is already A's, so B is an FP and GT1 an FN, although B
    overlaps the free GT1 above IoU 0.1. The rule before issue 35 (`best_unmatched`) gave B to GT1: two TP."""
    logits, target = two_predictions_whose_best_gt_is_one()
    guide = match_objects(logits, target, iou_thresholds=[0.1, 0.3, 0.5])
    assert counts(guide) == [(1, 1, 1), (1, 1, 1), (0, 2, 2)]
    a = int(np.argmax(guide.pred_mean_prob))
    assert guide.pred_match[0].tolist() == [0 if i == a else -1 for i in range(2)]
    assert guide.gt_matched[0].tolist() == [True, False]
    old = match_objects(logits, target, iou_thresholds=[0.1, 0.3, 0.5], matching="best_unmatched")
    assert counts(old) == [(2, 0, 0), (1, 1, 1), (0, 2, 2)]
    assert old.gt_matched[0].tolist() == [True, True]
    with pytest.raises(ValueError, match="object_matching"):
        match_objects(logits, target, matching="hungarian")  # type: ignore[arg-type]


def test_the_issue_example_through_the_counter_and_the_config() -> None:
    """The issue's A/B example at IoU 0.1: 1 TP, 1 FP, 1 FN under the default config, 2 TP under best_unmatched."""
    from rtscore.config.pipeline import MetricsConfig

    logits, target = two_predictions_whose_best_gt_is_one()
    guide = MetricsConfig(object_iou_thresholds=[0.1])
    old = MetricsConfig(object_iou_thresholds=[0.1], object_matching="best_unmatched")
    for m, expected in ((guide, (1.0, 1.0, 1.0)), (old, (2.0, 0.0, 0.0))):
        counter = ObjectCounter.for_metrics(m, 0.5)
        counter.add_tile(logits, target, pixel_area_m2=4.77**2)
        s = object_metrics(counter)[0.1]
        assert (s.tp, s.fp, s.fn) == expected, m.object_matching
    with pytest.raises(ValueError, match="cannot be merged"):
        counter.merge(ObjectCounter([0.1]))  # the guide's rule: not the best_unmatched counter's


def test_a_speck_counts_as_an_object_by_default() -> None:
    """Issue 35 (4): guide §6.2 counts every connected component. A 9 px speck of 4.77 m pixels (205 m², under the
    350 m² that evaluation dropped by default before) is a GT object (here an FN) and a predicted one (an FP)."""
    from rtscore.config.pipeline import MetricsConfig

    logits, target = canvas()
    target[2:5, 2:5] = 1
    logits[30:33, 30:33] = HIGH
    m = MetricsConfig()
    counter = ObjectCounter(m.object_iou_thresholds, threshold=0.5, min_object_area_m2=m.min_object_area_m2)
    tile = counter.add_tile(logits, target, pixel_area_m2=4.77**2)
    assert counts(tile) == [(0, 1, 1)] * 3 and tile.gt_area.tolist() == [9]
    assert m.min_object_area_m2 is None
    opted_in = ObjectCounter(m.object_iou_thresholds, min_object_area_m2=350.0)  # the rule before, now opt-in
    assert counts(opted_in.add_tile(logits, target, pixel_area_m2=4.77**2)) == [(0, 0, 0)] * 3


def test_small_blobs_dropped_on_both_sides() -> None:
    logits, target = canvas()
    target[2:5, 2:5] = 1  # 9 px GT: dropped, not an FN
    logits[30:33, 30:33] = HIGH  # 9 px prediction: dropped, not an FP
    target[10:20, 10:20] = 1
    logits[10:20, 10:20] = HIGH
    tile = match_objects(logits, target, min_pixels=16)
    assert counts(tile) == [(1, 0, 0)] * 3
    assert counts(match_objects(logits, target, min_pixels=1)) == [(1, 1, 1)] * 3
    only_small = target.copy()
    only_small[10:20, 10:20] = 0
    tile = match_objects(np.full_like(logits, LOW), only_small, min_pixels=16)
    assert tile.is_positive_tile and counts(tile) == [(0, 0, 0)] * 3  # positive tile, no GT object


def test_empty_tile_gives_zeros() -> None:
    logits, target = canvas()
    tile = match_objects(logits, target)
    assert counts(tile) == [(0, 0, 0)] * 3 and not tile.is_positive_tile
    assert tile.gt_matched.shape == (3, 0) and tile.pred_match.shape == (3, 0)


def test_prediction_on_ignore_discarded() -> None:
    logits, target = canvas()
    target[10:20, 10:20] = 255
    logits[10:20, 10:20] = HIGH  # entirely on ignore: discarded
    target[30:40, 30:40] = 255
    target[30:40, 36:40] = 0
    logits[30:40, 30:40] = HIGH  # 60 % on ignore: discarded too
    assert counts(match_objects(logits, target)) == [(0, 0, 0)] * 3
    target[30:40, 34:40] = 0  # now 40 % on ignore: a real false positive
    assert counts(match_objects(logits, target)) == [(0, 1, 0)] * 3


def test_diagonal_contact_is_one_object() -> None:
    logits, target = canvas()
    logits[10:15, 10:15] = HIGH
    logits[15:20, 15:20] = HIGH  # touches the first square only at a corner
    target[10:20, 10:20] = 1
    tile = match_objects(logits, target)
    assert len(tile.pred_area) == 1 and tile.pred_area[0] == 50


def test_counter_reweights_negative_tile_false_positives() -> None:
    pos_l, pos_t = canvas()
    pos_t[10:20, 10:20] = 1
    pos_l[10:20, 10:20] = HIGH
    neg_l, neg_t = canvas()
    neg_l[30:40, 30:40] = HIGH  # one FP on a negative tile
    counter = ObjectCounter()
    counter.add_batch(
        torch.from_numpy(np.stack([pos_l, neg_l]))[:, None],
        torch.from_numpy(np.stack([pos_t, neg_t])),
        torch.tensor([22.75, 22.75], dtype=torch.float64),
    )
    assert (counter.n_pos_tiles, counter.n_neg_tiles) == (1, 1)
    natural = object_metrics(counter)[0.3]
    assert (natural.tp, natural.fp, natural.fn) == (1, 1, 0) and natural.precision == 0.5
    at_200 = object_metrics(counter, 200)[0.3]  # w = 200 × 1 / 1
    assert at_200.precision == pytest.approx(1 / 201) and at_200.recall == 1.0
    assert at_200.f1 == pytest.approx(2 / (2 + 200))
    out = object_metrics_at_ratios(counter, [200], prefix="test")
    assert out["test_realistic_object_precision_iou30_1_200"] == pytest.approx(1 / 201)
    assert out["test_balanced_object_recall_iou50"] == 1.0


def test_recall_by_size_and_empty_counter() -> None:
    counter = ObjectCounter(min_object_area_m2=4.0)
    logits, target = canvas()
    target[2:4, 2:4] = 1  # 4 px, missed
    target[10:20, 10:20] = 1  # 100 px, found
    logits[10:20, 10:20] = HIGH
    counter.add_tile(logits, target, pixel_area_m2=1.0)
    n, recall = recall_by_size(counter, [0, 10, 1000, 5000], 0.5)
    assert n.tolist() == [1, 1, 0]
    assert recall[:2].tolist() == [0.0, 1.0] and math.isnan(recall[2])
    empty = object_metrics(ObjectCounter())[0.5]
    assert math.isnan(empty.precision) and math.isnan(empty.recall) and math.isnan(empty.f1)


def test_bad_arguments_raise() -> None:
    logits, target = canvas()
    with pytest.raises(ValueError, match="object_iou_thresholds"):
        match_objects(logits, target, iou_thresholds=[0.0])
    with pytest.raises(ValueError, match="same shape|one shape"):
        match_objects(logits, target[:10])
    with pytest.raises(ValueError, match="expects"):
        ObjectCounter([0.5]).add(match_objects(logits, target))


def test_the_minimum_object_area_in_pixels_of_each_tile() -> None:
    """Issue 23 (4): metrics.min_object_area_m2 converted with each tile's own ground pixel, at least 1 px."""
    from rtscore.metrics import min_object_pixels, reaches_min_area

    synthetic = 4.77**2  # the synthetic 4.77 m ground pixel: the default is the old 16 px there
    assert min_object_pixels(350.0, synthetic) == 16
    assert min_object_pixels(16 * synthetic, synthetic) == 16  # exactly 16 px of area: 16 px, not 17
    assert reaches_min_area(16 * synthetic, 16 * synthetic) and not reaches_min_area(15 * synthetic, 16 * synthetic)
    assert min_object_pixels(350.0, 300.0**2) == 1  # 300 m: one pixel is 90,000 m², every object is over 350 m²
    assert min_object_pixels(200_000.0, 300.0**2) == 3
    assert min_object_pixels(0.0, 9.0) == 1
    with pytest.raises(ValueError, match="pixel_area_m2"):
        min_object_pixels(350.0, 0.0)
    with pytest.raises(ValueError, match="min_object_area_m2"):
        ObjectCounter(min_object_area_m2=-1.0)


def test_the_counter_drops_objects_by_ground_area_per_tile() -> None:
    """One 9 px object on a tile of 4.77 m pixels (205 m²) is under 350 m²; the same 9 px at 10 m (900 m²) is not."""
    logits, target = canvas()
    target[2:5, 2:5] = 1
    logits[2:5, 2:5] = HIGH
    counter = ObjectCounter(min_object_area_m2=350.0)
    fine = counter.add_tile(logits, target, pixel_area_m2=4.77**2)
    coarse = counter.add_tile(logits, target, pixel_area_m2=100.0)
    assert (len(fine.gt_area), len(coarse.gt_area)) == (0, 1)
    area, _ = counter.gt_objects_m2()
    assert area.tolist() == [900.0]
    with pytest.raises(ValueError, match="2 tiles but 1 pixel areas"):
        counter.add_batch(np.stack([logits, logits]), np.stack([target, target]), [100.0])


def test_size_bin_labels_are_readable() -> None:
    from rtscore.metrics import size_bin_label

    assert size_bin_label(0.0, 2000.0) == "0-2000"
    assert size_bin_label(50_000.0, 1e12) == "50000+"  # was "50000-1e+12"
    assert size_bin_label(1e6, 1e7) == "1000000-10000000"  # no exponent form
    assert size_bin_label(0.5, 2.5) == "0.5-2.5"


def test_pixels_name_the_gt_objects_that_hold_them_and_the_counter_knows_each_objects_tile() -> None:
    """Issue 36 (6): an inventory's ObjectPixels name GT objects by the components the metrics match."""
    logits, target = canvas()
    target[2:6, 2:6] = 1  # object 0 (raster order)
    target[30:40, 30:40] = 1  # object 1
    target[20, 20] = 1  # a 1 px speck: dropped under min_pixels 4
    points = np.array([[31, 35], [3, 3], [2, 5], [10, 10], [20, 20], [SIZE, 0]])
    tile = match_objects(logits, target, points=points)
    assert tile.point_gt.tolist() == [2, 0, 0, -1, 1, -1]  # objects in raster order: the speck is the second
    kept = match_objects(logits, target, points=points, min_pixels=4)
    assert kept.point_gt.tolist() == [1, 0, 0, -1, -1, -1] and kept.gt_area.tolist() == [16, 100]
    assert match_objects(logits, target).point_gt.size == 0
    counter = ObjectCounter()
    counter.add_tile(logits, target, 1.0, points)
    empty = canvas()
    counter.add_tile(*empty, 1.0)
    counter.add_tile(logits, target, 1.0)
    assert counter.n_tiles == 3 and counter.gt_tile_index().tolist() == [0, 0, 0, 2, 2, 2]
