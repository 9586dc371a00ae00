"""The RTS inventory of an `rts tile` run: its polygons on the grid CRS (ids, regions, a spatial index), the
RegionName of a grid cell, and the labels the polygons give one tile."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.tiling import TilingConfig
from rtscore.data.raster.vector_labels import rasterize_labels, read_polygons
from rtscore.data.tiles import IGNORE_INDEX
from rtscore.data.tiling.pixels import GridCell, TilingError
from rtscore.data.tiling.scenes import scene_paths


def vector_fields(path: Path) -> list[str]:
    """The attribute columns of a vector file (its first layer)."""
    return _vector_info(path)[0]


def _vector_info(path: Path) -> tuple[list[str], int]:
    """(attribute columns, feature count) of a vector file's first layer."""
    import pyogrio

    try:
        info = pyogrio.read_info(path, force_feature_count=True)
    except Exception as err:  # pyogrio's DataSourceError/DataLayerError, GDAL's reasons inside
        raise TilingError(f"{path}: not a readable vector file ({type(err).__name__}: {err})") from None
    return [str(f) for f in info["fields"]], int(info["features"])


def _require_columns(path: Path, key: str, wanted: dict[str, str | None]) -> None:
    """``path`` (config ``key``) exists, holds polygons and has the ``wanted`` columns (an empty file has no
    columns to name: it is refused as empty first)."""
    if not path.is_file():
        raise TilingError(f"{path}: polygon file not found")
    fields, features = _vector_info(path)
    if features == 0:
        raise TilingError(f"{path}: holds no polygons ({key} must name a file with at least one polygon)")
    for name, column in wanted.items():
        if column is not None and column not in fields:
            raise TilingError(f"{name}: column {column!r} is not in {path}; its columns are {fields}")


@dataclass
class Inventory:
    """The RTS polygons on the grid CRS, with their ids, regions (column source) and a spatial index."""

    features: list[dict[str, Any]]
    geoms: list[Any]  # shapely geometries, index-aligned with features
    uids: list[str]
    regions: list[str] | None
    tree: Any  # shapely STRtree

    def touching(self, cell: GridCell) -> list[int]:
        import shapely

        box = shapely.box(*cell.bounds)
        return sorted(int(i) for i in self.tree.query(box, predicate="intersects"))


def read_inventory(cfg: TilingConfig) -> Inventory:
    """The polygons of ``cfg.polygons`` reprojected to the grid CRS (`read_polygons`), with ids and regions."""
    import shapely

    path = Path(cfg.polygons.path)
    wanted = {"polygons.id_column": cfg.polygons.id_column, "regions.column": cfg.regions.column}
    _require_columns(path, "polygons.path", wanted)
    features = read_polygons(path, cfg.grid.crs)
    if not features:
        raise TilingError(f"{path}: holds no polygons")
    geoms = [shapely.make_valid(shapely.geometry.shape(f["geometry"])) for f in features]
    if cfg.polygons.id_column is None:
        uids = [f"{path.stem}-{i}" for i in range(len(features))]
    else:
        uids = [_text(f["properties"].get(cfg.polygons.id_column)) for f in features]
        _no_blanks(path, "polygons.id_column", cfg.polygons.id_column, uids)
        dupes = sorted({u for u in uids if uids.count(u) > 1})
        if dupes:
            raise TilingError(f"{path}: polygons.id_column {cfg.polygons.id_column!r} repeats ids {dupes[:20]}")
    regions = None
    if cfg.regions.column is not None:
        regions = [_text(f["properties"].get(cfg.regions.column)) for f in features]
        _no_blanks(path, "regions.column", cfg.regions.column, regions)
    return Inventory(features, geoms, uids, regions, shapely.STRtree(geoms))


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _no_blanks(path: Path, key: str, column: str, values: list[str]) -> None:
    blank = [i for i, v in enumerate(values) if not v]
    if blank:
        raise TilingError(f"{path}: {key} {column!r} is empty for feature(s) {blank[:20]}")


class RegionOf:
    """The RegionName of a grid cell (config ``regions``); None: the cell lies outside every region polygon."""

    def __init__(self, cfg: TilingConfig, inventory: Inventory) -> None:
        import shapely

        self.name = cfg.regions.name
        self.inventory = inventory
        self.region_geoms: list[Any] = []
        self.region_names: list[str] = []
        if cfg.regions.path is not None:
            path = Path(cfg.regions.path)
            _require_columns(path, "regions.path", {"regions.name_column": cfg.regions.name_column})
            feats = read_polygons(path, cfg.grid.crs, columns=[str(cfg.regions.name_column)])
            self.region_geoms = [shapely.make_valid(shapely.geometry.shape(f["geometry"])) for f in feats]
            self.region_names = [_text(f["properties"].get(cfg.regions.name_column)) for f in feats]
            _no_blanks(path, "regions.name_column", str(cfg.regions.name_column), self.region_names)
            self.region_tree = shapely.STRtree(self.region_geoms)

    def __call__(self, cell: GridCell, touching: list[int]) -> str | None:
        import shapely

        if self.name is not None:
            return self.name
        if self.region_names:
            hit = self.region_tree.query(shapely.Point(*cell.centre), predicate="intersects")
            return self.region_names[int(min(hit))] if len(hit) else None
        regions = self.inventory.regions
        assert regions is not None  # RegionsConfig: exactly one source
        if touching:  # the most common region of the polygons in the tile (ties: the first name in order)
            counts = Counter(regions[i] for i in touching)
            return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        nearest = self.inventory.tree.nearest(shapely.Point(*cell.centre))
        return regions[int(nearest)]


@dataclass
class Focus:
    """Config ``focus``: the scenes cut only in the grid cells touching one of its areas (on the grid CRS)."""

    scenes: set[Path]  # resolved
    tree: Any  # shapely STRtree of the areas

    def only_near(self, scene: Path) -> bool:
        """Whether ``scene`` is cut only where it touches an area."""
        return scene.resolve() in self.scenes

    def touches(self, cell: GridCell) -> bool:
        import shapely

        return len(self.tree.query(shapely.box(*cell.bounds), predicate="intersects")) > 0


def read_focus(cfg: TilingConfig) -> Focus | None:
    """Config ``focus`` read: its areas on the grid CRS and its scenes (each among ``scenes``); None without focus.

    Raises:
        TilingError: the areas file missing or unreadable, a focus scene that is not among the scenes.
    """
    import shapely

    if cfg.focus is None:
        return None
    path = Path(cfg.focus.path)
    if not path.is_file():
        raise TilingError(f"focus.path: {path} not found")
    areas = [shapely.make_valid(shapely.geometry.shape(f["geometry"])) for f in read_polygons(path, cfg.grid.crs)]
    every = {p.resolve() for p in scene_paths(cfg.scenes)}
    focused = {p.resolve() for p in scene_paths(cfg.focus.scenes)}
    strays = sorted(str(p) for p in focused - every)
    if strays:
        raise TilingError(f"focus.scenes: {strays} not among the config's scenes; list them in scenes too")
    return Focus(focused, shapely.STRtree(areas))


# --------------------------------------------------------------------------------------------- labels


def tile_labels(
    cell: GridCell, inventory: Inventory, touching: list[int], valid: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """(n, n) uint8 labels and the ids of the RTS labelled 1. An RTS cut by the tile edge or touching NoData is
    255 over its extent (`rasterize_labels`' partial-object rule); NoData pixels are 255."""
    from rasterio.features import geometry_mask

    n = cell.tile_size
    features: list[dict[str, Any]] = []
    footprints: list[np.ndarray] = []
    for i in touching:
        f = inventory.features[i]
        inside = geometry_mask([f["geometry"]], out_shape=(n, n), transform=cell.transform, invert=True)
        if not inside.any():
            continue
        props = dict(f.get("properties") or {})
        if (inside & ~valid).any():
            props["ignore"] = True  # the RTS runs into NoData: not wholly observed, like one cut by the edge
        features.append({"type": "Feature", "geometry": f["geometry"], "properties": props, "uid": inventory.uids[i]})
        footprints.append(inside)
    label = rasterize_labels(features, cell.transform, n)
    label[~valid] = IGNORE_INDEX
    uids = [f["uid"] for f, inside in zip(features, footprints, strict=True) if (label[inside] == 1).any()]
    return label, uids
