"""`rts warp`: a UTM scene (R, G, B, alpha, NIR) put on the tile grid for `rts predict` / `rts map`, its pixels
and NDVI those `rts tile` cuts from it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import yaml
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin
from rasterio.warp import transform as warp_points

from flows.cli.command_params import WarpParams
from flows.cli.main import main, parse
from rtscore.config.binding import InputBinding, RasterContract
from rtscore.config.tiling import load_tiling_config
from rtscore.data.raster import warp
from rtscore.data.raster.bands import extra_candidates, open_checked
from rtscore.data.raster.warp import WarpError, warp_scenes
from rtscore.data.tiling.pixels import Datasets, GridCell
from rtscore.data.tiling.run import tile_scenes
from rtscore.data.tiling.scenes import check_scenes
from rtscore.package.verify import trained_on

UTM = "EPSG:32606"  # UTM 6N, Alaska
X0, Y0 = 500_000.0, 7_210_000.0  # upper-left corner, ~65° N 147° W
GSD = 10.0  # scene pixel size (m)
SIZE = 160  # scene pixels per side
PX = 20.0  # grid pixel size (EPSG:3857 m)
TILE = 32
NIR_BAND, RED_BAND = 4, 0  # 0-based bands of the scene


def write_scene(path: Path, *, seed: int = 0, crs: str | None = UTM, nodata_only: bool = False) -> Path:
    """R, G, B, alpha, NIR uint8 (colour interpretation red, green, blue, alpha, undefined): textured, alpha 0 on
    the west quarter, a dark patch (red and NIR of a few counts, where NDVI swings widely) and a patch where
    red + NIR is 0 (NDVI undefined)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    base = 100 + 40 * np.sin(xx / 6.0 + seed) * np.cos(yy / 9.0)
    rgb = np.clip(np.stack([base + rng.normal(0, 8, (SIZE, SIZE)) + d for d in (0, 10, -10)]), 1, 255)
    nir = np.clip(150 + 50 * np.cos(xx / 5.0) + rng.normal(0, 8, (SIZE, SIZE)), 1, 255)
    dark = (slice(60, 90), slice(80, 120))
    rgb[0][dark] = rng.integers(1, 6, (30, 40))
    nir[dark] = rng.integers(1, 6, (30, 40))
    rgb[0, 100:104, 100:104] = 0
    nir[100:104, 100:104] = 0
    valid = (xx >= SIZE // 4) & (not nodata_only)
    alpha = np.where(valid, 255, 0)
    data = np.concatenate([rgb, alpha[None], nir[None]]).astype(np.uint8)
    data[:3, ~valid] = 0
    profile: dict[str, Any] = {"driver": "GTiff", "height": SIZE, "width": SIZE, "count": 5, "dtype": "uint8"}
    if crs is not None:
        profile.update(crs=crs, transform=from_origin(X0, Y0, GSD, GSD))
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(path, "w", **profile) as f:
        f.write(data)
        f.colorinterp = [ColorInterp[c] for c in ("red", "green", "blue", "alpha", "undefined")]
    return path


def write_polygons(path: Path) -> Path:
    """One RTS outline in lon/lat GeoJSON, inside the scene's valid part."""
    xs = [X0 + 900, X0 + 1200, X0 + 1200, X0 + 900, X0 + 900]
    ys = [Y0 - 500, Y0 - 500, Y0 - 800, Y0 - 800, Y0 - 500]
    lon, lat = warp_points(UTM, "EPSG:4326", xs, ys)
    feature = {
        "type": "Feature",
        "properties": {"UID": "RTS-1"},
        "geometry": {"type": "Polygon", "coordinates": [[list(p) for p in zip(lon, lat, strict=True)]]},
    }
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [feature]}))
    return path


def write_config(tmp: Path, **over: Any) -> Path:
    doc: dict[str, Any] = {
        "scenes": ["scenes/*.tif"],
        "polygons": {"path": "rts.geojson", "id_column": "UID"},
        "regions": {"name": "north"},
        "extra": [{"name": "ndvi", "kind": "ndvi", "nir": {"band": NIR_BAND}, "red": {"band": RED_BAND}}],
        "grid": {"crs": "EPSG:3857", "pixel_size": PX, "tile_size": TILE},
        "output": "tiles",
    }
    doc.update(over)
    path = tmp / "tiling.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def scene_dir(tmp_path: Path) -> Path:
    write_scene(tmp_path / "scenes" / "landsat.tif")
    write_polygons(tmp_path / "rts.geojson")
    write_config(tmp_path)
    return tmp_path


def window_of(tile: Path, warped: rasterio.io.DatasetReader) -> tuple[int, int]:
    """(row, col) pixel offset of a tile in the warped raster, which must be whole pixels of the same grid."""
    with rasterio.open(tile) as t:
        assert t.crs == warped.crs and t.res == warped.res
        col = (t.transform.c - warped.transform.c) / PX
        row = (warped.transform.f - t.transform.f) / PX
    assert abs(col - round(col)) < 1e-6 and abs(row - round(row)) < 1e-6
    return round(row), round(col)


def read(path: Path, row: int = 0, col: int = 0, size: int | None = None) -> np.ndarray:
    with rasterio.open(path) as f:
        if size is None:
            return f.read()
        return f.read(window=rasterio.windows.Window(col, row, size, size))


def test_a_warped_scene_equals_the_tiles_rts_tile_cuts_from_it_pixel_for_pixel(scene_dir: Path) -> None:
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    tile_scenes(cfg.model_copy(update={"splits": {"train": ["north"]}}), scene_dir / "tiles")  # one region: train
    summary = warp_scenes(cfg, scene_dir / "warped")
    rgb, extra = scene_dir / "warped" / "landsat.tif", scene_dir / "warped" / "landsat_extra.tif"
    tiles = sorted((scene_dir / "tiles" / "PLANET-RGB").glob("*.tif"))
    assert len(tiles) >= 8
    with rasterio.open(rgb) as w:
        for tile in tiles:
            row, col = window_of(tile, w)
            assert np.array_equal(read(rgb, row, col, TILE), read(tile)), tile.name  # R, G, B and alpha
            ndvi = read(scene_dir / "tiles" / "EXTRA" / tile.name)
            np.testing.assert_array_equal(read(extra, row, col, TILE), ndvi, err_msg=tile.name)  # NaN == NaN
    warped_ndvi = read(extra)
    assert np.isnan(warped_ndvi).any() and np.nanmin(warped_ndvi) < -0.5 < 0.5 < np.nanmax(warped_ndvi)
    record = summary.scenes[0]
    assert (summary.written, summary.kept, summary.empty) == (1, 0, 0)
    assert record.valid_cells >= len(tiles) and record.cells == (record.width // TILE) * (record.height // TILE)


def test_outputs_are_the_layout_predict_reads(scene_dir: Path) -> None:
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    warp_scenes(cfg, scene_dir / "warped")
    out = scene_dir / "warped"
    assert sorted(p.name for p in out.iterdir()) == ["landsat.tif", "landsat_extra.tif", "landsat_warp.json"]
    with rasterio.open(out / "landsat.tif") as f:
        assert f.colorinterp == (ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha)
        assert f.dtypes == ("uint8",) * 4 and f.crs.to_string() == "EPSG:3857" and f.res == (PX, PX)
        assert f.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG" and f.compression is not None
        assert f.height % TILE == 0 and f.width % TILE == 0
        assert f.transform.c % (TILE * PX) == 0 and f.transform.f % (TILE * PX) == 0  # on the grid
    with rasterio.open(out / "landsat_extra.tif") as f:
        assert f.dtypes == ("float32",) and f.descriptions == ("ndvi",) and math.isnan(f.nodata)
        assert f.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
    contract = RasterContract(crs="EPSG:3857", pixel_size=PX)
    binding = InputBinding.positional(["ndvi"])
    scene = out / "landsat.tif"
    with open_checked(contract, binding, scene, extra_candidates(scene)[-1]) as raster:
        assert raster.extra_path == out / "landsat_extra.tif"


def test_cells_without_a_valid_pixel_are_nodata(scene_dir: Path) -> None:
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    record = warp_scenes(cfg, scene_dir / "warped").scenes[0]
    assert 0 < record.valid_cells < record.cells  # the west quarter is alpha 0: whole cells of NoData
    rgba, ndvi = read(scene_dir / "warped" / "landsat.tif"), read(scene_dir / "warped" / "landsat_extra.tif")
    datasets = Datasets()
    scene = check_scenes(cfg, datasets)[0]
    x0, y1 = record.transform[2], record.transform[5]
    empty = 0
    for r in range(record.height // TILE):
        for c in range(record.width // TILE):
            cell = GridCell(round(x0 / (TILE * PX)) + c, round(y1 / (TILE * PX)) - 1 - r, TILE, PX)
            if warp.render_pixels(cell, [scene], cfg, datasets) is None:
                empty += 1
                block = (slice(r * TILE, (r + 1) * TILE), slice(c * TILE, (c + 1) * TILE))
                assert not rgba[(slice(None), *block)].any() and not ndvi[(slice(None), *block)].any()
    datasets.close()
    assert empty == record.cells - record.valid_cells > 0


def test_a_rerun_skips_a_complete_scene_and_redoes_a_changed_one(scene_dir: Path) -> None:
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    out = scene_dir / "warped"
    warp_scenes(cfg, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = warp_scenes(cfg, out)
    assert (again.written, again.kept) == (0, 1)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    scene = scene_dir / "scenes" / "landsat.tif"
    os.utime(scene, ns=(scene.stat().st_atime_ns, scene.stat().st_mtime_ns + 10**9))
    assert warp_scenes(cfg, out).written == 1  # the scene's identity changed
    (out / "landsat_extra.tif").write_bytes(b"truncated")
    assert warp_scenes(cfg, out).written == 1  # a file of another size than recorded: not complete
    no_extra = cfg.model_copy(update={"extra": []})
    assert warp_scenes(no_extra, out).written == 1  # other settings: warped again, the stale EXTRA removed
    assert sorted(p.name for p in out.iterdir()) == ["landsat.tif", "landsat_warp.json"]


def test_a_scene_without_a_valid_pixel_writes_no_raster_and_is_skipped_on_a_rerun(scene_dir: Path) -> None:
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    blank = write_scene(scene_dir / "blank" / "blank.tif", nodata_only=True)
    out = scene_dir / "warped"
    summary = warp_scenes(cfg, out, scenes=[str(blank)])
    assert (summary.written, summary.empty) == (1, 1) and summary.scenes[0].files == {}
    assert sorted(p.name for p in out.iterdir()) == ["blank_warp.json"]
    assert warp_scenes(cfg, out, scenes=[str(blank)]).kept == 1


def test_an_error_midway_leaves_nothing_half_written(scene_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    out = scene_dir / "warped"
    calls = []
    render = warp.render_pixels

    def failing(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 5:
            raise OSError("disk full")
        return render(*args)

    monkeypatch.setattr(warp, "render_pixels", failing)
    with pytest.raises(OSError, match="disk full"):
        warp_scenes(cfg, out)
    assert list(out.iterdir()) == []  # no raster under its final name, no temporary file, no manifest


def test_scenes_replace_the_configs_and_polygons_are_not_read(scene_dir: Path, tmp_path: Path) -> None:
    write_config(
        scene_dir,
        scenes=["old/*.tif"],
        polygons={"path": "gone.gpkg"},
        regions={"path": "gone.gpkg", "name_column": "x"},
    )
    new = write_scene(tmp_path / "new" / "s2.tif", seed=3)
    summary = warp_scenes(load_tiling_config(scene_dir / "tiling.yaml"), tmp_path / "out", scenes=[str(new)])
    assert [Path(s.scene).name for s in summary.scenes] == ["s2.tif"]
    assert (tmp_path / "out" / "s2.tif").is_file() and (tmp_path / "out" / "s2_extra.tif").is_file()


def write_package(path: Path, *, crs: str, pixel_size: float, extra: list[dict[str, Any]]) -> Path:
    """A package's model_config.yaml (all `rts warp` reads of a package)."""
    doc = {
        "architecture": "unet",
        "backbone": "resnet18",
        "in_channels": 3 + len(extra),
        "channels": {"rgb": ["R", "G", "B"], "extra": extra},
        "tile_size": TILE,
        "raster": {"crs": crs, "pixel_size": pixel_size},
    }
    path.mkdir(parents=True)
    (path / "model_config.yaml").write_text(yaml.safe_dump(doc))
    return path


def test_a_package_is_checked_before_anything_is_written_listing_every_mismatch(scene_dir: Path) -> None:
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    bad = write_package(scene_dir / "bad", crs=UTM, pixel_size=4.77, extra=[{"name": "dem", "band": 0}])
    with pytest.raises(WarpError) as err:
        warp_scenes(cfg, scene_dir / "warped", package=trained_on(bad))
    text = str(err.value)
    assert "grid.crs EPSG:3857" in text and UTM in text
    assert "grid.pixel_size 20" in text and "4.77" in text
    assert "'dem' is bound to no band" in text
    assert not (scene_dir / "warped").exists()
    swapped = write_package(scene_dir / "swapped", crs="EPSG:3857", pixel_size=PX, extra=[{"name": "ndvi", "band": 1}])
    with pytest.raises(WarpError, match="'ndvi' is band 0 there, band 1 here"):
        warp_scenes(cfg, scene_dir / "warped", package=trained_on(swapped))
    good = write_package(scene_dir / "good", crs="EPSG:3857", pixel_size=PX, extra=[{"name": "ndvi", "band": 0}])
    assert warp_scenes(cfg, scene_dir / "warped", package=trained_on(good)).written == 1


def test_scene_problems_and_colliding_outputs_are_listed_together(scene_dir: Path, tmp_path: Path) -> None:
    write_scene(tmp_path / "a" / "x.tif")
    write_scene(tmp_path / "b" / "x.tif")
    write_scene(tmp_path / "c" / "nocrs.tif", crs=None)
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    scenes = [str(tmp_path / d / "*.tif") for d in ("a", "b", "c")]
    with pytest.raises(WarpError) as err:
        warp_scenes(cfg, tmp_path / "out", scenes=scenes)
    text = str(err.value)
    assert "nocrs.tif: has no CRS" in text and "would both write" in text and str(tmp_path / "a" / "x.tif") in text
    assert not (tmp_path / "out").exists()
    with pytest.raises(WarpError, match="would replace an input raster"):
        warp_scenes(cfg, scene_dir / "scenes")


def test_rts_warp_parses_and_runs(scene_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["warp", "--config", str(scene_dir / "tiling.yaml"), "--output", str(scene_dir / "w")]
    command, params = parse([*argv, "--scenes", "a.tif", "b/*.tif", "--package", "pkg"])
    assert command.name == "warp" and isinstance(params, WarpParams)
    assert params.scenes == ["a.tif", "b/*.tif"] and params.package == "pkg"
    assert Path(params.config).is_absolute()
    assert main(argv) == 0
    assert "1 scene(s) warped" in capsys.readouterr().out and (scene_dir / "w" / "landsat_warp.json").is_file()
    assert main([*argv, "--scenes", str(scene_dir / "nothing*.tif")]) == 2
    assert "matches no file" in capsys.readouterr().err


def test_a_grid_that_upsamples_a_scene_past_the_factor_is_refused_as_by_rts_tile(scene_dir: Path) -> None:
    """Issue 23 point 8 holds for warp too: the config's grid against each scene's native pixel, before writing."""
    cfg = load_tiling_config(scene_dir / "tiling.yaml")
    fine = cfg.model_copy(update={"grid": cfg.grid.model_copy(update={"pixel_size": 2.0})})
    with pytest.raises(WarpError) as err:
        warp_scenes(fine, scene_dir / "warped")
    text = str(err.value)
    assert "landsat.tif: native pixel 10 x 10 metre" in text and "more than grid.max_resample_factor 4" in text
    assert not (scene_dir / "warped").exists()
