"""The 0.5x input with the guide's meaning (§8.2, §8.3): the 2x field of view around a tile, downsampled 2x.

A 0.5x pass does not shrink the tile it is given (that blurs the same 2.4 km footprint, which §8.3 calls
"distributionally different"): it sees the 4.9 km window centred on the tile, at 9.54 m pixels, as a tile of
the same size. Its output's centre half is the tile's footprint; :mod:`rtscore.inference.numerics` upsamples
it back to native resolution and fuses it with the 1x pass.

Two sides provide that input, built by the same rules:

* Rasters (``rts predict``): :class:`ContextWindows` reads the 2x window centred on a tile window from the
  surrounding raster, one windowed read per context (outside the raster: NoData, alpha 0), downsamples every
  2x2 block exactly as the 0.5x stores are (:func:`downsample_context`, :mod:`rtscore.data.synthetic`: RGB mean
  rounded half up, extra bands mean, alpha valid only where all four pixels are, NoData pixels RGB 0 and
  extra 0), then prepares it as the window itself (normalisation). :func:`context_window` is the same for a
  raster held in memory.
* Tile stores (calibration, test evaluation): a split's context store (``RunLayout.CONTEXT_DATASET``) holds
  the same window for every tile under the same id; :class:`ContextPairedDataset` pairs each 1x tile with its
  context by tile id and yields it as ``context``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rtscore.data.loading.dataset import TileDataset
from rtscore.data.store.format import read_store_attrs
from rtscore.data.synthetic import CONTEXT_FACTOR, downsample_mean_float, downsample_mean_uint8, downsample_valid
from rtscore.errors import PipelineError

CONTEXT_SCALE = 1.0 / CONTEXT_FACTOR  # the one scale below 1.0 a context input exists for


class ContextError(PipelineError):
    """A 0.5x pass without its context input, or a context store that does not pair with its 1x store."""


def needs_context(scales: Sequence[float]) -> bool:
    """Whether a scale set has a pass below 1x (which needs the context input)."""
    return any(s != 1.0 for s in scales)


def context_window(channels: np.ndarray, alpha: np.ndarray, y: int, x: int, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """The 0.5x context of the tile window at (``y``, ``x``) of a raster held in memory: raw channels and alpha.

    Args:
        channels: (C, H, W) raw channels of the whole raster, RGB first (uint8 values), then extra bands.
        alpha: (H, W) alpha of the raster (0: NoData).
        y: Row of the tile window's top-left pixel.
        x: Column of the tile window's top-left pixel.
        tile: Tile size (even).

    Returns:
        (C, tile, tile) float32 raw channels and (tile, tile) uint8 alpha of the (2 tile)-pixel window centred
        on the tile window, downsampled 2x; pixels outside the raster are NoData.
    """
    return ContextWindows.of_arrays(channels, alpha, tile, lambda c, _a: c).raw(y, x)


def downsample_context(raw: np.ndarray, valid: np.ndarray, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """(C, tile, tile) float32 channels and (tile, tile) uint8 alpha of a (C, 2 tile, 2 tile) context window
    (NoData where ``valid`` is 0), by the 0.5x stores' 2x2 rules."""
    c = raw.shape[0]
    out_alpha = downsample_valid(valid)
    nodata = out_alpha == 0
    out = np.empty((c, tile, tile), np.float32)
    rgb = downsample_mean_uint8(np.clip(np.rint(raw[:3]), 0, 255).astype(np.uint8))
    rgb[:, nodata] = 0
    out[:3] = rgb
    if c > 3:
        extra = downsample_mean_float(raw[3:])
        extra[:, nodata] = 0.0
        out[3:] = extra
    return out, out_alpha


RegionReader = Callable[[int, int, int, int], tuple[np.ndarray, np.ndarray]]
"""``read(row, col, height, width)`` of a region inside a raster: (C, h, w) float32 raw channels (RGB holding
uint8 values, then EXTRA) and the (h, w) uint8 alpha (0: NoData)."""


class ContextWindows:
    """The prepared 0.5x context of any tile window of one raster (``rts predict``'s side of the pairing).

    Each context is read as a region of the raster (``read``: only the 2x window, clipped to the raster, so a
    raster of any size is never held in memory); ``prepare`` turns raw channels and alpha into the model input
    exactly as the tile windows are prepared (predict's normalisation), so a context differs from its window
    only in what it covers.
    """

    def __init__(
        self,
        read: RegionReader,
        height: int,
        width: int,
        tile: int,
        prepare: Callable[[np.ndarray, np.ndarray], np.ndarray],
    ) -> None:
        self.read = read
        self.height = height
        self.width = width
        self.tile = tile
        self.prepare = prepare

    @classmethod
    def of_arrays(
        cls, channels: np.ndarray, alpha: np.ndarray, tile: int, prepare: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> ContextWindows:
        """Contexts of a raster held in memory as (C, H, W) raw channels and (H, W) alpha."""

        def read(row: int, col: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
            return channels[:, row : row + h, col : col + w], alpha[row : row + h, col : col + w]

        return cls(read, channels.shape[1], channels.shape[2], tile, prepare)

    def raw(self, y: int, x: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw channels and alpha of the context of the window at (``y``, ``x``) (see :func:`context_window`)."""
        size, half = CONTEXT_FACTOR * self.tile, self.tile // 2
        y0, x0 = y - half, x - half
        sy, sx = slice(max(y0, 0), min(y0 + size, self.height)), slice(max(x0, 0), min(x0 + size, self.width))
        channels, alpha = self.read(sy.start, sx.start, sy.stop - sy.start, sx.stop - sx.start)
        raw = np.zeros((channels.shape[0], size, size), np.float32)
        valid = np.zeros((size, size), np.uint8)
        dy, dx = slice(sy.start - y0, sy.stop - y0), slice(sx.start - x0, sx.stop - x0)
        raw[:, dy, dx] = channels
        valid[dy, dx] = alpha
        return downsample_context(raw, valid, self.tile)

    def batch(self, windows: Sequence[tuple[int, int]]) -> np.ndarray:
        """(B, C, tile, tile) float32 prepared contexts of the windows at these (y, x)."""
        out = [self.prepare(*self.raw(y, x)) for y, x in windows]
        return np.stack(out).astype(np.float32, copy=False)


def _tile_ids(ds: TileDataset) -> list[str]:
    """The tile id of every position of a dataset (from its source's metadata)."""
    meta = getattr(ds.source, "metadata", None)
    if meta is None:
        raise ContextError(f"{ds.source!r} has no tile metadata: a context store pairs by tile id")
    ids = np.asarray(meta.tile_id)
    return [str(ids[i]) for i in ds.indices]


def check_context_store(store: Any, context: Any) -> None:
    """Refuse a context store that was not generated for ``store`` (its ``context_of`` is another config)."""
    attrs, ctx = read_store_attrs(store), read_store_attrs(context)
    if ctx.context_of != attrs.config_hash or ctx.scale != CONTEXT_SCALE:
        raise ContextError(
            f"{context} is not the 0.5x context store of {store}: it records context_of "
            f"{str(ctx.context_of)[:12]} and scale {ctx.scale}, the store's config_hash is "
            f"{attrs.config_hash[:12]}; regenerate the split (rts run / the generate-dataset stage "
            "writes both)"
        )


class ContextPairedDataset:
    """A 1x tile dataset whose items also carry ``context``: the prepared 0.5x context of the same tile id.

    Both datasets prepare their tiles the same way (one config, one set of normalisation stats); the pairing
    is by tile id, refused for any 1x tile the context store lacks.
    """

    def __init__(self, base: TileDataset, context: TileDataset) -> None:
        ids = _tile_ids(base)
        meta = getattr(context.source, "metadata", None)
        if meta is None:
            raise ContextError(f"{context.source!r} has no tile metadata: a context store pairs by tile id")
        where = {str(t): i for i, t in enumerate(np.asarray(meta.tile_id))}
        missing = [t for t in ids if t not in where]
        if missing:
            raise ContextError(
                f"the context store lacks {len(missing)} of the {len(ids)} tiles (e.g. {missing[0]!r}); "
                "regenerate it with its split"
            )
        context.indices = np.asarray([where[t] for t in ids], np.int64)
        self.base = base
        self.context = context

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, item: int) -> dict[str, Any]:
        out = self.base[item]
        ctx = self.context[item]
        if ctx["tile_id"] != out["tile_id"]:  # the index map above makes this a bug, not a data error
            raise ContextError(f"context tile {ctx['tile_id']!r} paired with tile {out['tile_id']!r}")
        out["context"] = ctx["image"]
        return out
