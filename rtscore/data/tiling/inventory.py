"""The inventory of an `rts tile` run: its labels on the grid CRS (typed by `rtscore.data.inventory.reader`: class,
label type, date; with ids, regions and a spatial index), the RegionName of a grid cell, and the labels the polygons
give one tile."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.tiling import TilingConfig
from rtscore.data.inventory.groups import buffered_groups, tile_diagonal
from rtscore.data.inventory.object_pixels import ObjectPixel, format_object_pixels
from rtscore.data.inventory.reader import InventoryError, InventoryFeature, read_inventory_file, vector_columns
from rtscore.data.raster.vector_labels import rasterize_labels, read_polygons
from rtscore.data.tiles import IGNORE_INDEX
from rtscore.data.tiling.pixels import GridCell, Scene, TilingError
from rtscore.data.tiling.scenes import scene_paths

log = logging.getLogger(__name__)


@contextmanager
def tiling_errors() -> Iterator[None]:
    """An inventory the reader refuses, as the TilingError of `rts tile` (the same message)."""
    try:
        yield
    except InventoryError as err:
        raise TilingError(str(err)) from None


@dataclass
class Inventory:
    """The inventory's polygons on the grid CRS: ``labels`` typed (class, label type, dates), ``features`` as
    GeoJSON-like dicts (geometry as repaired), ``geoms`` (shapely), ``uids``, ``regions`` (a region column or
    buffered groups; None otherwise) and a spatial index, all index-aligned. ``stale``: the labels older than
    ``max_label_age_days`` from their scene (set by the label-age check)."""

    features: list[dict[str, Any]]
    geoms: list[Any]  # shapely geometries, index-aligned with features
    uids: list[str]
    regions: list[str] | None
    tree: Any  # shapely STRtree
    labels: list[InventoryFeature] = field(default_factory=list)
    schema: str = "plain"
    grouped: bool = False  # regions are buffered groups with the tile-diagonal buffer: one group per tile
    stale: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not self.labels:  # built in memory (a review's grown inventory): RTS outlines without dates
            self.labels = [
                InventoryFeature(uid, i, "positive", "polygon", None, None, g, dict(f.get("properties") or {}))
                for i, (f, g, uid) in enumerate(zip(self.features, self.geoms, self.uids, strict=True))
            ]

    def touching(self, cell: GridCell) -> list[int]:
        import shapely

        box = shapely.box(*cell.bounds)
        return sorted(int(i) for i in self.tree.query(box, predicate="intersects"))

    def is_rts(self, i: int) -> bool:
        """Whether polygon ``i`` is labelled as an RTS (1 where a tile holds it whole on valid pixels): a Positive
        outline, neither flagged ``ignore`` nor stale."""
        f = self.labels[i]
        return f.train_class == "positive" and f.label_type == "polygon" and not f.ignore and i not in self.stale

    @property
    def negatives(self) -> int:
        return sum(f.train_class == "negative" for f in self.labels)

    @property
    def bounding_boxes(self) -> int:
        """Positive bounding boxes (ignore over their box; a Negative box is background like any Negative)."""
        return sum(f.train_class == "positive" and f.label_type == "bbox" for f in self.labels)

    @property
    def repaired(self) -> int:
        return sum(f.repaired for f in self.labels)


def read_inventory(cfg: TilingConfig) -> Inventory:
    """``cfg.polygons`` read by its schema (`read_inventory_file`) on the grid CRS, with ids and regions (the region
    column, or ARTS's buffered groups with ``regions.groups``).

    Raises:
        TilingError: what the reader refuses (the file, a column, every bad value at once).
    """
    import shapely

    path = Path(cfg.polygons.path)
    with tiling_errors():
        read = read_inventory_file(path, cfg.grid.crs, cfg.polygons, cfg.regions.column)
    labels = read.features
    geoms = [f.geometry for f in labels]
    features = [
        {"type": "Feature", "geometry": shapely.geometry.mapping(f.geometry), "properties": f.properties}
        for f in labels
    ]
    regions: list[str] | None = None
    grouped = False
    if cfg.regions.column is not None:
        regions = [str(f.region) for f in labels]
    elif cfg.regions.groups is not None:
        buffer = cfg.regions.groups.buffer_m
        grouped = buffer is None
        if buffer is None:
            buffer = tile_diagonal(cfg.grid.tile_size, cfg.grid.pixel_size)
        regions = buffered_groups(geoms, buffer)
        log.info("%s: %d group(s) of polygons buffered by %g (regions.groups)", path, len(set(regions)), buffer)
    return Inventory(
        features, geoms, [f.uid for f in labels], regions, shapely.STRtree(geoms), labels, read.schema.kind, grouped
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


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
            column = str(cfg.regions.name_column)
            with tiling_errors():
                fields = vector_columns(path, "regions.path")
            if column not in fields:
                raise TilingError(f"regions.name_column: column {column!r} is not in {path}; its columns are {fields}")
            feats = read_polygons(path, cfg.grid.crs, columns=[column])
            self.region_geoms = [shapely.make_valid(shapely.geometry.shape(f["geometry"])) for f in feats]
            self.region_names = [_text(f["properties"].get(column)) for f in feats]
            blank = [i for i, v in enumerate(self.region_names) if not v]
            if blank:
                raise TilingError(f"{path}: regions.name_column {column!r} is empty for feature(s) {blank[:20]}")
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
            # Two polygons touching one tile lie within a tile diagonal of each other, so their diagonal buffers
            # intersect: one group (rtscore.data.inventory.groups).
            assert not self.inventory.grouped or len(counts) == 1, f"{cell.tile_id}: polygons of groups {counts}"
            return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        nearest = self.inventory.tree.nearest(shapely.Point(*cell.centre))
        return regions[int(nearest)]


@dataclass
class Focus:
    """Config ``focus``: the scenes cut only in the grid cells touching one of its areas (on the grid CRS); with
    ``scene_column``, each scene only around its own areas (``own``: resolved scene -> STRtree of them). With
    ``ignore_column``, the areas it marks (``ignore``) cut no cell: they are 255 in the cells the others cut."""

    scenes: set[Path]  # resolved
    tree: Any  # shapely STRtree of the areas that cut cells
    own: dict[Path, Any] | None = None
    ignore: Any = None  # shapely STRtree of the ignore areas (None: none)
    _resolved: dict[Path, Path] = field(default_factory=dict)

    def _path(self, scene: Path) -> Path:
        if scene not in self._resolved:  # once per scene: a mosaic asks for every cell
            self._resolved[scene] = scene.resolve()
        return self._resolved[scene]

    def only_near(self, scene: Path) -> bool:
        """Whether ``scene`` is cut only where it touches an area."""
        return self._path(scene) in self.scenes

    def touches(self, cell: GridCell, scene: Path | None = None) -> bool:
        """Whether ``cell`` touches an area (of ``scene``'s own, with ``scene_column``)."""
        import shapely

        tree = self.tree if scene is None or self.own is None else self.own[self._path(scene)]
        return len(tree.query(shapely.box(*cell.bounds), predicate="intersects")) > 0

    def gives(self, scene: Path, cell: GridCell) -> bool:
        """Whether ``scene`` gives ``cell`` pixels: a scene not in focus always, a focus scene near its areas."""
        return not self.only_near(scene) or self.touches(cell, scene)

    def ignored(self, cell: GridCell) -> list[Any]:
        """The ignore areas in ``cell`` when it touches an area (a cell cut for the judged objects); else none: a
        cell away from them is cut as without focus."""
        import shapely

        if self.ignore is None or not self.touches(cell):
            return []
        return [self.ignore.geometries[i] for i in self.ignore.query(shapely.box(*cell.bounds), predicate="intersects")]


def cell_scenes(focus: Focus | None, cell: GridCell, scenes: list[Scene]) -> list[Scene]:
    """The scenes that give ``cell`` its pixels, in priority order: every scene, but a scene of ``focus.scenes`` only
    in a cell touching an area (its own, with ``scene_column``). Elsewhere it is not there at all: the cell is cut
    from the other scenes exactly as without it, so a scene a review adds changes no tile away from the judged
    objects (it would otherwise fill the other scenes' NoData, and a cell too sparse to write could become a tile)."""
    if focus is None:
        return scenes
    return [s for s in scenes if focus.gives(s.path, cell)]


def read_focus(cfg: TilingConfig) -> Focus | None:
    """Config ``focus`` read: its areas on the grid CRS and its scenes (each among ``scenes``), with
    ``scene_column`` each scene's own areas (naming its file, or blank); None without focus.

    Raises:
        TilingError: the areas file missing or unreadable, a focus scene that is not among the scenes, a
            ``scene_column`` the areas file does not have.
    """
    import shapely

    if cfg.focus is None:
        return None
    path = Path(cfg.focus.path)
    if not path.is_file():
        raise TilingError(f"focus.path: {path} not found")
    features = read_polygons(path, cfg.grid.crs)
    areas = [shapely.make_valid(shapely.geometry.shape(f["geometry"])) for f in features]
    every = {p.resolve() for p in scene_paths(cfg.scenes)}
    focused = {p.resolve() for p in scene_paths(cfg.focus.scenes)}
    strays = sorted(str(p) for p in focused - every)
    if strays:
        raise TilingError(f"focus.scenes: {strays} not among the config's scenes; list them in scenes too")
    marked = [ignore_flag(v) for v in _column(features, path, "ignore_column", cfg.focus.ignore_column)]
    ignore = [a for a, m in zip(areas, marked, strict=True) if m]
    ignore_tree = shapely.STRtree(ignore) if ignore else None
    features = [f for f, m in zip(features, marked, strict=True) if not m]
    areas = [a for a, m in zip(areas, marked, strict=True) if not m]
    tree = shapely.STRtree(areas)
    if cfg.focus.scene_column is None:
        return Focus(focused, tree, ignore=ignore_tree)
    names = [str(v or "").strip() for v in _column(features, path, "scene_column", cfg.focus.scene_column)]
    own = {s: shapely.STRtree([a for a, n in zip(areas, names, strict=True) if n in ("", s.name)]) for s in focused}
    return Focus(focused, tree, own, ignore_tree)


def _column(features: list[dict[str, Any]], path: Path, key: str, column: str | None) -> list[Any]:
    """Each feature's value of ``column`` (config ``focus.<key>``; all None without one), refused when absent."""
    if column is None:
        return [None] * len(features)
    if features and column not in (features[0].get("properties") or {}):
        raise TilingError(f"focus.{key}: {path} has no column {column!r}")
    return [(f.get("properties") or {}).get(column) for f in features]


def ignore_flag(value: Any) -> bool:
    """A value of ``focus.ignore_column``: set unless empty, zero or false."""
    return value not in (None, "", 0, "0", False, "false", "False")


# --------------------------------------------------------------------------------------------- labels


@dataclass(frozen=True)
class TileLabels:
    """One tile's labels: the (n, n) uint8 raster, the ids of the RTS labelled 1 (metadata.csv UIDs), the Negative
    polygons with a valid pixel in it (NegativeUIDs) and, per id of ``uids``, a (row, col) inside its label 1."""

    label: np.ndarray
    uids: list[str]
    negative_uids: list[str]
    object_pixels: list[ObjectPixel]

    def object_pixels_text(self) -> str:
        """metadata.csv ObjectPixels (rtscore.data.inventory.object_pixels, the one definition of the format)."""
        return format_object_pixels(self.object_pixels)


def tile_labels(
    cell: GridCell, inventory: Inventory, touching: list[int], valid: np.ndarray, ignore: Sequence[Any] = ()
) -> TileLabels:
    """The tile's labels (docs/inventories.md, "Classes, label types, dates, geometry"): a Positive outline is 1
    where the tile holds it whole on valid pixels, 255 over its extent where the tile edge cuts it or it runs into
    NoData (`rasterize_labels`' partial-object rule); a Positive bounding box, a stale label and a polygon flagged
    ``ignore`` are 255 over their extent; a Negative adds nothing (0 unless a Positive or an ignore is there);
    NoData pixels are 255; pixels in a polygon's hole are outside it. ``ignore``: further areas (grid CRS) 255 over
    their extent (:meth:`Focus.ignored`)."""
    from rasterio.features import geometry_mask

    n = cell.tile_size
    features: list[dict[str, Any]] = []
    footprints: list[np.ndarray] = []
    negatives = []
    for i in touching:
        f = inventory.features[i]
        inside = geometry_mask([f["geometry"]], out_shape=(n, n), transform=cell.transform, invert=True)
        if not inside.any():
            continue
        if inventory.labels[i].train_class == "negative":
            if i not in inventory.stale and (inside & valid).any():
                negatives.append(inventory.uids[i])
            continue
        props = dict(f.get("properties") or {})
        if (inside & ~valid).any() or not inventory.is_rts(i):
            props["ignore"] = True  # into NoData (not wholly observed), a bounding box, stale, or flagged
        features.append({"type": "Feature", "geometry": f["geometry"], "properties": props, "uid": inventory.uids[i]})
        footprints.append(inside)
    label = rasterize_labels(features, cell.transform, n)
    if ignore:
        unlabelled = geometry_mask(list(ignore), out_shape=(n, n), transform=cell.transform, invert=True)
        label[unlabelled] = IGNORE_INDEX
    label[~valid] = IGNORE_INDEX
    uids, pixels = [], []
    for f, inside in zip(features, footprints, strict=True):
        ones = inside & (label == 1)
        if ones.any():
            uids.append(f["uid"])
            pixels.append(ObjectPixel(f["uid"], *_central_pixel(ones)))
    return TileLabels(label, uids, negatives, pixels)


def _central_pixel(mask: np.ndarray) -> tuple[int, int]:
    """The pixel of ``mask`` nearest the mean of its pixels (ties: the first in row-major order): inside it even
    when it is not convex."""
    rows, cols = np.nonzero(mask)
    d = (rows - rows.mean()) ** 2 + (cols - cols.mean()) ** 2
    k = int(np.argmin(d))
    return int(rows[k]), int(cols[k])
