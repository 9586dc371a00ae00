"""Tile sources: anything indexable returning a StoredSample (a Zarr store, a legacy npz directory, several joined
end to end), opened by what is at a path, and what their metadata tells without reading a pixel (the usable tiles,
the class pixel counts, where a tile is stored)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from rtscore.data.store.legacy_npz import BatchedNpzSource
from rtscore.data.store.reader import TileMetadata, ZarrTileStore
from rtscore.data.tiles import IGNORE_INDEX, ClassPixelCounts, StoredSample


class TileSource(Protocol):
    """Anything with ``__len__`` and ``__getitem__`` returning :class:`StoredSample` (Zarr, legacy npz, ...)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> StoredSample: ...


class ConcatSource:
    """Tile sources joined end to end (joint training on several train stores, guide §8.3).

    Position ``i`` is tile ``i - offset[k]`` of source ``k``. ``metadata`` concatenates the sources' metadata
    (None unless every source has some), so :func:`usable_indices` and the balanced sampler see the tiles of
    all of them. Pickles without open file handles when its sources do (each Zarr store reopens per process).
    """

    def __init__(self, sources: Sequence[TileSource]) -> None:
        if not sources:
            raise ValueError("ConcatSource needs at least one source")
        self.sources = list(sources)
        names = [getattr(src, "channel_names", None) for src in self.sources]
        known = [list(n) for n in names if n is not None]
        if any(n != known[0] for n in known):
            raise ValueError(f"joined tile sources have different channels: {known}")
        self.channel_names: list[str] | None = known[0] if len(known) == len(names) else None
        self.offsets = np.cumsum([0, *(len(src) for src in self.sources)])
        self._meta: TileMetadata | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def locate(self, index: int) -> tuple[int, int]:
        """(source number, index within that source) of a position of the join."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"tile index {index} out of range for {n} tiles in {len(self.sources)} joined sources")
        i = int(index) % n
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return k, i - int(self.offsets[k])

    def __getitem__(self, index: int) -> StoredSample:
        k, j = self.locate(index)
        sample = self.sources[k][j]
        return dataclasses.replace(sample, index=int(self.offsets[k]) + j)

    @property
    def metadata(self) -> TileMetadata | None:
        if self._meta is None:
            metas = [getattr(src, "metadata", None) for src in self.sources]
            known = [m for m in metas if m is not None]
            if len(known) != len(metas):
                return None
            self._meta = concat_metadata(known)
        return self._meta


def concat_metadata(metas: Sequence[TileMetadata]) -> TileMetadata:
    """The per-tile metadata of sources joined in this order (they must share the tile size)."""
    sizes = sorted({m.tile_size for m in metas})
    if len(sizes) != 1:
        raise ValueError(f"joined tile sources have different tile sizes: {sizes}")
    fields = (
        "tile_id",
        "region",
        "kind",
        "is_positive",
        "n_positive_px",
        "n_ignore_px",
        "n_nodata_px",
        "pixel_area_m2",
    )
    joined = {f: np.concatenate([np.asarray(getattr(m, f)) for m in metas]) for f in fields}
    meta = TileMetadata(**joined, tile_size=sizes[0])
    # the optional arrays are joined where every source records them (else None: not known for every tile)
    for f in ("bounds", "uids", "negative_uids", "object_pixels", "latitude"):
        parts = [getattr(m, f) for m in metas]
        setattr(meta, f, None if any(p is None for p in parts) else np.concatenate(parts))
    return meta


def usable_indices(source: TileSource, exclude_full_nodata: bool = True) -> np.ndarray:
    """Indices that may enter a batch: full-NoData tiles are skipped at the dataset level (guide §4.4)."""
    meta = getattr(source, "metadata", None)
    if meta is not None:
        keep = ~meta.full_nodata if exclude_full_nodata else np.ones(len(meta), bool)
        return np.flatnonzero(keep)
    if not exclude_full_nodata:
        return np.arange(len(source))
    return np.array([i for i in range(len(source)) if (source[i].alpha > 0).any()], dtype=np.int64)


def class_pixel_counts(source: TileSource, indices: Sequence[int] | np.ndarray) -> ClassPixelCounts:
    """Background and RTS pixels of the tiles at ``indices`` (the pixels training counts: valid, not ignored).

    From the tile metadata when the source has it (no pixel read): RTS = ``n_positive_px``, background =
    ``H*W - n_positive_px - max(n_ignore_px, n_nodata_px)``. That is exact when a tile's NoData pixels are
    labelled 255 (synthetic stores) or when its only ignored pixels are NoData (training ignores NoData whatever
    its label); for a tile with both kinds apart it is within ``min(n_ignore_px, n_nodata_px)`` pixels. Without
    metadata (legacy npz), every tile's labels and alpha are read.
    """
    idx = np.asarray(indices, dtype=np.int64)
    meta = getattr(source, "metadata", None)
    if meta is not None:
        pos = np.asarray(meta.n_positive_px, dtype=np.int64)[idx]
        ignored = np.maximum(np.asarray(meta.n_ignore_px, np.int64)[idx], np.asarray(meta.n_nodata_px, np.int64)[idx])
        bg = meta.tile_size * meta.tile_size - pos - ignored
        return ClassPixelCounts(background=int(np.maximum(bg, 0).sum()), rts=int(pos.sum()))
    background = rts = 0
    for i in idx:
        s = source[int(i)]
        label = np.where(s.alpha == 0, IGNORE_INDEX, s.label)
        background += int((label == 0).sum())
        rts += int((label == 1).sum())
    return ClassPixelCounts(background=background, rts=rts)


def where_stored(source: TileSource, index: int) -> str:
    """``store <path>, index i`` of a position of ``source`` (a joined source names the member store)."""
    if isinstance(source, ConcatSource):
        k, j = source.locate(index)
        return where_stored(source.sources[k], j)
    path = getattr(source, "path", None)
    return f"index {index} of {'store ' + str(path) if path is not None else type(source).__name__}"


def open_source(path: str | Path, mask_type: str = "exact", extra_channels: list[str] | None = None) -> TileSource:
    """Open a Zarr store, or a legacy batched-npz directory, by what is at ``path``."""
    p = Path(path)
    if (p / "metadata.json").is_file() and not (p / "zarr.json").is_file():
        return BatchedNpzSource(p)
    return ZarrTileStore(p, mask_type=mask_type, extra_channels=extra_channels)
