"""Smooth random fields, blobs and windows: the building blocks of synthetic scenes."""

from __future__ import annotations

import functools
import math

import numpy as np

from rtscore.data.synthetic._constants import _N_HARMONICS

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
    from scipy import ndimage

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
