"""Which of a campaign's objects are reviewed (docs/review.md, "Choosing the objects").

:func:`select` applies a :class:`~rtscore.review.manifest.Selection` to the objects of a campaign's objects layer and
returns them in review order (the manifest's, the page's):

- ``all``: every object, by object id (ids run by descending area: the largest first);
- ``min-prob``: the objects whose ``prob_max`` reaches ``min_prob``, by object id;
- ``stratified``: ``n`` objects, a seeded sample stratified by probability bin x size bin x region, by object id.
  Probability bins are 5 equal bins of ``prob_mean`` between the threshold (or 0) and 1 (a mean under the threshold
  falls in the first). ``n`` is spread as evenly as possible over the non-empty strata; a stratum smaller than its
  share gives what it lacks to the others; what does not divide evenly goes one object each to strata drawn with
  the seed. Within a stratum the objects are drawn with ``numpy.random.Generator(PCG64(seed))``: the same objects,
  seed and selection give the same sample on any machine;
- ``uncertain``: the ``n`` objects whose ``prob_mean`` lies closest to the package's threshold, the closest first
  (ties by object id).

:func:`select_rows` is the same choice on the attribute columns alone (:class:`Attributes`: object id, ``prob_mean``,
``prob_max``, size bin, one row per object) and returns row positions; :func:`select` applies it to objects in
memory. The review export reads the objects layer's columns, chooses on them, and reads the geometries of the chosen
objects only (rtscore.review.objects_columns).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from rtscore.mapping.polygons import RtsObject
from rtscore.review.manifest import ReviewError, Selection

PROB_BINS = 5  # stratified: equal probability bins between the threshold (or 0) and 1

K = TypeVar("K")


def prob_bin(prob: float, low: float) -> int:
    """The probability bin (0..4) of ``prob`` among :data:`PROB_BINS` equal bins of [``low``, 1]; under ``low``: 0."""
    if low >= 1.0:
        return 0
    k = int(np.floor((prob - low) / (1.0 - low) * PROB_BINS))
    return min(max(k, 0), PROB_BINS - 1)


def stratum_of(obj: RtsObject, low: float, region: str | None) -> tuple[int, str, str]:
    """(probability bin, size bin, region) of an object: its stratum in a stratified sample."""
    return prob_bin(obj.prob_mean, low), obj.size_bin, region or ""


def allocate(sizes: Mapping[K, int], n: int, rng: np.random.Generator) -> dict[K, int]:
    """How many of ``n`` to draw from each stratum of ``sizes`` (stratum -> objects in it, strata in a fixed order):
    as even as possible, a stratum never giving more than it holds (what it lacks goes to the others), the remainder
    of an uneven division one each to strata drawn with ``rng``."""
    alloc = {k: 0 for k in sizes}
    active = [k for k in sizes if sizes[k] > 0]
    left = min(n, sum(sizes[k] for k in active))
    while left > 0 and active:
        share = left // len(active)
        small = [k for k in active if sizes[k] - alloc[k] <= share]
        if small:  # they give all they hold; the rest is shared again among the others
            for k in small:
                left -= sizes[k] - alloc[k]
                alloc[k] = sizes[k]
            active = [k for k in active if k not in small]
            continue
        for k in active:
            alloc[k] += share
        left -= share * len(active)
        if left:  # fewer than one each left: drawn, every stratum drawn holding one more
            for i in sorted(rng.choice(len(active), size=left, replace=False).tolist()):
                alloc[active[i]] += 1
            left = 0
    return alloc


@dataclass(frozen=True, eq=False)
class Attributes:
    """What a selection reads of each object, one row per object: arrays of one length."""

    object_id: np.ndarray  # int64
    prob_mean: np.ndarray  # float64
    prob_max: np.ndarray  # float64
    size_bin: np.ndarray  # object: str

    def __len__(self) -> int:
        return len(self.object_id)

    @classmethod
    def of(cls, objects: Sequence[RtsObject]) -> Attributes:
        """The attributes of objects in memory."""
        return cls(
            object_id=np.array([o.object_id for o in objects], dtype=np.int64),
            prob_mean=np.array([o.prob_mean for o in objects], dtype=np.float64),
            prob_max=np.array([o.prob_max for o in objects], dtype=np.float64),
            size_bin=np.array([o.size_bin for o in objects], dtype=object),
        )


def select(
    objects: Sequence[RtsObject], selection: Selection, regions: Mapping[int, str | None] | None = None
) -> list[RtsObject]:
    """The objects ``selection`` chooses, in review order (module docstring). ``regions``: object id -> its region
    (stratified only; missing or None: one region for all).

    Raises:
        ReviewError: a selection without what its mode needs (``min_prob``, ``n``, ``threshold``), naming it.
    """
    by_row = [regions.get(o.object_id) for o in objects] if regions else None
    return [objects[i] for i in select_rows(Attributes.of(objects), selection, by_row).tolist()]


def select_rows(
    attrs: Attributes, selection: Selection, regions: Sequence[str | None] | np.ndarray | None = None
) -> np.ndarray:
    """The rows of ``attrs`` that ``selection`` chooses, in review order (module docstring): what :func:`select`
    chooses of the same objects. ``regions``: each row's region (stratified only; None: one region for all).

    Raises:
        ReviewError: a selection without what its mode needs (``min_prob``, ``n``, ``threshold``), naming it.
    """
    by_id = np.argsort(attrs.object_id, kind="stable")
    mode = selection.mode
    if mode == "all":
        return by_id
    if mode == "min-prob":
        if selection.min_prob is None:
            raise ReviewError("selection min-prob needs min_prob (the least prob_max of an object reviewed)")
        return by_id[attrs.prob_max[by_id] >= selection.min_prob]
    if selection.n is None:
        raise ReviewError(f"selection {mode} needs n (how many objects to review)")
    if mode == "uncertain":
        if selection.threshold is None:
            raise ReviewError("selection uncertain needs threshold (the package's decision threshold)")
        distance = np.abs(attrs.prob_mean[by_id] - selection.threshold)
        return by_id[np.lexsort((attrs.object_id[by_id], distance))][: selection.n]  # lexsort is stable
    return _stratified(attrs, by_id, selection.n, selection.seed, selection.threshold or 0.0, regions)


def _prob_bins(prob: np.ndarray, low: float) -> np.ndarray:
    """:func:`prob_bin` of every value of ``prob`` (the same arithmetic, elementwise)."""
    if low >= 1.0:
        return np.zeros(len(prob), dtype=np.int64)
    k = np.floor((prob - low) / (1.0 - low) * PROB_BINS)
    return np.clip(k, 0, PROB_BINS - 1).astype(np.int64)


def _codes(values: Sequence[Any] | np.ndarray) -> tuple[list[Any], np.ndarray]:
    """(the distinct values sorted, each value's rank among them)."""
    labels = sorted(set(values))
    rank = {v: k for k, v in enumerate(labels)}
    return labels, np.fromiter((rank[v] for v in values), dtype=np.int64, count=len(values))


def _stratified(
    attrs: Attributes,
    by_id: np.ndarray,
    n: int,
    seed: int,
    low: float,
    regions: Sequence[str | None] | np.ndarray | None,
) -> np.ndarray:
    """The stratified sample's rows (module docstring): strata in the order of their (probability bin, size bin,
    region) keys, each stratum's members by object id, drawn as :func:`allocate` shares ``n`` out."""
    pbins = _prob_bins(attrs.prob_mean[by_id], low)
    sizes, size_code = _codes(attrs.size_bin[by_id])
    if regions is None:
        names, region_code = [""], np.zeros(len(by_id), dtype=np.int64)
    else:
        region_of = np.asarray(regions, dtype=object)[by_id]
        names, region_code = _codes([r or "" for r in region_of])
    key = (pbins * len(sizes) + size_code) * len(names) + region_code  # ranks: the order of the key tuples
    grouped = np.argsort(key, kind="stable")  # stratum by stratum, by object id within one
    codes, starts, counts = np.unique(key[grouped], return_index=True, return_counts=True)
    keys = [
        (c // len(names) // len(sizes), sizes[c // len(names) % len(sizes)], names[c % len(names)])
        for c in codes.tolist()
    ]
    rng = np.random.Generator(np.random.PCG64(seed))
    alloc = allocate(dict(zip(keys, counts.tolist(), strict=True)), n, rng)
    chosen: list[np.ndarray] = []
    for k, start, count in zip(keys, starts.tolist(), counts.tolist(), strict=True):
        members = grouped[start : start + count]
        take = alloc[k]
        if take >= count:
            chosen.append(members)
        elif take:
            chosen.append(members[sorted(rng.choice(count, size=take, replace=False).tolist())])
    rows = by_id[np.concatenate(chosen)] if chosen else by_id[:0]
    return rows[np.argsort(attrs.object_id[rows], kind="stable")]
