"""The writing side of the tile store (:mod:`rtscore.data.store.format`): a resumable staging store written shard by
shard (one :class:`ShardWriter` per shard, a progress marker once a shard is complete), then finalized: summary
attributes, checks, and an atomic publish under the final name."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rtscore.data.store.attrs import Prevalence, StoreAttrs, StoreCounts
from rtscore.data.store.format import (
    ATTRS_KEY,
    BOUNDS,
    EXTRA,
    INVENTORY_FIELDS,
    META_FIELDS,
    PIXELS,
    PROGRESS_DIR,
    StoreLayout,
    TileStoreError,
    pixel_arrays,
    read_array,
    zarr_array,
    zarr_group,
)
from rtscore.data.tiles import (
    IGNORE_INDEX,
    KIND_CODES,
    LABEL_VALUES,
    RawTile,
    TileInventory,
    pixel_kind,
    with_nodata_cleared,
)
from rtscore.storage import publish_dir

if TYPE_CHECKING:
    pass


def _compressors(layout: StoreLayout, typesize: int) -> list[Any]:
    """Blosc (unless ``none``), then a CRC-32C of every stored chunk: a flipped bit in a shard is caught on
    read instead of decoding to wrong pixels.

    Shuffle: byte shuffle for float32 EXTRA bands. For uint8 planes format 2 does not shuffle: on the
    synthetic 512 px tiles bitshuffle made zstd chunks ~7% larger and decoding slower (bench/README.md);
    format 1 kept bitshuffle (kept for writing that layout exactly)."""
    from zarr.codecs import BloscCodec, Crc32cCodec

    if layout.compressor == "none":
        return [Crc32cCodec()]
    shuffle: Literal["bitshuffle", "shuffle", "noshuffle"] = "shuffle"
    if typesize == 1:
        shuffle = "noshuffle" if layout.format_version >= 2 else "bitshuffle"
    return [BloscCodec(cname=layout.compressor, clevel=layout.clevel, shuffle=shuffle), Crc32cCodec()]


def _meta_compressors(dtype: Any) -> list[Any]:
    """Per-tile metadata chunks carry a CRC-32C too (zstd first for the numeric ones, as zarr's default)."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return [Crc32cCodec()] if dtype == "str" else [ZstdCodec(level=0), Crc32cCodec()]


def create_staging(path: Path, layout: StoreLayout, staging_attrs: dict[str, Any]) -> None:
    """Create an empty store of fixed size; shards are filled later by any process that owns them."""
    import zarr

    n, s, h = layout.n_tiles, layout.shard_tiles, layout.tile_size
    group = zarr.open_group(str(path), mode="w", zarr_format=3)

    def pixels(name: str, channels: int | None, dtype: Any, fill: int | float, **attrs: Any) -> None:
        # One inner chunk per tile (all its planes), ``shard_tiles`` tiles per shard file.
        shape = (n, h, h) if channels is None else (n, channels, h, h)
        chunk = (1, h, h) if channels is None else (1, channels, h, h)
        shard = (s, *chunk[1:])
        group.create_array(
            name,
            shape=shape,
            chunks=chunk,
            shards=shard,
            dtype=dtype,
            fill_value=fill,
            compressors=_compressors(layout, np.dtype(dtype).itemsize),
            attributes=attrs,
        )

    if layout.format_version >= 2:
        # Fill 0: an absent chunk reads as all-NoData (alpha 0), which the reader's metadata check catches.
        pixels(PIXELS, len(layout.planes), np.uint8, 0, planes=layout.planes)
    else:
        pixels("images", 3, np.uint8, 0)
        pixels("alpha", None, np.uint8, 0)
        pixels("labels_exact", None, np.uint8, IGNORE_INDEX)
        if layout.write_noisy:
            pixels("labels_noisy", None, np.uint8, IGNORE_INDEX)
    if layout.extra_channel_names:
        pixels(EXTRA, len(layout.extra_channel_names), np.float32, 0.0)
    meta = group.require_group("meta")
    fields = {**META_FIELDS, **(INVENTORY_FIELDS if layout.write_inventory else {})}
    for name, dtype in fields.items():
        dt = np.dtypes.StringDType() if dtype == "str" else dtype
        # One metadata chunk per shard so that shard owners never share a chunk.
        meta.create_array(name, shape=(n,), chunks=(s,), dtype=dt, compressors=_meta_compressors(dtype))
    if layout.write_bounds:  # NaN until a shard owner writes its tiles' footprints
        meta.create_array(
            BOUNDS,
            shape=(n, 4),
            chunks=(s, 4),
            dtype=np.float64,
            fill_value=np.nan,
            compressors=_meta_compressors(np.float64),
        )
    group.attrs.update({"rtscore_staging": {**staging_attrs, "format_version": layout.format_version}})
    (path / PROGRESS_DIR).mkdir(exist_ok=True)


def _tile_meta(tile: RawTile) -> dict[str, Any]:
    """A tile's metadata row, from its pixels as stored (NoData cleared: :func:`with_nodata_cleared`), so that the
    flags and counts agree with the pixels: ``kind`` is :func:`pixel_kind`'s and ``is_positive`` is
    ``kind == positive`` (a full-NoData tile is never positive)."""
    exact = tile.label_exact
    noisy = tile.label_noisy if tile.label_noisy is not None else exact
    return {
        "tile_id": tile.tile_id,
        "region": tile.region,
        "kind": KIND_CODES[pixel_kind(tile.alpha, exact)],
        "is_positive": bool((exact == 1).any()),
        "n_positive_px": int((exact == 1).sum()),
        "n_positive_px_noisy": int((noisy == 1).sum()),
        "n_ignore_px": int((exact == IGNORE_INDEX).sum()),
        "n_nodata_px": int((tile.alpha == 0).sum()),
        "n_objects": tile.n_objects,
        "source_index": tile.source_index,
        "rotation": tile.rotation,
        "pixel_area_m2": tile.pixel_area_m2,
    }


def check_tile(tile: RawTile, layout: StoreLayout) -> None:
    """Reject a tile whose shapes, dtypes or label values do not fit the store."""
    h = layout.tile_size
    expected: dict[str, tuple[tuple[int, ...], type[np.generic]]] = {
        "rgb": ((3, h, h), np.uint8),
        "alpha": ((h, h), np.uint8),
        "label_exact": ((h, h), np.uint8),
    }
    if layout.write_noisy:
        expected["label_noisy"] = ((h, h), np.uint8)
    if layout.extra_channel_names:
        expected["extra"] = ((len(layout.extra_channel_names), h, h), np.float32)
    for name, (shape, dtype) in expected.items():
        arr = getattr(tile, name)
        if arr is None or arr.shape != shape or arr.dtype != dtype:
            found = None if arr is None else f"{arr.shape} {arr.dtype}"
            raise TileStoreError(f"tile {tile.tile_id}: {name} must be {shape} {np.dtype(dtype)}; got {found}")
    area = tile.pixel_area_m2
    if not (isinstance(area, float | int) and math.isfinite(area) and area > 0):
        raise TileStoreError(f"tile {tile.tile_id}: pixel_area_m2 must be a positive ground area (m²); got {area!r}")
    if layout.write_inventory:
        inv = tile.inventory
        if inv is None:
            raise TileStoreError(
                f"tile {tile.tile_id}: the store records each tile's inventory ids; this tile has none"
            )
        if not (math.isnan(inv.latitude) or -90.0 <= inv.latitude <= 90.0):
            raise TileStoreError(
                f"tile {tile.tile_id}: latitude must be in [-90, 90] °N (NaN: unknown); got {inv.latitude}"
            )
    if layout.write_bounds:
        b = tile.bounds
        if b is None or len(b) != 4 or not all(math.isfinite(v) for v in b) or not (b[0] < b[2] and b[1] < b[3]):
            raise TileStoreError(
                f"tile {tile.tile_id}: bounds must be (minx, miny, maxx, maxy), finite, min < max; got {b!r}"
            )
    for name in ("label_exact", "label_noisy"):
        arr = getattr(tile, name)
        if arr is not None:
            bad = np.setdiff1d(np.unique(arr), LABEL_VALUES)
            if bad.size:
                raise TileStoreError(f"tile {tile.tile_id}: {name} has values {bad.tolist()} outside {{0, 1, 255}}")


class ShardWriter:
    """Buffers the tiles of one shard and writes the shard whole (never a partial shard)."""

    def __init__(self, path: Path, layout: StoreLayout, shard: int) -> None:
        self.path, self.layout, self.shard = path, layout, shard
        self.start, self.stop = layout.shard_range(shard)
        n, h = self.stop - self.start, layout.tile_size
        self.pixels: np.ndarray | None = None
        if layout.format_version >= 2:  # one buffer; the named planes below are views of it
            self.pixels = np.zeros((n, len(layout.planes), h, h), np.uint8)
            self.images, self.alpha, self.labels_exact = self.pixels[:, :3], self.pixels[:, 3], self.pixels[:, 4]
            self.labels_noisy = self.pixels[:, 5] if layout.write_noisy else None
        else:
            self.images = np.zeros((n, 3, h, h), np.uint8)
            self.alpha = np.zeros((n, h, h), np.uint8)
            self.labels_exact = np.zeros((n, h, h), np.uint8)
            self.labels_noisy = np.zeros((n, h, h), np.uint8) if layout.write_noisy else None
        e = len(layout.extra_channel_names)
        self.extra = np.zeros((n, e, h, h), np.float32) if e else None
        self.meta: list[dict[str, Any]] = []
        self.bounds: list[tuple[float, float, float, float]] = []
        self.inventory: list[TileInventory] = []

    @property
    def full(self) -> bool:
        return len(self.meta) == self.stop - self.start

    def add(self, tiles: Sequence[RawTile], kind_codes: Sequence[int]) -> None:
        """Add a batch (e.g. one generation batch) to the shard buffer.

        Each tile is stored as the format says (:func:`with_nodata_cleared`: NoData pixels hold RGB 0, EXTRA 0,
        label 255) and its metadata is computed from those pixels: the stored ``kind`` is the pixels' (a
        producer's code is its plan, e.g. a GeoTIFF tile's TrainClass, and is not what the store records)."""
        if len(tiles) != len(kind_codes):
            raise TileStoreError(f"shard {self.shard}: {len(tiles)} tiles but {len(kind_codes)} kind codes")
        for tile in tiles:
            if self.full:
                raise TileStoreError(f"shard {self.shard} is full ({self.stop - self.start} tiles)")
            check_tile(tile, self.layout)
            tile = with_nodata_cleared(tile)
            i = len(self.meta)
            self.images[i], self.alpha[i], self.labels_exact[i] = tile.rgb, tile.alpha, tile.label_exact
            if self.labels_noisy is not None:
                assert tile.label_noisy is not None  # check_tile requires it when the store keeps noisy labels
                self.labels_noisy[i] = tile.label_noisy
            if self.extra is not None:
                self.extra[i] = tile.extra
            self.meta.append(_tile_meta(tile))
            if self.layout.write_bounds:
                assert tile.bounds is not None  # check_tile requires it when the store keeps footprints
                self.bounds.append(tile.bounds)
            if self.layout.write_inventory:
                assert tile.inventory is not None  # check_tile requires it when the store keeps inventories
                self.inventory.append(tile.inventory)

    def write(self) -> dict[str, Any]:
        """Write every array's slice of this shard, then the shard's completion marker (last)."""
        import zarr

        if not self.full:
            raise TileStoreError(f"shard {self.shard}: {len(self.meta)} of {self.stop - self.start} tiles buffered")
        group = zarr.open_group(str(self.path), mode="r+")
        sl = slice(self.start, self.stop)
        if self.pixels is not None:
            zarr_array(group, PIXELS)[sl] = self.pixels
        else:
            zarr_array(group, "images")[sl] = self.images
            zarr_array(group, "alpha")[sl] = self.alpha
            zarr_array(group, "labels_exact")[sl] = self.labels_exact
            if self.labels_noisy is not None:
                zarr_array(group, "labels_noisy")[sl] = self.labels_noisy
        if self.extra is not None:
            zarr_array(group, EXTRA)[sl] = self.extra
        meta = zarr_group(group, "meta")
        for name, dtype in META_FIELDS.items():
            values = [m[name] for m in self.meta]
            arr = np.array(values, dtype=np.dtypes.StringDType() if dtype == "str" else dtype)
            zarr_array(meta, name)[sl] = arr
        if self.layout.write_bounds:
            zarr_array(meta, BOUNDS)[sl] = np.asarray(self.bounds, np.float64).reshape(-1, 4)
        if self.layout.write_inventory:
            for name, dtype in INVENTORY_FIELDS.items():
                values = [getattr(inv, name) for inv in self.inventory]
                zarr_array(meta, name)[sl] = np.array(values, np.dtypes.StringDType() if dtype == "str" else dtype)
        summary = {"shard": self.shard, "start": self.start, "stop": self.stop}
        marker = self.path / PROGRESS_DIR / f"shard_{self.shard:06d}.json"
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary))
        tmp.replace(marker)
        return summary


def completed_shards(path: Path) -> set[int]:
    progress = path / PROGRESS_DIR
    if not progress.is_dir():
        return set()
    return {int(p.stem.split("_")[1]) for p in progress.glob("shard_*.json")}


def staging_attrs(path: Path) -> dict[str, Any] | None:
    """The attributes a staging store was created with, or None if there is no usable one."""
    meta = path / "zarr.json"
    if not meta.is_file():
        return None
    try:
        return json.loads(meta.read_text()).get("attributes", {}).get("rtscore_staging")
    except ValueError:
        return None


def summarize(path: Path) -> tuple[StoreCounts, Prevalence]:
    """Counts and prevalence from the metadata arrays (no pixel chunk is read)."""
    import zarr

    meta = zarr_group(zarr.open_group(str(path), mode="r"), "meta")
    kind = read_array(meta, "kind")
    n_pos = read_array(meta, "n_positive_px").astype(np.int64)
    n_pos_noisy = read_array(meta, "n_positive_px_noisy").astype(np.int64)
    n_ign = read_array(meta, "n_ignore_px").astype(np.int64)
    h = zarr_array(zarr.open_group(str(path), mode="r"), pixel_arrays(path)[0]).shape[-1]
    labelled = np.maximum(h * h - n_ign, 0).sum()
    regions = read_array(meta, "region")
    counts = StoreCounts(  # a partition: every tile is of exactly one kind (from its stored pixels, _tile_meta)
        n_tiles=int(kind.size),
        n_positive=int((kind == KIND_CODES["positive"]).sum()),
        n_negative=int((kind == KIND_CODES["negative"]).sum()),
        n_full_nodata=int((kind == KIND_CODES["full_nodata"]).sum()),
        n_regions=len(set(regions.tolist())),
        regions=sorted(set(regions.tolist())),
    )
    prevalence = Prevalence(
        exact=float(n_pos.sum() / labelled) if labelled else 0.0,
        noisy=float(n_pos_noisy.sum() / labelled) if labelled else 0.0,
    )
    return counts, prevalence


def finalize(staging: Path, final: Path, store_attrs: dict[str, Any]) -> StoreAttrs:
    """Check all shards are done, write the store's attributes and publish it atomically; the attributes, typed."""
    import zarr

    attrs = staging_attrs(staging) or {}
    n_shards = int(attrs["n_shards"])
    missing = sorted(set(range(n_shards)) - completed_shards(staging))
    if missing:
        raise TileStoreError(f"store {staging}: shards {missing[:10]} were never completed; cannot publish")
    counts, prevalence = summarize(staging)
    full_attrs = {**store_attrs, "counts": counts.model_dump(mode="json"), "prevalence": prevalence.model_dump()}
    typed = StoreAttrs.model_validate(full_attrs)  # before anything is published: a document it describes
    group = zarr.open_group(str(staging), mode="r+")
    group.attrs.put({ATTRS_KEY: full_attrs})
    shutil.rmtree(staging / PROGRESS_DIR)
    publish_dir(staging, final)
    return typed


# --------------------------------------------------------------------------- reader
