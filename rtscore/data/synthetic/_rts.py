"""RTS geometry: amphitheatre outline, headwall arc, floor and debris tongue."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rtscore.data.synthetic._constants import _RING
from rtscore.data.synthetic._fields import _blob, _grid, _harmonics, _smoothstep, _window
from rtscore.data.synthetic._palette import _barren_colour
from rtscore.data.tiles import PIXEL_SIZE_M

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


def _four_floats(values: np.ndarray) -> tuple[float, float, float, float]:
    a, b, c, d = (float(v) for v in values)
    return a, b, c, d


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
        hw_var=_four_floats(rng.uniform(-0.2, 0.2, 4)),
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
        assert o.tongue is not None  # _tongue_sd is None without a tongue
        tw = o.tongue[2]
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
