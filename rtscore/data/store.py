"""The Zarr v3 tile store: shard-aligned writer with resumable staging, and a lazy random-access reader."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rtscore.data.shard_reader import FastShardArray
from rtscore.data.tiles import PIXEL_SIZE_M, StoredSample
from rtscore.errors import PipelineError

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
META_FIELDS: dict[str, Any] = {
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
