"""Hard negatives (lakes, rivers, roads, bare patches, clouds), NoData masks, noisy outlines."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rtscore.data.synthetic._constants import _MID
from rtscore.data.synthetic._fields import _blob, _grid, _harmonics, _noise, _smoothstep, _upsample, _window
from rtscore.data.synthetic._palette import _barren_colour
from rtscore.data.synthetic._rts import _Rts, _RtsGeom
from rtscore.data.synthetic._scene import _Scene

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


def _river(rng: np.random.Generator, scene: _Scene, fov: int = 1) -> bool:
    """Meandering dark river with a greener riparian fringe (width in stored-tile units: `fov` tiles across)."""
    n = scene.n
    dist, s = _band(rng, n, 0.12)
    w = rng.uniform(2.0, 0.04 * (n / fov) + 3.0) * (1.0 + 0.25 * np.sin(s * np.float32(2 * np.pi / (0.7 * n))))
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


def _bare_patch(rng: np.random.Generator, scene: _Scene, rts: Sequence[_Rts], fov: int = 1) -> bool:
    """Barren blob coloured like a slump floor but with no headwall or depression: the key look-alike.

    Sized in stored-tile units, so its physical size is the same when the scene spans `fov` tiles across.
    """
    n = scene.n
    r = (n / fov) * float(np.exp(rng.uniform(np.log(0.02), np.log(0.14))))
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
    rng: np.random.Generator, scene: _Scene, rts: Sequence[_Rts], sun_az: float, fov: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Opacity of a soft cumulus and of its shadow, displaced away from the sun (sizes per stored tile)."""
    n = scene.n
    m = max(n // _MID, 4)
    rc = (n / fov) * rng.uniform(0.12, 0.4)
    centre = _centre(rng, n, rc * 0.7, rts, strict=False)
    assert centre is not None  # never None unless strict
    cy, cx = centre
    dist = (n / fov) * rng.uniform(0.06, 0.25)
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
    from scipy import ndimage

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
