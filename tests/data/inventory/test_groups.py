"""ARTS's buffered-intersection grouping (rtscore.data.inventory.groups)."""

from __future__ import annotations

import math

import shapely

from rtscore.data.inventory.groups import buffered_groups, tile_diagonal


def test_buffers_that_intersect_join_transitively_and_groups_are_named_by_their_first_polygon() -> None:
    def sq(x: float) -> shapely.Polygon:
        return shapely.box(x, 0, x + 10, 10)

    # gaps: row 0 to row 2, 15; row 2 to row 3, 10; row 0 to row 3, 35 (joined through row 2 at buffer 10)
    geoms = [sq(0), sq(1000), sq(25), sq(45), sq(500)]
    assert buffered_groups(geoms, 10.0) == ["group-1", "group-2", "group-1", "group-1", "group-3"]
    assert buffered_groups(geoms, 6.0) == ["group-1", "group-2", "group-3", "group-3", "group-4"]
    assert buffered_groups(geoms, 4.0) == ["group-1", "group-2", "group-3", "group-4", "group-5"]
    assert buffered_groups([], 1.0) == []


def test_the_default_buffer_is_the_tile_diagonal() -> None:
    assert tile_diagonal(64, 9.54) == 64 * 9.54 * math.sqrt(2)
