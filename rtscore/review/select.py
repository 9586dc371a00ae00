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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

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


def select(
    objects: Sequence[RtsObject], selection: Selection, regions: Mapping[int, str | None] | None = None
) -> list[RtsObject]:
    """The objects ``selection`` chooses, in review order (module docstring). ``regions``: object id -> its region
    (stratified only; missing or None: one region for all).

    Raises:
        ReviewError: a selection without what its mode needs (``min_prob``, ``n``, ``threshold``), naming it.
    """
    by_id = sorted(objects, key=lambda o: o.object_id)
    mode = selection.mode
    if mode == "all":
        return by_id
    if mode == "min-prob":
        if selection.min_prob is None:
            raise ReviewError("selection min-prob needs min_prob (the least prob_max of an object reviewed)")
        return [o for o in by_id if o.prob_max >= selection.min_prob]
    if selection.n is None:
        raise ReviewError(f"selection {mode} needs n (how many objects to review)")
    if mode == "uncertain":
        if selection.threshold is None:
            raise ReviewError("selection uncertain needs threshold (the package's decision threshold)")
        thr = selection.threshold
        return sorted(by_id, key=lambda o: (abs(o.prob_mean - thr), o.object_id))[: selection.n]
    return _stratified(by_id, selection.n, selection.seed, selection.threshold or 0.0, regions or {})


def _stratified(
    by_id: list[RtsObject], n: int, seed: int, low: float, regions: Mapping[int, str | None]
) -> list[RtsObject]:
    strata: dict[tuple[int, str, str], list[RtsObject]] = {}
    for o in by_id:
        strata.setdefault(stratum_of(o, low, regions.get(o.object_id)), []).append(o)
    keys = sorted(strata)
    rng = np.random.Generator(np.random.PCG64(seed))
    alloc = allocate({k: len(strata[k]) for k in keys}, n, rng)
    chosen: list[RtsObject] = []
    for k in keys:
        members = strata[k]
        take = alloc[k]
        if take >= len(members):
            chosen += members
        elif take:
            chosen += [members[i] for i in sorted(rng.choice(len(members), size=take, replace=False).tolist())]
    return sorted(chosen, key=lambda o: o.object_id)
