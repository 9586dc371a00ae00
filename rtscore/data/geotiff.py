"""Per-tile GeoTIFF datasets (the real layout of /work/shared/DATA_LAYOUT.md): write synthetic ones, ingest any.

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
Bands not bound are not read. Every raster is read through `rtscore.data.bands.open_checked`, against the raster
contract of ``cfg.geotiff`` (bands by colour interpretation or ``rgb_bands``, dtypes, CRS, pixel size): NoData is
its one rule, the same as at predict (alpha 0, else the dataset mask; plus EXTRA nodata). Pixels (0, 0, 0) with
alpha 255 are valid. Each tile's ground pixel area (`rtscore.data.ground`) is stored with it.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.base import ConfigError, config_hash, parse_yaml
from rtscore.config.binding import InputBinding, RasterContract
from rtscore.config.generation import GenerationConfig, GeotiffSourceConfig
from rtscore.config.pipeline import SplitsConfig
from rtscore.data.bands import (
    EXTRA_DIR,
    LABEL_DIR,
    RGB_DIR,
    CheckedRaster,
    RasterContractError,
    open_checked,
    same_grid,
)
from rtscore.data.ground import WEB_MERCATOR_RADIUS_M, GroundSizeError, ground_pixel_area_m2, projected_crs
from rtscore.data.splits import SplitError, SplitResult, derive_splits, region_splits, unassigned_regions
from rtscore.data.store import StoreLayout, TileStoreError
from rtscore.data.synthetic import PIXEL_SIZE_M, plan_tiles, render_tile
from rtscore.data.tiles import IGNORE_INDEX, KIND_CODES, LABEL_VALUES, RawTile
from rtscore.data.vector_labels import LabelPolygonError, rasterize_labels, read_label_polygons
from rtscore.data.writer import base_attrs, write_store
from rtscore.identity import SourceError, closure_hash, source_identity
from rtscore.storage import atomic_write_text, default_cache_dir
from rtscore.storage.gcs import GcsStore, RetryPolicy, parse_gs_uri, transfer_workers

METADATA_CSV, SPLITS_YAML, SPLITS_SUMMARY_JSON = "metadata.csv", "splits.yaml", "splits_summary.json"
LABEL_POLYGON_SUFFIXES = (".geojson", ".gpkg", ".fgb", ".shp")  # labels/<id>.<suffix>, when there is no .tif
METADATA_COLUMNS = ("Tile_id", "centroid_lat", "centroid_lon", "TrainClass", "RegionName", "UIDs")
CRS = "EPSG:3857"
EARTH_RADIUS_M = WEB_MERCATOR_RADIUS_M
GRID_LAT_DEG, GRID_LON_DEG = 70.0, -150.0  # north-west corner of the synthetic tile grid (Arctic Alaska)
GRID_COLUMNS = 64  # synthetic tiles per grid row
_SPLIT_ROW_OFFSET = {"train": 0, "val": 200, "test": 400}  # grid rows: splits never share ground
_MAX_LISTED = 20  # problems listed in one error
_log = logging.getLogger(__name__)


class GeotiffError(TileStoreError):
    """A GeoTIFF data root does not match the layout; the message names the tile and the file."""


# --------------------------------------------------------------------------------------------- georeferencing


def _mercator_y(lat_deg: float) -> float:
    return EARTH_RADIUS_M * math.log(math.tan(math.pi / 4 + math.radians(lat_deg) / 2))


def mercator_to_lonlat(x: float, y: float) -> tuple[float, float]:
    """EPSG:3857 metres to (lon, lat) degrees on the Web Mercator sphere."""
    return math.degrees(x / EARTH_RADIUS_M), math.degrees(2 * math.atan(math.exp(y / EARTH_RADIUS_M)) - math.pi / 2)


def tile_origin(split: str, index: int, tile_size: int, pixel_size_m: float) -> tuple[float, float]:
    """Upper-left corner (EPSG:3857) of synthetic tile ``index`` of ``split``: adjacent, non-overlapping cells."""
    span = tile_size * pixel_size_m
    row = _SPLIT_ROW_OFFSET.get(split, 0) + index // GRID_COLUMNS
    col = index % GRID_COLUMNS
    x0 = math.radians(GRID_LON_DEG) * EARTH_RADIUS_M + col * span
    y0 = _mercator_y(GRID_LAT_DEG) - row * span
    return x0, y0


# --------------------------------------------------------------------------------------------- writing


def write_synthetic_geotiffs(
    cfg: GenerationConfig | Sequence[GenerationConfig], output: str | Path, *, overwrite: bool = False
) -> dict[str, Any]:
    """Write the synthetic scenes of one or more splits' generation configs as one GeoTIFF data root.

    One file set per source tile (rotation expansion is not applied), the exact labels, EPSG:3857 with
    ``4.77 / cfg.scale`` m pixels on a deterministic grid near 70 N (each split on its own rows).
    ``metadata.csv`` lists every tile and ``splits.yaml`` every split's regions, as DATA_LAYOUT.md describes a
    real root. The root is written to a hidden sibling and renamed into place at the end.

    Args:
        cfg: Generation config of a split, or of several splits (e.g. a pipeline's train, val and test).
        output: Data root to create.
        overwrite: Replace an existing ``output``.

    Returns:
        Summary: output path, splits, tile count, positives, full-NoData tiles, regions per split.
    """
    cfgs = [cfg] if isinstance(cfg, GenerationConfig) else list(cfg)
    splits = [c.split for c in cfgs]
    if not cfgs or len(set(splits)) != len(splits):
        raise GeotiffError(f"give one generation config per split; got splits {splits}")
    if any(c.synthetic is None for c in cfgs):
        raise GeotiffError(
            "synth-geotiff renders synthetic scenes: every generation config needs its synthetic section"
        )
    output = Path(output)
    if output.exists() and not overwrite:
        raise GeotiffError(f"output {output} already exists; pass overwrite (--overwrite) to replace it")
    staging = output.with_name(f".{output.name}.partial")
    if staging.exists():
        shutil.rmtree(staging)
    rows: list[dict[str, str]] = []
    counts = {"n_positive": 0, "n_full_nodata": 0}
    for c in cfgs:
        rows += _write_split(c, staging, counts)
    with open(staging / METADATA_CSV, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(METADATA_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    _write_yaml(staging / SPLITS_YAML, {c.split: list(c.synthetic_settings.regions) for c in cfgs})
    read_splits(staging)  # a region in two splits is refused before the root appears
    if output.exists():
        shutil.rmtree(output)
    staging.rename(output)
    return {
        "output": str(output),
        "split": ",".join(splits),
        "n_tiles": len(rows),
        **counts,
        "regions": {c.split: list(c.synthetic_settings.regions) for c in cfgs},
    }


def _write_split(cfg: GenerationConfig, staging: Path, counts: dict[str, int]) -> list[dict[str, str]]:
    """Write one split's tiles into the staging root; returns their metadata.csv rows."""
    import rasterio
    from rasterio.enums import ColorInterp
    from rasterio.transform import Affine

    for d in (RGB_DIR, LABEL_DIR, *([EXTRA_DIR] if cfg.synthetic_settings.extra_channels else [])):
        (staging / d).mkdir(parents=True, exist_ok=True)
    n = cfg.tile_size
    px = PIXEL_SIZE_M / cfg.scale
    rows: list[dict[str, str]] = []
    for plan in plan_tiles(cfg):
        tile = render_tile(plan, cfg)
        x0, y0 = tile_origin(cfg.split, plan.index, n, px)
        profile = {
            "driver": "GTiff",
            "width": n,
            "height": n,
            "crs": CRS,
            "transform": Affine(px, 0.0, x0, 0.0, -px, y0),  # rasterio from_origin(x0, y0, px, px)
            "compress": "lzw",
        }
        with rasterio.open(staging / RGB_DIR / f"{plan.tile_id}.tif", "w", count=4, dtype="uint8", **profile) as f:
            f.write(np.concatenate([tile.rgb, tile.alpha[None]]))
            f.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
        with rasterio.open(staging / LABEL_DIR / f"{plan.tile_id}.tif", "w", count=1, dtype="uint8", **profile) as f:
            f.write(tile.label_exact[None])
        if tile.extra is not None:
            path = staging / EXTRA_DIR / f"{plan.tile_id}.tif"
            with rasterio.open(path, "w", count=tile.extra.shape[0], dtype="float32", **profile) as f:
                f.write(tile.extra)
                for b, name in enumerate(cfg.synthetic_settings.extra_channels, start=1):
                    f.set_band_description(b, name)
        lon, lat = mercator_to_lonlat(x0 + n * px / 2, y0 - n * px / 2)
        positive = plan.kind == "positive"
        counts["n_positive"] += positive
        counts["n_full_nodata"] += plan.kind == "full_nodata"
        rows.append(
            {
                "Tile_id": plan.tile_id,
                "centroid_lat": f"{lat:.6f}",
                "centroid_lon": f"{lon:.6f}",
                "TrainClass": "positive" if positive else "negative",
                "RegionName": plan.region,
                "UIDs": ";".join(f"{plan.tile_id}-rts{k}" for k in range(tile.n_objects)) if positive else "",
            }
        )
    return rows


def _write_yaml(path: Path, data: dict[str, Any]) -> None:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))


# --------------------------------------------------------------------------------------------- reading the root


@dataclass(frozen=True)
class TileEntry:
    """One row of metadata.csv selected for ingestion."""

    tile_id: str
    region: str
    positive: bool
    n_uids: int
    row: int  # 0-based data row in metadata.csv (stored as source_index)


@dataclass(frozen=True)
class DerivedSplitFiles:
    """Where a split derived for a root without splits.yaml is written (never into the data root, an input):
    the split itself and its summary (:class:`~rtscore.data.splits.SplitResult` as JSON)."""

    splits_yaml: Path
    summary_json: Path

    @classmethod
    def beside(cls, store: Path) -> DerivedSplitFiles:
        """Next to an output store (``rts generate`` outside a run): ``splits.yaml``, ``splits_summary.json``."""
        return cls(store.parent / SPLITS_YAML, store.parent / SPLITS_SUMMARY_JSON)


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
    """The rows of metadata.csv, checked for the required columns and unique tile ids."""
    path = root / METADATA_CSV
    if not path.is_file():
        raise GeotiffError(f"{path} not found (the data root needs metadata.csv)")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in METADATA_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise GeotiffError(f"{path}: missing columns {missing}; expected {list(METADATA_COLUMNS)}")
        rows = [{k: (v or "").strip() for k, v in r.items() if k is not None} for r in reader]
    ids = [r["Tile_id"] for r in rows]
    dupes = sorted({t for t in ids if ids.count(t) > 1})
    if dupes:
        raise GeotiffError(f"{path}: repeated Tile_id {dupes[:_MAX_LISTED]}")
    bad = [(r["Tile_id"], r["TrainClass"]) for r in rows if r["TrainClass"] not in ("positive", "negative")]
    if bad:
        raise GeotiffError(f"{path}: TrainClass must be positive or negative; got {bad[:_MAX_LISTED]}")
    return rows


def _tile_files(root: Path, tile_id: str, with_extra: bool) -> dict[str, Path]:
    """The tile's files. Labels: the raster ``labels/<id>.tif``, else the first polygon file of
    ``labels/<id>`` + LABEL_POLYGON_SUFFIXES that exists (the raster's path when there is none: reported missing)."""
    labels = root / LABEL_DIR / f"{tile_id}.tif"
    if not labels.is_file():
        labels = next((p for s in LABEL_POLYGON_SUFFIXES if (p := labels.with_suffix(s)).is_file()), labels)
    files = {"rgb": root / RGB_DIR / f"{tile_id}.tif", "labels": labels}
    if with_extra:
        files["extra"] = root / EXTRA_DIR / f"{tile_id}.tif"
    return files


def derive_root_splits(root: Path, *, rules: SplitsConfig | None = None, seed: int = 0) -> SplitResult | None:
    """None when the root has splits.yaml; else a region-level split derived from metadata.csv with the rules of
    DATA_LAYOUT.md (`rtscore.data.splits`; thresholds from ``rules``, the pipeline config's `splits` section,
    defaults when None), each of its warnings logged (``logging.warning``: the console of ``rts``)."""
    if (root / SPLITS_YAML).is_file():
        return None
    rules = rules or SplitsConfig()
    try:
        result = derive_splits(
            read_metadata(root),
            min_test_positives=rules.min_test_positives,
            min_val_regions=rules.min_val_regions,
            seed=seed,
        )
    except SplitError as err:
        raise GeotiffError(f"{root}: no {SPLITS_YAML}, and none can be derived: {err}") from None
    for warning in result.warnings:
        _log.warning(f"split derived for {root} (no {SPLITS_YAML}): {warning}")
    return result.model_copy(update={"derived_from": str(root)})


def ensure_splits(root: Path, *, rules: SplitsConfig | None = None, seed: int = 0) -> dict[str, list[str]]:
    """The root's splits: its splits.yaml, else the split :func:`derive_root_splits` derives (written nowhere)."""
    derived = derive_root_splits(root, rules=rules, seed=seed)
    return read_splits(root) if derived is None else derived.splits


def write_derived_split(result: SplitResult, to: DerivedSplitFiles) -> None:
    """A derived split as ``splits.yaml`` and its summary as JSON (each atomically), at ``to``: never the data
    root, which is an input."""
    import yaml

    atomic_write_text(to.summary_json, result.model_dump_json(indent=2))
    atomic_write_text(to.splits_yaml, yaml.safe_dump(result.splits, sort_keys=False))


def select_tiles(
    root: Path,
    split: str,
    *,
    with_extra: bool,
    rules: SplitsConfig | None = None,
    splits: dict[str, list[str]] | None = None,
) -> list[TileEntry]:
    """The tiles of ``split`` (its regions in splits.yaml x RegionName), after checking that every region of
    metadata.csv is in a split and every tile has its files.

    ``splits``: the root's splits when the caller has them already; else :func:`ensure_splits` (with ``rules``).
    """
    splits = ensure_splits(root, rules=rules) if splits is None else splits
    if split not in splits:
        raise GeotiffError(f"{root / SPLITS_YAML}: no split {split!r} (has {sorted(splits)})")
    rows = read_metadata(root)
    strays = unassigned_regions(splits, (r["RegionName"] for r in rows))
    if strays:
        raise GeotiffError(
            f"{root / METADATA_CSV}: {len(strays)} RegionName(s) in no split of {root / SPLITS_YAML}: "
            f"{', '.join(strays[:_MAX_LISTED])}; every region goes to exactly one split (names match exactly)"
        )
    missing = [str(p) for r in rows for p in _tile_files(root, r["Tile_id"], with_extra).values() if not p.is_file()]
    if missing:
        more = f" (and {len(missing) - _MAX_LISTED} more)" if len(missing) > _MAX_LISTED else ""
        raise GeotiffError(f"{len(missing)} tile files of {METADATA_CSV} are missing: {missing[:_MAX_LISTED]}{more}")
    regions = set(splits[split])
    entries = [
        TileEntry(
            tile_id=r["Tile_id"],
            region=r["RegionName"],
            positive=r["TrainClass"] == "positive",
            n_uids=len([u for u in r["UIDs"].split(";") if u.strip()]),
            row=i,
        )
        for i, r in enumerate(rows)
        if r["RegionName"] in regions
    ]
    if not entries:
        raise GeotiffError(f"no tile of {root / METADATA_CSV} is in a region of split {split!r}: {sorted(regions)}")
    return entries


# --------------------------------------------------------------------------------------------- checking the tiles


@dataclass(frozen=True)
class CheckedTiles:
    """What checking a split's tiles established: the contract they all meet (CRS, the data's pixel size) and
    each tile's ground pixel area."""

    contract: RasterContract
    pixel_area_m2: dict[str, float]


@dataclass(frozen=True)
class _TileFacts:
    pixel_size: tuple[float, float]  # |a|, |e| in CRS units
    pixel_area_m2: float


def check_tiles(
    root: Path, entries: list[TileEntry], tile_size: int, binding: InputBinding, contract: RasterContract
) -> CheckedTiles:
    """Check every file of every tile against ``contract`` before anything is written.

    Each tile: its RGB (+ EXTRA) raster through :func:`~rtscore.data.bands.open_checked` (CRS, bands, dtypes,
    EXTRA on the RGB grid, non-finite EXTRA values), its size, its label (a raster on the RGB grid with values in
    {0, 1, 255}, or polygons reprojected to the tile's CRS), and a positive tile's label must hold RTS pixels.
    Then the pixel sizes: all within ``contract.pixel_size_tolerance`` of the contract's, or (None) of their
    median, which the returned contract records.

    Raises:
        GeotiffError: listing every problem found (up to 20), each naming the tile and the file.
    """
    problems: list[str] = []
    facts: dict[str, _TileFacts] = {}
    for e in entries:
        found = _check_tile(root, e, tile_size, binding, contract)
        if isinstance(found, list):
            problems += found
        else:
            facts[e.tile_id] = found
        if len(problems) >= _MAX_LISTED:
            break
    if not problems:
        contract, problems = _agreed_pixel_size(root, facts, contract, bool(binding.extra_bands))
    if problems:
        raise GeotiffError(f"{len(problems)} problem(s) in {root}:\n  " + "\n  ".join(problems[:_MAX_LISTED]))
    return CheckedTiles(contract, {t: f.pixel_area_m2 for t, f in facts.items()})


def _check_tile(
    root: Path, e: TileEntry, tile_size: int, binding: InputBinding, contract: RasterContract
) -> _TileFacts | list[str]:
    """The facts of one tile, or its problems (each naming the tile and the file)."""
    files = _tile_files(root, e.tile_id, bool(binding.extra_bands))
    try:
        with open_checked(contract, binding, files["rgb"], files.get("extra")) as src:
            if (src.height, src.width) != (tile_size, tile_size):
                got = f"{src.height}x{src.width}"
                return [f"tile {e.tile_id} ({files['rgb']}): size must be {tile_size}x{tile_size}; got {got}"]
            label, problem = _read_label(files["labels"], src, e)
            if problem is not None:
                return [problem]
            where = f"tile {e.tile_id} ({files['labels']})"
            if e.positive and not np.isin(label, (1, IGNORE_INDEX)).any():
                return [_empty_positive(where)]
            t = src.src.transform
            area = ground_pixel_area_m2(src.src.crs, t, src.height, src.width, str(files["rgb"]))
            return _TileFacts((abs(t.a), abs(t.e)), area)
    except (RasterContractError, GroundSizeError) as err:
        return [f"tile {e.tile_id}: {err}"]


def _empty_positive(where: str) -> str:
    """A positive tile whose label holds no RTS (1) and no partial RTS (255): the metadata and the label disagree.
    A tile whose RTS are all cut by its edge (only 255) is a real positive tile and is accepted."""
    return (
        f"{where}: TrainClass is positive in {METADATA_CSV}, but the label has no RTS pixel (1 or partial 255); "
        "polygons in another CRS than declared, a label of another tile or a shifted grid give this: check the "
        "label, or make the tile negative"
    )


def _read_label(path: Path, src: CheckedRaster, e: TileEntry) -> tuple[np.ndarray, str | None]:
    """The tile's label on the RGB raster's grid: a label raster (checked: one uint8 band, on the grid, values in
    {0, 1, 255}) or polygons reprojected to the tile's CRS and rasterised; else the problem, naming the file."""
    import rasterio

    where = f"tile {e.tile_id} ({path})"
    empty = np.zeros((0, 0), np.uint8)
    if path.suffix.lower() in LABEL_POLYGON_SUFFIXES:
        try:
            features = read_label_polygons(path, src.src.crs)
        except LabelPolygonError as err:
            return empty, f"tile {e.tile_id}: {err}"
        return rasterize_labels(features, src.src.transform, src.width), None
    with rasterio.open(path) as f:
        if f.count != 1 or f.dtypes[0] != "uint8":
            return empty, f"{where}: labels need 1 uint8 band; got {f.count} band(s) {sorted(set(f.dtypes))}"
        if (f.height, f.width) != (src.height, src.width):
            return empty, f"{where}: size must be {src.height}x{src.width} (its RGB raster's); got {f.height}x{f.width}"
        if not same_grid(src.src, f):
            return empty, (
                f"{where}: not on the grid of {src.path} (CRS {f.crs} vs {src.src.crs}, transform "
                f"{tuple(f.transform)[:6]} vs {tuple(src.src.transform)[:6]}): labels would be shifted"
            )
        label = f.read(1)
    return label, _label_problem(label, where)


def _agreed_pixel_size(
    root: Path, facts: dict[str, _TileFacts], contract: RasterContract, with_extra: bool
) -> tuple[RasterContract, list[str]]:
    """The contract with the tiles' pixel size (the median, when the config gives none) and the tiles beyond the
    tolerance of it (open_checked already refused them against a configured pixel size)."""
    if contract.pixel_size is not None or not facts:
        return contract, []
    size = float(np.median([s for f in facts.values() for s in f.pixel_size]))
    tol = contract.pixel_size_tolerance
    outliers = [
        f"tile {t} ({root / RGB_DIR / f'{t}.tif'}): pixel size {f.pixel_size[0]:.6g} x {f.pixel_size[1]:.6g}, "
        f"the split's median is {size:.6g} (tolerance {tol:.0%})"
        for t, f in facts.items()
        if any(abs(s / size - 1.0) > tol for s in f.pixel_size)
    ]
    if outliers:
        outliers.append(
            "every tile of a split must share one pixel size (the model learns object sizes in pixels): resample "
            "the outliers (rts tile), or set geotiff.pixel_size"
        )
    return contract.model_copy(update={"pixel_size": size}), outliers


def _label_problem(label: np.ndarray, where: str) -> str | None:
    bad = np.setdiff1d(np.unique(label), LABEL_VALUES)
    return f"{where}: label values {bad.tolist()} outside {{0, 1, 255}}" if bad.size else None


# --------------------------------------------------------------------------------------------- ingestion


class GeotiffProducer:
    """Reads the selected tiles of a data root lazily through :func:`~rtscore.data.bands.open_checked` (the
    contract and NoData rule of predict); picklable (paths and small records only)."""

    def __init__(
        self,
        root: str | Path,
        entries: list[TileEntry],
        binding: InputBinding,
        batch_size: int = 16,
        *,
        contract: RasterContract | None = None,
        pixel_area_m2: dict[str, float] | None = None,
    ) -> None:
        self.root = Path(root)
        self.entries = list(entries)
        self.binding = binding
        self.batch_size = batch_size
        self.contract = contract or RasterContract(crs=CRS)
        self.pixel_area_m2 = dict(pixel_area_m2 or {})

    def read(self, entry: TileEntry) -> tuple[RawTile, int]:
        """One tile and its kind code (full NoData when no pixel is valid, else the TrainClass)."""
        files = _tile_files(self.root, entry.tile_id, bool(self.binding.extra_bands))
        # Checked already (check_tiles): the EXTRA scan for non-finite values is not repeated.
        with open_checked(self.contract, self.binding, files["rgb"], files.get("extra"), check_finite=False) as src:
            rgb, extra, valid = src.read()
            label, problem = _read_label(files["labels"], src, entry)
            area = self.pixel_area_m2.get(entry.tile_id)
            if area is None:
                t = src.src.transform
                area = ground_pixel_area_m2(src.src.crs, t, src.height, src.width, str(files["rgb"]))
        if problem:
            raise GeotiffError(problem)
        alpha = np.where(valid, 255, 0).astype(np.uint8)
        code = KIND_CODES["full_nodata" if not valid.any() else "positive" if entry.positive else "negative"]
        tile = RawTile(
            tile_id=entry.tile_id,
            region=entry.region,
            rgb=np.ascontiguousarray(rgb),
            alpha=alpha,
            label_exact=label,
            extra=None if extra is None else np.ascontiguousarray(extra, np.float32),
            n_objects=entry.n_uids,
            source_index=entry.row,
            pixel_area_m2=area,
        )
        return tile, code

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        for a in range(start, stop, self.batch_size):
            read = [self.read(e) for e in self.entries[a : min(a + self.batch_size, stop)]]
            yield [t for t, _ in read], [c for _, c in read]


def stage_data_root(uri: str, split: str, cache_dir: Path | None = None) -> Path:
    """A local copy of what ingesting ``split`` needs from a ``gs://`` data root: metadata.csv, splits.yaml (when
    there is one) and the files of the split's tiles, downloaded in parallel into the cache (files already
    there with the object's size are kept). Without splits.yaml every tile is fetched (the split is derived
    locally, next to the copy)."""
    bucket, prefix = parse_gs_uri(uri)
    store = GcsStore(bucket, prefix, RetryPolicy.from_env(), workers=transfer_workers())
    local = (cache_dir or default_cache_dir()) / "gcs-data" / bucket / prefix
    local.mkdir(parents=True, exist_ok=True)
    for name in (METADATA_CSV, SPLITS_YAML):
        got = store.read(name)
        if got is None:
            if name == METADATA_CSV:
                raise GeotiffError(f"{uri}/{name} not found (the data root needs metadata.csv)")
            continue
        (local / name).write_bytes(got[0])
    wanted: set[str] | None = None
    if (local / SPLITS_YAML).is_file():
        regions = set(read_splits(local).get(split, []))
        wanted = {r["Tile_id"] for r in read_metadata(local) if r["RegionName"] in regions}
    items = []
    for sub in (RGB_DIR, EXTRA_DIR, LABEL_DIR):
        for rel, blob in store.list_under(sub).items():
            target = local / sub / rel
            if wanted is not None and Path(rel).stem not in wanted:
                continue
            if not (target.is_file() and target.stat().st_size == blob.size):
                items.append((blob, f"{sub}/{rel}", target))
    store.download_many(items)
    return local


def ingest_geotiffs(
    cfg: GenerationConfig,
    data_root: str | Path,
    output: str | Path,
    *,
    overwrite: bool = False,
    restart: bool = False,
    progress: bool = False,
    num_workers: int | None = None,
    split_rules: SplitsConfig | None = None,
    derived_splits: DerivedSplitFiles | None = None,
) -> dict[str, Any]:
    """`rts generate --source geotiff`: the tiles of ``cfg.split`` of a GeoTIFF data root as a published tile store.

    Tiles: the rows of metadata.csv whose RegionName is a region of ``cfg.split`` in splits.yaml, in file order.
    Every file is checked against the raster contract of ``cfg.geotiff`` (:func:`check_tiles`) before any store
    is staged; the store is published atomically by :func:`write_store` and records the contract
    (``raster_contract``, with the data's pixel size) and each tile's ground pixel area (``meta/pixel_area_m2``).
    The store holds the exact labels only (no noisy variant). ``cfg`` gives the split, tile size, scale, the input
    binding (which EXTRA band each stored channel is read from; recorded in the store as ``input_binding``), the
    raster contract (``geotiff``), store layout and workers.

    Args:
        cfg: Generation config (its ``synthetic`` counts and regions are not used).
        data_root: Root of the layout (local directory).
        output: Store to write.
        overwrite: Replace an existing store.
        restart: Discard an interrupted ingestion instead of resuming it.
        progress: Show a progress bar.
        num_workers: Worker processes (default ``processing.num_workers``).
        split_rules: The pipeline config's `splits` section: the rules a split derived for a root without
            splits.yaml must meet (None: its defaults).
        derived_splits: Where such a derived split and its summary are written (a run's
            ``RunLayout.DERIVED_SPLITS``); None: beside ``output``. Never into the data root.

    Returns:
        The published store's attributes.
    """
    if not str(data_root).startswith("gs://") and not Path(data_root).is_dir():
        raise GeotiffError(f"data root {data_root} is not a directory")
    try:  # before anything is read: what the root holds now keys the staged shards
        identity = source_identity(data_root)
    except SourceError as err:
        raise GeotiffError(f"data root {data_root}: {err}") from None
    root = stage_data_root(str(data_root), cfg.split) if str(data_root).startswith("gs://") else Path(data_root)
    source = cfg.geotiff or GeotiffSourceConfig(data_root=str(root))
    try:
        projected_crs(source.crs, "geotiff.crs")
    except GroundSizeError as err:
        raise GeotiffError(str(err)) from None
    binding = cfg.input_binding
    extra = binding.extra_names
    derived = derive_root_splits(root, rules=split_rules)
    splits = read_splits(root) if derived is None else derived.splits
    entries = select_tiles(root, cfg.split, with_extra=bool(extra), splits=splits)
    checked = check_tiles(root, entries, cfg.tile_size, binding, source.contract())
    layout = StoreLayout(
        n_tiles=len(entries),
        tile_size=cfg.tile_size,
        extra_channel_names=tuple(extra),
        shard_tiles=cfg.store.shard_tiles,
        compressor=cfg.store.compressor,
        clevel=cfg.store.clevel,
        write_noisy=False,
    )
    attrs = base_attrs(
        split=cfg.split,
        source="geotiff",
        tile_size=cfg.tile_size,
        extra=extra,
        mask_types=["exact"],
        dataset_version=cfg.dataset_version,
        scale=cfg.scale,
        pixel_size_m=checked.contract.pixel_size,
    )
    fingerprint = {"config": config_hash(cfg), "data_root": str(root.resolve()), "tiles": [e.tile_id for e in entries]}
    store_hash = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    resume = {"store": store_hash, "root": identity.digest, "code": closure_hash(__name__)}
    attrs.update(
        {
            "config": cfg.model_dump(mode="json"),
            "config_hash": store_hash,
            "data_root": str(root.resolve()),
            "input_binding": binding.model_dump(mode="json"),
            "raster_contract": checked.contract.model_dump(mode="json"),
            "shard_tiles": cfg.store.shard_tiles,
        }
    )
    batch = cfg.geotiff.batch_size if cfg.geotiff else cfg.synthetic.generation_batch_size if cfg.synthetic else 16
    producer = GeotiffProducer(
        root, entries, binding, batch, contract=checked.contract, pixel_area_m2=checked.pixel_area_m2
    )
    published = write_store(
        producer,
        layout,
        Path(output),
        attrs,
        num_workers=num_workers or cfg.processing.num_workers,
        overwrite=overwrite,
        restart=restart,
        progress=progress,
        resume_key=hashlib.sha256(json.dumps(resume, sort_keys=True).encode()).hexdigest(),
    )
    if derived is not None:  # once the store is out: a refused ingestion leaves nothing behind
        to = derived_splits or DerivedSplitFiles.beside(Path(output))
        write_derived_split(derived, to)
        _log.info(f"{root} has no {SPLITS_YAML}: the split derived for it is in {to.splits_yaml} ({to.summary_json})")
    return published
