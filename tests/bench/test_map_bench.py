"""bench/map_bench.py (issue 14): the deployment cost table and the scenes the bench maps."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import rasterio

from bench.map_bench import (
    GUIDE_DECISIONS,
    H200_IMG_PER_S,
    cost_table,
    deployment_area_km2,
    synth_tiles,
    write_mosaic,
)


def test_cost_table_counts_windows_of_4096_px_quads_at_full_and_half_tile_stride() -> None:
    full, half = cost_table(cpu_windows_per_s=2.0, ratio=0.8)
    assert full["windows"] == GUIDE_DECISIONS  # 8 x 8 tiles of 512 px per quad, each decided once
    assert half["windows"] == pytest.approx(GUIDE_DECISIONS * (15 / 8) ** 2)  # 15 windows a side at 256 px
    for row in (full, half):
        assert row["gpu_hours_bare"] == pytest.approx(row["windows"] / H200_IMG_PER_S / 3600)
        assert row["gpu_hours_at_cpu_ratio"] == pytest.approx(row["gpu_hours_bare"] / 0.8)
        assert row["cpu_hours"] == pytest.approx(row["windows"] / 2.0 / 3600)


def test_deployment_area_is_the_quads_projected_area_scaled_by_cos2_latitude() -> None:
    projected, g60, g74 = deployment_area_km2()
    assert projected == pytest.approx(GUIDE_DECISIONS / 64 * (4096 * 4.77 / 1000) ** 2)
    assert g60 == pytest.approx(projected * 0.25)
    assert g74 == pytest.approx(projected * math.cos(math.radians(74)) ** 2)


def test_mosaic_cycles_synthetic_tiles_with_both_extra_bands(tmp_path: Path) -> None:
    tiles = synth_tiles(tmp_path, 64, 2)
    scene = tmp_path / "scene.tif"
    write_mosaic(tiles, scene, 160, offset=1)  # 3 x 3 tiles of 64 px, the last row and column cut to 32 px
    with rasterio.open(scene) as f, rasterio.open(tmp_path / "scene_extra.tif") as e:
        assert (f.count, f.width, f.height, e.count, e.dtypes[0]) == (4, 160, 160, 2, "float32")  # RGBA; ndvi, slope
        rgb, extra = f.read(), e.read()
    for k in range(9):
        row, col = 64 * (k // 3), 64 * (k % 3)
        h, w = min(64, 160 - row), min(64, 160 - col)
        src_rgb, src_extra = tiles[(1 + k) % 2]
        with rasterio.open(src_rgb) as t, rasterio.open(src_extra) as x:
            np.testing.assert_array_equal(rgb[:, row : row + h, col : col + w], t.read()[:, :h, :w])
            np.testing.assert_array_equal(extra[:, row : row + h, col : col + w], x.read()[:, :h, :w])
