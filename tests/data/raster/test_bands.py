"""The one raster reader: every input raster checked against the raster contract before pixels are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rasterio.transform import from_origin
from rasterio.windows import Window

from rtscore.config.binding import ExtraChannel, InputBinding, RasterBandMap, RasterContract
from rtscore.data.raster.bands import (
    MAP_FIXES,
    PREDICT_FIXES,
    TILE_FIXES,
    RasterContractError,
    open_checked,
    resolve_bands,
)
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
    """A 1-band file at the wrong pixel size: both problems at once, no band map suggested (none can exist), and it
    is not sent to rts warp, which refuses a raster without R, G, B (issue 38, point 5)."""
    p = write(tmp_path / "ndvi.tif", rgb(count=1), transform=from_origin(-15e6, 11e6, 30.0, 30.0))
    with pytest.raises(RasterContractError) as err, open_checked(CONTRACT, RGB_ONLY, p):
        pass
    msg = str(err.value)
    assert "ndvi.tif: needs at least 3 bands (R, G, B); this file has 1" in msg
    assert "ndvi.tif: pixel size 30 (x) differs from the training pixel size 4.77 by more than 5%" in msg
    assert "rts warp" not in msg and "rgb_bands" not in msg and "rts tile" not in msg


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
        "landsat.tif: CRS EPSG:32606, trained on EPSG:3857",
        "landsat.tif: pixel size 300 (x) differs from the training pixel size 4.77",
        "landsat.tif: needs at least 3 bands (R, G, B); this file has 2",
        "landsat.tif: bands are uint16, the model was trained on uint8",
        "landsat_extra.tif was not found",
    ):
        assert part in msg, part
    assert "rts warp" not in msg  # it refuses 2 uint16 bands: no fix offered that runs it


# ------------------------------------------------------------------ the fixes, in the words of where the user is
UTM_30M = {"crs": "EPSG:32606", "transform": from_origin(500_000.0, 7_210_000.0, 30.0, 30.0)}
RGBA = ["red", "green", "blue", "alpha"]
UNTAGGED = ["gray", "undefined", "undefined", "undefined"]


def refusal(p: Path, fixes: Any, contract: RasterContract = CONTRACT) -> str:
    with pytest.raises(RasterContractError) as err, open_checked(contract, RGB_ONLY, p, fixes=fixes):
        pass
    return str(err.value)


def test_a_scene_off_the_grid_is_sent_to_rts_warp_with_its_flags_once(tmp_path: Path) -> None:
    """Issue 38 (5): rts predict, rts drift and rts map name the command and flags that put a scene on the grid."""
    p = write(tmp_path / "utm.tif", rgb(count=4), interp=RGBA, **UTM_30M)
    warp = (
        "put it on the training grid with rts warp --config <the tiling config the training data was cut with> "
        f"--scenes {p} --output <dir>"
    )
    for fixes in (PREDICT_FIXES, MAP_FIXES):
        msg = refusal(p, fixes)
        assert msg.startswith(f"{p}: CRS EPSG:32606, trained on EPSG:3857; {p}: pixel size 30 (x) differs"), msg
        assert msg.endswith(f"from the training pixel size 4.77 by more than 5%; {warp} (docs/geotiff.md)"), msg
        assert msg.count("rts warp") == 1


def test_training_tiles_off_the_grid_are_sent_to_their_generation_config_or_rts_tile_never_rts_warp(
    tmp_path: Path,
) -> None:
    """Issue 38 (5): ingestion reads a data root's tiles under the generation config's geotiff section: a tile in
    UTM is fixed by geotiff.crs (every tile in it) or by cutting the root again with rts tile; in degrees, only the
    latter; rts warp makes scenes to map, never training tiles."""
    p = write(tmp_path / "utm.tif", rgb(count=4), interp=RGBA, **UTM_30M)
    msg = refusal(p, TILE_FIXES)
    recut = "cut the root again from its scenes with rts tile --config <tiling config>"
    assert (
        f"{p}: CRS EPSG:32606, geotiff.crs is EPSG:3857; set geotiff.crs: EPSG:32606 in the generation config if "
        f"every tile of the root is in it, else {recut} (one grid.crs for every tile)"
    ) in msg
    assert (
        f"{p}: pixel size 30 (x) differs from geotiff.pixel_size 4.77 by more than 5%; set geotiff.pixel_size to the "
        f"tiles' pixel size in the generation config (or leave it empty: the split's median) if every tile has it, "
        f"else {recut} (one grid.pixel_size for every tile)"
    ) in msg
    assert "rts warp" not in msg and "trained on" not in msg
    lonlat = write(
        tmp_path / "ll.tif", rgb(count=4), interp=RGBA, crs="EPSG:4326", transform=from_origin(-150, 70, 4e-5, 4e-5)
    )
    msg = refusal(lonlat, TILE_FIXES)
    assert f"{lonlat}: CRS EPSG:4326, geotiff.crs is EPSG:3857; tiles need a projected CRS: {recut}" in msg
    assert "set geotiff.crs" not in msg and "rts warp" not in msg


def test_the_band_fix_speaks_the_language_of_where_the_user_is(tmp_path: Path) -> None:
    """Issue 38 (5): an untagged 4-band file: rts predict and rts drift name their flag (--rgb-bands 2,1,0), rts map
    (no such flag) the tiling config's rgb_bands and rts warp, ingestion the generation config's geotiff.rgb_bands,
    rts tile and rts warp their tiling config's rgb_bands."""
    p = write(tmp_path / "bgrn.tif", rgb(count=4), interp=UNTAGGED)
    lead = "say which band is which (an R,G,B,NIR or B,G,R,NIR file reads wrongly as RGB + alpha); tag the bands, or "
    predict = refusal(p, PREDICT_FIXES)
    assert predict.endswith(
        lead + "give their order with --rgb-bands R,G,B[,ALPHA] (0-based band indexes: --rgb-bands 2,1,0 for B,G,R,NIR)"
    ), predict
    assert "rgb_bands:" not in predict
    in_map = refusal(p, MAP_FIXES)
    assert (
        lead + "map them with rgb_bands: {rgb: [r, g, b], alpha: a|null} in the tiling config the training data was "
        f"cut with and put the scene through rts warp --config <that tiling config> --scenes {p} --output <dir>"
    ) in in_map
    assert "--rgb-bands" not in in_map
    tiles = refusal(p, TILE_FIXES)
    assert tiles.endswith(
        lead + "map them with geotiff.rgb_bands: {rgb: [r, g, b], alpha: a|null} in the generation config"
    ), tiles
    import rasterio

    with rasterio.open(p) as src, pytest.raises(RasterContractError) as err:
        resolve_bands(src, p, None)  # rts tile, rts warp
    assert str(err.value).endswith(
        lead + "map them with rgb_bands: {rgb: [r, g, b], alpha: a|null} in the tiling config"
    )
