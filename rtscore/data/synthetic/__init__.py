"""Procedural Planet-like tundra scenes with retrogressive thaw slumps: the embedded synthetic data source."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from rtscore.config.generation import GenerationConfig
from rtscore.data.synthetic._constants import _META_KEYS, _PART_NAMES, _PLAN_SALT
from rtscore.data.synthetic._render import render_scene
from rtscore.data.synthetic._scale import (
    downsample_mask,
    downsample_mean_float,
    downsample_mean_uint8,
    downsample_tile,
    downsample_valid,
)
from rtscore.data.tiles import IGNORE_INDEX, PIXEL_SIZE_M, RawTile, TileKind, TilePlan, nominal_pixel_area_m2

__all__ = [
    "CONTEXT_FACTOR",
    "PIXEL_SIZE_M",
    "downsample_mean_float",
    "downsample_mean_uint8",
    "downsample_tile",
    "downsample_valid",
    "native_config",
    "plan_tiles",
    "render_batch",
    "render_context",
    "render_tile",
    "render_tile_with_parts",
    "scale_suffix",
]

CONTEXT_FACTOR = 2  # a 0.5x tile is rendered at 2 x tile_size native pixels
_CONTEXT_SALT = "#context"  # tile-id salt of the surroundings' random stream (never a stored id)

# --------------------------------------------------------------------------------------------- planning


def scale_suffix(scale: float) -> str:
    """Tile-id suffix of a store's scale: none at 1x, ``@0.5x`` at 0.5x, so the two stores can be joined."""
    return "" if scale == 1.0 else f"@{scale:g}x"


def plan_tiles(cfg: GenerationConfig) -> list[TilePlan]:
    """Fix kind, region and id of every source tile of a split, deterministically from the config.

    Args:
        cfg: Generation config of one split.

    Returns:
        One plan per source tile, ``index`` = position in the list. Ids are ``<split>_<index>`` plus
        :func:`scale_suffix` (so a 0.5x store draws other scenes than the 1x store of the same seed).
    """
    s = cfg.synthetic_settings
    per_kind: dict[TileKind, int] = {"positive": s.n_positive, "negative": s.n_negative, "full_nodata": s.n_full_nodata}
    kinds: list[TileKind] = [kind for kind, count in per_kind.items() for _ in range(count)]
    rng = np.random.default_rng([cfg.seed, _PLAN_SALT])
    region_order = [s.regions[i] for i in rng.permutation(len(s.regions))]
    # Round-robin continued across the kind blocks: every region gets about the same number of tiles
    # and of positives, whatever the counts.
    regions = [region_order[i % len(region_order)] for i in range(len(kinds))]
    order = rng.permutation(len(kinds))
    suffix = scale_suffix(cfg.scale)
    return [
        TilePlan(index=i, tile_id=f"{cfg.split}_{i:06d}{suffix}", region=regions[j], kind=kinds[j], seed=cfg.seed)
        for i, j in enumerate(order)
    ]


# --------------------------------------------------------------------------------------------- rendering


def _empty_tile(plan: TilePlan, cfg: GenerationConfig) -> RawTile:
    n = cfg.tile_size
    ignore = np.full((n, n), IGNORE_INDEX, np.uint8)
    extra = cfg.synthetic_settings.extra_channels
    return RawTile(
        tile_id=plan.tile_id,
        region=plan.region,
        rgb=np.zeros((3, n, n), np.uint8),
        alpha=np.zeros((n, n), np.uint8),
        label_exact=ignore,
        label_noisy=ignore.copy() if cfg.store.write_noisy_labels else None,
        extra=np.zeros((len(extra), n, n), np.float32) if extra else None,
        n_objects=0,
        source_index=plan.index,
        rotation=0,
        meta=dict.fromkeys(_META_KEYS, 0.0),
        pixel_area_m2=nominal_pixel_area_m2(cfg.scale),
    )


def native_config(cfg: GenerationConfig) -> GenerationConfig:
    """The config of a tile's native-resolution (4.77 m) render: ``cfg`` itself at 1x.

    At 0.5x: twice the tile size (2x field of view) and half the RTS diameter fractions, which are relative to
    the tile size, so RTS keep their physical size distribution. Not re-validated (2 x tile_size may exceed
    the tile_size bound of a stored tile).
    """
    if cfg.scale == 1.0:
        return cfg
    f = CONTEXT_FACTOR
    lo, hi = cfg.synthetic_settings.rts_diameter_fraction
    syn = cfg.synthetic_settings.model_copy(update={"rts_diameter_fraction": (lo / f, hi / f)})
    return cfg.model_copy(update={"tile_size": cfg.tile_size * f, "scale": 1.0, "synthetic": syn})


def render_tile_with_parts(plan: TilePlan, cfg: GenerationConfig) -> tuple[RawTile, dict[str, np.ndarray]]:
    """Render a tile and also return boolean masks of its parts (for checks and debugging).

    At scale 0.5 the scene is rendered at 2 x tile_size native pixels (:func:`native_config`) and downsampled
    2x (:func:`downsample_tile`; part masks: true where at least half of a 2x2 block is).

    Args:
        plan: The tile's plan (kind, region, seed, index).
        cfg: Generation config (tile size, scale, scene settings, store options).

    Returns:
        The tile, and masks "headwall", "floor", "tongue" (complete slumps), "bare", "water", "road", "cloud".
    """
    if plan.kind == "full_nodata":
        empty = np.zeros((cfg.tile_size, cfg.tile_size), bool)
        return _empty_tile(plan, cfg), {k: empty for k in _PART_NAMES}
    if cfg.scale == 1.0:
        return render_scene(plan, cfg)
    tile, parts = render_scene(plan, native_config(cfg), fov=CONTEXT_FACTOR)
    return downsample_tile(tile), {k: downsample_mask(m) for k, m in parts.items()}


def render_tile(plan: TilePlan, cfg: GenerationConfig) -> RawTile:
    """Render one synthetic tile: a pure function of (plan, cfg), randomness from the plan's generator only.

    Args:
        plan: The tile's plan (kind, region, seed, index).
        cfg: Generation config (tile size, scene settings, store options).

    Returns:
        The tile: uint8 RGB and alpha, exact (and optionally noisy) labels, optional float32 extra bands.
    """
    return render_tile_with_parts(plan, cfg)[0]


def render_batch(plans: Sequence[TilePlan], cfg: GenerationConfig) -> list[RawTile]:
    """Render several tiles (in order).

    Args:
        plans: Plans to render.
        cfg: Generation config.

    Returns:
        One tile per plan.
    """
    return [render_tile(p, cfg) for p in plans]


def render_context(plan: TilePlan, cfg: GenerationConfig) -> RawTile:
    """The 0.5x context of a 1x tile (guide §8.3): its 2x field of view, downsampled 2x to ``cfg.tile_size``.

    The centre half of the context window *is* the 1x tile of ``plan`` (:func:`render_tile` at ``cfg``, pixel
    for pixel, NoData and labels included); the surroundings are a scene of the same region rendered at native
    resolution around it (2 x tile_size pixels, RTS diameters relative to the 1x tile, as a 0.5x store draws
    them), like the neighbouring acquisitions of a basemap mosaic: the seam at the tile's border is a mosaic
    seam. Slumps of the surroundings cut by the tile become ignore (255), as slumps cut by a tile edge are. The
    window is then downsampled exactly as a 0.5x store (:func:`downsample_tile`). The tile id stays the 1x
    tile's, so the two stores pair by id; a full-NoData tile has a full-NoData context.

    Args:
        plan: The 1x tile's plan.
        cfg: The 1x store's generation config (scale 1.0).
    """
    from scipy import ndimage

    if cfg.scale != 1.0:
        raise ValueError(f"render_context needs the 1x generation config (scale 1.0); got scale {cfg.scale}")
    centre = render_tile(plan, cfg)
    if plan.kind == "full_nodata":
        return centre
    n = cfg.tile_size
    q = n // 2
    wide = native_config(cfg.model_copy(update={"scale": 0.5}))
    around = dataclasses.replace(plan, tile_id=plan.tile_id + _CONTEXT_SALT)
    scene, _ = render_scene(around, wide, fov=CONTEXT_FACTOR)
    out = downsample_tile(_mosaic(scene, centre, (slice(q, q + n), slice(q, q + n))))
    _, n_objects = ndimage.label(out.label_exact == 1, structure=np.ones((3, 3), bool))
    return dataclasses.replace(out, n_objects=int(n_objects))


def _mosaic(scene: RawTile, centre: RawTile, inner: tuple[slice, slice]) -> RawTile:
    """The native-resolution context window: the surroundings ``scene`` with the 1x tile ``centre`` in its ``inner``
    window, under the centre's id, index and metadata; slumps of the surroundings the centre cuts are ignore."""
    cut = np.zeros(scene.label_exact.shape, bool)
    cut[inner] = True
    exact = _ignore_cut_slumps(scene.label_exact, cut)
    exact[inner] = centre.label_exact
    noisy = None
    if scene.label_noisy is not None and centre.label_noisy is not None:
        noisy = _ignore_cut_slumps(scene.label_noisy, cut)
        noisy[inner] = centre.label_noisy
    rgb, alpha = scene.rgb.copy(), scene.alpha.copy()
    rgb[(slice(None), *inner)] = centre.rgb
    alpha[inner] = centre.alpha
    extra = None
    if scene.extra is not None and centre.extra is not None:
        extra = scene.extra.copy()
        extra[(slice(None), *inner)] = centre.extra
    return dataclasses.replace(
        scene,
        tile_id=centre.tile_id,
        rgb=rgb,
        alpha=alpha,
        label_exact=exact,
        label_noisy=noisy,
        extra=extra,
        source_index=centre.source_index,
        meta=dict(centre.meta),
    )


def _ignore_cut_slumps(label: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """``label`` with every slump (8-connected component of 1) that touches ``cut`` set to ignore (255)."""
    from scipy import ndimage

    out = label.copy()
    lab, k = ndimage.label(out == 1, structure=np.ones((3, 3), bool))
    if k:
        touched = np.unique(lab[cut & (lab > 0)])
        out[np.isin(lab, touched[touched > 0])] = IGNORE_INDEX
    return out
