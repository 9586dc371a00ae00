"""Terrain (elevation, hill shading, vegetation) and RTS placement and painting."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rtscore.config.generation import GenerationConfig
from rtscore.data.synthetic._constants import _MID, _RING
from rtscore.data.synthetic._fields import _noise, _smoothstep, _upsample
from rtscore.data.synthetic._palette import _Palette
from rtscore.data.synthetic._rts import _new_rts, _Rts, _rts_geometry, _rts_overlaps, _RtsGeom
from rtscore.data.tiles import PIXEL_SIZE_M, TileKind

# --------------------------------------------------------------------------------------------- scene


@dataclass
class _Scene:
    """Float canvases of one tile while it is composed."""

    n: int
    rgb: np.ndarray  # (3, n, n) float32, DN
    ndvi: np.ndarray  # (n, n)
    elev: np.ndarray  # (n, n) metres
    water: np.ndarray  # 1 = water surface (flat, not hill-shaded)
    cap: np.ndarray  # largest hill-shade gain allowed (headwalls stay in shadow)
    fine: np.ndarray  # pixel-scale texture
    mid: np.ndarray  # few-pixel texture
    slope_mid: tuple[np.ndarray, np.ndarray]  # (dz/dy, dz/dx) of the base terrain on the coarse grid
    parts: dict[str, np.ndarray] = field(default_factory=dict)

    def paint(self, sl: tuple[slice, slice], a: np.ndarray, rgb: np.ndarray, ndvi: float | np.ndarray) -> None:
        """Alpha-blend a colour (3,) or (3, h, w) and an NDVI value into a window, in place."""
        c = self.rgb[:, sl[0], sl[1]]
        col = rgb if rgb.ndim == 3 else rgb.astype(np.float32)[:, None, None]
        c += a * (col - c)
        v = self.ndvi[sl]
        v += a * (ndvi - v)


def _terrain(rng: np.random.Generator, n: int, pal: _Palette) -> _Scene:
    """Fractal elevation, vegetation mosaic and textures of undisturbed tundra."""
    from scipy import ndimage

    m = max(n // _MID, 4)
    relief = pal.relief_m * rng.uniform(0.6, 1.4)
    elev_mid = np.zeros((m, m), np.float32)
    detail = np.zeros((m, m), np.float32)
    # Octaves at fixed pixel scales (pixel size is fixed), amplitude ~ scale^1.1 (fractal, smooth hillslopes).
    for scale in (256.0, 128.0, 64.0, 32.0, 16.0):
        octave = _noise(rng, m, m, scale / _MID, cubic=True) * np.float32(relief * (scale / 256.0) ** 1.1)
        elev_mid += octave
        if scale <= 64.0:
            detail += octave
    # A regional tilt (1-6 deg) makes hillslopes for the slumps to face down.
    tilt = math.tan(math.radians(rng.uniform(1.0, 6.0))) * PIXEL_SIZE_M
    tilt_dir = rng.uniform(0.0, 2.0 * np.pi)
    ty, tx = tilt * math.sin(tilt_dir), tilt * math.cos(tilt_dir)
    gy, gx = np.gradient(elev_mid, _MID * PIXEL_SIZE_M)
    slope_mid = (gy + np.float32(ty / PIXEL_SIZE_M), gx + np.float32(tx / PIXEL_SIZE_M))
    yy = np.arange(n, dtype=np.float32)[:, None]
    xx = np.arange(n, dtype=np.float32)[None, :]
    elev = _upsample(elev_mid, _MID, n, n, cubic=True)
    elev += np.float32(ty) * yy + np.float32(tx) * xx

    # Vegetation state and wetness are smooth: built on the coarse grid.
    veg = 0.5 + pal.veg_bias + 0.22 * _noise(rng, m, m, 40.0 / _MID) + 0.12 * _noise(rng, m, m, 12.0 / _MID)
    wet = 0.45 - detail / np.float32(max(relief * 0.35, 1e-3)) + 0.15 * _noise(rng, m, m, 24.0 / _MID)
    lichen = _noise(rng, m, m, 20.0 / _MID)
    veg = np.clip(_upsample(veg, _MID, n, n), 0.0, 1.0)
    wet = np.clip(_upsample(wet, _MID, n, n), 0.0, 1.0) * np.float32(0.7)
    lichen = _upsample(lichen, _MID, n, n)
    lichen_w = np.float32(pal.lichen_weight) * _smoothstep(0.3, 1.5, lichen)

    fine = ndimage.gaussian_filter(rng.standard_normal((n, n), dtype=np.float32), 0.7) * np.float32(1 / 0.4)
    mid = _noise(rng, n, n, 5.0)
    rgb = np.empty((3, n, n), np.float32)
    tex = 1.0 + 0.05 * fine + 0.06 * mid
    shrub = _smoothstep(0.8, 2.2, mid) * np.float32(0.6)  # dark dwarf-shrub clumps
    for c in range(3):
        base = np.float32(pal.dry[c]) + np.float32(pal.moist[c] - pal.dry[c]) * veg
        base = base + (np.float32(pal.wet[c]) - base) * wet
        base = base + (np.float32(pal.lichen[c]) - base) * lichen_w
        base = base + (np.float32(pal.wet[c] * 0.8) - base) * shrub
        rgb[c] = base * tex * np.float32(pal.brightness)
    ndvi = 0.3 + 0.4 * veg + 0.12 * wet - 0.15 * lichen_w + 0.1 * shrub + 0.02 * mid
    return _Scene(
        n=n,
        rgb=rgb,
        ndvi=ndvi.astype(np.float32),
        elev=elev.astype(np.float32),
        water=np.zeros((n, n), np.float32),
        cap=np.full((n, n), 1.45, np.float32),
        fine=fine,
        mid=mid,
        slope_mid=slope_mid,
    )


def _downslope(scene: _Scene, cy: float, cx: float) -> float:
    """Downslope direction (radians) of the base terrain near (cy, cx), clamped into the tile."""
    gy, gx = scene.slope_mid
    m = gy.shape[0]
    iy = int(np.clip(cy / _MID, 0, m - 1))
    ix = int(np.clip(cx / _MID, 0, m - 1))
    return math.atan2(-float(gy[iy, ix]), -float(gx[iy, ix]))


def _place_rts(
    rng: np.random.Generator, scene: _Scene, cfg: GenerationConfig, kind: TileKind
) -> list[tuple[_Rts, _RtsGeom]]:
    """Draw and rasterise the slumps of a tile.

    Positive tiles get 1..max_rts_per_tile, the first one sized and placed to lie wholly inside; negatives
    sometimes get one cut by the tile edge (as the neighbour tile of a real slump would).
    """
    n = scene.n
    s = cfg.synthetic_settings
    lo, hi = (np.log(f * n / 2.0) for f in s.rts_diameter_fraction)

    def radius() -> float:
        return float(max(np.exp(rng.uniform(lo, hi)), 1.5))

    out: list[tuple[_Rts, _RtsGeom]] = []
    occupied = np.zeros((n + 2 * _RING, n + 2 * _RING), bool)  # labels so far, over the tile and its ring

    def add(o: _Rts) -> bool:
        """Rasterise and keep the slump if it shows in the tile and keeps clear of the others."""
        if any(math.hypot(o.cy - p.cy, o.cx - p.cx) < o.inner + p.inner for p, _ in out):
            return False  # surely overlapping: skip rasterising
        o.theta = _downslope(scene, o.cy, o.cx) + float(rng.normal(0.0, 0.3))
        if out and _rts_overlaps(o, n, occupied):
            return False
        geom = _rts_geometry(o, n)
        if geom is None:
            return False
        y0, y1, x0, x1 = (v + _RING for v in geom.win)
        if (occupied[y0:y1, x0:x1] & geom.halo_ext).any():
            return False
        occupied[y0:y1, x0:x1] |= geom.label_ext
        out.append((o, geom))
        return True

    if kind == "positive":
        o = _new_rts(rng)
        # Clamp the size so the bound disc fits: this one is complete by construction.
        # (At least 2.5 px: the tiniest outlines could miss every pixel centre.)
        o.r = max(min(radius(), (n / 2.0 - 3.0) / o.reach), 2.5)
        b = o.bound
        o.cy, o.cx = (float(rng.uniform(min(b, n / 2), max(n - 1 - b, n / 2))) for _ in range(2))
        if not add(o):
            raise AssertionError("the first slump of a positive tile must rasterise")  # by construction
        for _ in range(int(rng.integers(1, s.max_rts_per_tile + 1)) - 1):
            o = _new_rts(rng)
            o.r = radius()
            for _try in range(8):
                if rng.random() < 0.5:
                    # Next to an existing slump: they cluster on the same slopes.
                    p = out[int(rng.integers(len(out)))][0]
                    ang = rng.uniform(0.0, 2.0 * np.pi)
                    dist = (o.inner + p.inner) * rng.uniform(1.0, 1.6) + rng.uniform(0.0, 0.3 * n)
                    o.cy, o.cx = p.cy + dist * math.sin(ang), p.cx + dist * math.cos(ang)
                else:
                    o.cy, o.cx = (float(rng.uniform(-0.5 * o.bound, n + 0.5 * o.bound)) for _ in range(2))
                if add(o):
                    break
    elif rng.random() < 0.1:
        o = _new_rts(rng)
        o.r = radius()
        along = float(rng.uniform(0.0, n))
        # Centre just outside one edge: the slump is necessarily cut (its centre is outside the tile).
        away = float(rng.uniform(1.0, max(1.5, 0.6 * o.r)))
        side = int(rng.integers(4))
        o.cy, o.cx = [(-away, along), (n - 1 + away, along), (along, -away), (along, n - 1 + away)][side]
        add(o)
    return out


def _paint_rts(rng: np.random.Generator, scene: _Scene, o: _Rts, g: _RtsGeom) -> None:
    """Carve and colour one slump: shadowed headwall, bright barren floor, mid-bright debris tongue."""
    sl = g.sl
    scene.elev[sl] -= g.dep
    fine, mid = scene.fine[sl], scene.mid[sl]
    h, w = g.mask.shape
    lobes = _noise(rng, h, w, max(3.0, o.r / 4.0))  # mud-flow lobes, slumped tundra blocks
    streak = np.sin(np.float32(2.0 * np.pi / o.streak_period) * g.vpx + 1.5 * lobes)  # rills run downslope
    tex = 1.0 + 0.04 * streak + 0.05 * fine + 0.06 * mid + 0.07 * lobes
    # Fresh, wet darker mud below the headwall; drier, lighter sediment towards the outlet.
    fresh = _smoothstep(0.6, -0.8, g.un)
    tan = o.floor_rgb.astype(np.float32)[:, None, None]
    mud = tan * np.float32(0.88)
    floor_col = (tan + (mud - tan) * fresh) * tex
    # Meltwater and shadow pool at the foot of the scarp.
    foot = g.arc * _smoothstep(o.headwall_px + 2.0 + 0.08 * o.r, o.headwall_px, g.sd)
    floor_col *= 1.0 - 0.25 * foot
    # Revegetation: more residual tundra towards the (older) outlet and in patches.
    reveg = np.clip(0.35 * np.clip(g.un, 0.0, 1.0) + 0.3 * (lobes - 0.6) + 0.1 * mid, 0.0, 0.7) * (1.0 - 0.7 * fresh)
    scene.paint(sl, g.floor * (1.0 - reveg), floor_col, 0.08)
    debris = tan * np.array([0.86, 0.84, 0.8], np.float32)[:, None, None] * tex  # wetter, browner debris
    scene.paint(sl, g.tongue * (0.85 - 0.2 * np.clip(mid, 0.0, 1.0)), debris, 0.2)
    head_col = o.head_rgb.astype(np.float32)[:, None, None] * (1.0 + 0.06 * fine)
    scene.paint(sl, g.head, head_col, 0.1)
    cap = scene.cap[sl]
    np.minimum(cap, 1.45 - 0.7 * g.head, out=cap)
