"""The Zarr v3 tile store: shard-aligned writer with resumable staging, and a lazy random-access reader."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rtscore.data.shard_reader import FastShardArray
from rtscore.data.tiles import IGNORE_INDEX, KIND_CODES, LABEL_VALUES, PIXEL_SIZE_M, RawTile, StoredSample
from rtscore.errors import PipelineError
from rtscore.storage import publish_dir

if TYPE_CHECKING:
    import zarr

FORMAT = "rts-tile-store"
# 1: one array per kind of pixel (images, alpha, labels_exact, labels_noisy, extra): a sample is 4 chunk reads.
# 2: the uint8 planes of a tile (R, G, B, alpha, labels) in one chunk of ``pixels``, the float32 EXTRA bands in
#    one chunk of ``extra``: a sample is 1 chunk read (RGB stores) or 2 (with EXTRA channels). Both read.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
PIXELS = "pixels"  # v2 uint8 array (n, planes, h, w); its zarr attribute ``planes`` names the planes
EXTRA = "extra"  # float32 array (n, E, h, w), both versions
V1_ARRAYS = ("images", "alpha", "labels_exact", "labels_noisy")
ATTRS_KEY = "rtscore"
PROGRESS_DIR = ".progress"
MASK_TYPES = ("exact", "noisy")
_TRANSIENT_RETRIES = 3


class TileStoreError(PipelineError):
    """A tile store is missing, incomplete, corrupt or inconsistent; the message names it."""


_log = logging.getLogger(__name__)
_WARNED_UNCHECKED: set[str] = set()  # stores already warned about (once per process)


# Per-tile metadata arrays (readable without touching pixel chunks).
_META_FIELDS: dict[str, Any] = {
    "tile_id": "str",
    "region": "str",
    "kind": np.uint8,
    "is_positive": np.bool_,
    "n_positive_px": np.int32,
    "n_positive_px_noisy": np.int32,
    "n_ignore_px": np.int32,
    "n_nodata_px": np.int32,
    "n_objects": np.int16,
    "source_index": np.int32,
    "rotation": np.uint8,
    "pixel_area_m2": np.float64,  # ground m² of one pixel of the tile (GeoTIFF: from its transform)
}


@dataclass(frozen=True)
class StoreLayout:
    """Shapes and codecs of a store, fixed when the staging store is created."""

    n_tiles: int
    tile_size: int
    extra_channel_names: tuple[str, ...]
    shard_tiles: int
    compressor: Literal["zstd", "lz4", "none"] = "zstd"
    clevel: int = 3
    write_noisy: bool = True
    format_version: int = FORMAT_VERSION  # 1 writes the old layout (tests and bench/data_bench.py compare them)

    def __post_init__(self) -> None:
        if self.format_version not in READ_VERSIONS:
            raise TileStoreError(f"store format_version must be one of {READ_VERSIONS}; got {self.format_version}")

    @property
    def planes(self) -> list[str]:
        """The planes of a v2 ``pixels`` chunk, in order."""
        return pixel_planes(self.write_noisy)

    @property
    def n_shards(self) -> int:
        return -(-self.n_tiles // self.shard_tiles)

    def shard_range(self, shard: int) -> tuple[int, int]:
        start = shard * self.shard_tiles
        return start, min(start + self.shard_tiles, self.n_tiles)


def pixel_planes(write_noisy: bool) -> list[str]:
    """The uint8 planes of one tile in a format-2 ``pixels`` chunk: RGB, alpha, then the label variants."""
    return ["R", "G", "B", "alpha", "labels_exact", *(["labels_noisy"] if write_noisy else [])]


def pixel_arrays(group_path: Path) -> list[str]:
    """The pixel arrays (not ``meta``) a store at ``group_path`` holds, by its layout: ``pixels`` [+ ``extra``]
    (format 2) or ``images``, ``alpha``, labels [+ ``extra``] (format 1)."""
    if (group_path / PIXELS / "zarr.json").is_file():
        names = [PIXELS]
    else:
        names = [n for n in V1_ARRAYS if (group_path / n / "zarr.json").is_file()]
    return names + ([EXTRA] if (group_path / EXTRA / "zarr.json").is_file() else [])


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


def has_chunk_checksums(array_dir: Path) -> bool:
    """Whether the array at ``array_dir`` stores a CRC-32C with each chunk (stores written before
    checksums were added do not; they still read, without the check)."""
    try:
        codecs = json.loads((array_dir / "zarr.json").read_text())["codecs"]
    except (OSError, ValueError, KeyError):
        return False
    names = [c.get("name") for c in codecs]
    if names and names[0] == "sharding_indexed":
        names = [c.get("name") for c in codecs[0].get("configuration", {}).get("codecs", [])]
    return "crc32c" in names


def read_rows(array: Any, start: int, stop: int, where: str) -> np.ndarray:
    """``array[start:stop]`` as NumPy; a checksum or codec failure becomes a TileStoreError naming ``where``
    and the tile range (a corrupt shard never decodes to wrong pixels silently)."""
    try:
        return np.asarray(array[start:stop])
    except Exception as err:
        raise TileStoreError(
            f"{where}, tiles {start}..{stop - 1}: cannot decode ({type(err).__name__}: {err}); "
            "the store is corrupt: regenerate it"
        ) from err


def zarr_array(group: zarr.Group, name: str) -> zarr.Array:
    """The array `name` of `group` (zarr types a member as array or group; a group here is a corrupt store)."""
    import zarr

    node = group[name]
    if not isinstance(node, zarr.Array):
        raise TileStoreError(f"{group.store_path}: {name!r} is a {type(node).__name__}, not an array")
    return node


def zarr_group(group: zarr.Group, name: str) -> zarr.Group:
    """The subgroup `name` of `group` (an array there is a corrupt store)."""
    import zarr

    node = group[name]
    if not isinstance(node, zarr.Group):
        raise TileStoreError(f"{group.store_path}: {name!r} is a {type(node).__name__}, not a group")
    return node


def read_array(group: zarr.Group, name: str) -> np.ndarray:
    """All of the array `name` of `group` in memory (`array[:]`, typed as the NumPy array it is); a corrupt
    chunk (checksum mismatch) is a TileStoreError naming the array."""
    arr = zarr_array(group, name)
    try:
        return np.asarray(arr[:])
    except Exception as err:
        raise TileStoreError(
            f"{group.store_path}/{name}: cannot decode ({type(err).__name__}: {err}); the store is corrupt: "
            "regenerate it"
        ) from err


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
    for name, dtype in _META_FIELDS.items():
        dt = np.dtypes.StringDType() if dtype == "str" else dtype
        # One metadata chunk per shard so that shard owners never share a chunk.
        meta.create_array(name, shape=(n,), chunks=(s,), dtype=dt, compressors=_meta_compressors(dtype))
    group.attrs.update({"rtscore_staging": {**staging_attrs, "format_version": layout.format_version}})
    (path / PROGRESS_DIR).mkdir(exist_ok=True)


def _tile_meta(tile: RawTile, kind_code: int) -> dict[str, Any]:
    exact = tile.label_exact
    noisy = tile.label_noisy if tile.label_noisy is not None else exact
    return {
        "tile_id": tile.tile_id,
        "region": tile.region,
        "kind": kind_code,
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

    @property
    def full(self) -> bool:
        return len(self.meta) == self.stop - self.start

    def add(self, tiles: Sequence[RawTile], kind_codes: Sequence[int]) -> None:
        """Add a batch (e.g. one generation batch) to the shard buffer."""
        for tile, code in zip(tiles, kind_codes, strict=True):
            if self.full:
                raise TileStoreError(f"shard {self.shard} is full ({self.stop - self.start} tiles)")
            check_tile(tile, self.layout)
            i = len(self.meta)
            self.images[i], self.alpha[i], self.labels_exact[i] = tile.rgb, tile.alpha, tile.label_exact
            if self.labels_noisy is not None:
                assert tile.label_noisy is not None  # check_tile requires it when the store keeps noisy labels
                self.labels_noisy[i] = tile.label_noisy
            if self.extra is not None:
                self.extra[i] = tile.extra
            self.meta.append(_tile_meta(tile, code))

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
        for name, dtype in _META_FIELDS.items():
            values = [m[name] for m in self.meta]
            arr = np.array(values, dtype=np.dtypes.StringDType() if dtype == "str" else dtype)
            zarr_array(meta, name)[sl] = arr
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


def summarize(path: Path) -> dict[str, Any]:
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
    return {
        "n_tiles": int(kind.size),
        "n_positive": int(read_array(meta, "is_positive").sum()),
        "n_negative": int(((kind == KIND_CODES["negative"]) | ((kind == KIND_CODES["positive"]) & (n_pos == 0))).sum()),
        "n_full_nodata": int((kind == KIND_CODES["full_nodata"]).sum()),
        "n_regions": len(set(regions.tolist())),
        "regions": sorted(set(regions.tolist())),
        "prevalence": {
            "exact": float(n_pos.sum() / labelled) if labelled else 0.0,
            "noisy": float(n_pos_noisy.sum() / labelled) if labelled else 0.0,
        },
    }


def finalize(staging: Path, final: Path, store_attrs: dict[str, Any]) -> dict[str, Any]:
    """Check all shards are done, write the store's attributes and publish it atomically."""
    import zarr

    attrs = staging_attrs(staging) or {}
    n_shards = int(attrs["n_shards"])
    missing = sorted(set(range(n_shards)) - completed_shards(staging))
    if missing:
        raise TileStoreError(f"store {staging}: shards {missing[:10]} were never completed; cannot publish")
    summary = summarize(staging)
    group = zarr.open_group(str(staging), mode="r+")
    full_attrs = {**store_attrs, "counts": {k: v for k, v in summary.items() if k != "prevalence"}}
    full_attrs["prevalence"] = summary["prevalence"]
    group.attrs.put({ATTRS_KEY: full_attrs})
    shutil.rmtree(staging / PROGRESS_DIR)
    publish_dir(staging, final)
    return full_attrs


# --------------------------------------------------------------------------- reader
@dataclass
class TileMetadata:
    """Per-tile metadata held in memory (small: a few dozen bytes per tile)."""

    tile_id: np.ndarray
    region: np.ndarray
    kind: np.ndarray
    is_positive: np.ndarray
    n_positive_px: np.ndarray
    n_ignore_px: np.ndarray
    n_nodata_px: np.ndarray
    pixel_area_m2: np.ndarray  # float64 ground m² of one pixel, per tile
    tile_size: int

    def __len__(self) -> int:
        return int(self.kind.size)

    @property
    def full_nodata(self) -> np.ndarray:
        return self.n_nodata_px >= self.tile_size * self.tile_size


def _retry(fn: Callable[[], Any], what: str) -> Any:
    """Retry transient I/O errors (network filesystems, object stores) before giving up."""
    for attempt in range(_TRANSIENT_RETRIES):
        try:
            return fn()
        except (TimeoutError, ConnectionError, InterruptedError):
            if attempt == _TRANSIENT_RETRIES - 1:
                raise
            time.sleep(0.2 * 2**attempt)
        except OSError as err:  # EIO etc. may be transient on network mounts; a missing file is not
            if isinstance(err, FileNotFoundError) or attempt == _TRANSIENT_RETRIES - 1:
                raise TileStoreError(f"{what}: {err}") from err
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


class ZarrTileStore:
    """Random access to the tiles of one published store; opens the arrays lazily per process."""

    def __init__(self, path: str | Path, mask_type: str = "exact", extra_channels: list[str] | None = None) -> None:
        self.path = Path(path)
        if mask_type not in MASK_TYPES:
            raise TileStoreError(f"mask_type must be one of {MASK_TYPES}; got {mask_type!r}")
        self.attrs = read_store_attrs(self.path)
        if mask_type not in self.attrs["mask_types"]:
            raise TileStoreError(f"store {self.path} has no {mask_type!r} labels (has {self.attrs['mask_types']})")
        self.mask_type = mask_type
        self.tile_size = int(self.attrs["tile_size"])
        stored_extra = list(self.attrs["extra_channel_names"])
        wanted = stored_extra if extra_channels is None else list(extra_channels)
        missing = [c for c in wanted if c not in stored_extra]
        if missing:
            raise TileStoreError(f"store {self.path} has no extra channels {missing} (has {stored_extra})")
        self._extra_idx = [stored_extra.index(c) for c in wanted]
        self.channel_names: list[str] = ["R", "G", "B", *wanted]
        self.n_tiles = int(self.attrs["counts"]["n_tiles"])
        self.format_version = int(self.attrs.get("format_version", 1))
        self._label_plane = 0
        if self.format_version >= 2:
            planes = read_planes(self.path)
            self._label_plane = planes.index(f"labels_{mask_type}")
        self.checksummed = has_chunk_checksums(self.path / (PIXELS if self.format_version >= 2 else "images"))
        if not self.checksummed and str(self.path) not in _WARNED_UNCHECKED:
            _WARNED_UNCHECKED.add(str(self.path))
            _log.warning(
                f"tile store {self.path} was written without per-chunk checksums (before rtscore added them): "
                "a corrupt shard cannot be detected on read. Regenerate it (rts generate ... --overwrite, or "
                "rts run --refresh) to add them."
            )
        self._arrays: dict[str, Any] | None = None
        self._pid: int | None = None
        self._meta: TileMetadata | None = None

    def __len__(self) -> int:
        return self.n_tiles

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"], state["_pid"] = None, None  # reopened in each DataLoader worker
        return state

    def _open(self) -> dict[str, Any]:
        if self._arrays is None or self._pid != os.getpid():
            import zarr

            group = zarr.open_group(str(self.path), mode="r")
            # Format 2: one chunk read for the uint8 planes, one for EXTRA; format 1: one per array.
            names = [PIXELS] if self.format_version >= 2 else ["images", "alpha", f"labels_{self.mask_type}"]
            if self._extra_idx:
                names.append(EXTRA)
            # Direct shard reads for our own layout (zarr's per-call overhead dominates one tile); zarr otherwise.
            self._arrays = {n: FastShardArray.open(self.path / n) or zarr_array(group, n) for n in names}
            self._pid = os.getpid()
        return self._arrays

    @property
    def metadata(self) -> TileMetadata:
        if self._meta is None:
            import zarr

            meta = zarr_group(zarr.open_group(str(self.path), mode="r"), "meta")
            positive_key = "n_positive_px" if self.mask_type == "exact" else "n_positive_px_noisy"
            n_pos = read_array(meta, positive_key)
            self._meta = TileMetadata(
                tile_id=read_array(meta, "tile_id").astype(object),
                region=read_array(meta, "region").astype(object),
                kind=read_array(meta, "kind"),
                is_positive=n_pos > 0,
                n_positive_px=n_pos,
                n_ignore_px=read_array(meta, "n_ignore_px"),
                n_nodata_px=read_array(meta, "n_nodata_px"),
                pixel_area_m2=self._pixel_areas(meta, len(n_pos)),
                tile_size=self.tile_size,
            )
        return self._meta

    def _pixel_areas(self, meta: zarr.Group, n: int) -> np.ndarray:
        """Per-tile ground pixel areas; a store written before they were recorded: its nominal pixel size
        (``pixel_size_m``, 4.77 / scale) squared for every tile, as every reader assumed then."""
        if "pixel_area_m2" in meta:
            return read_array(meta, "pixel_area_m2").astype(np.float64)
        nominal = float(self.attrs.get("pixel_size_m", PIXEL_SIZE_M))
        return np.full(n, nominal**2, np.float64)

    def __getitem__(self, index: int) -> StoredSample:
        if not -self.n_tiles <= index < self.n_tiles:
            raise IndexError(f"tile index {index} out of range for {self.n_tiles} tiles in {self.path}")
        i = int(index) % self.n_tiles
        arrays = self._open()
        meta = self.metadata
        where = f"store {self.path}, tile index {i} ({meta.tile_id[i]})"

        def read() -> tuple[np.ndarray, ...]:
            return tuple(np.asarray(arrays[n][i]) for n in arrays)

        try:
            values = _retry(read, where)
        except TileStoreError:
            raise
        except Exception as err:  # checksum and codec errors of a truncated or corrupt shard
            raise TileStoreError(f"{where}: cannot decode ({err}); the shard is corrupt: regenerate the store") from err
        if self.format_version >= 2:
            planes = values[0]
            rgb, alpha, label = planes[:3], planes[3], planes[self._label_plane]
        else:
            rgb, alpha, label = values[0], values[1], values[2]
        extra = None
        if self._extra_idx:
            stored = values[-1]
            extra = stored if self._extra_idx == list(range(len(stored))) else stored[self._extra_idx]
        # A missing shard object reads back as fill values; the metadata written with it tells.
        n_nodata = int((alpha == 0).sum())
        if n_nodata != int(meta.n_nodata_px[i]):
            raise TileStoreError(
                f"{where}: pixel data disagrees with the tile's metadata "
                f"({n_nodata} vs {int(meta.n_nodata_px[i])} NoData pixels); a shard is missing or corrupt"
            )
        return StoredSample(
            index=i,
            tile_id=str(meta.tile_id[i]),
            region=str(meta.region[i]),
            rgb=rgb,
            alpha=alpha,
            label=label,
            extra=extra,
            pixel_area_m2=float(meta.pixel_area_m2[i]),
        )


def read_planes(path: Path) -> list[str]:
    """The plane names of a format-2 store's ``pixels`` array (its zarr attribute ``planes``)."""
    try:
        planes = json.loads((path / PIXELS / "zarr.json").read_text())["attributes"]["planes"]
    except (OSError, ValueError, KeyError) as err:
        raise TileStoreError(
            f"tile store {path}: {PIXELS}/zarr.json is missing or names no planes ({type(err).__name__}: {err}); "
            "the store is corrupt: regenerate it"
        ) from None
    if [str(p) for p in planes[:5]] != pixel_planes(False):
        raise TileStoreError(f"tile store {path}: {PIXELS} planes {planes}; expected {pixel_planes(True)}")
    return [str(p) for p in planes]


def iter_pixel_blocks(
    path: Path, limit: int | None, extra_idx: list[int]
) -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """(rgb, extra, alpha) for runs of tiles, one shard at a time (sequential, bounded memory), from a store of
    either format; ``extra_idx`` selects the EXTRA bands (none read when empty)."""
    import zarr

    group = zarr.open_group(str(path), mode="r")
    v2 = int(read_store_attrs(path).get("format_version", 1)) >= 2
    first = zarr_array(group, PIXELS if v2 else "images")
    alpha = None if v2 else zarr_array(group, "alpha")
    extra = zarr_array(group, EXTRA) if extra_idx else None
    n = first.shape[0] if limit is None else min(limit, first.shape[0])
    step = first.shards[0] if first.shards else 32
    where = f"store {path}"
    for a in range(0, n, step):
        b = min(a + step, n)
        block = read_rows(first, a, b, where)
        ext = read_rows(extra, a, b, where)[:, extra_idx] if extra is not None else None
        if alpha is None:
            yield block[:, :3], ext, block[:, 3]
        else:
            yield block, ext, read_rows(alpha, a, b, where)


def read_store_attrs(path: Path) -> dict[str, Any]:
    """The published store's attributes, or a clear error if it is missing or unpublished."""
    meta = path / "zarr.json"
    if not meta.is_file():
        partial = path.with_name(f".{path.name}.partial")
        hint = f" (an interrupted generation is staged at {partial}; re-run to resume)" if partial.exists() else ""
        raise TileStoreError(f"tile store not found: {path}{hint}")
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except ValueError as err:
        raise TileStoreError(f"tile store {path}: zarr.json is not valid JSON ({err})") from None
    store = attrs.get(ATTRS_KEY)
    if not store or store.get("format") != FORMAT:
        raise TileStoreError(f"{path} is not a published rts tile store (no '{ATTRS_KEY}' attributes)")
    if int(store.get("format_version", 0)) > FORMAT_VERSION:
        raise TileStoreError(
            f"tile store {path} has format_version {store['format_version']}; this rtscore reads up to {FORMAT_VERSION}"
        )
    return dict(store)
