"""The one raster reader: every input raster checked against the raster contract before pixels are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rasterio.transform import from_origin

from rtscore.config.binding import ExtraChannel, InputBinding, RasterBandMap, RasterContract
from rtscore.data.bands import RasterContractError, open_checked
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


def test_three_bands_with_nodata_zero_use_the_dataset_mask(tmp_path: Path) -> None:
    data = rgb()
    data[:, :3] = 0
    p = write(tmp_path / "nd.tif", data, nodata=0)
    with open_checked(CONTRACT, RGB_ONLY, p) as r:
        _, _, valid = r.read()
    assert not valid[:3].any() and valid[3:].all()
