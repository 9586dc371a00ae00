"""The one raster reader: every input raster checked against the raster contract before pixels are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rasterio.transform import from_origin
from rasterio.windows import Window

from rtscore.config.binding import ExtraChannel, InputBinding, RasterBandMap, RasterContract
from rtscore.data.raster.bands import RasterContractError, open_checked
from tests.helpers import write_raster

PX = 4.77
CONTRACT = RasterContract(crs="EPSG:3857", pixel_size=PX)
RGB_ONLY = InputBinding.of_extra([])
NDVI = InputBinding.of_extra([ExtraChannel(name="ndvi", band=0)])


def write(path: Path, data: np.ndarray, *, interp: list[str] | None = None, **profile: Any) -> Path:
    return write_raster(
        path,
        data,
        transform=profile.pop("transform", from_origin(-15_000_000.0, 11_000_000.0, PX, PX)),
        interp=interp,
        **profile,
    )


def refused(match: str, *args: Any) -> None:
    with pytest.raises(RasterContractError, match=match), open_checked(*args):
        pass


def rgb(n: int = 4, count: int = 3, dtype: str = "uint8") -> np.ndarray:
    return (np.arange(count * 16 * 16).reshape(count, 16, 16) % 200 + 1).astype(dtype)[:, :16, :16][:count]


def test_rgba_by_colour_interpretation_reads_rgb_and_alpha(tmp_path: Path) -> None:
    data = rgb(count=4)
    data[3] = 255
    data[3, :4] = 0
    p = write(tmp_path / "a.tif", data, interp=["red", "green", "blue", "alpha"])
    with open_checked(CONTRACT, RGB_ONLY, p) as r:
        px, extra, valid = r.read()
    assert extra is None and (px == data[:3]).all()
    assert not valid[:4].any() and valid[4:].all()


def test_planet_bgrn_tagged_bands_are_reordered_to_rgb(tmp_path: Path) -> None:
    data = rgb(count=4)
    p = write(tmp_path / "bgrn.tif", data, interp=["blue", "green", "red", "undefined"])
    with open_checked(CONTRACT, RGB_ONLY, p) as r:
        px, _, valid = r.read()
    assert (px[0] == data[2]).all() and (px[2] == data[0]).all() and valid.all()


def test_four_untagged_bands_are_refused_unless_mapped(tmp_path: Path) -> None:
    data = rgb(count=4)
    p = write(tmp_path / "rgbn.tif", data, interp=["gray", "undefined", "undefined", "undefined"])  # GDAL's
    # default for 4 uint8 bands is RGBA; an R,G,B,NIR product says what it is, or nothing
    refused(r"rgbn.tif: 4 bands .*say which band is which", CONTRACT, RGB_ONLY, p)
    mapped = CONTRACT.model_copy(update={"rgb_bands": RasterBandMap(rgb=[2, 1, 0], alpha=None)})
    with open_checked(mapped, RGB_ONLY, p) as r:
        px, _, valid = r.read()
    assert (px[0] == data[2]).all() and valid.all()


def test_a_band_map_contradicting_the_colour_interpretation_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path / "rgb.tif", rgb(), interp=["red", "green", "blue"])
    mapped = CONTRACT.model_copy(update={"rgb_bands": RasterBandMap(rgb=[2, 1, 0])})
    refused(r"R, G, B in bands \[0, 1, 2\], the band map in \[2, 1, 0\]", mapped, RGB_ONLY, p)


@pytest.mark.parametrize("dtype", ["uint16", "float32"])
def test_rgb_of_another_dtype_is_refused(tmp_path: Path, dtype: str) -> None:
    p = write(tmp_path / "deep.tif", rgb(dtype=dtype))
    refused(rf"deep.tif: RGB bands are {dtype}, the model was trained on uint8", CONTRACT, RGB_ONLY, p)


def test_no_crs_another_crs_and_another_pixel_size_are_refused(tmp_path: Path) -> None:
    p = write(tmp_path / "nocrs.tif", rgb(), crs=None)
    refused("nocrs.tif: has no CRS", CONTRACT, RGB_ONLY, p)
    p = write(tmp_path / "ll.tif", rgb(), crs="EPSG:4326", transform=from_origin(-150, 70, 0.0001, 0.0001))
    refused("ll.tif: CRS EPSG:4326, trained on EPSG:3857", CONTRACT, RGB_ONLY, p)
    p = write(tmp_path / "coarse.tif", rgb(), transform=from_origin(-15e6, 11e6, 110.0, 110.0))
    refused("coarse.tif: pixel size 110", CONTRACT, RGB_ONLY, p)
    p = write(tmp_path / "close.tif", rgb(), transform=from_origin(-15e6, 11e6, PX * 1.01, PX * 1.01))
    with open_checked(CONTRACT, RGB_ONLY, p):
        pass


def test_extra_on_a_shifted_grid_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path / "t.tif", rgb())
    ex = np.zeros((1, 16, 16), np.float32)
    e = write(tmp_path / "t_extra.tif", ex, transform=from_origin(-15_000_000.0 + PX, 11_000_000.0, PX, PX))
    refused("t_extra.tif: not on the grid of", CONTRACT, NDVI, p, e)


def test_undeclared_nan_in_extra_is_refused_declared_nan_is_nodata(tmp_path: Path) -> None:
    p = write(tmp_path / "t.tif", rgb())
    ex = np.ones((1, 16, 16), np.float32)
    ex[0, :2] = np.nan
    e = write(tmp_path / "t_extra.tif", ex)
    refused("t_extra.tif: 32 valid pixels hold NaN or inf", CONTRACT, NDVI, p, e)
    e = write(tmp_path / "t_extra.tif", ex, nodata=float("nan"))
    with open_checked(CONTRACT, NDVI, p, e) as r:
        _, extra, valid = r.read()
    assert extra is not None and np.isfinite(extra).all()
    assert not valid[:2].any() and valid[2:].all()


def test_three_bands_with_nodata_zero_have_their_all_zero_pixels_nodata(tmp_path: Path) -> None:
    data = rgb()
    data[:, :3] = 0
    p = write(tmp_path / "nd.tif", data, nodata=0)
    with open_checked(CONTRACT, RGB_ONLY, p) as r:
        _, _, valid = r.read()
    assert not valid[:3].any() and valid[3:].all()


# ------------------------------------------------------------------------------------------------ the NoData rule


# R, G, B, NIR: ALPHA=UNSPECIFIED is GDAL's ExtraSamples for a band that is not alpha; without it a 4-band uint8
# GeoTIFF with red first keeps band 4 as alpha whatever colour interpretation is set after writing
RGBN: dict[str, Any] = {"interp": ["red", "green", "blue", "undefined"], "alpha": "UNSPECIFIED"}


def rgbn(nir_zero_rows: slice, rgb_zero_rows: slice) -> np.ndarray:
    """R, G, B, NIR: NIR 0 (RGB not) in ``nir_zero_rows``, RGB 0 (NIR not) in ``rgb_zero_rows``, red 0 alone at
    (15, 15) (a dark pixel, not NoData)."""
    data = rgb(count=4)
    data[3, nir_zero_rows] = 0
    data[:3, rgb_zero_rows] = 0
    data[0, 15, 15] = 0
    return data


def test_a_nir_band_with_nodata_zero_never_masks_pixels(tmp_path: Path) -> None:
    """R,G,B,NIR tagged red, green, blue, undefined with nodata=0: GDAL's dataset mask is band 4's (NIR == 0 would
    be NoData); the rule reads the mapped R, G, B bands only: NoData where all three are 0."""
    data = rgbn(slice(0, 4), slice(8, 10))
    p = write(tmp_path / "rgbn.tif", data, nodata=0, **RGBN)
    expected = np.ones((16, 16), bool)
    expected[8:10] = False
    with open_checked(CONTRACT, RGB_ONLY, p) as r:
        px, _, valid = r.read()
        _, _, part = r.read(Window(2, 6, 10, 8))  # a window reads the same rule
    assert (px == data[:3]).all()
    np.testing.assert_array_equal(valid, expected)
    np.testing.assert_array_equal(part, expected[6:14, 2:12])


def test_an_alpha_band_decides_whatever_nodata_says(tmp_path: Path) -> None:
    """An untagged 4-band file mapped with alpha (rgb_bands) and nodata=0: alpha alone decides; (0, 0, 0) with
    alpha 255 is valid (dark ground in Planet quads)."""
    data = rgbn(slice(0, 4), slice(8, 10))
    data[3] = 255
    data[3, 12:] = 0
    p = write(tmp_path / "rgba.tif", data, interp=["gray", "undefined", "undefined", "undefined"], nodata=0)
    mapped = CONTRACT.model_copy(update={"rgb_bands": RasterBandMap(rgb=[0, 1, 2], alpha=3)})
    with open_checked(mapped, RGB_ONLY, p) as r:
        _, _, valid = r.read()
    assert valid[:12].all() and not valid[12:].any()


def test_an_internal_mask_is_honoured_and_not_a_spectral_band(tmp_path: Path) -> None:
    import rasterio

    data = rgbn(slice(0, 4), slice(8, 10))
    p = write(tmp_path / "masked.tif", data, **RGBN)
    mask = np.full((16, 16), 255, np.uint8)
    mask[:, :5] = 0
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK=True), rasterio.open(p, "r+") as f:
        f.write_mask(mask)
    with open_checked(CONTRACT, RGB_ONLY, p) as r:
        _, _, valid = r.read()
    np.testing.assert_array_equal(valid, mask > 0)  # RGB-zero rows and NIR-zero rows valid: the mask decides


def test_without_alpha_mask_or_nodata_every_pixel_is_valid(tmp_path: Path) -> None:
    data = rgbn(slice(0, 4), slice(8, 10))
    p = write(tmp_path / "plain.tif", data, **RGBN)
    with open_checked(CONTRACT, RGB_ONLY, p) as r:
        _, _, valid = r.read()
        _, _, part = r.read(Window(0, 0, 5, 3))
    assert valid.all() and part.shape == (3, 5) and part.all()


# ------------------------------------------------------------------------------------------------ the messages


def test_a_one_band_file_names_its_band_count_and_every_other_mismatch(tmp_path: Path) -> None:
    """A 1-band file at the wrong pixel size: both problems at once, and no band map suggested (none can exist)."""
    p = write(tmp_path / "ndvi.tif", rgb(count=1), transform=from_origin(-15e6, 11e6, 30.0, 30.0))
    with pytest.raises(RasterContractError) as err, open_checked(CONTRACT, RGB_ONLY, p):
        pass
    msg = str(err.value)
    assert "ndvi.tif: needs at least 3 bands (R, G, B); this file has 1" in msg
    assert "ndvi.tif: pixel size 30" in msg and "prepare it with rts warp (docs/geotiff.md)" in msg
    assert "rgb_bands" not in msg and "rts tile" not in msg


def test_every_mismatch_of_a_file_is_listed_at_once(tmp_path: Path) -> None:
    """A UTM scene at 300 m, 2 uint16 bands, its EXTRA raster missing: CRS, pixel size, bands, dtype, EXTRA."""
    p = write(
        tmp_path / "landsat.tif",
        rgb(count=2, dtype="uint16"),
        crs="EPSG:32606",
        transform=from_origin(500_000.0, 7_210_000.0, 300.0, 300.0),
    )
    with pytest.raises(RasterContractError) as err, open_checked(CONTRACT, NDVI, p, tmp_path / "landsat_extra.tif"):
        pass
    msg = str(err.value)
    for part in (
        "landsat.tif: CRS EPSG:32606, trained on EPSG:3857; prepare it with rts warp",
        "landsat.tif: pixel size 300 (x) differs from the training pixel size 4.77",
        "landsat.tif: needs at least 3 bands (R, G, B); this file has 2",
        "landsat.tif: bands are uint16, the model was trained on uint8",
        "landsat_extra.tif was not found",
    ):
        assert part in msg, part
