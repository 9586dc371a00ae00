"""Ground metres per CRS unit (rtscore.data.raster.ground.GroundScale): the one owner of the rule that pixel areas,
object areas, blocking distances, chip scale bars and footprint densifying all use. Web Mercator scales by
cos(latitude), projected CRSs are true to scale in their linear unit, geographic and unit-less CRSs are refused."""

from __future__ import annotations

import math

import pytest
from rasterio.crs import CRS
from rasterio.transform import Affine

from rtscore.data.raster.ground import (
    WEB_MERCATOR_RADIUS_M,
    GroundScale,
    GroundSizeError,
    ground_pixel_area_m2,
    web_mercator_latitude,
)
from rtscore.data.splits.blocking import ground_distance_m

US_FOOT_M = 1200 / 3937  # the US survey foot


def mercator_y(lat_deg: float) -> float:
    """EPSG:3857 northing of a latitude: the projection, written out here."""
    return WEB_MERCATOR_RADIUS_M * math.log(math.tan(math.pi / 4 + math.radians(lat_deg) / 2))


@pytest.mark.parametrize("lat", [0.0, 60.0, 80.0, -60.0])
def test_web_mercator_latitude_inverts_the_projection(lat: float) -> None:
    assert web_mercator_latitude(mercator_y(lat)) == pytest.approx(lat, abs=1e-12)


@pytest.mark.parametrize("lat", [0.0, 60.0, 80.0])
def test_web_mercator_metre_is_cos_latitude_of_ground(lat: float) -> None:
    g = GroundScale.of("EPSG:3857")
    assert (g.unit, g.unit_m, g.web_mercator) == ("metre", 1.0, True)
    assert g.metres_per_unit(mercator_y(lat)) == pytest.approx(math.cos(math.radians(lat)), rel=1e-12, abs=1e-15)
    assert g.metres_per_unit(-mercator_y(lat)) == pytest.approx(g.metres_per_unit(mercator_y(lat)), rel=1e-12)  # N = S


@pytest.mark.parametrize("lat", [0.0, 60.0, 80.0])
def test_web_mercator_pixel_area_is_cos2_latitude_at_the_raster_centre(lat: float) -> None:
    px, h, w = 4.77, 512, 256
    top = mercator_y(lat) + px * h / 2  # the raster's centre row at `lat`
    area = ground_pixel_area_m2("EPSG:3857", Affine(px, 0.0, 1e6, 0.0, -px, top), h, w)
    assert area == pytest.approx(px * px * math.cos(math.radians(lat)) ** 2, rel=1e-12)


def test_a_4_77_m_web_mercator_pixel_covers_1_63_m_at_70_n() -> None:
    """The module docstring's example (training guide §8.3)."""
    g = GroundScale.of("EPSG:3857")
    assert 4.77 * g.metres_per_unit(mercator_y(70.0)) == pytest.approx(1.63, abs=0.005)


def test_utm_is_true_to_scale_everywhere() -> None:
    g = GroundScale.of("EPSG:32606", "tile")  # UTM 6N (Alaska)
    assert (g.unit, g.unit_m, g.web_mercator) == ("metre", 1.0, False)
    assert {g.metres_per_unit(y) for y in (0.0, 7_700_000.0, 9_000_000.0)} == {1.0}
    for h, w in [(1, 1), (512, 512), (3000, 17)]:
        assert g.pixel_area_m2(Affine(3.0, 0.0, 500_000.0, 0.0, -3.0, 7_700_000.0), h, w) == 9.0


def test_feet_convert_to_metres() -> None:
    g = GroundScale.of("EPSG:2263")  # New York State Plane, US survey feet
    assert g.unit == "US survey foot"
    assert g.unit_m == pytest.approx(US_FOOT_M, rel=1e-12)
    assert g.metres_per_unit(123.0) == g.unit_m
    assert g.pixel_area_m2(Affine(10.0, 0.0, 0.0, 0.0, -10.0, 0.0), 4, 4) == pytest.approx(
        100 * US_FOOT_M**2, rel=1e-12
    )


@pytest.mark.parametrize("lat", [0.0, 60.0, 80.0])
def test_geographic_crs_is_refused_at_any_latitude(lat: float) -> None:
    """Degrees have no fixed ground size (today's rule: reproject first, not cos(latitude) per degree)."""
    t = Affine(0.0001, 0.0, 10.0, 0.0, -0.0001, lat + 0.01)
    with pytest.raises(GroundSizeError, match=r"scene\.tif: EPSG:4326 is geographic .*reproject"):
        ground_pixel_area_m2("EPSG:4326", t, 100, 100, what="scene.tif")
    with pytest.raises(GroundSizeError, match="geographic"):
        GroundScale.of(CRS.from_epsg(4326))


@pytest.mark.parametrize(
    "crs",
    [
        "EPSG:4978",  # geocentric: metres, but three axes and no projected unit
        'ENGCRS["local",EDATUM["site"],CS[Cartesian,2],AXIS["(E)",east,ORDER[1],LENGTHUNIT["metre",1]],'
        'AXIS["(N)",north,ORDER[2],LENGTHUNIT["metre",1]]]',
    ],
)
def test_crs_without_a_linear_unit_is_refused_naming_it(crs: str) -> None:
    with pytest.raises(GroundSizeError, match=r"^campaign CRS: the linear unit of .* is unknown"):
        GroundScale.of(crs, "campaign CRS")


def test_no_crs_and_a_bad_crs_are_refused() -> None:
    with pytest.raises(GroundSizeError, match=r"^a\.tif: no CRS"):
        GroundScale.of(None, "a.tif")
    with pytest.raises(GroundSizeError, match=r"^a\.tif: 'nonsense' is not a CRS"):
        GroundScale.of("nonsense", "a.tif")


def test_a_degenerate_transform_has_no_pixel_area() -> None:
    g = GroundScale.of("EPSG:32606", "flat.tif")
    with pytest.raises(GroundSizeError, match=r"^flat\.tif: pixel area 0\.0 m² from transform .*\(metre\)"):
        g.pixel_area_m2(Affine(0.0, 0.0, 0.0, 0.0, -1.0, 0.0), 1, 1)


def test_scale_is_the_same_fact_for_a_pixel_a_unit_and_a_distance() -> None:
    """ground_pixel_area_m2 is GroundScale's pixel area; a unit pixel's area is the unit's length squared; the blocking
    distance is the projected one times the same scale (bit for bit)."""
    crs = CRS.from_epsg(3857)
    g = GroundScale.of(crs, "campaign CRS")
    assert g == GroundScale.of("EPSG:3857")  # `what` names errors only
    y = mercator_y(70.0)
    t = Affine(1.0, 0.0, 0.0, 0.0, -1.0, y + 0.5)
    assert ground_pixel_area_m2(crs, t, 1, 1) == g.pixel_area_m2(t, 1, 1)
    assert g.pixel_area_m2(t, 1, 1) == pytest.approx(g.metres_per_unit(y) ** 2, rel=1e-12)
    a, b = (0.0, y - 500, 1000.0, y + 500), (3000.0, y - 500, 4000.0, y + 500)
    assert ground_distance_m(a, b, crs) == 2000.0 * g.metres_per_unit(y)


def test_blocking_names_a_crs_without_a_linear_unit_as_the_owner_does() -> None:
    with pytest.raises(GroundSizeError, match=r"^footprint CRS: the linear unit of EPSG:4978 is unknown"):
        ground_distance_m((0.0, 0.0, 1.0, 1.0), (2.0, 0.0, 3.0, 1.0), "EPSG:4978")
