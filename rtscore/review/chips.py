"""One object's chip: the scene's pixels around it (PNG) and its overlay (SVG) (docs/review.md, "The export").

The window (:func:`chip_window`): the object's bounding box in the scene's pixels (its outline reprojected from the
campaign CRS to the scene CRS, then to pixel coordinates by the scene's transform), grown by ``context`` x its size
on each side, made square, at least ``min_px`` and at most ``max_px`` pixels a side; an object larger than
``max_px`` gets the ``max_px`` window centred on its centroid. Windows are whole pixels of the scene: never
resampled.

The pixels (:func:`read_chip`) are read through the one input contract and NoData rule of inference
(:func:`rtscore.data.raster.bands.open_checked`, R, G, B only): the PNG (:func:`png_bytes`) is RGBA, RGB the scene's
pixels exactly, alpha 255 where valid and 0 at NoData (their RGB set to 0); the part of a window outside the scene is
NoData. Pillow writes the PNG at a fixed zlib level with no timestamp, text or other metadata chunk, so a chip is the
same bytes on every run (with the same Pillow and zlib: the bytes, not the pixels, may change with their versions).

The overlay (:func:`overlay_svg`) draws the PNG pixelated, the object's outline, a label (mean and max
probability, ground area) and a scale bar of a round ground length (1, 2, 5 x 10^k m) from the ground metres of one
pixel at the object; every number has a fixed format.
"""

from __future__ import annotations

import io
import math
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.data.raster.bands import CheckedRaster
from rtscore.data.raster.ground import ground_pixel_area_m2
from rtscore.review.manifest import ChipSettings
from rtscore.storage.files import os_errors

PNG_ZLIB_LEVEL = 6
OUTLINE_DECIMALS = 2  # chip_outline: hundredths of a pixel
OUTLINE_COLOUR = "#ff2bd6"
SCALE_STEPS = (1.0, 2.0, 5.0)


@dataclass(frozen=True)
class ChipWindow:
    """A square window of the scene's pixels (may leave the scene)."""

    col_off: int
    row_off: int
    size: int

    def as_tuple(self) -> tuple[int, int, int, int]:
        return self.col_off, self.row_off, self.size, self.size


def pixel_geometry(geometry: Any, campaign_crs: Any, scene_crs: Any, transform: Any) -> Any:
    """The object's outline (shapely, campaign CRS) in the scene's pixel coordinates (x = column, y = row; a pixel's
    corner at whole numbers)."""
    import shapely
    from rasterio.crs import CRS
    from rasterio.warp import transform as warp
    from shapely.affinity import affine_transform

    src, dst = CRS.from_user_input(campaign_crs), CRS.from_user_input(scene_crs)
    g = geometry
    if src != dst:

        def move(xy: np.ndarray) -> np.ndarray:
            xs, ys = warp(src, dst, xy[:, 0].tolist(), xy[:, 1].tolist())
            return np.column_stack([xs, ys])

        g = shapely.transform(g, move)
    inv = ~transform
    return affine_transform(g, [inv.a, inv.b, inv.d, inv.e, inv.c, inv.f])


def chip_window(px_geometry: Any, settings: ChipSettings) -> ChipWindow:
    """The chip's window around an outline in pixel coordinates (module docstring)."""
    x0, y0, x1, y1 = px_geometry.bounds
    w, h = x1 - x0, y1 - y0
    grown = max(w, h) * (1.0 + 2.0 * settings.context)
    side = max(settings.min_px, math.ceil(grown - 1e-9))
    if side > settings.max_px:
        side = settings.max_px
        c = px_geometry.centroid
        cx, cy = c.x, c.y
    else:
        cx, cy = (x0 + x1) / 2.0, (y0 + y1) / 2.0
    return ChipWindow(math.floor(cx - side / 2.0 + 0.5), math.floor(cy - side / 2.0 + 0.5), side)


def chip_outline(px_geometry: Any, window: ChipWindow) -> list[list[list[float]]]:
    """The outline's exterior rings in chip pixel coordinates (x right, y down), rounded to hundredths."""
    polys = list(px_geometry.geoms) if hasattr(px_geometry, "geoms") else [px_geometry]
    rings = []
    for p in polys:
        if p.geom_type != "Polygon" or p.is_empty:
            continue
        rings.append(
            [
                [round(x - window.col_off, OUTLINE_DECIMALS), round(y - window.row_off, OUTLINE_DECIMALS)]
                for x, y in p.exterior.coords
            ]
        )
    return rings


def read_chip(raster: CheckedRaster, window: ChipWindow) -> np.ndarray:
    """(size, size, 4) uint8 RGBA of the window: RGB the scene's pixels, alpha 255 valid / 0 NoData (RGB 0 there);
    outside the scene NoData. Only the part inside the scene is read."""
    from rasterio.windows import Window

    n = window.size
    out = np.zeros((n, n, 4), np.uint8)
    c0, r0 = max(window.col_off, 0), max(window.row_off, 0)
    c1, r1 = min(window.col_off + n, raster.width), min(window.row_off + n, raster.height)
    if c1 <= c0 or r1 <= r0:
        return out
    rgb, _, valid = raster.read(Window(c0, r0, c1 - c0, r1 - r0))
    part = out[r0 - window.row_off : r1 - window.row_off, c0 - window.col_off : c1 - window.col_off]
    part[..., :3] = np.moveaxis(rgb, 0, -1)
    part[..., 3] = np.where(valid, 255, 0)
    part[~valid, :3] = 0
    return out


def pixel_ground_m(raster: CheckedRaster, window: ChipWindow) -> float:
    """Ground metres of one pixel at the chip's centre (rtscore.data.raster.ground: EPSG:3857 scaled by cos φ)."""
    from rasterio.transform import Affine

    t = raster.src.transform @ Affine.translation(window.col_off, window.row_off)
    return math.sqrt(ground_pixel_area_m2(raster.src.crs, t, window.size, window.size, what=str(raster.path)))


# ------------------------------------------------------------------------------------------------ PNG
def png_bytes(rgba: np.ndarray) -> bytes:
    """A PNG of an (h, w, 4) uint8 RGBA array, by Pillow: 8-bit RGBA, zlib level ``PNG_ZLIB_LEVEL``, IHDR, IDATs and
    IEND only (no time, text or other metadata: the image is made from the array alone and saved with no ``pnginfo``,
    ``exif`` or ``dpi``), so the same pixels give the same bytes under one Pillow and zlib."""
    if rgba.dtype != np.uint8 or rgba.ndim != 3 or rgba.shape[2] != 4:
        raise ValueError(f"png_bytes takes (h, w, 4) uint8, got {rgba.shape} {rgba.dtype}")
    from PIL import Image

    image = Image.fromarray(np.ascontiguousarray(rgba))
    if image.mode != "RGBA":  # what Pillow makes of (h, w, 4) uint8; a guard should that ever change
        raise ValueError(f"png_bytes: Pillow made a {image.mode} image of (h, w, 4) uint8, not RGBA")
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=PNG_ZLIB_LEVEL, optimize=False)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ SVG
def area_text(m2: float) -> str:
    """A ground area: ``840 m²`` under a hectare, else ``1.25 ha``."""
    return f"{m2:,.0f} m²" if m2 < 10_000 else f"{m2 / 10_000:,.2f} ha"


def scale_bar(pixel_m: float, size: int, fraction: float = 0.3) -> tuple[float, float]:
    """(ground metres, pixels) of the longest round bar (1, 2, 5 x 10^k m) at most ``fraction`` of the chip wide (at
    least 1 m)."""
    limit = fraction * size * pixel_m
    best = 1.0
    k = 0
    while True:
        fits = [s * 10.0**k for s in SCALE_STEPS if s * 10.0**k <= limit]
        if not fits:
            break
        best = fits[-1]
        k += 1
    return best, best / pixel_m


def length_text(m: float) -> str:
    return f"{m / 1000:g} km" if m >= 1000 else f"{m:g} m"


def overlay_svg(
    object_id: int,
    size: int,
    outline: list[list[list[float]]],
    prob_mean: float,
    prob_max: float,
    ground_area_m2: float,
    pixel_m: float,
) -> str:
    """The chip's overlay (module docstring): ``<object_id>.png`` pixelated, the outline, label and scale bar."""
    s = size
    font = max(s * 0.045, 1.0)
    pad = font * 0.5
    polys = "".join(
        f'<polygon points="{" ".join(f"{x:.2f},{y:.2f}" for x, y in ring)}"/>' for ring in outline if len(ring) >= 3
    )
    label = f"#{object_id}  p {prob_mean:.3f} (max {prob_max:.3f})  {area_text(ground_area_m2)}"
    metres, bar_px = scale_bar(pixel_m, s)
    bar_y = s - pad * 2
    bar_x = pad * 2
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{s}" height="{s}" viewBox="0 0 {s} {s}">'
        f'<image href="{object_id}.png" x="0" y="0" width="{s}" height="{s}" style="image-rendering:pixelated"/>'
        f'<g fill="none" stroke="{OUTLINE_COLOUR}" stroke-width="2" vector-effect="non-scaling-stroke" '
        f'stroke-linejoin="round">{polys}</g>'
        f'<g font-family="sans-serif" font-size="{font:.2f}" fill="#fff" stroke="#000" stroke-width="{font * 0.15:.2f}"'
        f' paint-order="stroke">'
        f'<text x="{pad:.2f}" y="{pad + font:.2f}">{label}</text>'
        f'<text x="{bar_x:.2f}" y="{bar_y - pad:.2f}">{length_text(metres)}</text></g>'
        f'<g stroke-width="{max(font * 0.25, 1.0):.2f}" stroke-linecap="butt">'
        f'<line x1="{bar_x:.2f}" y1="{bar_y:.2f}" x2="{bar_x + bar_px:.2f}" y2="{bar_y:.2f}" stroke="#000" '
        f'stroke-width="{max(font * 0.45, 2.0):.2f}"/>'
        f'<line x1="{bar_x:.2f}" y1="{bar_y:.2f}" x2="{bar_x + bar_px:.2f}" y2="{bar_y:.2f}" stroke="#fff"/></g>'
        "</svg>\n"
    )


# ------------------------------------------------------------------------------------------------ files
def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` under a temporary sibling name renamed into place: readers see no half file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with os_errors("write", path):
        try:
            tmp.write_bytes(data)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
