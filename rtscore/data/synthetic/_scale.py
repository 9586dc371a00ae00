"""2x downsampling of a tile rendered at native resolution: the 0.5x context-expanded store (guide §8.3).

A 0.5x tile covers twice the field of view of a 1x tile: the scene is rendered at ``2 * tile_size`` native
(4.77 m) pixels, and every 2x2 block becomes one stored pixel (9.54 m). All rules are integer or fixed-order
float arithmetic, so a store stays byte-identical for the same config and seed.
"""

from __future__ import annotations

import numpy as np

from rtscore.data.tiles import IGNORE_INDEX, RawTile

__all__ = [
    "downsample_labels",
    "downsample_mask",
    "downsample_mean_float",
    "downsample_mean_uint8",
    "downsample_tile",
    "downsample_valid",
]


def _blocks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four pixels of every 2x2 block of the last two axes (which must have even sizes)."""
    h, w = a.shape[-2:]
    if h % 2 or w % 2:
        raise ValueError(f"2x downsampling needs even height and width; got {h} x {w}")
    return a[..., 0::2, 0::2], a[..., 0::2, 1::2], a[..., 1::2, 0::2], a[..., 1::2, 1::2]


def downsample_mean_uint8(a: np.ndarray) -> np.ndarray:
    """2x2 area mean of uint8 pixels (..., 2H, 2W) -> (..., H, W), rounded half up."""
    p, q, r, s = (b.astype(np.uint16) for b in _blocks(a))
    return ((p + q + r + s + 2) >> 2).astype(np.uint8)


def downsample_mean_float(a: np.ndarray) -> np.ndarray:
    """2x2 area mean of float pixels (..., 2H, 2W) -> (..., H, W) float32."""
    p, q, r, s = (b.astype(np.float32) for b in _blocks(a))
    return ((p + q) + (r + s)) * np.float32(0.25)


def downsample_valid(alpha: np.ndarray) -> np.ndarray:
    """Alpha (2H, 2W) -> (H, W): 255 (valid) only where all four source pixels are valid, else 0 (NoData)."""
    p, q, r, s = _blocks(alpha)
    return np.where((p > 0) & (q > 0) & (r > 0) & (s > 0), 255, 0).astype(np.uint8)


def downsample_labels(label: np.ndarray) -> np.ndarray:
    """Labels in {0, 1, 255} (2H, 2W) -> (H, W).

    Among the block's non-ignore pixels: 1 if at least half are 1, else 0; 255 if all four are ignore.
    """
    p, q, r, s = _blocks(label)
    ones = (p == 1).astype(np.uint8) + (q == 1) + (r == 1) + (s == 1)
    known = (p != IGNORE_INDEX).astype(np.uint8) + (q != IGNORE_INDEX) + (r != IGNORE_INDEX) + (s != IGNORE_INDEX)
    out = np.where(2 * ones >= known, 1, 0).astype(np.uint8)
    out[known == 0] = IGNORE_INDEX
    return out


def downsample_mask(mask: np.ndarray) -> np.ndarray:
    """Boolean mask (2H, 2W) -> (H, W): true where at least half of the block is true (as labels)."""
    p, q, r, s = _blocks(mask)
    return np.asarray(p.astype(np.uint8) + q + r + s >= 2)


def downsample_tile(tile: RawTile) -> RawTile:
    """A natively rendered tile (2N pixels) as its 0.5x tile (N pixels).

    Images: 2x2 mean, rounded; extra bands: 2x2 mean; alpha: valid only if all four pixels are; labels (exact
    and noisy): :func:`downsample_labels`. As at 1x, NoData pixels hold RGB 0, extra 0 and label 255. The
    per-tile values that describe pixels (``n_objects``, ``has_partial_nodata``, ``has_dark_pixels``) are
    recomputed from the downsampled pixels; the store derives its pixel counts from them too.
    """
    alpha = downsample_valid(tile.alpha)
    nodata = alpha == 0
    rgb = downsample_mean_uint8(tile.rgb)
    rgb[:, nodata] = 0
    extra = None
    if tile.extra is not None:
        extra = downsample_mean_float(tile.extra)
        extra[:, nodata] = 0.0

    def labels(a: np.ndarray) -> np.ndarray:
        out = downsample_labels(a)
        out[nodata] = IGNORE_INDEX
        return out

    exact = labels(tile.label_exact)
    noisy = None if tile.label_noisy is None else labels(tile.label_noisy)
    meta = dict(tile.meta)
    if "has_partial_nodata" in meta:
        meta["has_partial_nodata"] = float(nodata.any())
    if "has_dark_pixels" in meta:
        meta["has_dark_pixels"] = float(((rgb == 0).all(axis=0) & ~nodata).any())
    return RawTile(
        tile_id=tile.tile_id,
        region=tile.region,
        rgb=rgb,
        alpha=alpha,
        label_exact=exact,
        label_noisy=noisy,
        extra=extra,
        # A slump too small to keep a majority block drops out (label-1 pixels are what the store counts).
        n_objects=tile.n_objects if (exact == 1).any() else 0,
        source_index=tile.source_index,
        rotation=tile.rotation,
        meta=meta,
        pixel_area_m2=4.0 * tile.pixel_area_m2,  # a 2x2 block of the native pixels
    )
