"""One synthetic scene rendered at native resolution, step by step: the acquisition, the terrain and its slumps, the
hard negatives, hill-shading, cloud, radiometry, NoData, dark clamping, labels, EXTRA bands, noisy labels.

Every step draws from the tile's one random generator, in this order: the order is part of the data (a step
moved, added or skipped changes every tile after it), so :func:`render_scene` calls them in a fixed sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rtscore.config.generation import GenerationConfig, SyntheticConfig
from rtscore.data.synthetic._negatives import _bare_patch, _cloud, _lake, _nodata_mask, _noisy_outline, _river, _road
from rtscore.data.synthetic._palette import _region_palette
from rtscore.data.synthetic._rts import _Rts, _RtsGeom
from rtscore.data.synthetic._scene import _paint_rts, _place_rts, _Scene, _terrain
from rtscore.data.tiles import IGNORE_INDEX, PIXEL_SIZE_M, RawTile, TileKind, TilePlan, nominal_pixel_area_m2

# Lake and pond radii as fractions of the rendered tile (physical sizes: fractions of a 1x tile).
_LAKE_SIZE = (0.04, 0.2)
_POND_SIZE = (0.015, 0.05)

_Slumps = list[tuple[_Rts, _RtsGeom]]


@dataclass(frozen=True)
class _Acquisition:
    """The scene's illumination and radiometry: low Arctic sun, mid-morning acquisitions from the south."""

    sun_az: float  # radians
    sun_el: float  # radians
    shade_k: float
    has_dark: bool  # Planet's clamping of deep shadow and dark water to (0, 0, 0)
    gain: np.ndarray  # (3,) per-band gain
    offset: float


@dataclass
class _Labels:
    """Exact labels and the part masks of the complete slumps; which slumps are complete, which cut."""

    label: np.ndarray
    parts: dict[str, np.ndarray]
    complete: _Slumps
    partial: list[_RtsGeom]


def render_scene(plan: TilePlan, cfg: GenerationConfig, fov: int = 1) -> tuple[RawTile, dict[str, np.ndarray]]:
    """Render a scene at native resolution, ``cfg.tile_size`` pixels covering ``fov`` stored tiles across."""
    n = cfg.tile_size
    s = cfg.synthetic_settings
    rng = plan.rng()
    acq = _acquisition(rng, s)
    scene = _terrain(rng, n, _region_palette(plan.region))
    for k in ("water", "bare", "road"):
        scene.parts[k] = np.zeros((n, n), bool)
    slumps = _place_rts(rng, scene, cfg, plan.kind)
    objects = [o for o, _ in slumps]
    n_hard = _hard_negatives(rng, scene, objects, s, fov)
    if acq.has_dark and not scene.parts["water"].any():
        # Clamped pixels need deep shadow or deep water: add a small pond with a pitch-dark centre.
        _lake(rng, scene, objects, size=(_POND_SIZE[0] / fov, _POND_SIZE[1] / fov), pitch_probability=1.0)
    for o, g in slumps:
        _paint_rts(rng, scene, o, g)
    slope = _hill_shade(scene, acq)
    cloud = _cloud_cover(rng, scene, objects, acq, s, fov)
    rgb = _radiometry(rng, scene, acq)
    nodata = _partial_nodata(rng, s, plan.kind, slumps, n)
    has_dark = _clamp_dark(rng, rgb, ~nodata, acq.has_dark)
    labels = _exact_labels(slumps, nodata, n)
    alpha = np.where(~nodata, 255, 0).astype(np.uint8)
    rgb[:, nodata] = 0
    labels.label[nodata] = IGNORE_INDEX
    tile = RawTile(
        tile_id=plan.tile_id,
        region=plan.region,
        rgb=rgb,
        alpha=alpha,
        label_exact=labels.label,
        label_noisy=_noisy_labels(rng, cfg, labels),  # drawn last: image and exact labels never depend on it
        extra=_extra_bands(scene, slope, nodata, s),
        n_objects=len(labels.complete),
        source_index=plan.index,
        rotation=0,
        meta={
            "n_hard_negatives": float(n_hard),
            "has_cloud": float(cloud is not None),
            "has_partial_nodata": float(nodata.any()),
            "has_dark_pixels": float(has_dark),
            "n_partial_objects": float(len(labels.partial)),
            "sun_azimuth_deg": math.degrees(acq.sun_az),
            "sun_elevation_deg": math.degrees(acq.sun_el),
        },
        pixel_area_m2=nominal_pixel_area_m2(1.0),  # rendered at native resolution (downsample_tile scales it)
    )
    parts = labels.parts
    parts.update(bare=scene.parts["bare"], water=scene.parts["water"], road=scene.parts["road"])
    parts["cloud"] = np.zeros((n, n), bool) if cloud is None else cloud
    return tile, parts


def _acquisition(rng: np.random.Generator, s: SyntheticConfig) -> _Acquisition:
    sun_az = math.radians(rng.uniform(130.0, 200.0))
    sun_el = math.radians(rng.uniform(15.0, 40.0))
    shade_k = rng.uniform(0.55, 0.8)
    has_dark = rng.random() < s.dark_pixel_probability
    gain = rng.uniform(0.93, 1.07) * rng.uniform(0.97, 1.03, 3)
    offset = rng.uniform(-4.0, 4.0)
    return _Acquisition(sun_az, sun_el, shade_k, bool(has_dark), gain, offset)


def _hard_negatives(rng: np.random.Generator, scene: _Scene, objects: list[_Rts], s: SyntheticConfig, fov: int) -> int:
    """Lakes, a river, bare patches and roads (with ``hard_negative_probability``); how many were painted."""
    n_hard = 0
    if rng.random() < s.hard_negative_probability:
        has_river = False
        for _ in range(int(rng.integers(1, 4))):
            pick = rng.choice(4, p=[0.28, 0.14, 0.38, 0.2])
            if pick == 1 and has_river:
                pick = 0  # one river per tile: crossing rivers look wrong
            if pick == 0:
                painted = _lake(rng, scene, objects, size=(_LAKE_SIZE[0] / fov, _LAKE_SIZE[1] / fov))
            elif pick == 1:
                painted = has_river = _river(rng, scene, fov)
            elif pick == 2:
                painted = _bare_patch(rng, scene, objects, fov)
            else:
                painted = _road(rng, scene)
            n_hard += int(painted)  # lakes and bare patches are skipped when no place clear of slumps
    return n_hard


def _hill_shade(scene: _Scene, acq: _Acquisition) -> np.ndarray:
    """Hill-shading (Lambertian, relative to flat ground) of the final surface, in place; its slope in degrees."""
    gy, gx = np.gradient(scene.elev, PIXEL_SIZE_M)
    grad2 = gx * gx + gy * gy
    sun_az, sun_el = acq.sun_az, acq.sun_el
    sx, sy, sz = math.sin(sun_az) * math.cos(sun_el), -math.cos(sun_az) * math.cos(sun_el), math.sin(sun_el)
    lit = (np.float32(sz) - gx * np.float32(sx) - gy * np.float32(sy)) / np.sqrt(1.0 + grad2)
    shade = np.clip(1.0 + acq.shade_k * (np.maximum(lit, 0.0) / np.float32(sz) - 1.0), 0.3, scene.cap)
    shade += (1.0 - shade) * scene.water
    scene.rgb *= shade
    return np.degrees(np.arctan(np.sqrt(grad2))).astype(np.float32)


def _cloud_cover(
    rng: np.random.Generator, scene: _Scene, objects: list[_Rts], acq: _Acquisition, s: SyntheticConfig, fov: int
) -> np.ndarray | None:
    """A cloud and its shadow (with ``cloud_probability``), in place; the cloud's mask, None without one."""
    if not rng.random() < s.cloud_probability:
        return None
    n = scene.n
    op, op_shadow = _cloud(rng, scene, objects, acq.sun_az, fov)
    scene.rgb *= 1.0 - 0.55 * op_shadow
    scene.paint((slice(0, n), slice(0, n)), op, np.array([232.0, 235.0, 239.0]) * rng.uniform(0.92, 1.04), 0.0)
    return np.asarray(op > 0.3)


def _radiometry(rng: np.random.Generator, scene: _Scene, acq: _Acquisition) -> np.ndarray:
    """Per-scene gain/tint/offset and a little sensor noise; the uint8 RGB."""
    n = scene.n
    scene.rgb *= acq.gain.astype(np.float32)[:, None, None]
    # (Uniform noise: several times cheaper to draw than normals, and indistinguishable at 0.7 DN std.)
    scene.rgb += np.float32(acq.offset - 1.2) + rng.random((3, n, n), dtype=np.float32) * np.float32(2.4)
    return np.clip(np.rint(scene.rgb), 0, 255).astype(np.uint8)


def _partial_nodata(
    rng: np.random.Generator, s: SyntheticConfig, kind: TileKind, slumps: _Slumps, n: int
) -> np.ndarray:
    """Partial NoData (with ``partial_nodata_probability``), kept off the guaranteed complete slump of a positive."""
    nodata = np.zeros((n, n), bool)
    if rng.random() < s.partial_nodata_probability:
        first = next((g for _, g in slumps if g.complete), None) if kind == "positive" else None
        for _ in range(8):
            nodata = _nodata_mask(rng, n, first)
            if nodata.any():
                break
    return nodata


def _clamp_dark(rng: np.random.Generator, rgb: np.ndarray, valid: np.ndarray, has_dark: bool) -> bool:
    """Planet clamps deep shadow and dark water to (0, 0, 0): valid pixels (alpha 255), labels unchanged; in place.
    Whether the tile has such pixels."""
    has_dark = has_dark and bool(valid.any())
    if has_dark:
        lum = 0.3 * rgb[0].astype(np.float32) + 0.59 * rgb[1] + 0.11 * rgb[2]
        dark = (lum <= rng.uniform(8.0, 20.0)) & valid
        if not dark.any():
            dark.flat[int(np.argmin(np.where(valid, lum, np.inf)))] = True
        rgb[:, dark] = 0
    return has_dark


def _exact_labels(slumps: _Slumps, nodata: np.ndarray, n: int) -> _Labels:
    """Complete slumps 1, slumps cut by the tile edge or by NoData 255 over their whole extent."""
    label = np.zeros((n, n), np.uint8)
    parts = {k: np.zeros((n, n), bool) for k in ("headwall", "floor", "tongue")}
    complete: _Slumps = []
    partial: list[_RtsGeom] = []
    for o, g in slumps:
        if g.complete and not nodata[g.sl][g.mask].any():
            complete.append((o, g))
        else:
            partial.append(g)
    for _, g in complete:
        label[g.sl][g.mask] = 1
        hard_head = g.mask & (g.head >= 0.5)
        parts["headwall"][g.sl] |= hard_head
        parts["tongue"][g.sl] |= g.mask & (g.tongue >= 0.5) & ~hard_head
        parts["floor"][g.sl] |= g.mask & (g.floor >= 0.5) & ~hard_head
    for g in partial:
        label[g.sl][g.mask] = IGNORE_INDEX
    return _Labels(label, parts, complete, partial)


def _extra_bands(scene: _Scene, slope: np.ndarray, nodata: np.ndarray, s: SyntheticConfig) -> np.ndarray | None:
    """The configured EXTRA channels (ndvi, slope) as float32, 0 under NoData; None without EXTRA channels."""
    if not s.extra_channels:
        return None
    bands = {"ndvi": np.clip(scene.ndvi, -1.0, 1.0), "slope": slope}
    extra = np.stack([bands[c] for c in s.extra_channels]).astype(np.float32)
    extra[:, nodata] = 0.0
    return extra


def _noisy_labels(rng: np.random.Generator, cfg: GenerationConfig, labels: _Labels) -> np.ndarray | None:
    """Noisy labels (missed slumps, jittered outlines) when the store writes them; ignore where the exact are."""
    if not cfg.store.write_noisy_labels:
        return None
    n = cfg.tile_size
    nl = cfg.synthetic_settings.noisy_labels
    noisy = np.zeros((n, n), np.uint8)
    for o, g in labels.complete:
        if rng.random() < nl.miss_probability:
            continue
        wsl, outline = _noisy_outline(rng, g.mask, g.sl, n, nl.boundary_jitter_px, o.r)
        noisy[wsl][outline] = 1
    noisy[labels.label == IGNORE_INDEX] = IGNORE_INDEX
    return noisy
