"""Where an object of a campaign falls in a tiling config's regions and splits: one rule for the review page (``rts
review export`` writes it into each manifest line) and for ``rts review ingest`` (which acts on it), so what a reviewer
is shown is what ingest does.

An object lies in the grid cells its outline touches; each cell is in the region ``RegionOf`` gives it (as ``rts
tile`` places tiles). Its *region* is that of the cell holding its representative point (a point inside it); its
*split* is the strictest (test, then val, then train) of its cells' regions' splits: a slump across a train cell and
a test cell would put pixels into test, so it is a test object. The regions of a stratified sample's strata are the
cheaper centroid cells' (:meth:`RegionPlacer.regions`), computed for every object of the campaign.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rtscore.config.tiling import TilingConfig
from rtscore.data.splits.blocking import SPLIT_ORDER
from rtscore.data.tiling.inventory import Inventory, RegionOf
from rtscore.data.tiling.pixels import GridCell, grid_cells


@dataclass(frozen=True)
class Place:
    """An object's place: its region, every region of the cells it touches (sorted), its split, and the ids of the
    inventory polygons it overlaps (a shared area, not only a touching border; in inventory order)."""

    region: str | None
    regions: list[str]
    split: str | None
    inventory_uids: list[str]

    def outcome_fields(self) -> dict[str, Any]:
        """Region, regions and split: what ingest records of an object (ObjectOutcome)."""
        return {"region": self.region, "regions": self.regions, "split": self.split}


def grid_geometry(geom: Any, crs: Any, grid_crs: Any) -> Any:
    """A shapely outline of ``crs`` on the grid CRS, made valid."""
    import shapely
    from rasterio.warp import transform_geom

    moved = transform_geom(crs, grid_crs, shapely.geometry.mapping(geom))
    return shapely.make_valid(shapely.geometry.shape(moved))


def touched_cells(geom: Any, cfg: TilingConfig) -> list[GridCell]:
    """The grid cells a grid-CRS outline touches (shares a point with)."""
    import shapely

    ts, px = cfg.grid.tile_size, cfg.grid.pixel_size
    return [c for c in grid_cells(geom.bounds, ts, px) if geom.intersects(shapely.box(*c.bounds))]


def home_region(geom: Any, cells: list[GridCell], regions: list[str | None]) -> str | None:
    """The region of the cell (of ``cells``) holding the outline's representative point."""
    point = geom.representative_point()
    for c, r in zip(cells, regions, strict=True):
        x0, y0, x1, y1 = c.bounds
        if x0 <= point.x < x1 and y0 <= point.y < y1:
            return r
    return regions[0] if regions else None


def strictest_split(regions: Iterable[str | None], split_of: Mapping[str, str]) -> str | None:
    """The strictest split of the regions' splits (None: no region has one)."""
    splits = [split_of[r] for r in regions if r is not None and r in split_of]
    return max(splits, key=lambda s: SPLIT_ORDER.get(s, 0)) if splits else None


@dataclass(eq=False)
class RegionPlacer:
    """A tiling config's region rule, each cell's region asked of ``RegionOf`` once (``cells``), for objects of the
    campaign CRS ``crs``."""

    cfg: TilingConfig
    crs: Any
    inventory: Inventory
    split_of: Mapping[str, str]
    region_of: RegionOf = field(init=False)
    cells: dict[tuple[int, int], str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.region_of = RegionOf(self.cfg, self.inventory)

    def cell_region(self, cell: GridCell) -> str | None:
        return self._region((cell.col, cell.row))

    def _region(self, key: tuple[int, int]) -> str | None:
        if key not in self.cells:
            cell = GridCell(key[0], key[1], self.cfg.grid.tile_size, self.cfg.grid.pixel_size)
            self.cells[key] = self.region_of(cell, self.inventory.touching(cell))
        return self.cells[key]

    def regions(self, xs: list[float], ys: list[float]) -> list[str | None]:
        """The region of the cell holding each point (campaign CRS)."""
        from rasterio.warp import transform as warp

        if not xs:
            return []
        gx, gy = warp(self.crs, self.cfg.grid.crs, xs, ys)
        span = self.cfg.grid.tile_size * self.cfg.grid.pixel_size
        return [self._region((math.floor(x / span), math.floor(y / span))) for x, y in zip(gx, gy, strict=True)]

    def place(self, geom: Any) -> Place:
        """The place of an outline of the campaign CRS (module docstring)."""
        on_grid = grid_geometry(geom, self.crs, self.cfg.grid.crs)
        cells = touched_cells(on_grid, self.cfg)
        return self.place_cells(on_grid, cells, [self.cell_region(c) for c in cells])

    def place_cells(self, geom: Any, cells: list[GridCell], regions: list[str | None]) -> Place:
        """The place of a grid-CRS outline whose cells and their regions are known."""
        return Place(
            home_region(geom, cells, regions),
            sorted({r for r in regions if r is not None}),
            strictest_split(regions, self.split_of),
            self._overlapped(geom),
        )

    def _overlapped(self, geom: Any) -> list[str]:
        import shapely

        inv = self.inventory
        hits = sorted(int(i) for i in inv.tree.query(geom, predicate="intersects"))
        return [inv.uids[i] for i in hits if not shapely.touches(geom, inv.geoms[i])]
