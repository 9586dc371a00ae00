"""Object-level metrics (guide §6.2): connected components, greedy 1-to-1 IoU matching, prevalence-weighted counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import get_args

import numpy as np
from scipy import ndimage
from scipy.special import expit

from rtscore.config.metrics import MetricsConfig, ObjectMatching
from rtscore.data.tiles import IGNORE_INDEX
from rtscore.metrics.histograms import ArrayLike, as_tile_batch, to_numpy
from rtscore.metrics.pixel import prob_to_logit
from rtscore.metrics.prevalence import negative_weight, ratio_pools

# 8-connectivity: thresholded slump outlines are ragged and often touch only diagonally across thin necks;
# 4-connectivity would shatter one slump into several blobs, each a spurious FP (or FN on the GT side).
# Both sides use the same structure so GT and predictions are segmented alike.
EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)
DEFAULT_IOU_THRESHOLDS = (0.1, 0.3, 0.5)
# metrics.object_matching. "guide" (guide §6.2, step 4): each prediction, most confident first, is matched to ITS
# highest-IoU GT object only if that IoU reaches the threshold and that object is still unmatched; otherwise it is an
# FP (a later prediction on an already matched GT object is an FP even when it overlaps another, free GT object).
# "best_unmatched" (the rule before issue 35): each prediction takes its best-IoU GT object among those still unmatched.
OBJECT_MATCHINGS: tuple[ObjectMatching, ...] = get_args(ObjectMatching)
# An object-size rule is a ground area (evaluation's opt-in metrics.min_object_area_m2; package.min_object_area_m2,
# the smallest object `rts map` writes); an object reaches it when its area is at least the minimum less this
# relative slack, so that 16 px of 22.75 m² and a polygon of the same 16 px agree on 364 m² whatever the last bit of
# their floating-point products.
AREA_RTOL = 1e-9
# An upper bin edge at or above this (m²: 100,000 km², larger than any RTS) closes no bin: the last bin is open.
OPEN_BIN_EDGE_M2 = 1e11


def reaches_min_area(area_m2: float, min_area_m2: float) -> bool:
    """Whether an object of ``area_m2`` ground m² is kept under a minimum of ``min_area_m2``: the one size test of
    evaluation's opt-in ``metrics.min_object_area_m2`` (in pixels of each tile, :func:`min_object_pixels`) and of
    mapping's ``package.min_object_area_m2`` (each mapped object's ground area)."""
    return bool(area_m2 >= min_area_m2 * (1.0 - AREA_RTOL))


def min_object_pixels(min_area_m2: float, pixel_area_m2: float) -> int:
    """The fewest pixels of ``pixel_area_m2`` ground m² each whose object :func:`reaches_min_area` (at least 1):
    ``metrics.min_object_area_m2`` converted for one tile, whose pixel area its transform gives.

    Raises:
        ValueError: a negative or non-finite minimum, or a pixel area that is not finite and positive.
    """
    if not (math.isfinite(min_area_m2) and min_area_m2 >= 0.0):
        raise ValueError(f"metrics.min_object_area_m2 must be a finite area >= 0 m²; got {min_area_m2}")
    if not (math.isfinite(pixel_area_m2) and pixel_area_m2 > 0.0):
        raise ValueError(f"a tile's pixel_area_m2 must be finite and > 0; got {pixel_area_m2}")
    return max(1, math.ceil(min_area_m2 * (1.0 - AREA_RTOL) / pixel_area_m2))


def size_bin_label(lo: float, hi: float) -> str:
    """The label of the ground-area bin ``[lo, hi)`` m²: ``"2000-10000"``, or ``"50000+"`` for the open last bin
    (``hi`` at or above :data:`OPEN_BIN_EDGE_M2`); edges written in full, never in exponent form. Evaluation's
    object recall by area and the mapped objects' ``size_bin`` use it alike."""
    return f"{_edge(lo)}+" if hi >= OPEN_BIN_EDGE_M2 else f"{_edge(lo)}-{_edge(hi)}"


def _edge(v: float) -> str:
    return format(float(v), ".15g")  # 2000.0 -> '2000', 1e6 -> '1000000', 0.5 -> '0.5'


@dataclass(frozen=True, eq=False)
class TileObjects:
    """Matching result of one tile.

    Attributes:
        iou_thresholds: The IoU thresholds, in the order of the first axis below.
        is_positive_tile: The tile has at least one label-1 pixel (before the blob-size filter).
        gt_area: (G,) pixel area of each kept GT object.
        gt_matched: (n_thr, G) whether each GT object was matched at each threshold.
        pred_area: (P,) pixel area of each kept predicted object.
        pred_mean_prob: (P,) mean probability over each predicted object.
        pred_match: (n_thr, P) index of the GT object each prediction matched, -1 if none.
        point_gt: (N,) index of the kept GT object holding each of the ``points`` given to :func:`match_objects`
            (-1: on no kept GT object); empty when none were given.
    """

    iou_thresholds: tuple[float, ...]
    is_positive_tile: bool
    gt_area: np.ndarray
    gt_matched: np.ndarray
    pred_area: np.ndarray
    pred_mean_prob: np.ndarray
    pred_match: np.ndarray
    point_gt: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def tp(self) -> np.ndarray:
        """(n_thr,) matched pairs."""
        return self.gt_matched.sum(axis=1).astype(np.int64)

    @property
    def fp(self) -> np.ndarray:
        """(n_thr,) unmatched predictions."""
        return len(self.pred_area) - self.tp

    @property
    def fn(self) -> np.ndarray:
        """(n_thr,) unmatched GT objects."""
        return len(self.gt_area) - self.tp


def _check_iou_thresholds(iou_thresholds: Sequence[float]) -> tuple[float, ...]:
    thr = tuple(float(t) for t in iou_thresholds)
    if not thr or any(not 0.0 < t <= 1.0 for t in thr):
        raise ValueError(f"metrics.object_iou_thresholds must be non-empty and in (0, 1]; got {list(thr)}")
    return thr


def _compact(labels: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, int]:
    """Relabel the kept components 1..K (dropped ones become background 0)."""
    new = np.zeros(keep.shape[0], np.int64)
    k = int(keep.sum())
    new[keep] = np.arange(1, k + 1)
    return new[labels], k


def _check_matching(matching: str) -> ObjectMatching:
    if matching not in OBJECT_MATCHINGS:
        raise ValueError(f"metrics.object_matching must be one of {list(OBJECT_MATCHINGS)}; got {matching!r}")
    return matching


def _greedy_match(iou: np.ndarray, order: np.ndarray, thr: float, matching: ObjectMatching) -> np.ndarray:
    """(P,) GT index per prediction (-1: none), predictions taken in ``order``.

    ``"guide"`` (guide §6.2): a prediction matches its highest-IoU GT object if that IoU >= ``thr`` and the object is
    unmatched; when several GT objects tie for its highest IoU, the first unmatched of them (lowest label).
    ``"best_unmatched"``: a prediction takes the highest-IoU GT object among the unmatched ones, if >= ``thr``.
    """
    match = np.full(iou.shape[0], -1, np.int64)
    if iou.shape[1] == 0:
        return match
    free = np.ones(iou.shape[1], bool)
    for p in order:
        if matching == "guide":
            best = iou[p].max()
            cand = np.where(free & (iou[p] == best), iou[p], -1.0)
        else:
            cand = np.where(free, iou[p], -1.0)
        g = int(np.argmax(cand))  # ties: lowest GT label, deterministic
        if cand[g] >= thr:
            match[p] = g
            free[g] = False
    return match


def match_objects(
    logits: ArrayLike,
    target: ArrayLike,
    *,
    threshold: float = 0.5,
    iou_thresholds: Sequence[float] = DEFAULT_IOU_THRESHOLDS,
    min_pixels: int = 1,
    matching: ObjectMatching = "guide",
    points: np.ndarray | None = None,
) -> TileObjects:
    """Greedy 1-to-1 object matching on one tile at every IoU threshold in one pass (guide §6.2).

    Predicted objects are the 8-connected components of `sigmoid(logits) >= threshold` (compared as
    `logits >= logit(threshold)`, the pixel metrics' rule); GT objects those of `target == 1`. Every component is
    an object (the guide's rule) unless ``min_pixels`` > 1, which drops smaller ones on both sides (the opt-in
    ``metrics.min_object_area_m2``, converted per tile by :func:`min_object_pixels`). A predicted component
    with more than half of its pixels on ignore (255) is discarded, not counted as FP: it sits where the label
    makes no claim. IoU is taken over non-ignore pixels, like every pixel metric. Predictions are taken by mean
    probability, highest first. Under ``matching="guide"`` (guide §6.2 step 4) each is matched to its highest-IoU
    GT object only if that IoU >= the threshold and that object is unmatched, else it is an FP: one prediction over
    two GT objects matches the better one (the other is FN), and of several predictions whose best GT object is the
    same only the most confident matches (the others are FP, even where they overlap another, free GT object).
    Under ``"best_unmatched"`` each takes its highest-IoU still-unmatched GT object if that IoU >= the threshold.

    Args:
        logits: (H,W) logits. For averaged probabilities (TTA), pass their logits (e.g. `scipy.special.logit`).
        target: (H,W) labels in {0, 1, 255}.
        threshold: Probability threshold in (0, 1); the guide's in-training reference is 0.5.
        iou_thresholds: Matching thresholds in (0, 1].
        min_pixels: Smallest component kept, in pixels of this tile (1: every component, the guide's rule);
            ``metrics.min_object_area_m2`` converted with the tile's ground pixel area (:func:`min_object_pixels`,
            as :meth:`ObjectCounter.add_tile` does).
        matching: ``metrics.object_matching``: ``"guide"`` or ``"best_unmatched"``.
        points: (N, 2) pixels (row, col) naming GT objects (``ObjectPixels``): ``TileObjects.point_gt``.
    """
    thr = _check_iou_thresholds(iou_thresholds)
    how = _check_matching(matching)
    x, t = to_numpy(logits), to_numpy(target)
    if x.ndim != 2 or x.shape != t.shape:
        raise ValueError(f"logits and target must both be (H,W) of one shape; got {x.shape} and {t.shape}")
    if min_pixels < 1:
        raise ValueError(f"min_pixels must be >= 1; got {min_pixels}")
    ignore = t == IGNORE_INDEX
    gt_mask = t == 1
    p_lab, n_p, pred_area, g_lab, n_g, gt_area = _kept_objects(
        x >= prob_to_logit(threshold), gt_mask, ignore, min_pixels
    )
    iou = _pair_iou(p_lab, n_p, g_lab, n_g, ~ignore)
    mean_prob = _mean_probs(x, p_lab, n_p, pred_area)
    pred_match, gt_matched = _match_at_thresholds(iou, mean_prob, thr, n_g, how)
    return TileObjects(
        iou_thresholds=thr,
        is_positive_tile=bool(gt_mask.any()),
        gt_area=gt_area.astype(np.int64),
        gt_matched=gt_matched,
        pred_area=pred_area.astype(np.int64),
        pred_mean_prob=mean_prob,
        pred_match=pred_match,
        point_gt=_objects_at(g_lab, points),
    )


def _objects_at(g_lab: np.ndarray, points: np.ndarray | None) -> np.ndarray:
    """(N,) kept GT object (0-based) at each (row, col) of ``points``; -1 on none or outside the tile."""
    if points is None:
        return np.zeros(0, np.int64)
    pts = np.asarray(points, np.int64).reshape(-1, 2)
    h, w = g_lab.shape
    inside = (pts[:, 0] >= 0) & (pts[:, 0] < h) & (pts[:, 1] >= 0) & (pts[:, 1] < w)
    out = np.full(pts.shape[0], -1, np.int64)
    out[inside] = g_lab[pts[inside, 0], pts[inside, 1]] - 1
    return out


def _kept_objects(
    pred_mask: np.ndarray, gt_mask: np.ndarray, ignore: np.ndarray, min_pixels: int
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, int, np.ndarray]:
    """The objects that take part in matching: both sides' 8-connected components, relabelled 1..K once those under
    ``min_pixels`` are dropped and, on the prediction side, those more than half on ignore (the label makes no claim
    there, so they count as neither TP nor FP). Returns (pred labels, P, pred areas, GT labels, G, GT areas)."""
    p_lab, n_p = ndimage.label(pred_mask, structure=EIGHT_CONNECTED)
    g_lab, n_g = ndimage.label(gt_mask, structure=EIGHT_CONNECTED)
    p_size = np.bincount(p_lab.ravel(), minlength=n_p + 1)
    p_on_ignore = np.bincount(p_lab[ignore], minlength=n_p + 1)
    keep_p = (p_size >= min_pixels) & (2 * p_on_ignore <= p_size)  # > 50 % on ignore: discarded
    keep_p[0] = False
    g_size = np.bincount(g_lab.ravel(), minlength=n_g + 1)
    keep_g = g_size >= min_pixels
    keep_g[0] = False
    p_lab, n_p = _compact(p_lab, keep_p)
    g_lab, n_g = _compact(g_lab, keep_g)
    return p_lab, n_p, p_size[keep_p], g_lab, n_g, g_size[keep_g]


def _pair_iou(p_lab: np.ndarray, n_p: int, g_lab: np.ndarray, n_g: int, valid: np.ndarray) -> np.ndarray:
    """(P, G) IoU of every (prediction, GT object) pair over the ``valid`` (non-ignore) pixels, like every pixel
    metric: the intersections of all pairs come from one joint label histogram, not a loop over pairs."""
    joint = np.bincount((p_lab[valid] * (n_g + 1) + g_lab[valid]), minlength=(n_p + 1) * (n_g + 1))
    joint = joint.reshape(n_p + 1, n_g + 1)
    inter = joint[1:, 1:].astype(np.float64)
    union = joint[1:, :].sum(axis=1)[:, None] + joint[:, 1:].sum(axis=0)[None, :] - inter
    return inter / np.maximum(union, 1.0)  # every kept prediction has valid pixels, so union > 0


def _mean_probs(x: np.ndarray, p_lab: np.ndarray, n_p: int, pred_area: np.ndarray) -> np.ndarray:
    """(P,) mean probability over each kept predicted object (ignore pixels included): the confidence that orders
    the greedy matching and that the object is reported with."""
    in_pred = p_lab > 0
    prob_sum = np.bincount(p_lab[in_pred], weights=expit(x[in_pred].astype(np.float64)), minlength=n_p + 1)
    return prob_sum[1:] / pred_area


def _match_at_thresholds(
    iou: np.ndarray, mean_prob: np.ndarray, thr: tuple[float, ...], n_g: int, matching: ObjectMatching
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy matching at each IoU threshold, predictions most confident first (stable order on ties): the
    (n_thr, P) GT index per prediction and the (n_thr, G) matched flag per GT object."""
    order = np.argsort(-mean_prob, kind="stable")
    pred_match = np.stack([_greedy_match(iou, order, th, matching) for th in thr])
    gt_matched = np.zeros((len(thr), n_g), bool)
    for j in range(len(thr)):
        gt_matched[j, pred_match[j][pred_match[j] >= 0]] = True
    return pred_match, gt_matched


@dataclass(frozen=True)
class ObjectScores:
    """Object TP / FP / FN (FP possibly prevalence-weighted) at one IoU threshold.

    Precision is nan without predictions, recall nan without GT objects; F1 = 2TP / (2TP + FP + FN) is 0 when
    either side is empty but the other is not, nan only when both are.
    """

    tp: float
    fp: float
    fn: float

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp > 0 else math.nan

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn > 0 else math.nan

    @property
    def f1(self) -> float:
        den = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / den if den > 0 else math.nan


class ObjectCounter:
    """Accumulates tile matching results, keeping FP on positive and negative tiles apart.

    The prevalence weight is applied at reduction (`object_metrics`), so one validation pass serves every
    ratio: at 1:N, FP on negative tiles count `negative_weight(N, n_pos, n_neg)` times, as in the pixel metrics.

    ``matching`` (``metrics.object_matching``) is the greedy rule of :func:`match_objects`, the guide's by default.
    ``min_object_area_m2`` (``metrics.min_object_area_m2``) is an opt-in ground area under which objects are dropped
    on both sides; :meth:`add_tile` converts it per tile with the tile's own pixel area (:func:`min_object_pixels`).
    None or 0 (the default) keeps every component, as the guide counts them. Every user of the object metrics
    (validation, calibration, test evaluation and its recall by area) counts through this class, so through one rule.
    """

    def __init__(
        self,
        iou_thresholds: Sequence[float] = DEFAULT_IOU_THRESHOLDS,
        *,
        threshold: float = 0.5,
        min_object_area_m2: float | None = None,
        matching: ObjectMatching = "guide",
    ) -> None:
        self.iou_thresholds = _check_iou_thresholds(iou_thresholds)
        prob_to_logit(threshold)  # validate early
        area = 0.0 if min_object_area_m2 is None else float(min_object_area_m2)
        min_object_pixels(area, 1.0)  # validate early
        self.threshold = threshold
        self.min_object_area_m2 = area
        self.matching = _check_matching(matching)
        self.reset()

    @classmethod
    def for_metrics(cls, metrics: MetricsConfig, threshold: float) -> ObjectCounter:
        """A counter at ``threshold`` under a config's ``metrics`` section (its IoU thresholds, object matching
        and minimum object area): the one way validation, calibration and evaluation build theirs."""
        return cls(
            metrics.object_iou_thresholds,
            threshold=threshold,
            min_object_area_m2=metrics.min_object_area_m2,
            matching=metrics.object_matching,
        )

    def reset(self) -> None:
        """Forget every tile."""
        k = len(self.iou_thresholds)
        self.tp = np.zeros(k, np.int64)
        self.fn = np.zeros(k, np.int64)
        self.fp_pos_tiles = np.zeros(k, np.int64)
        self.fp_neg_tiles = np.zeros(k, np.int64)
        self.n_pos_tiles = 0
        self.n_neg_tiles = 0
        self._gt_area: list[np.ndarray] = []
        self._gt_area_m2: list[np.ndarray] = []
        self._gt_matched: list[np.ndarray] = []

    def merge(self, other: ObjectCounter) -> None:
        """Add every tile ``other`` counted (a shard of the same pool, counted at the same settings), after this
        counter's own tiles."""
        mine = (self.iou_thresholds, self.threshold, self.min_object_area_m2, self.matching)
        if (other.iou_thresholds, other.threshold, other.min_object_area_m2, other.matching) != mine:
            raise ValueError(
                "object counters of other IoU thresholds, probability threshold, minimum object area or matching "
                "rule cannot be merged"
            )
        self.tp += other.tp
        self.fn += other.fn
        self.fp_pos_tiles += other.fp_pos_tiles
        self.fp_neg_tiles += other.fp_neg_tiles
        self.n_pos_tiles += other.n_pos_tiles
        self.n_neg_tiles += other.n_neg_tiles
        self._gt_area += other._gt_area
        self._gt_area_m2 += other._gt_area_m2
        self._gt_matched += other._gt_matched

    def add(self, tile: TileObjects, pixel_area_m2: float | None = None) -> None:
        """Add one tile's matching result (its thresholds must be the counter's); ``pixel_area_m2``, the tile's
        ground area of one pixel, gives its objects' areas in m² (:func:`recall_by_area`). Tiles differ in pixel
        size (latitude in EPSG:3857, the resolution of each scene), so an area in pixels is per tile only."""
        if tile.iou_thresholds != self.iou_thresholds:
            raise ValueError(f"tile matched at IoU {tile.iou_thresholds}; counter expects {self.iou_thresholds}")
        self.tp += tile.tp
        self.fn += tile.fn
        if tile.is_positive_tile:
            self.n_pos_tiles += 1
            self.fp_pos_tiles += tile.fp
        else:
            self.n_neg_tiles += 1
            self.fp_neg_tiles += tile.fp
        self._gt_area.append(tile.gt_area)
        area = math.nan if pixel_area_m2 is None else float(pixel_area_m2)
        self._gt_area_m2.append(tile.gt_area.astype(np.float64) * area)
        self._gt_matched.append(tile.gt_matched)

    def add_tile(
        self, logits: ArrayLike, target: ArrayLike, pixel_area_m2: float, points: np.ndarray | None = None
    ) -> TileObjects:
        """Match one (H,W) tile at the counter's threshold under its matching rule, objects under
        ``min_object_area_m2`` (if set) dropped in pixels of this tile's ground area ``pixel_area_m2``
        (:func:`min_object_pixels`), and add it; returns the match (with the GT object at each of ``points``,
        :func:`match_objects`)."""
        tile = match_objects(
            logits,
            target,
            threshold=self.threshold,
            iou_thresholds=self.iou_thresholds,
            min_pixels=min_object_pixels(self.min_object_area_m2, float(pixel_area_m2)),
            matching=self.matching,
            points=points,
        )
        self.add(tile, pixel_area_m2=pixel_area_m2)
        return tile

    def add_batch(self, logits: ArrayLike, target: ArrayLike, pixel_area_m2: ArrayLike | Sequence[float]) -> None:
        """Match and add a (B,H,W) or (B,1,H,W) batch of logits and {0, 1, 255} targets (numpy or torch), with
        each tile's ground pixel area (B,) in m² (a batch's ``pixel_area_m2``)."""
        lg, tg = as_tile_batch(logits, target)
        x, t = to_numpy(lg), to_numpy(tg)
        raw = np.asarray(pixel_area_m2) if isinstance(pixel_area_m2, Sequence) else to_numpy(pixel_area_m2)
        areas = raw.astype(np.float64).reshape(-1)
        if areas.shape[0] != x.shape[0]:
            raise ValueError(f"{x.shape[0]} tiles but {areas.shape[0]} pixel areas")
        for i in range(x.shape[0]):
            self.add_tile(x[i], t[i], float(areas[i]))

    def gt_objects(self) -> tuple[np.ndarray, np.ndarray]:
        """Every GT object seen: (G,) areas in pixels and (n_thr, G) matched flags, for recall by size."""
        k = len(self.iou_thresholds)
        if not self._gt_area:
            return np.zeros(0, np.int64), np.zeros((k, 0), bool)
        return np.concatenate(self._gt_area), np.concatenate(self._gt_matched, axis=1)

    @property
    def n_tiles(self) -> int:
        """Tiles added, in the order :meth:`gt_tile_index` numbers them."""
        return len(self._gt_area)

    def gt_tile_index(self) -> np.ndarray:
        """(G,) the tile of every GT object of :meth:`gt_objects`: its position in the order tiles were added
        (merged counters: this counter's tiles first). A tile's objects are consecutive, in label order."""
        sizes = [a.size for a in self._gt_area]
        return np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)

    def gt_objects_m2(self) -> tuple[np.ndarray, np.ndarray]:
        """Every GT object seen: (G,) ground areas in m² (each from its tile's pixel area) and (n_thr, G) matched
        flags. Raises ValueError when a tile holding objects was added without its pixel area."""
        _, matched = self.gt_objects()
        if not self._gt_area_m2:
            return np.zeros(0, np.float64), matched
        area = np.concatenate(self._gt_area_m2)
        if np.isnan(area).any():
            raise ValueError("object areas in m² need each tile's pixel_area_m2 (ObjectCounter.add(tile, area))")
        return area, matched


def object_metrics(counter: ObjectCounter, ratio: float | None = None) -> dict[float, ObjectScores]:
    """Object scores per IoU threshold at 1:`ratio` (None: the natural pool), FP on negative tiles re-weighted."""
    w = negative_weight(ratio, counter.n_pos_tiles, counter.n_neg_tiles)
    return {
        thr: ObjectScores(tp=float(tp), fp=float(fp_p + w * fp_n), fn=float(fn))
        for thr, tp, fp_p, fp_n, fn in zip(
            counter.iou_thresholds, counter.tp, counter.fp_pos_tiles, counter.fp_neg_tiles, counter.fn, strict=True
        )
    }


def iou_tag(thr: float) -> str:
    """Name fragment of an IoU threshold: 0.3 -> 'iou30'."""
    return f"iou{round(thr * 100):02d}"


def object_metrics_at_ratios(
    counter: ObjectCounter,
    ratios: Sequence[float] = (200, 500, 1000),
    *,
    balanced: bool = True,
    prefix: str = "val",
) -> dict[str, float]:
    """Object precision / recall / F1 per IoU threshold at 1:1 and each 1:N.

    Keys look like `val_realistic_object_precision_iou30_1_200` and `val_balanced_object_f1_iou50`; recall does
    not depend on the ratio (negative tiles hold no GT) but is repeated per pool for a self-contained table.
    """
    out: dict[str, float] = {}
    for pool, suffix, r in ratio_pools(ratios, balanced):
        for thr, s in object_metrics(counter, r).items():
            for name, value in (("precision", s.precision), ("recall", s.recall), ("f1", s.f1)):
                out[f"{prefix}_{pool}_object_{name}_{iou_tag(thr)}{suffix}"] = value
    return out


def recall_by_size(
    counter: ObjectCounter, size_edges_px: Sequence[float] | np.ndarray, iou_threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Object recall per GT size bin: bins [edges[i], edges[i+1]); returns (GT objects per bin, recall per bin).

    Bins without GT objects have nan recall.
    """
    area, matched = counter.gt_objects()
    return _recall_in_bins(area, matched, counter, size_edges_px, iou_threshold)


def recall_by_area(
    counter: ObjectCounter, edges_m2: Sequence[float] | np.ndarray, iou_threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Object recall per GT ground-area bin [edges[i], edges[i+1]) in m², each object's area from its own tile's
    pixel area; returns (GT objects per bin, recall per bin), nan recall for an empty bin."""
    area, matched = counter.gt_objects_m2()
    return _recall_in_bins(area, matched, counter, edges_m2, iou_threshold)


def _recall_in_bins(
    area: np.ndarray,
    matched: np.ndarray,
    counter: ObjectCounter,
    size_edges: Sequence[float] | np.ndarray,
    iou_threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    if iou_threshold not in counter.iou_thresholds:
        raise ValueError(f"IoU threshold {iou_threshold} was not matched; counter has {counter.iou_thresholds}")
    edges = np.asarray(size_edges, np.float64)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"size edges must be increasing with at least 2 edges; got {list(edges)}")
    hit = matched[counter.iou_thresholds.index(iou_threshold)]
    inside = (area >= edges[0]) & (area < edges[-1])
    b = np.searchsorted(edges, area[inside], side="right") - 1
    n = np.bincount(b, minlength=edges.size - 1)
    k = np.bincount(b, weights=hit[inside], minlength=edges.size - 1)
    recall = np.divide(k, n, out=np.full(n.shape, np.nan), where=n > 0)
    return n, recall
