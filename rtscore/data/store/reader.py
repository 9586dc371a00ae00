"""The Zarr v3 tile store's reader: lazy random access to the tiles of a published store (opened per process,
transient I/O retried, each tile checked against its metadata), its per-tile metadata, and one sequential pass over
its pixels. The format it reads is `rtscore.data.store.format`."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rtscore.data.store.format import (
    BOUNDS,
    EXTRA,
    INVENTORY_FIELDS,
    MASK_TYPES,
    PIXELS,
    TileStoreError,
    has_chunk_checksums,
    read_array,
    read_planes,
    read_rows,
    read_store_attrs,
    zarr_array,
    zarr_group,
)
from rtscore.data.store.shard_reader import FastShardArray
from rtscore.data.tiles import PIXEL_SIZE_M, StoredSample

if TYPE_CHECKING:
    import zarr

_TRANSIENT_RETRIES = 3
_log = logging.getLogger(__name__)
_WARNED_UNCHECKED: set[str] = set()  # stores already warned about (once per process)


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
    # float64 (n, 4) minx, miny, maxx, maxy per tile in the store's CRS (``ZarrTileStore.crs``); None: the store
    # has no footprints (synthetic, legacy npz, or written before they were recorded)
    bounds: np.ndarray | None = None
    # The tiles' inventory identity (docs/store-format.md#inventory-identity), each None where the store records none
    # (synthetic, legacy npz, context stores, GeoTIFF stores written before it was recorded): ';'-joined RTS ids,
    # ';'-joined ids of mapped Negative polygons with a pixel in the tile, ObjectPixels text (object arrays of str),
    # and the latitude of the tile's centre (float64 °N, NaN: unknown).
    uids: np.ndarray | None = None
    negative_uids: np.ndarray | None = None
    object_pixels: np.ndarray | None = None
    latitude: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.kind.size)

    @property
    def full_nodata(self) -> np.ndarray:
        return self.n_nodata_px >= self.tile_size * self.tile_size

    @property
    def records_negatives(self) -> bool:
        """Whether the store records which tiles hold a mapped Negative polygon (``negative_uids``)."""
        return self.negative_uids is not None

    @property
    def mapped_negative(self) -> np.ndarray:
        """(n,) bool: the tile holds a pixel of a mapped Negative (background) polygon of the inventory, a hard
        negative (guide §7); all False where the store records none (:attr:`records_negatives`)."""
        if self.negative_uids is None:
            return np.zeros(len(self), bool)
        return np.array([bool(str(v).strip()) for v in self.negative_uids], bool)


def _inventory_arrays(meta: zarr.Group) -> dict[str, np.ndarray | None]:
    """The store's optional inventory arrays (``INVENTORY_FIELDS``): str as object arrays, latitude as float64;
    None for each one the store does not hold."""
    out: dict[str, np.ndarray | None] = {}
    for name, dtype in INVENTORY_FIELDS.items():
        if name not in meta:
            out[name] = None
        else:
            values = read_array(meta, name)
            out[name] = values.astype(object) if dtype == "str" else values.astype(np.float64)
    return out


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
        if mask_type not in self.attrs.mask_types:
            raise TileStoreError(f"store {self.path} has no {mask_type!r} labels (has {self.attrs.mask_types})")
        self.mask_type = mask_type
        self.tile_size = self.attrs.tile_size
        stored_extra = list(self.attrs.extra_channel_names)
        wanted = stored_extra if extra_channels is None else list(extra_channels)
        missing = [c for c in wanted if c not in stored_extra]
        if missing:
            raise TileStoreError(f"store {self.path} has no extra channels {missing} (has {stored_extra})")
        self._extra_idx = [stored_extra.index(c) for c in wanted]
        self.channel_names: list[str] = ["R", "G", "B", *wanted]
        self.n_tiles = self.attrs.counts.n_tiles
        self.format_version = self.attrs.format_version
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
                bounds=read_array(meta, BOUNDS).astype(np.float64) if BOUNDS in meta else None,
                **_inventory_arrays(meta),
            )
        return self._meta

    @property
    def crs(self) -> str | None:
        """The CRS of the store's tiles and footprints (its raster contract's), or None when it records none."""
        contract = self.attrs.raster_contract
        return None if contract is None or contract.crs is None else str(contract.crs)

    def _pixel_areas(self, meta: zarr.Group, n: int) -> np.ndarray:
        """Per-tile ground pixel areas; a store written before they were recorded: its nominal pixel size
        (``pixel_size_m``, 4.77 / scale) squared for every tile, as every reader assumed then."""
        if "pixel_area_m2" in meta:
            return read_array(meta, "pixel_area_m2").astype(np.float64)
        nominal = PIXEL_SIZE_M if self.attrs.pixel_size_m is None else self.attrs.pixel_size_m
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


def iter_pixel_blocks(
    path: Path, limit: int | None, extra_idx: list[int]
) -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """(rgb, extra, alpha) for runs of tiles, one shard at a time (sequential, bounded memory), from a store of
    either format; ``extra_idx`` selects the EXTRA bands (none read when empty)."""
    import zarr

    group = zarr.open_group(str(path), mode="r")
    v2 = read_store_attrs(path).format_version >= 2
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
