"""Procedural Planet-like tundra scenes with retrogressive thaw slumps: the embedded synthetic data source."""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from rtscore.config.generation import GenerationConfig
from rtscore.data.tiles import IGNORE_INDEX, RawTile, TileKind, TilePlan

PIXEL_SIZE_M = 4.77  # Web Mercator zoom 15, as the real PLANET-RGB tiles (DATA_LAYOUT.md)
_PLAN_SALT = 0x9A1A7  # any fixed constant: keeps the plan shuffle independent of tile streams
_MID = 4  # smooth fields are built on a grid this much coarser than the tile, then upsampled
_N_HARMONICS = 7
_PART_NAMES = ("headwall", "floor", "tongue", "bare", "water", "road", "cloud")
_META_KEYS = (
    "n_hard_negatives",
    "has_cloud",
    "has_partial_nodata",
    "has_dark_pixels",
    "n_partial_objects",
    "sun_azimuth_deg",
    "sun_elevation_deg",
)
_RING = 1  # objects are rasterised one pixel beyond the tile to detect those cut by its edge


# --------------------------------------------------------------------------------------------- planning


def plan_tiles(cfg: GenerationConfig) -> list[TilePlan]:
    """Fix kind, region and id of every source tile of a split, deterministically from the config.

    Args:
        cfg: Generation config of one split.

    Returns:
        One plan per source tile, ``index`` = position in the list.
    """
    s = cfg.synthetic
    kinds: list[TileKind] = (
        ["positive"] * s.n_positive + ["negative"] * s.n_negative + ["full_nodata"] * s.n_full_nodata
    )
    rng = np.random.default_rng([cfg.seed, _PLAN_SALT])
    region_order = [s.regions[i] for i in rng.permutation(len(s.regions))]
    # Round-robin continued across the kind blocks: every region gets about the same number of tiles
    # and of positives, whatever the counts.
    regions = [region_order[i % len(region_order)] for i in range(len(kinds))]
    order = rng.permutation(len(kinds))
    return [
        TilePlan(index=i, tile_id=f"{cfg.split}_{i:06d}", region=regions[j], kind=kinds[j], seed=cfg.seed)
        for i, j in enumerate(order)
    ]


# --------------------------------------------------------------------------------------------- helpers


def _smoothstep(e0: float, e1: float, x: np.ndarray) -> np.ndarray:
    """Hermite ramp from 0 at e0 to 1 at e1 (e1 < e0 gives a falling ramp)."""
    t = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


@functools.lru_cache(maxsize=128)
def _taps(m: int, n: int, f: int, cubic: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights, (n, k), of an f-times upsampling of m samples (pixel-centre aligned)."""
    x = (np.arange(n) + 0.5) / f - 0.5
    j = np.floor(x).astype(np.intp)
    t = (x - j).astype(np.float32)
    if cubic:
        # Uniform cubic B-spline: C2-smooth, so hill-shading of upsampled elevation shows no grid facets.
        idx = j[:, None] + np.arange(-1, 3)
        w = np.stack([(1 - t) ** 3, 3 * t**3 - 6 * t**2 + 4, -3 * t**3 + 3 * t**2 + 3 * t + 1, t**3], 1) / 6
    else:
        idx = j[:, None] + np.arange(2)
        w = np.stack([1 - t, t], 1)
    idx, w = np.clip(idx, 0, m - 1), w.astype(np.float32)
    idx.flags.writeable = w.flags.writeable = False  # cached: shared between calls
    return idx, w


def _upsample(g: np.ndarray, f: int, h: int, w: int, cubic: bool = False) -> np.ndarray:
    """Separable f-times upsampling of a 2-D grid, cropped to (h, w).

    Gathers with precomputed taps: several times faster than ndimage.zoom, and plain numpy (deterministic).
    """
    iy, wy = _taps(g.shape[0], h, f, cubic)
    ix, wx = _taps(g.shape[1], w, f, cubic)
    rows = wy[:, :1] * g[iy[:, 0]]
    for k in range(1, iy.shape[1]):
        rows += wy[:, k : k + 1] * g[iy[:, k]]
    out = rows[:, ix[:, 0]] * wx[:, 0]
    for k in range(1, ix.shape[1]):
        out += rows[:, ix[:, k]] * wx[:, k]
    return out


def _noise(rng: np.random.Generator, h: int, w: int, scale: float, cubic: bool = False) -> np.ndarray:
    """Smooth gaussian noise of unit std with features about ``scale`` pixels across.

    Built on a coarse grid and upsampled, because a wide gaussian filter at full resolution is far too slow.
    """
    cell = max(1, round(scale / 2))
    g = rng.standard_normal((h // cell + 3, w // cell + 3), dtype=np.float32)
    # 0.2821 = std of unit white noise after a sigma-1 2-D gaussian: rescale to unit std.
    g = ndimage.gaussian_filter(g, 1.0, mode="wrap") * np.float32(1.0 / 0.2821)
    if cell == 1:
        return g[1 : 1 + h, 1 : 1 + w]
    # Drop the first coarse cell: edge taps are clamped there.
    return _upsample(g, cell, h + cell, w + cell, cubic)[cell:, cell:]


def _harmonics(rng: np.random.Generator, amp: float) -> tuple[np.ndarray, np.ndarray]:
    """Random low-order Fourier coefficients of an outline perturbation (amplitude falling with order)."""
    k = np.arange(1, _N_HARMONICS + 1)
    mag = amp * rng.uniform(0.2, 1.0, _N_HARMONICS) / k**0.9
    phase = rng.uniform(0.0, 2.0 * np.pi, _N_HARMONICS)
    return mag * np.cos(phase), mag * np.sin(phase)


def _blob(
    ys: np.ndarray,
    xs: np.ndarray,
    cy: float,
    cx: float,
    r: float,
    ea: float,
    theta: float,
    coef: tuple[np.ndarray, np.ndarray],
    taper: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Signed distance (pixels, positive inside) to a perturbed ellipse.

    The ellipse has semi-axes ``r * ea`` along direction ``theta`` and ``r`` across; its normalised radius is
    modulated by the harmonics ``coef``, so outlines are irregular but closed and star-shaped. ``taper`` > 0
    narrows the forward half (teardrop: a slump bowl narrowing to its outlet).

    Returns:
        (sd, un, vn, rho): signed distance, normalised along/across coordinates and normalised radius.
    """
    ct, st = np.float32(math.cos(theta)), np.float32(math.sin(theta))
    dx = (xs - np.float32(cx)).astype(np.float32)
    dy = (ys - np.float32(cy)).astype(np.float32)
    un = (dx * ct + dy * st) / np.float32(r * ea)
    vn = (dy * ct - dx * st) / np.float32(r)
    vt = vn * (1.0 + np.float32(taper) * np.maximum(un, 0.0)) if taper else vn
    r2 = un * un + vt * vt + np.float32(1e-9)
    rho = np.sqrt(r2)
    c1, s1 = un / rho, vt / rho
    # cos(k phi), sin(k phi) by the angle-addition recurrence: no atan2, no trig per pixel.
    ck, sk = c1, s1
    a, b = coef
    p = np.float32(a[0]) * ck + np.float32(b[0]) * sk
    for i in range(1, len(a)):
        ck, sk = ck * c1 - sk * s1, sk * c1 + ck * s1
        p += np.float32(a[i]) * ck + np.float32(b[i]) * sk
    # Pixels per unit of normalised radius along this ray, so sd is (roughly) in pixels.
    px = np.float32(r) * np.sqrt((np.float32(ea * ea) * un * un + vt * vt + np.float32(1e-9)) / r2)
    sd = (1.0 + p - rho) * px
    return sd, un, vn, rho


def _window(cy: float, cx: float, bound: float, n: int, ring: int = 0) -> tuple[int, int, int, int] | None:
    """Pixel window [y0, y1) x [x0, x1) of a disc, clipped to the tile grown by ``ring`` pixels."""
    y0, y1 = max(-ring, math.floor(cy - bound)), min(n + ring, math.ceil(cy + bound) + 1)
    x0, x1 = max(-ring, math.floor(cx - bound)), min(n + ring, math.ceil(cx + bound) + 1)
    if y0 >= y1 or x0 >= x1:
        return None
    return y0, y1, x0, x1


def _grid(win: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    y0, y1, x0, x1 = win
    return np.arange(y0, y1, dtype=np.float32)[:, None], np.arange(x0, x1, dtype=np.float32)[None, :]


# --------------------------------------------------------------------------------------------- palette


@dataclass(frozen=True)
class _Palette:
    """Region look: vegetation endmember colours and terrain character."""

    moist: np.ndarray  # green moist tundra
    dry: np.ndarray  # olive/brown shrub and tussock tundra
    wet: np.ndarray  # dark wet sedge
    lichen: np.ndarray  # pale lichen heath
    lichen_weight: float
    veg_bias: float
    relief_m: float
    brightness: float


def _region_palette(region: str) -> _Palette:
    """Deterministic region palette (crc32 of the name: stable across processes, unlike hash())."""
    r = np.random.default_rng(zlib.crc32(region.encode("utf-8")))
    brown = r.uniform(-1.0, 1.0)  # -1 greener regions, +1 browner (drier / later season)
    return _Palette(
        moist=np.array([74.0, 98.0, 56.0]) + brown * np.array([7.0, 2.0, -3.0]) + r.normal(0, 3.5, 3),
        dry=np.array([106.0, 104.0, 72.0]) + brown * np.array([8.0, 3.0, -2.0]) + r.normal(0, 3.5, 3),
        wet=np.array([58.0, 77.0, 54.0]) + r.normal(0, 3.0, 3),
        lichen=np.array([120.0, 121.0, 96.0]) + r.normal(0, 3.5, 3),
        lichen_weight=float(r.uniform(0.0, 0.45)),
        veg_bias=float(r.uniform(-0.2, 0.2)),
        relief_m=float(np.exp(r.uniform(np.log(6.0), np.log(40.0)))),
        brightness=float(r.uniform(0.93, 1.07)),
    )


def _barren_colour(rng: np.random.Generator) -> np.ndarray:
    """Grey-brown of exposed mud / thawed sediment (RTS floors and look-alike bare patches)."""
    grey = rng.uniform(0.0, 1.0)  # wet grey silt ... dry tan sediment
    base = np.array([152.0, 142.0, 124.0]) + grey * np.array([-12.0, -6.0, 2.0])
    col = base * rng.uniform(0.85, 1.12) + rng.normal(0.0, 2.0, 3)
    col[2] = min(col[2], col[1] - 3.0)  # never bluish/pink: mud is grey-brown
    return col


# --------------------------------------------------------------------------------------------- RTS geometry


@dataclass
class _Rts:
    """One slump: a horseshoe scar (headwall arc + floor) opening downslope, and an optional debris tongue."""

    ea: float  # scar elongation along the slope
    coef: tuple[np.ndarray, np.ndarray]
    c0: float  # headwall covers directions whose cosine to upslope exceeds c0 (c0 < 0: > 180 deg arc)
    hw_frac: float
    hw_var: tuple[float, float, float, float]
    taper: float
    tongue: tuple[float, float, float, float, tuple[np.ndarray, np.ndarray]] | None  # off, len, width, shift, coef
    floor_rgb: np.ndarray
    head_rgb: np.ndarray
    streak_period: float
    r: float = 1.0
    cy: float = 0.0
    cx: float = 0.0
    theta: float = 0.0  # downslope direction (radians, image x/y)

    @property
    def reach(self) -> float:
        """Farthest extent of the object in units of r (conservative)."""
        amp = float(np.hypot(*self.coef).sum())
        out = max(self.ea, 1.0) * (1.0 + amp)
        if self.tongue is not None:
            off, tl, tw, shift, tc = self.tongue
            tamp = float(np.hypot(*tc).sum())
            out = max(out, off + abs(shift) + max(tl, tw) * (1.0 + tamp))
        return out

    @property
    def inner(self) -> float:
        """Radius (px) of a disc surely inside the scar: closer centres surely overlap."""
        return self.r * min(self.ea, 1.0) * (1.0 - float(np.hypot(*self.coef).sum()))

    @property
    def bound(self) -> float:
        return self.r * self.reach + 2.0

    @property
    def headwall_px(self) -> float:
        # Headwalls are a few metres wide: 1-7 px at 4.77 m, growing slowly with the slump.
        return float(np.clip(self.hw_frac * self.r, 1.2, 7.0))

    @property
    def depth_m(self) -> float:
        # Headwall height ~2 m for small slumps to ~15 m for kilometre-scale ones.
        return float(np.clip(1.5 + 0.007 * 2.0 * self.r * PIXEL_SIZE_M, 1.5, 15.0))


def _new_rts(rng: np.random.Generator) -> _Rts:
    """Draw the shape and colours of a slump (size and position are set by the caller)."""
    tongue = None
    if rng.random() < 0.65:
        tongue = (
            float(rng.uniform(0.6, 0.95)),
            float(rng.uniform(0.4, 1.1)),
            float(rng.uniform(0.3, 0.6)),
            float(rng.uniform(-0.15, 0.15)),
            _harmonics(rng, 0.12),
        )
    floor = _barren_colour(rng)
    return _Rts(
        ea=float(rng.uniform(0.85, 1.5)),
        coef=_harmonics(rng, rng.uniform(0.08, 0.2)),
        c0=float(rng.uniform(-0.5, -0.15)),
        hw_frac=float(rng.uniform(0.06, 0.11)),
        hw_var=tuple(float(v) for v in rng.uniform(-0.2, 0.2, 4)),
        taper=float(rng.uniform(0.0, 0.9)),
        tongue=tongue,
        floor_rgb=floor,
        head_rgb=np.array([56.0, 51.0, 43.0]) * rng.uniform(0.75, 1.1),
        streak_period=float(rng.uniform(3.0, 8.0)),
    )


@dataclass
class _RtsGeom:
    """A slump rasterised into its in-tile window (soft alphas for painting, a hard mask for labels)."""

    sl: tuple[slice, slice]
    floor: np.ndarray
    head: np.ndarray
    tongue: np.ndarray
    mask: np.ndarray
    dep: np.ndarray  # elevation change (m, positive = lowered)
    un: np.ndarray  # along-slope coordinate, in scar radii
    vpx: np.ndarray  # across-slope coordinate, pixels
    sd: np.ndarray  # signed distance to the scar outline (px)
    arc: np.ndarray  # 1 on the headwall arc, 0 on the open (downslope) side
    complete: bool
    win: tuple[int, int, int, int]  # rasterised window, tile coordinates, may include the ring (-1, n)
    label_ext: np.ndarray  # label extent over ``win``
    halo_ext: np.ndarray  # label extent grown by ~2 px over ``win``


def _tongue_sd(o: _Rts, ys: np.ndarray, xs: np.ndarray) -> np.ndarray | None:
    """Signed distance (px) to the debris tongue: a lobe centred downslope of the scar."""
    if o.tongue is None:
        return None
    off, tl, tw, shift, tc = o.tongue
    ct, st = math.cos(o.theta), math.sin(o.theta)
    ty = o.cy + o.r * (off * st + shift * ct)
    tx = o.cx + o.r * (off * ct - shift * st)
    return _blob(ys, xs, ty, tx, o.r * tw, tl / tw, o.theta, tc)[0]


def _rts_overlaps(o: _Rts, n: int, occupied: np.ndarray, step: int = 4, grow: float = 5.0) -> bool:
    """Cheap pre-check on every ``step``-th pixel: does the slump, grown by ``grow`` px, hit ``occupied``?

    Rejecting overlapping candidates here avoids rasterising them in full (large ones cost milliseconds).
    """
    win = _window(o.cy, o.cx, o.bound, n, ring=_RING)
    if win is None:
        return False
    y0, y1, x0, x1 = win
    ys = np.arange(y0, y1, step, dtype=np.float32)[:, None]
    xs = np.arange(x0, x1, step, dtype=np.float32)[None, :]
    hit = _blob(ys, xs, o.cy, o.cx, o.r, o.ea, o.theta, o.coef, o.taper)[0] >= -grow
    sd_t = _tongue_sd(o, ys, xs)
    if sd_t is not None:
        hit |= sd_t >= -grow
    return bool((hit & occupied[y0 + _RING : y1 + _RING : step, x0 + _RING : x1 + _RING : step]).any())


def _rts_geometry(o: _Rts, n: int) -> _RtsGeom | None:
    """Rasterise a slump; ``complete`` is False when any of it lies outside the tile.

    The object is rasterised one pixel beyond the tile: a connected object crossing the tile edge always
    covers some pixel of that ring, so a ring hit means "cut by the edge" (also for objects larger than the
    tile), without rasterising the part far outside. Objects touching the border pixels count as cut too.
    """
    win = _window(o.cy, o.cx, o.bound, n, ring=_RING)
    if win is None:
        return None
    ys, xs = _grid(win)
    sd, un, vn, rho = _blob(ys, xs, o.cy, o.cx, o.r, o.ea, o.theta, o.coef, o.taper)
    # Cosine between the pixel's direction and upslope: the headwall is the upslope arc of the scar.
    cos_up = -un / rho
    arc = _smoothstep(o.c0, o.c0 + 0.3, cos_up)
    # Sharp at the scarp, diffuse where the scar grades into tundra (flanks and outlet).
    a_scar = np.clip(sd / (1.0 + 2.5 * (1.0 - arc)) + 0.5, 0.0, 1.0)
    # Headwall width varies along the arc (2nd/3rd harmonics of the direction).
    c = -cos_up
    sn = np.copysign(np.sqrt(np.clip(1.0 - c * c, 0.0, 1.0)), vn)
    a2, b2, a3, b3 = o.hw_var
    var = (
        1.0
        + a2 * (c * c - sn * sn)
        + b2 * 2.0 * c * sn
        + a3 * c * (4.0 * c * c - 3.0)
        + b3 * sn * (3.0 - 4.0 * sn * sn)
    )
    hw = o.headwall_px * arc * var
    head = a_scar * np.clip(hw - sd + 0.5, 0.0, 1.0) * _smoothstep(0.0, 0.3, arc)
    floor = a_scar - head
    # The floor is lowered by the headwall height: steep across the headwall, grading out towards the outlet.
    ramp = np.maximum(hw + (1.0 - arc) * 0.4 * o.r, 1.0)
    dep = o.depth_m * _smoothstep(0.0, 1.0, sd / ramp) * _smoothstep(1.0, -0.2, un)
    label = sd >= 0.0
    halo = sd >= -2.0  # the label grown by ~2 px: slumps keep a gap between them
    tongue = np.zeros_like(a_scar)
    sd_t = _tongue_sd(o, ys, xs)
    if sd_t is not None:
        tw = o.tongue[2]  # type: ignore[index]
        tongue = np.clip(sd_t / 1.5 + 0.5, 0.0, 1.0) * (1.0 - a_scar)  # softer lobate edge
        label |= sd_t >= 0.0
        halo |= sd_t >= -2.0
        # Debris is a low deposit: raises the surface a little.
        dep = dep - 0.25 * o.depth_m * _smoothstep(0.0, 0.3 * o.r * tw + 1.0, sd_t) * (1.0 - a_scar)
    y0, y1, x0, x1 = win
    iy0, ix0 = max(0, -y0), max(0, -x0)
    iy1, ix1 = (y1 - y0) - max(0, y1 - n), (x1 - x0) - max(0, x1 - n)
    inner = (slice(iy0, iy1), slice(ix0, ix1))
    mask = label[inner]
    if iy1 <= iy0 or ix1 <= ix0 or not mask.any():
        return None
    # Cut by the tile edge: some labelled pixel in the ring. Touching the border row or column counts too,
    # since the outline may still cross the edge between pixel centres.
    cut = int(label.sum()) != int(mask.sum())
    cut = cut or bool(mask[0].any() and y0 + iy0 == 0) or bool(mask[-1].any() and y0 + iy1 == n)
    cut = cut or bool(mask[:, 0].any() and x0 + ix0 == 0) or bool(mask[:, -1].any() and x0 + ix1 == n)
    return _RtsGeom(
        sl=(slice(y0 + iy0, y0 + iy1), slice(x0 + ix0, x0 + ix1)),
        floor=floor[inner],
        head=head[inner],
        tongue=tongue[inner],
        mask=mask,
        dep=dep[inner],
        un=un[inner],
        vpx=(vn * np.float32(o.r))[inner],
        sd=sd[inner],
        arc=arc[inner],
        complete=not cut,
        win=win,
        label_ext=label,
        halo_ext=halo,
    )


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
    s = cfg.synthetic
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


# --------------------------------------------------------------------------------------------- hard negatives


def _clear_of(cy: float, cx: float, r: float, rts: Sequence[_Rts]) -> bool:
    return all(math.hypot(cy - o.cy, cx - o.cx) > r + 0.8 * o.bound for o in rts)


def _centre(
    rng: np.random.Generator, n: int, r: float, rts: Sequence[_Rts], strict: bool = True
) -> tuple[float, float] | None:
    """A centre in the tile at least ``r`` away from slumps (look-alikes, not overlaps).

    Returns None when a few tries find no such place and ``strict``; otherwise the last try.
    """
    cy = cx = n / 2.0
    for _ in range(8):
        cy, cx = float(rng.uniform(0, n)), float(rng.uniform(0, n))
        if _clear_of(cy, cx, r, rts):
            return cy, cx
    return None if strict else (cy, cx)


def _lake(
    rng: np.random.Generator,
    scene: _Scene,
    rts: Sequence[_Rts],
    size: tuple[float, float] = (0.04, 0.2),
    pitch_probability: float = 0.4,
) -> bool:
    """Thermokarst lake: dark smooth blob, shallow margin, sometimes a pitch-dark deep centre."""
    n = scene.n
    r = max(n * float(rng.uniform(*size)), 3.0)
    ea = float(rng.uniform(1.0, 2.0))
    coef = _harmonics(rng, 0.15)
    theta = float(rng.uniform(0, np.pi))
    at = _centre(rng, n, r * (1.3 * ea + 0.3), rts)  # lake and its graded banks
    pitch = rng.random() < pitch_probability
    shallow = np.array([60.0, 74.0, 72.0]) + rng.normal(0, 4, 3)
    deep = np.array([20.0, 29.0, 42.0]) * rng.uniform(0.8, 1.2)
    if at is None:
        return False
    cy, cx = at
    win = _window(cy, cx, r * (1.5 * ea + 0.3) + 4, n)  # room for the graded banks
    if win is None:
        return False
    ys, xs = _grid(win)
    sd, _, _, _ = _blob(ys, xs, cy, cx, r, ea, theta, coef)
    a = np.clip(sd / 1.2 + 0.5, 0.0, 1.0)
    if not a.any():
        return False
    sl = (slice(win[0], win[1]), slice(win[2], win[3]))
    t = _smoothstep(0.0, 0.35 * r, sd)
    col = shallow[:, None, None] + (deep - shallow)[:, None, None] * t
    if pitch:
        col = col * (1.0 - 0.85 * _smoothstep(0.3 * r, 0.55 * r, sd))
    col = col.astype(np.float32) * (1.0 + 0.02 * scene.fine[sl])
    scene.paint(sl, a, col, -0.05 - 0.2 * t)
    # Water is flat: level the surface (slope channel ~0, no hill-shading), with banks graded over a
    # band so that a lake on tilted ground does not become a cliff.
    e = scene.elev[sl]
    level = float(np.percentile(e[a > 0.5], 20)) if (a > 0.5).any() else float(e.min())
    e += _smoothstep(-0.25 * r - 2.0, 0.0, sd) * (level - e)
    w = scene.water[sl]
    np.maximum(w, a, out=w)
    scene.parts["water"][sl] |= a > 0.5
    return True


def _band(rng: np.random.Generator, n: int, wiggle: float) -> tuple[np.ndarray, np.ndarray]:
    """Distance (px) to a meandering centre line across the tile, and the along-line coordinate."""
    theta = rng.uniform(0.0, np.pi)
    py, px = rng.uniform(0.2 * n, 0.8 * n, 2)
    yy = np.arange(n, dtype=np.float32)[:, None] - np.float32(py)
    xx = np.arange(n, dtype=np.float32)[None, :] - np.float32(px)
    ct, st = np.float32(math.cos(theta)), np.float32(math.sin(theta))
    s = xx * ct + yy * st
    t = yy * ct - xx * st
    f = np.zeros_like(s)
    df = np.zeros_like(s)
    for _ in range(3):
        lam = rng.uniform(0.4, 1.6) * n
        amp = lam * rng.uniform(0.0, wiggle)
        ph = rng.uniform(0, 2 * np.pi)
        k = np.float32(2.0 * np.pi / lam)
        arg = k * s + np.float32(ph)
        f += np.float32(amp) * np.sin(arg)
        df += np.float32(amp) * k * np.cos(arg)
    # Perpendicular distance to the curve t = f(s), first order in its slope.
    return np.abs(t - f) / np.sqrt(1.0 + df * df), s


def _river(rng: np.random.Generator, scene: _Scene) -> bool:
    """Meandering dark river with a greener riparian fringe."""
    n = scene.n
    dist, s = _band(rng, n, 0.12)
    w = rng.uniform(2.0, 0.04 * n + 3.0) * (1.0 + 0.25 * np.sin(s * np.float32(2 * np.pi / (0.7 * n))))
    rip = rng.uniform(2.0, 7.0)
    sl = (slice(0, n), slice(0, n))
    a_rip = np.clip(w / 2 + rip - dist, 0.0, 1.0) * 0.45
    scene.paint(sl, a_rip, np.array([55.0, 78.0, 50.0]), 0.75)
    a = np.clip(w / 2 - dist + 0.5, 0.0, 1.0)
    t = _smoothstep(0.0, 0.5, (w / 2 - dist) / np.maximum(w / 2, 1.0))
    shallow = np.array([64.0, 76.0, 74.0]) + rng.normal(0, 4, 3)
    deep = np.array([24.0, 33.0, 45.0]) * rng.uniform(0.8, 1.2)
    col = (shallow[:, None, None] + (deep - shallow)[:, None, None] * t).astype(np.float32)
    scene.paint(sl, a, col, -0.1 - 0.1 * t)
    np.maximum(scene.water, a, out=scene.water)
    scene.parts["water"] |= a > 0.5
    return True


def _road(rng: np.random.Generator, scene: _Scene) -> bool:
    """Gravel road (thin bright line) or a winter/ATV track (faint double line)."""
    n = scene.n
    dist, _ = _band(rng, n, 0.03)
    sl = (slice(0, n), slice(0, n))
    if rng.random() < 0.5:
        w = rng.uniform(1.0, 2.6)
        a = np.clip(w / 2 - dist + 0.5, 0.0, 1.0)
        scene.paint(sl, a, np.array([170.0, 162.0, 145.0]) * rng.uniform(0.9, 1.08), 0.08)
    else:
        off = rng.uniform(1.5, 2.5)
        a = np.clip(0.9 - np.abs(dist - off), 0.0, 1.0) * rng.uniform(0.4, 0.7)
        scene.paint(sl, a, np.array([132.0, 126.0, 104.0]) * rng.uniform(0.9, 1.1), 0.25)
    scene.parts["road"] |= a > 0.3
    return True


def _bare_patch(rng: np.random.Generator, scene: _Scene, rts: Sequence[_Rts]) -> bool:
    """Barren blob coloured like a slump floor but with no headwall or depression: the key look-alike."""
    n = scene.n
    r = n * float(np.exp(rng.uniform(np.log(0.02), np.log(0.14))))
    r = max(r, 2.0)
    ea = float(rng.uniform(0.8, 1.6))
    coef = _harmonics(rng, 0.18)
    theta = float(rng.uniform(0, 2 * np.pi))
    at = _centre(rng, n, r * ea * 1.3, rts)
    col = _barren_colour(rng) * rng.uniform(0.9, 1.05)
    if at is None:
        return False
    cy, cx = at
    win = _window(cy, cx, r * max(ea, 1.0) * 1.7 + 3, n)
    if win is None:
        return False
    ys, xs = _grid(win)
    sd, _, _, _ = _blob(ys, xs, cy, cx, r, ea, theta, coef)
    sl = (slice(win[0], win[1]), slice(win[2], win[3]))
    mid = scene.mid[sl]
    a = np.clip(sd / 2.5 + 0.5, 0.0, 1.0) * np.clip(0.85 + 0.3 * mid, 0.0, 1.0)
    tex = 1.0 + 0.05 * scene.fine[sl] + 0.05 * mid
    scene.paint(sl, a, col.astype(np.float32)[:, None, None] * tex, 0.1)
    scene.parts["bare"][sl] |= a > 0.5
    return True


def _cloud(
    rng: np.random.Generator, scene: _Scene, rts: Sequence[_Rts], sun_az: float
) -> tuple[np.ndarray, np.ndarray]:
    """Opacity of a soft cumulus and of its shadow, displaced away from the sun."""
    n = scene.n
    m = max(n // _MID, 4)
    rc = n * rng.uniform(0.12, 0.4)
    cy, cx = _centre(rng, n, rc * 0.7, rts, strict=False)  # type: ignore[misc]
    dist = n * rng.uniform(0.06, 0.25)
    # Azimuth is clockwise from north (image up): the sun lies at (sin az, -cos az); shadows fall opposite.
    sy, sx = dist * math.cos(sun_az), -dist * math.sin(sun_az)
    pad = math.ceil(dist / _MID) + 1
    noise = _noise(rng, m + 2 * pad, m + 2 * pad, m / 6.0)
    opmax = rng.uniform(0.6, 0.95)
    gain = rng.uniform(1.1, 2.0)

    def opacity(oy: float, ox: float) -> np.ndarray:
        iy, ix = pad - round(oy / _MID), pad - round(ox / _MID)
        nz = noise[iy : iy + m, ix : ix + m]
        yy = (np.arange(m, dtype=np.float32)[:, None] + 0.5) * _MID - (cy + oy)
        xx = (np.arange(m, dtype=np.float32)[None, :] + 0.5) * _MID - (cx + ox)
        d = np.sqrt(yy * yy + xx * xx) / np.float32(rc)
        op = np.clip(gain * (1.0 - d + 0.35 * nz), 0.0, 1.0) * np.float32(opmax)
        return _upsample(op, _MID, n, n, cubic=True)

    return opacity(0.0, 0.0), opacity(sy, sx)


def _nodata_mask(rng: np.random.Generator, n: int, keep: _RtsGeom | None) -> np.ndarray:
    """Straight-edged NoData as on a basemap edge: a strip along one side or a cut corner.

    The edge is pushed back, if needed, so that the region stays clear of the slump ``keep``.
    """
    if rng.random() < 0.6:
        theta = rng.integers(4) * (np.pi / 2) + rng.normal(0.0, math.radians(1.5))
        frac = rng.uniform(0.05, 0.45)
    else:
        theta = np.pi / 4 + rng.integers(4) * (np.pi / 2) + rng.uniform(-0.35, 0.35)
        frac = rng.uniform(0.03, 0.3)
    yy = np.arange(n, dtype=np.float32)[:, None]
    xx = np.arange(n, dtype=np.float32)[None, :]
    proj = xx * np.float32(math.cos(theta)) + yy * np.float32(math.sin(theta))
    thr = float(np.quantile(proj[::4, ::4], 1.0 - frac))
    if keep is not None:
        thr = max(thr, float(proj[keep.sl][keep.mask].max()) + 1.5)
    return proj > thr


def _noisy_outline(
    rng: np.random.Generator, mask: np.ndarray, sl: tuple[slice, slice], n: int, jitter: float, r: float
) -> tuple[tuple[slice, slice], np.ndarray]:
    """An annotator's outline of one object: boundary displaced by a smooth field of ~``jitter`` px.

    The mask is blurred and thresholded at a spatially varying level (cheaper than distance transforms);
    the blur also rounds off corners and drops thin parts, as hand-drawn polygons do.
    """
    sigma = max(jitter, 0.7)
    pad = math.ceil(4.0 * sigma) + 2
    y0, y1 = max(0, sl[0].start - pad), min(n, sl[0].stop + pad)
    x0, x1 = max(0, sl[1].start - pad), min(n, sl[1].stop + pad)
    big = np.zeros((y1 - y0, x1 - x0), bool)
    big[sl[0].start - y0 : sl[0].stop - y0, sl[1].start - x0 : sl[1].stop - x0] = mask
    win = (slice(y0, y1), slice(x0, x1))
    if jitter <= 0:
        return win, big
    bias = jitter * rng.uniform(-0.6, 0.6)  # some annotators draw loose, some tight
    shift = bias + 0.8 * jitter * _noise(rng, y1 - y0, x1 - x0, max(3.0, 0.5 * r))  # outward, px
    soft = ndimage.gaussian_filter(big.astype(np.float32), sigma)
    # A blurred straight edge has value Phi(-d / sigma) at distance d outside it (tanh approximation of Phi).
    level = 0.5 - 0.5 * np.tanh(0.8 * shift / sigma)
    return win, soft > level


# --------------------------------------------------------------------------------------------- rendering


def _empty_tile(plan: TilePlan, cfg: GenerationConfig) -> RawTile:
    n = cfg.tile_size
    ignore = np.full((n, n), IGNORE_INDEX, np.uint8)
    extra = cfg.synthetic.extra_channels
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
    )


def render_tile_with_parts(plan: TilePlan, cfg: GenerationConfig) -> tuple[RawTile, dict[str, np.ndarray]]:
    """Render a tile and also return boolean masks of its parts (for checks and debugging).

    Args:
        plan: The tile's plan (kind, region, seed, index).
        cfg: Generation config (tile size, scene settings, store options).

    Returns:
        The tile, and masks "headwall", "floor", "tongue" (complete slumps), "bare", "water", "road", "cloud".
    """
    n = cfg.tile_size
    if plan.kind == "full_nodata":
        empty = np.zeros((n, n), bool)
        return _empty_tile(plan, cfg), {k: empty for k in _PART_NAMES}
    s = cfg.synthetic
    rng = plan.rng()
    pal = _region_palette(plan.region)

    # Low Arctic sun, mid-morning acquisitions from the south.
    sun_az = math.radians(rng.uniform(130.0, 200.0))
    sun_el = math.radians(rng.uniform(15.0, 40.0))
    shade_k = rng.uniform(0.55, 0.8)
    has_dark = rng.random() < s.dark_pixel_probability
    gain = rng.uniform(0.93, 1.07) * rng.uniform(0.97, 1.03, 3)
    offset = rng.uniform(-4.0, 4.0)

    scene = _terrain(rng, n, pal)
    for k in ("water", "bare", "road"):
        scene.parts[k] = np.zeros((n, n), bool)

    slumps = _place_rts(rng, scene, cfg, plan.kind)
    objects = [o for o, _ in slumps]

    n_hard = 0
    if rng.random() < s.hard_negative_probability:
        has_river = False
        for _ in range(int(rng.integers(1, 4))):
            pick = rng.choice(4, p=[0.28, 0.14, 0.38, 0.2])
            if pick == 1 and has_river:
                pick = 0  # one river per tile: crossing rivers look wrong
            if pick == 0:
                painted = _lake(rng, scene, objects)
            elif pick == 1:
                painted = has_river = _river(rng, scene)
            elif pick == 2:
                painted = _bare_patch(rng, scene, objects)
            else:
                painted = _road(rng, scene)
            n_hard += int(painted)  # lakes and bare patches are skipped when no place clear of slumps

    if has_dark and not scene.parts["water"].any():
        # Clamped pixels need deep shadow or deep water: add a small pond with a pitch-dark centre.
        _lake(rng, scene, objects, size=(0.015, 0.05), pitch_probability=1.0)

    for o, g in slumps:
        _paint_rts(rng, scene, o, g)

    # Hill-shading (Lambertian, relative to flat ground) and slope from the final surface.
    gy, gx = np.gradient(scene.elev, PIXEL_SIZE_M)
    grad2 = gx * gx + gy * gy
    sx, sy, sz = math.sin(sun_az) * math.cos(sun_el), -math.cos(sun_az) * math.cos(sun_el), math.sin(sun_el)
    lit = (np.float32(sz) - gx * np.float32(sx) - gy * np.float32(sy)) / np.sqrt(1.0 + grad2)
    shade = np.clip(1.0 + shade_k * (np.maximum(lit, 0.0) / np.float32(sz) - 1.0), 0.3, scene.cap)
    shade += (1.0 - shade) * scene.water
    scene.rgb *= shade
    slope = np.degrees(np.arctan(np.sqrt(grad2))).astype(np.float32)

    has_cloud = rng.random() < s.cloud_probability
    cloud = np.zeros((n, n), bool)
    if has_cloud:
        op, op_shadow = _cloud(rng, scene, objects, sun_az)
        scene.rgb *= 1.0 - 0.55 * op_shadow
        scene.paint((slice(0, n), slice(0, n)), op, np.array([232.0, 235.0, 239.0]) * rng.uniform(0.92, 1.04), 0.0)
        cloud = op > 0.3

    # Radiometry: per-scene gain/tint/offset and a little sensor noise.
    scene.rgb *= gain.astype(np.float32)[:, None, None]
    # (Uniform noise: several times cheaper to draw than normals, and indistinguishable at 0.7 DN std.)
    scene.rgb += np.float32(offset - 1.2) + rng.random((3, n, n), dtype=np.float32) * np.float32(2.4)
    rgb = np.clip(np.rint(scene.rgb), 0, 255).astype(np.uint8)

    # Partial NoData, kept off the guaranteed complete slump of a positive tile.
    nodata = np.zeros((n, n), bool)
    if rng.random() < s.partial_nodata_probability:
        first = next((g for _, g in slumps if g.complete), None) if plan.kind == "positive" else None
        for _ in range(8):
            nodata = _nodata_mask(rng, n, first)
            if nodata.any():
                break
    valid = ~nodata

    # Planet clamps deep shadow and dark water to (0, 0, 0): valid pixels (alpha 255), labels unchanged.
    has_dark = has_dark and bool(valid.any())
    if has_dark:
        lum = 0.3 * rgb[0].astype(np.float32) + 0.59 * rgb[1] + 0.11 * rgb[2]
        dark = (lum <= rng.uniform(8.0, 20.0)) & valid
        if not dark.any():
            dark.flat[int(np.argmin(np.where(valid, lum, np.inf)))] = True
        rgb[:, dark] = 0

    # Labels: complete slumps 1, slumps cut by the tile edge or by NoData 255 over their whole extent.
    label = np.zeros((n, n), np.uint8)
    parts = {k: np.zeros((n, n), bool) for k in ("headwall", "floor", "tongue")}
    complete: list[tuple[_Rts, _RtsGeom]] = []
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
    alpha = np.where(valid, 255, 0).astype(np.uint8)
    rgb[:, nodata] = 0
    label[nodata] = IGNORE_INDEX

    extra = None
    if s.extra_channels:
        bands = {"ndvi": np.clip(scene.ndvi, -1.0, 1.0), "slope": slope}
        extra = np.stack([bands[c] for c in s.extra_channels]).astype(np.float32)
        extra[:, nodata] = 0.0

    noisy = None
    if cfg.store.write_noisy_labels:
        # Drawn last so the image and exact labels do not depend on whether noisy labels are written.
        nl = cfg.synthetic.noisy_labels
        noisy = np.zeros((n, n), np.uint8)
        for o, g in complete:
            if rng.random() < nl.miss_probability:
                continue
            wsl, outline = _noisy_outline(rng, g.mask, g.sl, n, nl.boundary_jitter_px, o.r)
            noisy[wsl][outline] = 1
        noisy[label == IGNORE_INDEX] = IGNORE_INDEX

    tile = RawTile(
        tile_id=plan.tile_id,
        region=plan.region,
        rgb=rgb,
        alpha=alpha,
        label_exact=label,
        label_noisy=noisy,
        extra=extra,
        n_objects=len(complete),
        source_index=plan.index,
        rotation=0,
        meta={
            "n_hard_negatives": float(n_hard),
            "has_cloud": float(has_cloud),
            "has_partial_nodata": float(nodata.any()),
            "has_dark_pixels": float(has_dark),
            "n_partial_objects": float(len(partial)),
            "sun_azimuth_deg": math.degrees(sun_az),
            "sun_elevation_deg": math.degrees(sun_el),
        },
    )
    parts.update(bare=scene.parts["bare"], water=scene.parts["water"], road=scene.parts["road"], cloud=cloud)
    return tile, parts


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
