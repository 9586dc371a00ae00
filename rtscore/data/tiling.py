"""`rts tile`: GeoTIFF scenes or quads (any CRS, any size) and an RTS polygon inventory cut into the tile layout of
docs/geotiff.md#the-tile-layout (PLANET-RGB/, EXTRA/, labels/, metadata.csv, splits.yaml) on a fixed grid.

Rules (docs/geotiff.md, "From scenes and polygons: rts tile"):

* **Grid.** Tile (c, r) of the grid CRS covers x in [c S, (c+1) S), y in [r S, (r+1) S) with S = tile_size x
  pixel_size: anchored at the CRS origin, so the tiles of two scenes (or two runs) line up pixel for pixel. Its id
  is ``c<c>_r<r>``. Every cell a scene's footprint touches is a candidate; a cell without a valid pixel is skipped.
* **Pixels.** For each tile only the window of each scene that covers it is read (plus a 2-pixel margin for the
  kernel): memory is bounded by one tile and one scene window, never by the scene or mosaic. Validity (the alpha
  band, else the dataset mask: `rtscore.data.bands.resolve_bands`) is warped with nearest neighbour; RGB and EXTRA
  bands with ``resampling`` (bilinear by default), NoData pixels excluded from the kernel. Scenes overlap: per
  pixel, the first scene in config order with a valid pixel wins.
* **Outputs.** PLANET-RGB/<id>.tif: R, G, B, alpha uint8, colour interpretation tagged, LZW; NoData pixels RGB 0,
  alpha 0. EXTRA/<id>.tif: float32, declared nodata NaN (NDVI where nir + red is 0, a companion raster's NoData),
  0 on NoData pixels. labels/<id>.tif: uint8, the polygons rasterised directly on the tile grid
  (`rtscore.data.vector_labels.rasterize_labels`): 1 inside a whole RTS, 255 over an RTS cut by the tile edge or
  touching NoData, 255 on NoData, else 0. metadata.csv: TrainClass positive when a pixel is 1; UIDs the RTS with a
  pixel of 1.
* **Resumable.** Each file is written under a temporary name and renamed; a tile's record (``.rts-tile/tiles/``) is
  written after its files, so a tile with a record and all its files is skipped on a re-run; metadata.csv,
  splits.yaml and ``tiling.json`` are written at the end, atomically, from the records (and only when their
  content changes: a re-run that finds everything done leaves the root untouched).
* **One identity.** The records are valid only for the run's identity (:func:`fingerprint`: this module's code
  closure, the settings that decide the tiles' content, the listing identity of every input file; never a path).
  A root tiled under another identity is not resumed: its tiles, records and lists are set aside into
  ``.rts-tile/set_aside/<UTC time>/`` (one warning line names it) and the run starts fresh, so tiles of two
  identities are never mixed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import math
import os
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from rtscore.config.base import canonical_json
from rtscore.config.tiling import TilingConfig, resolve_paths
from rtscore.data.bands import EXTRA_DIR, LABEL_DIR, RGB_DIR, RasterContractError, resolve_bands
from rtscore.data.tile_pixels import Datasets, GridCell, Scene, TilePixels, TilingError, grid_cells, render_pixels
from rtscore.data.tiles import IGNORE_INDEX
from rtscore.data.tiling_state import (
    MANIFEST_JSON,
    METADATA_CSV,
    SPLITS_YAML,
    complete_record,
    prepare_output,
    record_path,
)
from rtscore.data.vector_labels import rasterize_labels, read_polygons
from rtscore.identity import closure_hash, source_identity
from rtscore.storage import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)

METADATA_COLUMNS = ("Tile_id", "centroid_lat", "centroid_lon", "TrainClass", "RegionName", "UIDs")


class TilingCounts(BaseModel):
    """What a tiling run found and wrote."""

    candidate_tiles: int = Field(..., description="Grid cells touched by a scene footprint.")
    tiles: int = Field(..., description="Tiles written (listed in metadata.csv).")
    positive: int = Field(..., description="Tiles with at least one RTS pixel (label 1).")
    negative: int = Field(..., description="Tiles without an RTS pixel.")
    skipped_no_valid_pixels: int = Field(..., description="Candidate cells without a valid pixel in any scene.")
    skipped_outside_regions: int = Field(..., description="Cells whose centre lies in no region polygon.")
    polygons: int = Field(..., description="Polygons in the inventory.")
    polygons_labelled: int = Field(..., description="Polygons labelled 1 (whole, on valid pixels) in some tile.")
    polygons_outside_scenes: int = Field(..., description="Polygons that touch no scene footprint (not tiled).")


class TilingManifest(BaseModel):
    """``tiling.json``: what was tiled, how, and what came out (written last: its presence means done)."""

    output: str = Field(..., description="The data root written.")
    config_fingerprint: str = Field(
        ...,
        description="The run's identity: sha256 of the tiling code, the settings that decide the tiles' content and "
        "every input file's identity (fingerprint()); records of another identity are set aside, not resumed.",
    )
    config: dict[str, Any] = Field(..., description="The tiling config, paths absolute.")
    scenes: list[str] = Field(..., description="The scenes, in priority order (first valid pixel wins).")
    extra_bands: list[str] = Field(..., description="EXTRA band names, in band order.")
    regions: dict[str, int] = Field(..., description="Tiles written per RegionName.")
    counts: TilingCounts = Field(..., description="Counts of tiles and polygons.")
    resumed_tiles: int = Field(..., description="Tiles found complete from an earlier run and kept.")


# --------------------------------------------------------------------------------------------- inputs


def scene_paths(patterns: Sequence[str]) -> list[Path]:
    """The scenes of ``patterns`` (paths or globs), in order, each once; a pattern matching nothing is an error."""
    import glob

    out: list[Path] = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        found = [f for f in found if Path(f).is_file()]
        if not found:
            raise TilingError(f"scenes: {pattern} matches no file")
        out += [Path(f) for f in found if Path(f) not in out]
    return out


def check_scenes(cfg: TilingConfig, datasets: Datasets) -> list[Scene]:
    """Every scene's header checked (CRS, R, G, B bands and their dtype, bands the EXTRA sources name), before any
    pixel is read; all problems in one :class:`TilingError`."""
    from rasterio.warp import transform_bounds

    problems: list[str] = []
    scenes: list[Scene] = []
    scene_bands = sorted({s.band for e in cfg.extra for s in e.sources if s.path is None})
    for path in scene_paths(cfg.scenes):
        src = datasets.get(path)
        if src.crs is None:
            problems.append(f"{path}: has no CRS; rts tile cannot place it on the grid (assign its CRS first)")
            continue
        try:
            bands = resolve_bands(src, path, cfg.rgb_bands)
        except RasterContractError as err:
            problems.append(str(err))
            continue
        dtypes = sorted({src.dtypes[b] for b in bands.rgb})
        if dtypes != ["uint8"]:
            problems.append(
                f"{path}: RGB bands are {', '.join(dtypes)}; the tile layout holds 8-bit RGB as the training imagery "
                "(convert it to 8-bit first: no silent rescaling)"
            )
        beyond = [b for b in scene_bands if b >= src.count]
        if beyond:
            problems.append(f"{path}: {src.count} bands; extra (nir/red/band) names scene band(s) {beyond} (0-based)")
        bounds = transform_bounds(src.crs, cfg.grid.crs, *src.bounds, densify_pts=21)
        scenes.append(Scene(path, tuple(float(v) for v in bounds), bands))  # type: ignore[arg-type]
    for path in sorted({Path(s.path) for e in cfg.extra for s in e.sources if s.path is not None}):
        if not path.is_file():
            problems.append(f"{path}: companion raster (extra) not found")
            continue
        src = datasets.get(path)
        if src.crs is None:
            problems.append(f"{path}: companion raster has no CRS; it cannot be placed on the grid")
        wanted = [s.band for e in cfg.extra for s in e.sources if s.path is not None and Path(s.path) == path]
        if max(wanted) >= src.count:
            problems.append(f"{path}: {src.count} bands; extra names band {max(wanted)} (0-based)")
    if problems:
        raise TilingError("; ".join(problems) if len(problems) < 3 else "\n  " + "\n  ".join(problems))
    return scenes


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


# --------------------------------------------------------------------------------------------- writing


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


def _write_tif(path: Path, data: np.ndarray, cell: GridCell, crs: str, **kw: Any) -> None:
    """A GeoTIFF on the tile grid, written under a temporary name and renamed into place."""
    import rasterio
    from rasterio.enums import ColorInterp

    interp = kw.pop("colorinterp", None)
    descriptions = kw.pop("descriptions", None)
    profile = {
        "driver": "GTiff",
        "width": cell.tile_size,
        "height": cell.tile_size,
        "count": data.shape[0],
        "dtype": data.dtype.name,
        "crs": crs,
        "transform": cell.transform,
        "compress": "lzw",
        **kw,
    }
    tmp = _tmp(path)
    try:
        with rasterio.open(tmp, "w", **profile) as f:
            f.write(data)
            if interp is not None:
                f.colorinterp = [ColorInterp[c] for c in interp]
            for b, name in enumerate(descriptions or [], start=1):
                f.set_band_description(b, name)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_tile(root: Path, cell: GridCell, px: TilePixels, label: np.ndarray, cfg: TilingConfig) -> dict[str, int]:
    """The tile's files; returns each file's size (root-relative path -> bytes) for its record."""
    alpha = np.where(px.valid, 255, 0).astype(np.uint8)
    rgb = np.where(px.valid, px.rgb, 0).astype(np.uint8)
    tid = cell.tile_id
    files = {f"{RGB_DIR}/{tid}.tif": None, f"{LABEL_DIR}/{tid}.tif": None}
    rgba = np.concatenate([rgb, alpha[None]])
    _write_tif(root / RGB_DIR / f"{tid}.tif", rgba, cell, cfg.grid.crs, colorinterp=["red", "green", "blue", "alpha"])
    _write_tif(root / LABEL_DIR / f"{tid}.tif", label[None], cell, cfg.grid.crs)
    if px.extra is not None:
        files[f"{EXTRA_DIR}/{tid}.tif"] = None
        names = [e.name for e in cfg.extra]
        _write_tif(root / EXTRA_DIR / f"{tid}.tif", px.extra, cell, cfg.grid.crs, nodata=math.nan, descriptions=names)
    return {rel: (root / rel).stat().st_size for rel in files}


def _lonlat(cell: GridCell, crs: str) -> tuple[float, float]:
    from rasterio.warp import transform

    xs, ys = transform(crs, "EPSG:4326", [cell.centre[0]], [cell.centre[1]])
    return float(xs[0]), float(ys[0])


# GDAL reads these beside a file without being told: a scene's external mask and auxiliary metadata, a
# shapefile's attributes, index, CRS and encoding. They are part of the file's identity when present.
SIDECARS = {".shp": (".dbf", ".shx", ".prj", ".cpg")}
RASTER_SIDECARS = (".msk", ".aux.xml")


def _file_identity(path: Path) -> str:
    """The identity of one input file and of the sidecars GDAL reads with it: :func:`source_identity` (name,
    size, mtime, the content hash of a small non-raster file), never the path that leads to it."""
    parts = [source_identity(path).digest]
    beside = [path.with_suffix(ext) for ext in SIDECARS.get(path.suffix.lower(), ())]
    beside += [path.with_name(path.name + ext) for ext in RASTER_SIDECARS]
    parts += [f"{p.name}:{source_identity(p).digest}" for p in beside if p.is_file()]
    return "+".join(parts)


def fingerprint(cfg: TilingConfig) -> str:
    """The identity of a tiling run: sha256 of the code that cuts the tiles (this module's import closure), the
    settings that decide the tiles' content (the config but its output and splits) and the identity of every
    input file in place of its path (scenes in priority order, polygons, regions, companion rasters).

    Paths do not enter it: the same run from another working directory, through an absolute ``--config`` or
    after moving the inputs together is the same run. A record or tile written under another identity is
    never resumed (:func:`prepare_output` sets it aside).
    """
    doc = cfg.model_dump(mode="json", exclude={"output", "splits"})
    doc["scenes"] = [_file_identity(p) for p in scene_paths(cfg.scenes)]
    doc["polygons"]["path"] = _file_identity(Path(cfg.polygons.path))
    if cfg.regions.path is not None:
        doc["regions"]["path"] = _file_identity(Path(cfg.regions.path))
    for band, band_doc in zip(cfg.extra, doc["extra"], strict=True):
        for key in ("nir", "red", "band"):
            source = getattr(band, key)
            if source is not None and source.path is not None:
                band_doc[key]["path"] = _file_identity(Path(source.path))
    identity = {"code": closure_hash(__name__), "settings": doc}
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()


def _metadata_csv(records: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(METADATA_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: r["row"][k] for k in METADATA_COLUMNS})
    return buf.getvalue()


def _check_splits(cfg: TilingConfig, placed: list[Placed], scenes: list[Scene], datasets: Datasets) -> None:
    """Every region a tile will have is in a split, checked before the first tile is written.

    A cell's region is known from the polygons alone; whether the cell becomes a tile (has a valid pixel) only
    from its pixels. So a region in no split is an error when one of its cells has a valid pixel: its cells are
    rendered (not written) until one does. A region whose cells are all NoData gives no tile and is no error.

    Raises:
        TilingError: names ``splits``, the regions in no split and those it lists.
    """
    if cfg.splits is None:
        return
    listed = {r for rs in cfg.splits.values() for r in rs}
    strays = []
    for region in sorted({p.region for p in placed} - listed):
        cells = (p.cell for p in placed if p.region == region)
        if any(render_pixels(cell, scenes, cfg, datasets) is not None for cell in cells):
            strays.append(region)
    if strays:
        raise TilingError(
            f"splits: region(s) {strays} of the tiles are in no split (splits lists {sorted(listed)}); every region "
            "must be in exactly one split"
        )


def _write_if_changed(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically, unless the file already holds it: a re-run that changes nothing leaves
    the data root as it was (its listing, mtimes included, is its identity for the runs that read it)."""
    try:
        if path.read_text() == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    atomic_write_text(path, text)


# --------------------------------------------------------------------------------------------- the run


def _plan(cfg: TilingConfig, scenes: list[Scene], inventory: Inventory) -> tuple[list[GridCell], int]:
    """Candidate cells of every scene footprint (each once), and the polygons touching no scene footprint.

    Raises:
        TilingError: no polygon overlaps any scene.
    """
    import shapely

    seen: set[tuple[int, int]] = set()
    cells: list[GridCell] = []
    for s in scenes:
        for c in grid_cells(s.bounds, cfg.grid.tile_size, cfg.grid.pixel_size):
            if (c.col, c.row) not in seen:
                seen.add((c.col, c.row))
                cells.append(c)
    cells.sort(key=lambda c: (-c.row, c.col))
    footprints = shapely.union_all([shapely.box(*s.bounds) for s in scenes])
    outside = sum(1 for g in inventory.geoms if not g.intersects(footprints))
    if outside == len(inventory.geoms):
        x0, y0, x1, y1 = footprints.bounds
        px0, py0, px1, py1 = shapely.union_all(inventory.geoms).bounds
        raise TilingError(
            f"{cfg.polygons.path}: none of its {outside} polygons overlaps the {len(scenes)} scene(s) (scenes cover "
            f"x {x0:.0f}..{x1:.0f}, y {y0:.0f}..{y1:.0f}, polygons x {px0:.0f}..{px1:.0f}, y {py0:.0f}..{py1:.0f} in "
            f"{cfg.grid.crs}); are they of the same area, and is the polygon file's CRS right?"
        )
    return cells, outside


@dataclass(frozen=True)
class Placed:
    """A candidate cell inside a region: the polygons touching it and its RegionName."""

    cell: GridCell
    touching: list[int]
    region: str


def _place(cfg: TilingConfig, cells: list[GridCell], inventory: Inventory, region_of: RegionOf) -> list[Placed]:
    """The cells that lie in a region, each with its polygons and region (no pixel read).

    Raises:
        TilingError: a cell holding RTS whose centre lies in no region polygon.
    """
    placed = []
    for cell in cells:
        touching = inventory.touching(cell)
        region = region_of(cell, touching)
        if region is None:
            if touching:
                raise TilingError(
                    f"{cfg.regions.path}: tile {cell.tile_id} holds RTS {[inventory.uids[i] for i in touching]} "
                    "but its centre lies in no region polygon; extend the regions"
                )
            continue
        placed.append(Placed(cell, touching, region))
    return placed


def tile_scenes(cfg: TilingConfig, output: str | Path, *, overwrite: bool = False) -> TilingManifest:
    """`rts tile`: cut ``cfg.scenes`` and ``cfg.polygons`` into the tile layout under ``output`` (module docstring).

    Every input and setting is checked before a tile is written; a re-run of the same identity
    (:func:`fingerprint`) resumes (finished tiles kept), one of another identity sets the earlier run aside and
    starts fresh; ``tiling.json`` is written last. A re-run that finds every tile done rewrites nothing.

    Raises:
        TilingError: a scene without CRS or with unusable bands, an empty polygon file, a polygon column that does
            not exist, no overlap between polygons and scenes, a region in no split, an output that is not ours.
        LabelPolygonError: a polygon file without CRS (not GeoJSON) or unreadable.
    """
    root = Path(output)
    datasets = Datasets()
    try:
        scenes = check_scenes(cfg, datasets)
        inventory = read_inventory(cfg)
        region_of = RegionOf(cfg, inventory)
        cells, outside = _plan(cfg, scenes, inventory)
        placed = _place(cfg, cells, inventory, region_of)
        _check_splits(cfg, placed, scenes, datasets)
        fp = fingerprint(cfg)
        prepare_output(root, fp, overwrite=overwrite)
        records, resumed, empty = [], 0, 0
        for k, p in enumerate(placed):
            record = complete_record(root, p.cell.tile_id)
            if record is not None:
                resumed += record["status"] == "written"
            else:
                (root / MANIFEST_JSON).unlink(missing_ok=True)  # "done" again only once this run is done
                record = _tile(root, p.cell, scenes, cfg, datasets, inventory, p.touching, p.region)
                atomic_write_json(record_path(root, p.cell.tile_id), record)
            if record["status"] == "written":
                records.append(record)
            else:
                empty += 1
            if (k + 1) % 100 == 0:
                log.info("rts tile: %d of %d grid cells done (%d tiles)", k + 1, len(placed), len(records))
    finally:
        datasets.close()
    if not records:
        raise TilingError(f"no tile of {len(cells)} grid cells has a valid pixel in the scenes {cfg.scenes}")
    regions = Counter(r["row"]["RegionName"] for r in records)
    _write_if_changed(root / METADATA_CSV, _metadata_csv(records))
    if cfg.splits is not None:
        import yaml

        _write_if_changed(root / SPLITS_YAML, yaml.safe_dump(cfg.splits, sort_keys=False))
    else:
        (root / SPLITS_YAML).unlink(missing_ok=True)  # one of an earlier run with splits: ingestion derives them
    labelled = {u for r in records for u in r["uids"]}
    n_pos = sum(r["row"]["TrainClass"] == "positive" for r in records)
    absolute = resolve_paths(cfg, Path.cwd())  # the manifest says the same whatever the working directory
    manifest = TilingManifest(
        output=str(root.resolve()),
        config_fingerprint=fp,
        config=absolute.model_dump(mode="json"),
        scenes=[str(s.path.resolve()) for s in scenes],
        extra_bands=[e.name for e in cfg.extra],
        regions=dict(sorted(regions.items())),
        counts=TilingCounts(
            candidate_tiles=len(cells),
            tiles=len(records),
            positive=n_pos,
            negative=len(records) - n_pos,
            skipped_no_valid_pixels=empty,
            skipped_outside_regions=len(cells) - len(placed),
            polygons=len(inventory.geoms),
            polygons_labelled=len(labelled),
            polygons_outside_scenes=outside,
        ),
        resumed_tiles=resumed,
    )
    _write_manifest(root, manifest)
    return manifest


def _write_manifest(root: Path, manifest: TilingManifest) -> None:
    """``tiling.json``, unless it already says the same of the same tiles (``resumed_tiles`` aside: it counts what
    this run kept, and a re-run that kept everything changed nothing)."""
    path = root / MANIFEST_JSON
    try:
        before = TilingManifest.model_validate_json(path.read_text())
    except (OSError, ValueError):
        before = None
    if before is not None and before.model_copy(update={"resumed_tiles": manifest.resumed_tiles}) == manifest:
        return
    atomic_write_json(path, manifest.model_dump(mode="json"))


def _tile(
    root: Path,
    cell: GridCell,
    scenes: list[Scene],
    cfg: TilingConfig,
    datasets: Datasets,
    inventory: Inventory,
    touching: list[int],
    region: str,
) -> dict[str, Any]:
    """Render and write one tile; its record (status written or empty)."""
    px = render_pixels(cell, scenes, cfg, datasets)
    if px is None:
        return {"tile_id": cell.tile_id, "status": "empty", "files": {}}
    label, uids = tile_labels(cell, inventory, touching, px.valid)
    files = _write_tile(root, cell, px, label, cfg)
    lon, lat = _lonlat(cell, cfg.grid.crs)
    positive = bool((label == 1).any())
    row = {
        "Tile_id": cell.tile_id,
        "centroid_lat": f"{lat:.6f}",
        "centroid_lon": f"{lon:.6f}",
        "TrainClass": "positive" if positive else "negative",
        "RegionName": region,
        "UIDs": ";".join(uids),
    }
    return {"tile_id": cell.tile_id, "status": "written", "files": files, "row": row, "uids": uids}
