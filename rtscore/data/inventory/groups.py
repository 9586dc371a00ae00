"""ARTS's buffered-intersection grouping of an inventory (docs/inventories.md, "Splits from an inventory"): each
polygon buffered, polygons whose buffers intersect joined transitively into one group, a group a region of the
split rule, so no two splits hold polygons within two buffers of each other."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

GROUP_PREFIX = "group-"


def tile_diagonal(tile_size: int, pixel_size: float) -> float:
    """A tile's diagonal in grid CRS units: the default buffer, with which two polygons in one tile (both within
    one diagonal of each other) always share a group."""
    return tile_size * pixel_size * math.sqrt(2)


def buffered_groups(geoms: Sequence[Any], buffer: float) -> list[str]:
    """Each polygon's group name ``group-<k>``: polygons whose ``buffer``-buffered outlines intersect, directly or
    through others, share a group; k = 1, 2, ... numbers the groups in the order of their first polygon (the
    smallest feature index), so the names are stable for a given file."""
    import numpy as np
    import shapely

    n = len(geoms)
    if n == 0:
        return []
    buffers = shapely.buffer(np.asarray(geoms, dtype=object), buffer)
    pairs = shapely.STRtree(buffers).query(buffers, predicate="intersects")
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in zip(pairs[0].tolist(), pairs[1].tolist(), strict=True):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # a group's root is its smallest index
    number: dict[int, int] = {}
    names = []
    for i in range(n):
        r = root(i)
        number.setdefault(r, len(number) + 1)
        names.append(f"{GROUP_PREFIX}{number[r]}")
    return names
