"""The layout of a GeoTIFF data root (docs/geotiff.md): its files, metadata.csv and splits.yaml.

Layout under a data root::

    PLANET-RGB/<tile_id>.tif   tile_size^2, geotiff.crs (EPSG:3857), 3 bands R,G,B uint8 (+ alpha)
    EXTRA/<tile_id>.tif        N float32 auxiliary bands, same grid (needed only when extra channels are selected)
    labels/<tile_id>.tif       1 band uint8 in {0 background, 1 RTS, 255 ignore}, same grid; or RTS polygons
                               labels/<tile_id>.geojson|.gpkg|.fgb|.shp (reprojected to the tile's CRS)
    metadata.csv               Tile_id, centroid_lat, centroid_lon, TrainClass, RegionName, UIDs
    splits.yaml                split -> [region names] (derived into the run directory when absent)

Channel rule: the generation config's input binding (``geotiff.extra_channels``: ``{name, band}`` entries, or the
synthetic channels by position) says which band of the EXTRA file each stored channel is read from
(`rtscore.config.binding`); the store records that binding, and stats, the package, predict and drift read it.
Bands not bound are not read. Every raster is read through `rtscore.data.raster.bands.open_checked`, against the raster
contract of ``cfg.geotiff`` (bands by colour interpretation or ``rgb_bands``, dtypes, CRS, pixel size): NoData is
its one rule, the same as at predict (`rtscore.data.raster.bands.valid_mask`; plus EXTRA nodata). Pixels (0, 0, 0) with
alpha 255 are valid. Each tile's ground pixel area (`rtscore.data.raster.ground`) is stored with it.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from rtscore.config.base import ConfigError, parse_yaml
from rtscore.data.raster.bands import EXTRA_DIR, LABEL_DIR, RGB_DIR
from rtscore.data.splits.regions import SplitError, region_splits
from rtscore.data.store.format import TileStoreError
from rtscore.data.tiles import TileInventory
from rtscore.storage import RunLayout

METADATA_CSV, SPLITS_YAML = "metadata.csv", "splits.yaml"  # a data root's files (docs/geotiff.md#the-tile-layout)
SPLITS_SUMMARY_JSON = Path(RunLayout.DERIVED_SPLITS_SUMMARY.at()).name  # beside a store, as in a run's datasets/
LABEL_POLYGON_SUFFIXES = (".geojson", ".gpkg", ".fgb", ".shp")  # labels/<id>.<suffix>, when there is no .tif
METADATA_COLUMNS = ("Tile_id", "centroid_lat", "centroid_lon", "TrainClass", "RegionName", "UIDs")
# After them, optional (a root without them reads, empty): the Negative polygons with a pixel in the tile, and one
# `<uid>@<row>,<col>` pixel inside each UID's label 1 (docs/geotiff.md#the-tile-layout); rts tile writes them.
OPTIONAL_METADATA_COLUMNS = ("NegativeUIDs", "ObjectPixels")
CRS = "EPSG:3857"
MAX_LISTED = 20  # problems listed in one error


class GeotiffError(TileStoreError):
    """A GeoTIFF data root does not match the layout; the message names the tile and the file."""


@dataclass(frozen=True)
class TileEntry:
    """One row of metadata.csv selected for ingestion."""

    tile_id: str
    region: str
    positive: bool
    n_uids: int
    row: int  # 0-based data row in metadata.csv (stored as source_index)
    # its ids and latitude from metadata.csv (selection.tile_inventory), stored with the tile
    inventory: TileInventory = field(default_factory=TileInventory)


def read_splits(root: Path) -> dict[str, list[str]]:
    """splits.yaml as ``{split: [regions]}`` (duplicate keys refused); a region listed in two splits is an error."""
    return parse_splits(root / SPLITS_YAML)


def parse_splits(path: Path) -> dict[str, list[str]]:
    """A splits.yaml file (a data root's, or a derived one) as ``{split: [regions]}``."""
    if not path.is_file():
        raise GeotiffError(f"{path} not found (the data root needs splits.yaml)")
    try:
        data = parse_yaml(path.read_text(), str(path)) or {}
    except ConfigError as err:
        raise GeotiffError(str(err)) from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise GeotiffError(f"{path}: expected a mapping split -> [region names]")
    try:
        region_splits(data)
    except SplitError as err:
        raise GeotiffError(f"{path}: {err}") from None
    return {str(k): [str(r) for r in v] for k, v in data.items()}


def read_metadata(root: Path) -> list[dict[str, str]]:
    """The rows of metadata.csv, checked for the required columns and unique tile ids; the optional columns
    (``OPTIONAL_METADATA_COLUMNS``) read as empty where the file has none."""
    path = root / METADATA_CSV
    if not path.is_file():
        raise GeotiffError(f"{path} not found (the data root needs metadata.csv)")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in METADATA_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise GeotiffError(f"{path}: missing columns {missing}; expected {list(METADATA_COLUMNS)}")
        rows = [{k: (v or "").strip() for k, v in r.items() if k is not None} for r in reader]
    for r in rows:  # a root without the optional columns reads as if they were empty
        for c in OPTIONAL_METADATA_COLUMNS:
            r.setdefault(c, "")
    ids = [r["Tile_id"] for r in rows]
    dupes = sorted({t for t in ids if ids.count(t) > 1})
    if dupes:
        raise GeotiffError(f"{path}: repeated Tile_id {dupes[:MAX_LISTED]}")
    bad = [(r["Tile_id"], r["TrainClass"]) for r in rows if r["TrainClass"] not in ("positive", "negative")]
    if bad:
        raise GeotiffError(f"{path}: TrainClass must be positive or negative; got {bad[:MAX_LISTED]}")
    return rows


def tile_files(root: Path, tile_id: str, with_extra: bool) -> dict[str, Path]:
    """The tile's files. Labels: the raster ``labels/<id>.tif``, else the first polygon file of
    ``labels/<id>`` + LABEL_POLYGON_SUFFIXES that exists (the raster's path when there is none: reported missing)."""
    labels = root / LABEL_DIR / f"{tile_id}.tif"
    if not labels.is_file():
        labels = next((p for s in LABEL_POLYGON_SUFFIXES if (p := labels.with_suffix(s)).is_file()), labels)
    files = {"rgb": root / RGB_DIR / f"{tile_id}.tif", "labels": labels}
    if with_extra:
        files["extra"] = root / EXTRA_DIR / f"{tile_id}.tif"
    return files
