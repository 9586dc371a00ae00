"""Per-tile GeoTIFF datasets (the real layout of /work/shared/DATA_LAYOUT.md): write synthetic ones, ingest any.

Layout under a data root::

    PLANET-RGB/<tile_id>.tif   tile_size^2, EPSG:3857, 3 bands R,G,B uint8 (+ optional alpha band 4)
    EXTRA/<tile_id>.tif        N float32 auxiliary bands, same grid (needed only when extra channels are selected)
    labels/<tile_id>.tif       1 band uint8 in {0 background, 1 RTS, 255 ignore}
    metadata.csv               Tile_id, centroid_lat, centroid_lon, TrainClass, RegionName, UIDs
    splits.yaml                split -> [region names]

Channel rule: the generation config's input binding (``geotiff.extra_channels``: ``{name, band}`` entries, or the
synthetic channels by position) says which band of the EXTRA file each stored channel is read from
(`rtscore.config.binding`); the store records that binding, and stats, the package, predict and drift read it.
Bands not bound are not read. NoData comes from the alpha band only (alpha 0); pixels (0, 0, 0) with alpha 255 are
valid; an RGB file without alpha is all valid.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import shutil
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.base import config_hash
from rtscore.config.binding import InputBinding
from rtscore.config.generation import GenerationConfig
from rtscore.config.pipeline import SplitsConfig
from rtscore.data.bands import read_bound_bands, unreadable_extra
from rtscore.data.splits import SplitError, derive_splits
from rtscore.data.store import StoreLayout, TileStoreError
from rtscore.data.synthetic import PIXEL_SIZE_M, plan_tiles, render_tile
from rtscore.data.tiles import KIND_CODES, LABEL_VALUES, RawTile
from rtscore.data.vector_labels import LabelPolygonError, rasterize_labels, read_label_polygons
from rtscore.data.writer import base_attrs, write_store
from rtscore.storage import atomic_write_text, default_cache_dir
from rtscore.storage.gcs import GcsStore, RetryPolicy, parse_gs_uri, transfer_workers

RGB_DIR, EXTRA_DIR, LABEL_DIR = "PLANET-RGB", "EXTRA", "labels"
METADATA_CSV, SPLITS_YAML = "metadata.csv", "splits.yaml"
METADATA_COLUMNS = ("Tile_id", "centroid_lat", "centroid_lon", "TrainClass", "RegionName", "UIDs")
CRS = "EPSG:3857"
EARTH_RADIUS_M = 6378137.0  # Web Mercator sphere
GRID_LAT_DEG, GRID_LON_DEG = 70.0, -150.0  # north-west corner of the synthetic tile grid (Arctic Alaska)
GRID_COLUMNS = 64  # synthetic tiles per grid row
_SPLIT_ROW_OFFSET = {"train": 0, "val": 200, "test": 400}  # grid rows: splits never share ground
_MAX_LISTED = 20  # problems listed in one error


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


def read_splits(root: Path) -> dict[str, list[str]]:
    """splits.yaml as ``{split: [regions]}``; a region listed in two splits is an error."""
    import yaml

    path = root / SPLITS_YAML
    if not path.is_file():
        raise GeotiffError(f"{path} not found (the data root needs splits.yaml)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise GeotiffError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise GeotiffError(f"{path}: expected a mapping split -> [region names]")
    seen: dict[str, str] = {}
    for split, regions in data.items():
        for region in regions:
            if region in seen and seen[region] != split:
                raise GeotiffError(
                    f"{path}: region {region!r} is in two splits ({seen[region]} and {split}); "
                    "whole regions go to one split"
                )
            seen[str(region)] = str(split)
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
    """The tile's files; labels are a raster, or (when there is none) RTS polygons `labels/<id>.geojson`."""
    labels = root / LABEL_DIR / f"{tile_id}.tif"
    polygons = labels.with_suffix(".geojson")
    files = {
        "rgb": root / RGB_DIR / f"{tile_id}.tif",
        "labels": polygons if polygons.is_file() and not labels.is_file() else labels,
    }
    if with_extra:
        files["extra"] = root / EXTRA_DIR / f"{tile_id}.tif"
    return files


def ensure_splits(root: Path, *, rules: SplitsConfig | None = None, seed: int = 0) -> dict[str, list[str]]:
    """splits.yaml of the root; when absent, a region-level split is derived from metadata.csv with the rules of
    DATA_LAYOUT.md (`rtscore.data.splits`; thresholds from ``rules``, the pipeline config's `splits` section,
    defaults when None) and written with `splits_summary.md` next to it (atomically)."""
    if (root / SPLITS_YAML).is_file():
        return read_splits(root)
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
    summary = f"# Derived spatial-block split of {root}\n\n" + result.summary()
    atomic_write_text(root / "splits_summary.md", summary)
    import yaml

    atomic_write_text(root / SPLITS_YAML, yaml.safe_dump(result.splits, sort_keys=False))
    return read_splits(root)


def select_tiles(root: Path, split: str, *, with_extra: bool, rules: SplitsConfig | None = None) -> list[TileEntry]:
    """The tiles of ``split`` (its regions in splits.yaml x RegionName), after checking every tile has its files.

    Without splits.yaml the split is derived first (`ensure_splits`, with ``rules``).
    """
    splits = ensure_splits(root, rules=rules)
    if split not in splits:
        raise GeotiffError(f"{root / SPLITS_YAML}: no split {split!r} (has {sorted(splits)})")
    rows = read_metadata(root)
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


def check_tiles(root: Path, entries: list[TileEntry], tile_size: int, binding: InputBinding) -> None:
    """Check headers (CRS, size, band count, dtype) of every file and the label values, before anything is written.

    Raises:
        GeotiffError: listing every problem found (up to 20), each naming the tile and the file.
    """
    import rasterio

    problems: list[str] = []
    expected = {"rgb": ((3, 4), "uint8"), "labels": ((1,), "uint8"), "extra": (None, "float32")}
    for e in entries:
        for kind, path in _tile_files(root, e.tile_id, bool(binding.extra_bands)).items():
            where = f"tile {e.tile_id} ({path})"
            if path.suffix == ".geojson":
                try:
                    read_label_polygons(path)
                except LabelPolygonError as err:
                    problems.append(f"{where}: {err}")
                continue
            with rasterio.open(path) as f:
                crs = f.crs.to_string() if f.crs else None
                if crs != CRS:
                    problems.append(f"{where}: CRS must be {CRS}; got {crs}")
                if (f.height, f.width) != (tile_size, tile_size):
                    problems.append(f"{where}: size must be {tile_size}x{tile_size}; got {f.height}x{f.width}")
                counts, dtype = expected[kind]
                if counts is not None and f.count not in counts:
                    problems.append(f"{where}: {kind} needs {' or '.join(map(str, counts))} bands; got {f.count}")
                beyond = unreadable_extra(binding, f.count) if kind == "extra" else []
                if beyond:
                    problems.append(
                        f"{where}: extra channel band index {max(c.band for c in beyond)} is beyond the file's "
                        f"{f.count} bands (bound: {', '.join(f'{c.name}={c.band}' for c in beyond)})"
                    )
                if any(d != dtype for d in f.dtypes):
                    problems.append(f"{where}: {kind} bands must be {dtype}; got {sorted(set(f.dtypes))}")
                if kind == "labels" and not _problems_for(problems, where) and f.count == 1:
                    problem = _label_problem(f.read(1), where)
                    if problem:
                        problems.append(problem)
        if len(problems) >= _MAX_LISTED:
            break
    if problems:
        raise GeotiffError(f"{len(problems)} problem(s) in {root}:\n  " + "\n  ".join(problems[:_MAX_LISTED]))


def _problems_for(problems: list[str], where: str) -> bool:
    return any(p.startswith(where) for p in problems)


def _label_problem(label: np.ndarray, where: str) -> str | None:
    bad = np.setdiff1d(np.unique(label), LABEL_VALUES)
    return f"{where}: label values {bad.tolist()} outside {{0, 1, 255}}" if bad.size else None


# --------------------------------------------------------------------------------------------- ingestion


class GeotiffProducer:
    """Reads the selected tiles of a data root lazily with rasterio; picklable (paths and small records only)."""

    def __init__(self, root: str | Path, entries: list[TileEntry], binding: InputBinding, batch_size: int = 16) -> None:
        self.root = Path(root)
        self.entries = list(entries)
        self.binding = binding
        self.batch_size = batch_size

    def read(self, entry: TileEntry) -> tuple[RawTile, int]:
        """One tile and its kind code (full NoData when alpha is all 0, else the TrainClass)."""
        import rasterio

        with_extra = bool(self.binding.extra_bands)
        files = _tile_files(self.root, entry.tile_id, with_extra)
        with rasterio.open(files["rgb"]) as f, rasterio.open(files["extra"]) if with_extra else nullcontext() as ex:
            rgb, extra = read_bound_bands(self.binding, f, ex)
            transform = f.transform
            alpha = (
                np.where(f.read(4) > 0, 255, 0).astype(np.uint8)
                if f.count == 4
                else np.full(rgb.shape[1:], 255, np.uint8)
            )
        rgb = np.ascontiguousarray(rgb)
        if files["labels"].suffix == ".geojson":
            label = rasterize_labels(read_label_polygons(files["labels"]), transform, rgb.shape[-1])
        else:
            with rasterio.open(files["labels"]) as f:
                label = f.read(1)
        problem = _label_problem(label, f"tile {entry.tile_id} ({files['labels']})")
        if problem:
            raise GeotiffError(problem)
        if not alpha.any():
            code = KIND_CODES["full_nodata"]
        else:
            code = KIND_CODES["positive" if entry.positive else "negative"]
        tile = RawTile(
            tile_id=entry.tile_id,
            region=entry.region,
            rgb=rgb,
            alpha=alpha,
            label_exact=label,
            extra=extra,
            n_objects=entry.n_uids,
            source_index=entry.row,
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
) -> dict[str, Any]:
    """`rts generate --source geotiff`: the tiles of ``cfg.split`` of a GeoTIFF data root as a published tile store.

    Tiles: the rows of metadata.csv whose RegionName is a region of ``cfg.split`` in splits.yaml, in file order.
    Every file is checked (headers and label values) before any store is staged; the store is published
    atomically by :func:`write_store`. The store holds the exact labels only (no noisy variant). ``cfg`` gives
    the split, tile size, scale, the input binding (which EXTRA band each stored channel is read from; recorded
    in the store as ``input_binding``), store layout and workers.

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

    Returns:
        The published store's attributes.
    """
    root = stage_data_root(str(data_root), cfg.split) if str(data_root).startswith("gs://") else Path(data_root)
    if not root.is_dir():
        raise GeotiffError(f"data root {root} is not a directory")
    binding = cfg.input_binding
    extra = binding.extra_names
    entries = select_tiles(root, cfg.split, with_extra=bool(extra), rules=split_rules)
    check_tiles(root, entries, cfg.tile_size, binding)
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
    )
    fingerprint = {"config": config_hash(cfg), "data_root": str(root.resolve()), "tiles": [e.tile_id for e in entries]}
    attrs.update(
        {
            "config": cfg.model_dump(mode="json"),
            "config_hash": hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest(),
            "data_root": str(root.resolve()),
            "input_binding": binding.model_dump(mode="json"),
            "shard_tiles": cfg.store.shard_tiles,
        }
    )
    batch = cfg.geotiff.batch_size if cfg.geotiff else cfg.synthetic.generation_batch_size if cfg.synthetic else 16
    producer = GeotiffProducer(root, entries, binding, batch)
    return write_store(
        producer,
        layout,
        Path(output),
        attrs,
        num_workers=num_workers or cfg.processing.num_workers,
        overwrite=overwrite,
        restart=restart,
        progress=progress,
    )
