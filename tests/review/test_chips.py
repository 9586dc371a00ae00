"""rtscore.review.chips: the window around an object, the chip's pixels, its PNG and overlay."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import rasterio
import shapely
from PIL import Image
from rasterio.transform import Affine

from bench.review_export_bench import PIXEL, write_scene
from rtscore.config.binding import InputBinding, RasterContract
from rtscore.data.raster.bands import open_checked
from rtscore.review.chips import (
    ChipWindow,
    area_text,
    chip_outline,
    chip_window,
    overlay_svg,
    pixel_geometry,
    png_bytes,
    read_chip,
    scale_bar,
)
from rtscore.review.manifest import ChipSettings

CONTRACT = RasterContract(crs="EPSG:3857", pixel_size=PIXEL)


def decode_png(data: bytes) -> np.ndarray:
    """An RGBA PNG of png_bytes' kind decoded: its chunks walked (each CRC checked; IHDR, one or more IDAT, IEND and
    nothing else: no time, no text), 8-bit RGBA, and its pixels read by Pillow."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        assert struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])[0] == zlib.crc32(kind + body)
        chunks.append((kind, body))
        pos += 12 + n
    kinds = [k for k, _ in chunks]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and set(kinds[1:-1]) == {b"IDAT"}, kinds  # no time, no text
    w, h, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    assert (depth, colour) == (8, 6)
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "RGBA" and im.size == (w, h) and not im.info  # no metadata read back either
        return np.asarray(im).copy()


def test_png_round_trips_the_pixels_and_is_the_same_bytes_every_time() -> None:
    rgba = np.random.default_rng(0).integers(0, 256, (37, 53, 4), dtype=np.uint8)
    data = png_bytes(rgba)
    np.testing.assert_array_equal(decode_png(data), rgba)
    assert png_bytes(rgba.copy()) == data
    # A large chip (several IDAT chunks) with NoData (alpha 0, RGB 0) and smooth rows (filters other than None/Sub),
    # and a strided view: the same pixels back, the same bytes as its contiguous copy.
    big = np.zeros((300, 300, 4), np.uint8)
    big[..., 0], big[..., 1] = np.arange(300)[:, None] % 256, np.arange(300)[None, :] // 2
    big[40:, :250, 2] = np.random.default_rng(1).integers(0, 256, (260, 250), dtype=np.uint8)
    big[40:, :250, 3] = 255
    big[:40, :, :3] = 0
    np.testing.assert_array_equal(decode_png(png_bytes(big)), big)
    view = big[::-1, ::2]
    np.testing.assert_array_equal(decode_png(png_bytes(view)), view)
    assert png_bytes(view) == png_bytes(view.copy())
    with pytest.raises(ValueError, match=r"\(h, w, 4\) uint8"):
        png_bytes(rgba[..., :3])


def test_window_grows_by_context_is_square_and_clamped_to_min_and_max() -> None:
    g = shapely.box(100, 200, 140, 220)  # 40 x 20 px
    w = chip_window(g, ChipSettings(context=0.5, min_px=16, max_px=1024))
    assert (w.size, w.col_off, w.row_off) == (80, 80, 170)  # 40 x (1 + 2 x 0.5), centred on the box
    assert chip_window(g, ChipSettings(context=0.0, min_px=64, max_px=1024)).size == 64
    big = shapely.Polygon([(0, 0), (1000, 0), (1000, 10), (10, 10), (10, 300), (0, 300)])  # an L: centroid off-box
    w = chip_window(big, ChipSettings(context=0.5, min_px=16, max_px=256))
    c = big.centroid
    assert w.size == 256
    assert (w.col_off, w.row_off) == (round(c.x - 128), round(c.y - 128))  # centred on the centroid, not the box


def test_pixel_geometry_and_outline_are_in_scene_then_chip_pixels() -> None:
    t = Affine(PIXEL, 0, 1000.0, 0, -PIXEL, 5000.0)
    g = shapely.box(1000 + 10 * PIXEL, 5000 - 30 * PIXEL, 1000 + 20 * PIXEL, 5000 - 20 * PIXEL)
    px = pixel_geometry(g, "EPSG:3857", "EPSG:3857", t)
    assert px.bounds == pytest.approx((10, 20, 20, 30))
    ring = chip_outline(shapely.MultiPolygon([px]), ChipWindow(5, 15, 20))[0]
    assert {tuple(p) for p in ring} == {(5.0, 5.0), (15.0, 5.0), (15.0, 15.0), (5.0, 15.0)}
    utm = pixel_geometry(g, "EPSG:3857", "EPSG:32633", Affine(3.0, 0, 0, 0, -3.0, 0))  # reprojected, then pixels
    assert utm.is_valid and utm.area > 0


def test_scale_bar_is_a_round_length_and_labels_have_fixed_formats() -> None:
    assert scale_bar(4.77, 100) == (100.0, pytest.approx(100 / 4.77))  # longest of 1, 2, 5 x 10^k under 143 m
    assert scale_bar(1.0, 1000)[0] == 200.0
    assert scale_bar(0.01, 64)[0] == 1.0  # at least 1 m
    assert (area_text(840.4), area_text(12_500)) == ("840 m²", "1.25 ha")
    svg = overlay_svg(7, 64, [[[1, 1], [10, 1], [10, 10], [1, 1]]], 0.73456, 0.9, 1234.0, 4.77)
    assert 'href="7.png"' in svg and "image-rendering:pixelated" in svg and 'width="64"' in svg
    assert "p 0.735 (max 0.900)" in svg and "1,234 m²" in svg and ">50 m<" in svg
    assert 'points="1.00,1.00 10.00,1.00 10.00,10.00 1.00,1.00"' in svg


@pytest.mark.parametrize("nodata_value", [False, True])
def test_chip_over_the_scene_edge_is_the_scenes_pixels_inside_and_nodata_outside(
    tmp_path: Path, nodata_value: bool
) -> None:
    scene = write_scene(tmp_path / "s.tif", 0, 128, nodata_value=nodata_value)
    with rasterio.open(scene) as f:
        data = f.read()
    rgb = data[:3]
    valid = data[3] > 0 if not nodata_value else ~(rgb == 0).all(axis=0)
    assert (~valid).any()  # the NoData corner
    window = ChipWindow(-10, -6, 40)  # over the top-left corner: outside, NoData, valid
    with open_checked(CONTRACT, InputBinding.of_extra([]), scene) as raster:
        chip = read_chip(raster, window)
    assert chip.shape == (40, 40, 4)
    inside = chip[6:, 10:]
    assert (chip[:6, :, 3] == 0).all() and (chip[:, :10, 3] == 0).all() and (chip[:6, :, :3] == 0).all()
    np.testing.assert_array_equal(inside[..., 3] == 255, valid[:34, :30])
    np.testing.assert_array_equal(inside[..., 3] == 0, ~valid[:34, :30])
    ok = valid[:34, :30]
    np.testing.assert_array_equal(np.moveaxis(inside[..., :3], -1, 0)[:, ok], rgb[:, :34, :30][:, ok])
    assert (inside[~ok][:, :3] == 0).all()
