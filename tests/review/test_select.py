"""rtscore.review.select: which objects a review shows, and in which order."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import shapely

from rtscore.mapping.polygons import RtsObject
from rtscore.review.manifest import ReviewError, Selection
from rtscore.review.select import PROB_BINS, allocate, prob_bin, select, stratum_of


def obj(i: int, prob_mean: float, size_bin: str = "0-2000", prob_max: float | None = None) -> RtsObject:
    g = shapely.box(i, 0, i + 1, 1)
    return RtsObject(
        object_id=i,
        geometry=g,
        scene_ids=("s",),
        n_pixels=1,
        prob_mean=prob_mean,
        prob_max=prob_mean if prob_max is None else prob_max,
        area_m2=1.0,
        ground_area_m2=1.0,
        bbox=g.bounds,
        size_bin=size_bin,
        partial=False,
    )


def test_all_is_every_object_by_id_and_min_prob_keeps_prob_max_at_least_the_limit() -> None:
    objs = [obj(3, 0.6, prob_max=0.9), obj(1, 0.55, prob_max=0.7), obj(2, 0.5, prob_max=0.8)]
    assert [o.object_id for o in select(objs, Selection())] == [1, 2, 3]
    assert [o.object_id for o in select(objs, Selection(mode="min-prob", min_prob=0.8))] == [2, 3]


@pytest.mark.parametrize(
    ("selection", "needs"),
    [
        (Selection(mode="min-prob"), "min_prob"),
        (Selection(mode="stratified"), "needs n"),
        (Selection(mode="uncertain", n=3), "threshold"),
    ],
)
def test_a_selection_without_what_its_mode_needs_is_refused_naming_it(selection: Selection, needs: str) -> None:
    with pytest.raises(ReviewError, match=needs):
        select([obj(1, 0.6)], selection)


def test_uncertain_takes_the_n_closest_to_the_threshold_closest_first_ties_by_id() -> None:
    objs = [obj(1, 0.9), obj(2, 0.45), obj(3, 0.55), obj(4, 0.52), obj(5, 0.7)]
    got = select(objs, Selection(mode="uncertain", n=3, threshold=0.5))
    assert [o.object_id for o in got] == [4, 2, 3]  # 0.02, then 0.05 twice: id 2 before id 3


def test_probability_bins_are_five_equal_bins_between_the_threshold_and_one() -> None:
    assert PROB_BINS == 5
    assert [prob_bin(p, 0.5) for p in (0.3, 0.5, 0.59, 0.61, 0.75, 0.99, 1.0)] == [0, 0, 0, 1, 2, 4, 4]
    assert [prob_bin(p, 0.0) for p in (0.0, 0.19, 0.2, 0.999)] == [0, 0, 1, 4]


def test_allocation_is_even_and_a_small_stratum_gives_what_it_lacks_to_the_others() -> None:
    rng = np.random.default_rng(0)
    alloc = allocate({"a": 10, "b": 10, "c": 10, "d": 2}, 16, rng)
    assert alloc["d"] == 2  # its share is 4: it gives all it holds
    assert sorted(alloc[k] for k in "abc") == [4, 5, 5]  # the other 14 as evenly as possible
    assert allocate({"a": 3, "b": 1}, 10, rng) == {"a": 3, "b": 1}  # n beyond the objects: all of them
    assert allocate({"a": 0, "b": 5}, 2, rng) == {"a": 0, "b": 2}


def test_stratified_spreads_n_over_probability_size_and_region_strata_reproducibly() -> None:
    objs = []
    for i in range(1, 201):  # 2 probability bins x 2 size bins x 2 regions, 25 objects each
        objs.append(obj(i, 0.55 if i % 2 else 0.95, "0-2000" if i % 4 < 2 else "2000-10000"))
    regions = {i: ("north" if i % 8 < 4 else "south") for i in range(1, 201)}
    sel = Selection(mode="stratified", n=40, seed=7, threshold=0.5)
    got = select(objs, sel, regions)
    assert len(got) == 40
    per = Counter(stratum_of(o, 0.5, regions[o.object_id]) for o in got)
    assert len(per) == 8 and set(per.values()) == {5}  # every stratum 40 / 8
    assert [o.object_id for o in got] == sorted(o.object_id for o in got)  # review order: by object id
    assert [o.object_id for o in select(objs, sel, regions)] == [o.object_id for o in got]  # same seed, same sample
    other = select(objs, sel.model_copy(update={"seed": 8}), regions)
    assert [o.object_id for o in other] != [o.object_id for o in got]
    assert len(Counter(stratum_of(o, 0.5, None) for o in select(objs, sel))) == 4  # no regions: one region


def test_stratified_with_one_small_stratum_fills_n_from_the_others() -> None:
    objs = [obj(i, 0.95) for i in range(1, 51)] + [obj(100, 0.55)]
    got = select(objs, Selection(mode="stratified", n=10, seed=0, threshold=0.5))
    assert len(got) == 10 and 100 in [o.object_id for o in got]
