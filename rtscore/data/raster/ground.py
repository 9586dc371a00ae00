"""Ground size of a CRS unit and of a raster's pixels: the one rule for ground metres (object areas, size bins,
large RTS, the blocking distance between splits, chip scale bars, densifying footprints).

:class:`GroundScale` owns it. One unit of a projected CRS is ``unit_m`` metres (its linear unit: metres, US feet,
...). That is the ground length for the local projections labelled tiles come in (UTM: within 0.1 %; polar
stereographic and equal-area CRSs count as true to scale too), but not for Web Mercator (EPSG:3857): its scale
grows as ``1 / cos(latitude)``, so a 4.77 m projected pixel covers 1.63 m of ground at 70° N (training guide §8.3).
For EPSG:3857 a length is therefore multiplied by ``cos(φ)`` and an area by ``cos²(φ)`` at the latitude ``φ`` of
the northing it is taken at (the projection is conformal: one factor for x and y). A pixel's area is that of its
transform, ``|a * e|``, at the latitude of the raster's centre (a tile spans a few hundredths of a degree: one
factor per tile). A geographic CRS (degrees) has no fixed ground size per unit and is refused, as is a CRS without
a linear unit (geocentric, engineering): reproject first (``rts tile`` for training data, ``rts warp`` for scenes
to map).

Known limit: Web Mercator is recognised by its EPSG code (``CRS.to_epsg() == 3857``, which GDAL's and PROJ's
spellings of it return); a CRS that rasterio does not identify as EPSG:3857 (``ESRI:102100``) counts as true to
scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rtscore.errors import PipelineError

WEB_MERCATOR_EPSG = 3857
WEB_MERCATOR_RADIUS_M = 6378137.0  # EPSG:3857 projects the ellipsoid's coordinates onto this sphere


class GroundSizeError(PipelineError, ValueError):
    """A raster or CRS whose units have no ground size (no CRS, a geographic CRS, unknown units)."""


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


@dataclass(frozen=True)
class GroundScale:
    """Ground metres per unit of one projected CRS (module docstring): built once per CRS by :meth:`of`, asked at
    a northing.

    Attributes:
        crs: The CRS, parsed (a rasterio CRS).
        unit: Its linear unit's name (``"metre"``, ``"US survey foot"``).
        unit_m: Metres per CRS unit (the linear unit; no projection scale).
        web_mercator: Whether it is EPSG:3857, whose ground scale is ``unit_m * cos(latitude)``.
        what: The CRS's owner (a config key, a file), named in errors.
    """

    crs: Any
    unit: str
    unit_m: float
    web_mercator: bool
    what: str = field(default="raster", compare=False)

    @classmethod
    def of(cls, crs: Any, what: str = "raster") -> GroundScale:
        """The scale of ``crs`` (a rasterio CRS or anything ``CRS.from_user_input`` takes).

        Raises:
            GroundSizeError: naming ``what``: no CRS, not a CRS, a geographic CRS, or one without a linear unit.
        """
        parsed = projected_crs(crs, what)
        try:
            unit, factor = parsed.linear_units_factor
        except Exception as err:  # rasterio raises CRSError for a CRS without a linear unit
            raise GroundSizeError(f"{what}: the linear unit of {parsed.to_string()} is unknown ({err})") from None
        return cls(parsed, str(unit), float(factor), parsed.to_epsg() == WEB_MERCATOR_EPSG, what)

    def _cos_latitude(self, y: float) -> float:
        return math.cos(math.radians(web_mercator_latitude(y)))

    def metres_per_unit(self, y: float) -> float:
        """Ground metres of one CRS unit, along x or y, at northing ``y`` (CRS units; only EPSG:3857 uses it)."""
        if not self.web_mercator:
            return self.unit_m
        return self.unit_m * self._cos_latitude(y)

    def pixel_area_m2(self, transform: Any, height: int, width: int) -> float:
        """Ground area in m² of one pixel of a north-up raster of ``height`` x ``width`` pixels and affine
        ``transform`` in this CRS (``a``, ``e``: pixel width and height in CRS units), at the raster's centre.

        Raises:
            GroundSizeError: the area is not a finite positive number (a degenerate transform).
        """
        area = abs(transform.a * transform.e) * self.unit_m**2
        if self.web_mercator:
            y_centre = transform.f + transform.e * height / 2.0 + transform.d * width / 2.0
            area *= self._cos_latitude(y_centre) ** 2
        if not (math.isfinite(area) and area > 0):
            raise GroundSizeError(
                f"{self.what}: pixel area {area!r} m² from transform {tuple(transform)[:6]} ({self.unit})"
            )
        return area


def ground_pixel_area_m2(crs: Any, transform: Any, height: int, width: int, what: str = "raster") -> float:
    """Ground area in m² of one pixel of a north-up raster: :meth:`GroundScale.pixel_area_m2` of its CRS.

    Args:
        crs: Its CRS (a rasterio CRS or anything ``CRS.from_user_input`` takes).
        transform: Its affine transform (``a``, ``e``: pixel width and height in CRS units).
        height: Rows (for the centre's latitude in EPSG:3857).
        width: Columns.
        what: The file or tile, named in errors.
    """
    return GroundScale.of(crs, what).pixel_area_m2(transform, height, width)
