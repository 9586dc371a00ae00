"""Ground size of a raster's pixels, from its CRS and affine transform (object areas, size bins, large RTS).

A pixel's area in the CRS is ``|a * e|`` of its transform, in the CRS's linear unit squared (metres, US feet, ...).
That is the ground area for the local projections labelled tiles come in (UTM: within 0.1 %), but not for Web
Mercator (EPSG:3857): its scale grows as ``1 / cos(latitude)``, so a 4.77 m projected pixel covers 1.63 m of
ground at 70° N (training guide §8.3). For EPSG:3857 the area is therefore multiplied by ``cos²(φ)`` at the
latitude ``φ`` of the tile's centre (a tile spans a few hundredths of a degree: one factor per tile). A
geographic CRS (degrees) has no fixed ground size per pixel and is refused: reproject first (``rts tile`` for
training data, ``rts warp`` for scenes to map).
"""

from __future__ import annotations

import math
from typing import Any

from rtscore.errors import PipelineError

WEB_MERCATOR_EPSG = 3857
WEB_MERCATOR_RADIUS_M = 6378137.0  # EPSG:3857 projects the ellipsoid's coordinates onto this sphere


class GroundSizeError(PipelineError, ValueError):
    """A raster whose pixels have no ground size (no CRS, a geographic CRS, unknown units)."""


def projected_crs(crs: Any, what: str) -> Any:
    """``crs`` (anything rasterio's ``CRS.from_user_input`` takes) as a projected rasterio CRS.

    Raises:
        GroundSizeError: naming ``what`` (a config key or a file): not a CRS, or a geographic one.
    """
    from rasterio.crs import CRS
    from rasterio.errors import CRSError

    if crs is None:
        raise GroundSizeError(f"{what}: no CRS; pixels have no ground size without one")
    try:
        parsed = CRS.from_user_input(crs)
    except CRSError as err:
        raise GroundSizeError(f"{what}: {crs!r} is not a CRS ({err})") from None
    if parsed.is_geographic:
        raise GroundSizeError(
            f"{what}: {parsed.to_string()} is geographic (degrees): its pixels have no fixed ground size and "
            "RTS would be mapped in degrees; reproject to a projected CRS first (rts tile for training data, rts warp "
            "for scenes to map; default EPSG:3857)"
        )
    return parsed


def web_mercator_latitude(y: float) -> float:
    """Latitude (degrees) of EPSG:3857 northing ``y`` (the projection's inverse, exact)."""
    return math.degrees(2.0 * math.atan(math.exp(y / WEB_MERCATOR_RADIUS_M)) - math.pi / 2.0)


def ground_pixel_area_m2(crs: Any, transform: Any, height: int, width: int, what: str = "raster") -> float:
    """Ground area in m² of one pixel of a north-up raster of ``height`` x ``width`` pixels (module docstring).

    Args:
        crs: Its CRS (a rasterio CRS or anything ``CRS.from_user_input`` takes).
        transform: Its affine transform (``a``, ``e``: pixel width and height in CRS units).
        height: Rows (for the centre's latitude in EPSG:3857).
        width: Columns.
        what: The file or tile, named in errors.
    """
    parsed = projected_crs(crs, what)
    try:
        unit, factor = parsed.linear_units_factor
    except Exception as err:  # rasterio raises CRSError for a CRS without a linear unit
        raise GroundSizeError(f"{what}: the linear unit of {parsed.to_string()} is unknown ({err})") from None
    area = abs(transform.a * transform.e) * float(factor) ** 2
    if parsed.to_epsg() == WEB_MERCATOR_EPSG:
        y_centre = transform.f + transform.e * height / 2.0 + transform.d * width / 2.0
        area *= math.cos(math.radians(web_mercator_latitude(y_centre))) ** 2
    if not (math.isfinite(area) and area > 0):
        raise GroundSizeError(f"{what}: pixel area {area!r} m² from transform {tuple(transform)[:6]} ({unit})")
    return area
