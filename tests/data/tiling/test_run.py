"""`rts tile`: scenes in EPSG:32606 (UTM 6N, Alaska) and a GeoPackage of RTS polygons in EPSG:4326 -> tiles."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import shapely
import yaml
from rasterio.enums import ColorInterp
from rasterio.features import rasterize
from rasterio.transform import from_origin
from rasterio.warp import transform_geom

from flows.cli.main import main
from rtscore.config.base import ConfigError, parse_config
from rtscore.config.tiling import TilingConfig, load_tiling_config
from rtscore.data.raster.vector_labels import LabelPolygonError
from rtscore.data.tiling import pixels as tile_pixels
from rtscore.data.tiling import run as tiling
from rtscore.data.tiling.run import TilingError, tile_scenes
from rtscore.data.tiling.state import iter_records
from rtscore.identity import resume_key

UTM = "EPSG:32606"
X0, Y0 = 500_000.0, 7_210_000.0  # upper-left corner of scene A, ~65° N 147° W
GSD = 3.0  # scene pixel size (m)
SIZE = 200  # scene pixels per side in the unit tests
PX = 9.54  # tile pixel size (EPSG:3857 m): 4.0 m on the ground at 65° N
TILE = 64


def blob(cx: float, cy: float, r: float, seed: int, n: int = 24) -> shapely.Polygon:
    """An irregular RTS-like outline around (cx, cy) (UTM m) of mean radius r."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    rr = r * (1 + 0.2 * np.sin(3 * t + rng.uniform(0, 6)) + 0.05 * rng.standard_normal(n))
    return shapely.Polygon(np.c_[cx + rr * np.cos(t), cy + 0.8 * rr * np.sin(t)])


def write_scene(
    path: Path,
    x0: float,
    polygons: list[shapely.Polygon],
    *,
    size: int = SIZE,
    alpha: bool = True,
    nir: bool = False,
    nir_hole: bool = True,
    nodata_cols: int = 0,
    seed: int = 0,
    dtype: str = "uint8",
    crs: str | None = UTM,
    gsd: float = GSD,
) -> Path:
    """A textured scene with the polygons painted bright; RGB + alpha (+ NIR), or RGB with nodata 0."""
    rng = np.random.default_rng(seed)
    transform = from_origin(x0, Y0, gsd, gsd)
    yy, xx = np.mgrid[0:size, 0:size]
    base = 90 + 25 * np.sin(xx / 7.0 + seed) * np.cos(yy / 11.0)
    rgb = np.stack([base + rng.normal(0, 6, (size, size)) + d for d in (0, 8, -6)])
    inside = rasterize([shapely.geometry.mapping(p) for p in polygons], (size, size), transform=transform) > 0
    rgb[:, inside] = np.array([205.0, 170.0, 140.0])[:, None] + rng.normal(0, 5, (3, int(inside.sum())))
    rgb = np.clip(rgb, 20, 250).astype(np.uint8)
    valid = np.ones((size, size), bool)
    valid[:, :nodata_cols] = False
    rgb[:, ~valid] = 0
    bands = [rgb]
    interp = ["red", "green", "blue"]
    kw: dict[str, Any] = {}
    if alpha:
        bands.append(np.where(valid, 255, 0).astype(np.uint8)[None])
        interp.append("alpha")
    else:
        kw["nodata"] = 0
    if nir:
        n = np.clip(150 - 60 * inside + rng.normal(0, 5, (size, size)), 1, 255).astype(np.uint8)
        if nir_hole:
            n[:3, :3] = 0  # nir + red == 0 here: NDVI undefined
            rgb[0, :3, :3] = 0
        bands.append(np.where(valid, n, 0)[None].astype(np.uint8))
        interp.append("undefined")
        if not alpha:
            kw["alpha"] = "UNSPECIFIED"  # R,G,B,NIR: band 4 is not alpha (GDAL's default ExtraSamples for RGB + 1)
    data = np.concatenate(bands).astype(dtype)
    profile = {"driver": "GTiff", "height": size, "width": size, "count": data.shape[0], "dtype": dtype}
    if crs is not None:
        profile.update(crs=crs, transform=transform)
    with rasterio.open(path, "w", **profile, **kw) as f:
        f.write(data)
        f.colorinterp = [ColorInterp[c] for c in interp]
    return path


def write_gpkg(
    path: Path, polygons: list[shapely.Polygon], regions: list[str], crs: str | None = "EPSG:4326", src: str = UTM
) -> Path:
    """The inventory (``polygons`` in ``src``) as a GeoPackage in ``crs`` (pyogrio.raw.write; geopandas is not a
    dependency)."""
    import pyogrio

    geoms = [shapely.geometry.shape(transform_geom(src, crs or src, shapely.geometry.mapping(p))) for p in polygons]
    uids = np.array([f"RTS-{i:03d}" for i in range(len(polygons))], dtype=object)
    pyogrio.raw.write(
        path,
        geometry=np.array([shapely.to_wkb(g) for g in geoms], dtype=object),
        field_data=[uids, np.array(regions, dtype=object)],
        fields=["UID", "Region"],
        crs=crs,
        driver="GPKG",
        geometry_type="Polygon",
    )
    return path


def base_config(tmp: Path, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "scenes": ["scenes/*.tif"],
        "polygons": {"path": "rts.gpkg", "id_column": "UID"},
        "regions": {"column": "Region"},
        "grid": {"pixel_size": PX, "tile_size": TILE},
        "splits": {"train": ["west", "east"]},  # a root of train tiles: the split rules hold with one region
        "output": "tiles",
    }
    doc.update(over)
    return doc


def config(tmp: Path, **over: Any) -> TilingConfig:
    path = tmp / "tile.yaml"
    path.write_text(yaml.safe_dump(base_config(tmp, **over)))
    return load_tiling_config(path)


POLYS = [blob(X0 + 150, Y0 - 150, 45, 1), blob(X0 + 420, Y0 - 330, 60, 2), blob(X0 + 300, Y0 - 500, 35, 3)]


@pytest.fixture
def mosaic(tmp_path: Path) -> Path:
    return mosaic_scenes(tmp_path)


def mosaic_scenes(tmp_path: Path) -> Path:
    """Scene A (alpha band) and scene B east of it (nodata mask), polygons in both, inventory in EPSG:4326."""
    (tmp_path / "scenes").mkdir()
    east = X0 + SIZE * GSD
    polys = [*POLYS, blob(east + 200, Y0 - 250, 50, 4), blob(east - 20, Y0 - 420, 50, 5)]  # the last on the seam
    write_scene(tmp_path / "scenes" / "a.tif", X0, polys, seed=1)
    write_scene(tmp_path / "scenes" / "b.tif", east, polys, alpha=False, seed=2)
    write_gpkg(tmp_path / "rts.gpkg", polys, ["west", "west", "west", "east", "east"])
    return tmp_path


def read_tif(path: Path) -> tuple[np.ndarray, Any]:
    with rasterio.open(path) as f:
        return f.read(), f


def metadata(root: Path) -> list[dict[str, str]]:
    with open(root / "metadata.csv", newline="") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------------------------ the layout


def test_layout_files_georeferencing_and_metadata(mosaic: Path) -> None:
    cfg = config(mosaic)
    out = tile_scenes(cfg, cfg.output or "")
    root = Path(cfg.output or "")
    rows = metadata(root)
    assert list(rows[0]) == [
        "Tile_id", "centroid_lat", "centroid_lon", "TrainClass", "RegionName", "UIDs", "NegativeUIDs", "ObjectPixels"
    ]  # fmt: skip
    assert out.counts.tiles == len(rows) > 0 and out.counts.positive == sum(r["TrainClass"] == "positive" for r in rows)
    for r in rows:
        with rasterio.open(root / "PLANET-RGB" / f"{r['Tile_id']}.tif") as f:
            assert f.crs.to_string() == "EPSG:3857" and (f.height, f.width) == (TILE, TILE)
            assert [c.name for c in f.colorinterp] == ["red", "green", "blue", "alpha"]
            assert f.dtypes == ("uint8",) * 4 and f.compression.name == "lzw"
            t = f.transform
            span = TILE * PX
            assert t.a == PX and t.e == -PX
            assert math.isclose(t.c / span, round(t.c / span), abs_tol=1e-9), "anchored at the CRS origin"
            assert math.isclose(t.f / span, round(t.f / span), abs_tol=1e-9)
            lon, lat = float(r["centroid_lon"]), float(r["centroid_lat"])
            assert 64.9 < lat < 65.1 and -147.1 < lon < -146.9
        label, _ = read_tif(root / "labels" / f"{r['Tile_id']}.tif")
        assert set(np.unique(label)) <= {0, 1, 255}
        assert (r["TrainClass"] == "positive") == bool((label == 1).any())
        assert (r["UIDs"] != "") == (r["TrainClass"] == "positive")
        assert [e.split("@")[0] for e in r["ObjectPixels"].split(";") if e] == [u for u in r["UIDs"].split(";") if u]
        for e in filter(None, r["ObjectPixels"].split(";")):
            row, col = map(int, e.split("@")[1].split(","))
            assert label[0, row, col] == 1
        assert r["NegativeUIDs"] == "", "a plain inventory has no Negative"
    assert (
        out.counts.polygons == 5
        and out.counts.polygons_labelled == len({u for r in rows for u in r["UIDs"].split(";") if u}) >= 1
    )
    manifest = json.loads((root / "tiling.json").read_text())
    assert manifest["counts"]["tiles"] == len(rows) and manifest["scenes"][0].endswith("a.tif")


def test_tiles_line_up_across_two_scenes_and_the_first_valid_pixel_wins(mosaic: Path) -> None:
    every = {"min_valid_fraction": 0.0}  # a seam tile sparse in each scene alone is whole in both: count them all
    both = tile_scenes(config(mosaic, **every), mosaic / "both")
    only_a = tile_scenes(config(mosaic, scenes=["scenes/a.tif"], output="a", **every), mosaic / "a")
    only_b = tile_scenes(config(mosaic, scenes=["scenes/b.tif"], output="b", **every), mosaic / "b")
    ids = {p: {r["Tile_id"] for r in metadata(mosaic / p)} for p in ("both", "a", "b")}
    seam = ids["a"] & ids["b"]
    assert seam, "tiles of the two scenes share grid cells along the seam"
    assert ids["both"] == ids["a"] | ids["b"] and both.counts.tiles == len(ids["both"])
    assert only_a.counts.tiles + only_b.counts.tiles - len(seam) == both.counts.tiles
    for tid in seam:
        mixed, fm = read_tif(mosaic / "both" / "PLANET-RGB" / f"{tid}.tif")
        a, fa = read_tif(mosaic / "a" / "PLANET-RGB" / f"{tid}.tif")
        b, fb = read_tif(mosaic / "b" / "PLANET-RGB" / f"{tid}.tif")
        assert fm.transform == fa.transform == fb.transform, "one fixed grid"
        va, vb = a[3] > 0, b[3] > 0
        np.testing.assert_array_equal(mixed[3] > 0, va | vb)
        np.testing.assert_array_equal(mixed[:3][:, va], a[:3][:, va])  # scene A first: its valid pixels win
        only_in_b = vb & ~va
        np.testing.assert_array_equal(mixed[:3][:, only_in_b], b[:3][:, only_in_b])
    inner = sorted(ids["a"] - seam)[0]  # a tile scene A alone covers: the same bytes with or without scene B
    np.testing.assert_array_equal(
        read_tif(mosaic / "both" / "PLANET-RGB" / f"{inner}.tif")[0],
        read_tif(mosaic / "a" / "PLANET-RGB" / f"{inner}.tif")[0],
    )


def test_rgb_is_resampled_bilinear_and_validity_nearest(tmp_path: Path) -> None:
    (tmp_path / "scenes").mkdir()
    write_scene(tmp_path / "scenes" / "a.tif", X0, POLYS, nodata_cols=60, seed=3)
    write_gpkg(tmp_path / "rts.gpkg", POLYS, ["west"] * 3)
    cfg = config(tmp_path)
    tile_scenes(cfg, tmp_path / "tiles")
    for r in metadata(tmp_path / "tiles"):
        px, _ = read_tif(tmp_path / "tiles" / "PLANET-RGB" / f"{r['Tile_id']}.tif")
        valid = px[3] > 0
        assert (px[:3][:, ~valid] == 0).all() and set(np.unique(px[3])) <= {0, 255}
        # no NoData (0) bled into valid pixels at the edge of the NoData area: the scene's valid values are >= 20
        assert (px[:3][:, valid] >= 20).all()


def test_an_rts_running_into_nodata_is_ignore_and_nodata_is_ignore(tmp_path: Path) -> None:
    (tmp_path / "scenes").mkdir()
    into_nodata = blob(X0 + 45, Y0 - 420, 40, 2)  # its west part lies in the scene's NoData columns
    write_scene(tmp_path / "scenes" / "a.tif", X0, [into_nodata], nodata_cols=20, seed=4)
    write_gpkg(tmp_path / "rts.gpkg", [into_nodata], ["west"])
    cfg = config(tmp_path)
    tile_scenes(cfg, tmp_path / "tiles")
    geom = transform_geom(UTM, "EPSG:3857", shapely.geometry.mapping(into_nodata))
    touched = 0
    for r in metadata(tmp_path / "tiles"):
        label, f = read_tif(tmp_path / "tiles" / "labels" / f"{r['Tile_id']}.tif")
        alpha = read_tif(tmp_path / "tiles" / "PLANET-RGB" / f"{r['Tile_id']}.tif")[0][3]
        assert (label[0][alpha == 0] == 255).all(), "NoData is ignore"
        inside = rasterize([geom], (TILE, TILE), transform=f.transform) > 0
        if inside.any():
            touched += 1
            assert (label[0][inside] == 255).all(), "an RTS not wholly observed is ignore, like one cut by the edge"
            assert r["UIDs"] == "" and r["TrainClass"] == "negative"
    assert touched >= 1


def test_partial_object_on_a_tile_edge_is_255_in_both_tiles(tmp_path: Path) -> None:
    """An RTS centred on a grid line of the tile grid: 255 on both sides; a small one inside a tile: 1."""
    from rasterio.warp import transform as warp_points

    span = TILE * PX
    # a grid line (EPSG:3857 x = k * span) inside the scene, mapped back to UTM for the polygon
    sx, sy = warp_points(UTM, "EPSG:3857", [X0 + 300], [Y0 - 300])
    gx = math.floor(sx[0] / span) * span
    ux, uy = warp_points("EPSG:3857", UTM, [gx], [sy[0]])
    cx, cy = warp_points("EPSG:3857", UTM, [gx + span / 2], [math.floor(sy[0] / span) * span + span / 2])
    edge, whole = blob(ux[0], uy[0], 40, 7), blob(cx[0], cy[0], 15, 8)
    (tmp_path / "scenes").mkdir()
    write_scene(tmp_path / "scenes" / "a.tif", X0, [edge, whole], seed=5)
    write_gpkg(tmp_path / "rts.gpkg", [edge, whole], ["west", "west"])
    cfg = config(tmp_path)
    tile_scenes(cfg, tmp_path / "tiles")
    values: dict[int, list[set[int]]] = {0: [], 1: []}
    for r in metadata(tmp_path / "tiles"):
        label, f = read_tif(tmp_path / "tiles" / "labels" / f"{r['Tile_id']}.tif")
        for k, p in enumerate((edge, whole)):
            inside = direct_labels([p], f.transform)[0]
            if inside.any():
                values[k].append(set(np.unique(label[0][inside]).tolist()))
                if k == 1:
                    assert r["UIDs"] == "RTS-001" and r["TrainClass"] == "positive"
    assert len(values[0]) == 2 and values[0] == [{255}, {255}]
    assert values[1] == [{1}]


def test_tiles_without_valid_pixels_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "scenes").mkdir()
    write_scene(tmp_path / "scenes" / "a.tif", X0, POLYS[1:], nodata_cols=SIZE - 40, seed=6)  # 40 valid columns
    write_gpkg(tmp_path / "rts.gpkg", POLYS[1:], ["west", "west"])
    cfg = config(tmp_path)
    out = tile_scenes(cfg, tmp_path / "tiles")
    assert out.counts.skipped_no_valid_pixels > 0
    assert (
        out.counts.tiles + out.counts.skipped_no_valid_pixels + out.counts.skipped_sparse == out.counts.candidate_tiles
    )
    written = {p.stem for p in (tmp_path / "tiles" / "PLANET-RGB").glob("*.tif")}
    assert written == {r["Tile_id"] for r in metadata(tmp_path / "tiles")}
    for tid in written:
        assert (read_tif(tmp_path / "tiles" / "PLANET-RGB" / f"{tid}.tif")[0][3] > 0).any()


def test_nir_zero_pixels_of_an_rgbn_scene_with_nodata_zero_stay_valid(tmp_path: Path) -> None:
    """R,G,B,NIR tagged red, green, blue, undefined with nodata=0 (GDAL's dataset mask is then band 4's): NIR == 0
    never makes a pixel NoData; RGB all 0 does. Tiled with and without a NIR hole, the tiles' alpha is the same."""
    (tmp_path / "scenes").mkdir()
    write_gpkg(tmp_path / "rts.gpkg", POLYS, ["west"] * 3)
    scene = tmp_path / "scenes" / "a.tif"
    alphas = []
    for hole in (False, True):
        write_scene(scene, X0, POLYS, alpha=False, nir=True, nir_hole=False, nodata_cols=30, seed=8)
        if hole:
            with rasterio.open(scene, "r+") as f:
                nir = f.read(4)
                nir[40:160, 40:160] = 0  # dark NIR (water), RGB valid
                f.write(nir, 4)
        out = tmp_path / f"tiles_{hole}"
        tile_scenes(config(tmp_path, output=out.name), out)
        alphas.append({p.stem: read_tif(p)[0][3] for p in sorted((out / "PLANET-RGB").glob("*.tif"))})
    assert alphas[0].keys() == alphas[1].keys()
    for tid, alpha in alphas[0].items():
        np.testing.assert_array_equal(alphas[1][tid], alpha, err_msg=tid)
    assert any((a == 0).any() for a in alphas[0].values()), "the RGB-zero columns are NoData"


def test_a_killed_run_resumes_and_redoes_only_unfinished_tiles(mosaic: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(mosaic)
    root = mosaic / "tiles"
    real = tiling._tile
    calls: list[str] = []

    def dies_after_five(*args: Any, **kw: Any) -> dict[str, Any]:
        if len(calls) == 5:
            raise KeyboardInterrupt  # the kill
        calls.append(args[1].tile_id)
        return real(*args, **kw)

    monkeypatch.setattr(tiling, "_tile", dies_after_five)
    with pytest.raises(KeyboardInterrupt):
        tile_scenes(cfg, root)
    assert not (root / "metadata.csv").exists() and not (root / "tiling.json").exists()
    monkeypatch.setattr(tiling, "_tile", real)
    first = tile_scenes(cfg, root)
    assert first.resumed_tiles == sum(r.status == "written" for r in iter_records(root) if r.tile_id in calls)
    reference = {p.relative_to(root): p.read_bytes() for p in root.rglob("*.tif")}
    csv_before = (root / "metadata.csv").read_text()

    # a kill mid-file leaves a temp file; a lost file makes its tile incomplete
    rows = metadata(root)
    victim = rows[len(rows) // 2]["Tile_id"]
    (root / "labels" / f"{victim}.tif").unlink()
    stray = root / "PLANET-RGB" / f".{rows[0]['Tile_id']}.tif.tmp-deadbeef"
    stray.write_bytes(b"half")
    redone: list[str] = []

    def counting(*args: Any, **kw: Any) -> dict[str, Any]:
        redone.append(args[1].tile_id)
        return real(*args, **kw)

    monkeypatch.setattr(tiling, "_tile", counting)
    again = tile_scenes(cfg, root)
    assert redone == [victim] and again.resumed_tiles == first.counts.tiles - 1
    assert not stray.exists()
    assert {p.relative_to(root): p.read_bytes() for p in root.rglob("*.tif")} == reference
    assert (root / "metadata.csv").read_text() == csv_before


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but its hidden bookkeeping (.rts-tile/), by relative path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.relative_to(root).as_posix().startswith(".")
    }


def set_aside_folders(root: Path) -> list[Path]:
    return sorted((root / ".rts-tile" / "set_aside").glob("*"))


def counting_tiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tile ids rendered from now on (a kept tile is not rendered)."""
    real = tiling._tile
    rendered: list[str] = []

    def counting(*args: Any, **kw: Any) -> dict[str, Any]:
        rendered.append(args[1].tile_id)
        return real(*args, **kw)

    monkeypatch.setattr(tiling, "_tile", counting)
    return rendered


def test_another_identity_is_set_aside_and_tiled_afresh_never_mixed(
    mosaic: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21: a root tiled with other settings or inputs is not resumed and not refused: the earlier run's tiles,
    records and lists are set aside (named in one warning line) and the run starts fresh; no tile of the earlier
    run stays beside the new ones."""
    root = mosaic / "tiles"
    both = tile_scenes(config(mosaic), root)
    before = tree(root)
    only_a = config(mosaic, scenes=["scenes/a.tif"])
    rendered = counting_tiles(monkeypatch)
    with caplog.at_level("WARNING", logger="rtscore"):
        out = tile_scenes(only_a, root)
    assert out.resumed_tiles == 0 and len(rendered) == out.counts.candidate_tiles - out.counts.skipped_outside_regions
    [folder] = set_aside_folders(root)
    [line] = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert f"set aside in {folder}; starting fresh" in line and "other code, settings or inputs" in line
    assert tree(folder) == before, "the earlier run is kept whole for the user"
    assert (folder / ".rts-tile" / "fingerprint").is_file() and len(list((folder / ".rts-tile/tiles").glob("*")))
    ids = {r["Tile_id"] for r in metadata(root)}
    assert out.counts.tiles == len(ids) < both.counts.tiles
    for sub in ("PLANET-RGB", "labels"):
        assert {p.stem for p in (root / sub).glob("*.tif")} == ids, "no tile of scene B left from the earlier run"
    assert {r.tile_id for r in iter_records(root)} <= {r.tile_id for r in iter_records(folder)}

    # an input rewritten (the inventory, one polygon fewer): another identity again
    write_gpkg(mosaic / "rts.gpkg", POLYS[:2], ["west", "west"])
    rendered.clear()
    again = tile_scenes(only_a, root)
    assert again.resumed_tiles == 0 and rendered and len(set_aside_folders(root)) == 2
    assert again.counts.polygons == 2

    # --overwrite deletes the earlier run instead (the set-aside folders stay); a directory not ours is refused
    rendered.clear()
    fresh = tile_scenes(only_a, root, overwrite=True)
    assert (
        fresh.resumed_tiles == 0
        and len(rendered) == fresh.counts.tiles + fresh.counts.skipped_no_valid_pixels + fresh.counts.skipped_sparse
    )
    assert len(set_aside_folders(root)) == 2 and fresh.counts.tiles == len(metadata(root))
    (mosaic / "mine").mkdir()
    (mosaic / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(TilingError, match="not written by rts tile"):
        tile_scenes(only_a, mosaic / "mine", overwrite=True)
    assert (mosaic / "mine" / "notes.txt").exists()


def test_a_code_edit_in_the_tiling_closure_retiles_from_scratch(
    mosaic: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21 acceptance (a): after a completed run, an edit of a module the tiling imports (simulated: the bytes
    the code identity reads change) re-tiles every cell; the earlier run is set aside, never resumed."""
    from tests.helpers import PROJECT_ROOT, CodeEdits

    cfg = config(mosaic)
    root = mosaic / "tiles"
    first = tile_scenes(cfg, root)
    reference = tree(root)
    rendered = counting_tiles(monkeypatch)
    assert tile_scenes(cfg, root).resumed_tiles == first.counts.tiles and rendered == [], "unchanged: all kept"

    CodeEdits(monkeypatch).edit(Path(tile_pixels.__file__).resolve().relative_to(PROJECT_ROOT).as_posix())
    with caplog.at_level("WARNING", logger="rtscore"):
        out = tile_scenes(cfg, root)
    assert out.resumed_tiles == 0
    assert len(rendered) == out.counts.tiles + out.counts.skipped_no_valid_pixels + out.counts.skipped_sparse, (
        "every cell cut again"
    )
    [folder] = set_aside_folders(root)
    assert any(f"set aside in {folder}" in r.getMessage() for r in caplog.records)
    assert tree(folder) == reference
    assert {k: v for k, v in tree(root).items() if k != "tiling.json"} == {
        k: v for k, v in reference.items() if k != "tiling.json"
    }, "the same bytes: the edit changed no behaviour"


def test_the_same_run_from_another_directory_or_an_absolute_config_is_already_done(
    mosaic: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21: the identity holds no path, so the run is the same whatever the working directory or the way the
    config is named; a re-run that finds every tile done leaves the data root untouched (mtimes included)."""
    (mosaic / "tile.yaml").write_text(yaml.safe_dump(base_config(mosaic)))
    monkeypatch.chdir(mosaic)
    assert main(["tile", "--config", "tile.yaml"]) == 0
    root = mosaic / "tiles"
    n = len(metadata(root))
    stamps = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file() and ".rts-tile" not in p.parts}
    capsys.readouterr()
    rendered = counting_tiles(monkeypatch)
    monkeypatch.chdir(mosaic / "scenes")
    assert main(["tile", "--config", "../tile.yaml"]) == 0
    assert main(["tile", "--config", str(mosaic / "tile.yaml")]) == 0
    assert main(["tile", "--config", "../tile.yaml", "--output", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.count(f"{n} kept from an earlier run") == 3 and "set aside" not in out
    assert rendered == [] and not set_aside_folders(root)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps, "an unchanged root is not rewritten"


SLOW_TILE = """
import sys, time
from rtscore.data.tiling import run as tiling
real = tiling._tile
def slow(*args, **kw):
    time.sleep(0.25)
    return real(*args, **kw)
tiling._tile = slow
from flows.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_9_during_rts_tile_resumes_to_the_bytes_of_an_uninterrupted_run(
    mosaic: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 acceptance (b): ``rts tile`` killed with SIGKILL once some but not all tiles are recorded, then
    re-run with unchanged code, keeps the finished tiles and ends byte-identical to an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    (mosaic / "tile.yaml").write_text(yaml.safe_dump(base_config(mosaic)))
    reference = tile_scenes(load_tiling_config(mosaic / "tile.yaml"), mosaic / "reference")
    total = reference.counts.tiles + reference.counts.skipped_no_valid_pixels + reference.counts.skipped_sparse
    assert total >= 8
    root = mosaic / "tiles"
    records = root / ".rts-tile" / "tiles"
    cmd = [sys.executable, "-c", SLOW_TILE, "tile", "--config", "tile.yaml"]
    proc = subprocess.Popen(cmd, cwd=mosaic, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (records.is_dir() and len(list(records.glob("*.json"))) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "rts tile ended before it could be killed"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    done = len(list(records.glob("*.json")))
    assert 3 <= done < total and not (root / "tiling.json").exists()

    monkeypatch.chdir(mosaic / "scenes")  # another working directory, the config named absolutely: the same run
    assert main(["tile", "--config", str(mosaic / "tile.yaml")]) == 0
    resumed = json.loads((root / "tiling.json").read_text())
    assert 0 < resumed["resumed_tiles"] <= done and not set_aside_folders(root)
    got, want = tree(root), tree(mosaic / "reference")
    assert got.keys() == want.keys()
    for rel, data in want.items():
        if rel != "tiling.json":
            assert got[rel] == data, rel
    first = reference.model_dump(mode="json", exclude={"output", "resumed_tiles"})
    assert {k: v for k, v in resumed.items() if k not in ("output", "resumed_tiles")} == first


# ------------------------------------------------------------------------------------------------ EXTRA bands


def test_ndvi_from_scene_bands_and_a_companion_dem_in_another_crs(tmp_path: Path) -> None:
    (tmp_path / "scenes").mkdir()
    write_scene(tmp_path / "scenes" / "a.tif", X0, POLYS, nir=True, seed=7)
    write_gpkg(tmp_path / "rts.gpkg", POLYS, ["west"] * 3)
    dem = tmp_path / "dem.tif"  # a DEM in lon/lat: elevation = 1000 * (lon + 148)
    lon0, lat0, res = -147.1, 65.1, 0.0005
    lon = lon0 + res * (np.arange(400) + 0.5)
    profile = {"driver": "GTiff", "height": 400, "width": 400, "count": 1, "dtype": "float32", "crs": "EPSG:4326"}
    with rasterio.open(dem, "w", **profile, transform=from_origin(lon0, lat0, res, res)) as f:
        f.write(np.tile(1000 * (lon + 148), (400, 1)).astype(np.float32)[None])
    extra = [
        {"name": "ndvi", "kind": "ndvi", "nir": {"band": 4}, "red": {"band": 0}},
        {"name": "dem", "kind": "band", "band": {"path": "dem.tif", "band": 0}},
    ]
    cfg = config(tmp_path, extra=extra)
    out = tile_scenes(cfg, tmp_path / "tiles")
    assert out.extra_bands == ["ndvi", "dem"]
    nan_seen = False
    for r in metadata(tmp_path / "tiles"):
        with rasterio.open(tmp_path / "tiles" / "EXTRA" / f"{r['Tile_id']}.tif") as f:
            ex = f.read()
            assert f.dtypes == ("float32", "float32") and math.isnan(f.nodata) and f.descriptions == ("ndvi", "dem")
            t = f.transform
        alpha = read_tif(tmp_path / "tiles" / "PLANET-RGB" / f"{r['Tile_id']}.tif")[0][3] > 0
        nd = ex[0][alpha]
        finite = np.isfinite(nd)
        nan_seen |= not finite.all()
        assert (np.abs(nd[finite]) <= 1).all()
        assert (ex[:, ~alpha] == 0).all(), "NoData pixels hold 0"
        # the DEM follows longitude: check the tile centre
        from rasterio.warp import transform as warp_points

        row, col = np.argwhere(alpha)[len(np.argwhere(alpha)) // 2]
        cx, cy = t @ (col + 0.5, row + 0.5)
        (clon,), _ = warp_points("EPSG:3857", "EPSG:4326", [cx], [cy])
        assert abs(ex[1][row, col] - 1000 * (clon + 148)) < 0.5
    assert nan_seen, "NDVI is NaN (declared nodata) where nir + red is 0"


def test_ndvi_is_nan_safe() -> None:
    nir = np.array([0.0, 10.0, np.nan, 5.0], np.float32)
    red = np.array([0.0, 0.0, 1.0, 5.0], np.float32)
    out = tile_pixels.ndvi(nir, red)
    assert out.dtype == np.float32 and math.isnan(out[0]) and out[1] == 1.0 and math.isnan(out[2]) and out[3] == 0


# ------------------------------------------------------------------------------------------------ regions


def test_regions_from_a_region_polygon_file(mosaic: Path) -> None:
    import pyogrio

    east = X0 + SIZE * GSD
    west_box = shapely.box(X0 - 100, Y0 - SIZE * GSD - 100, east, Y0 + 100)
    east_box = shapely.box(east, Y0 - 300, east + SIZE * GSD + 100, Y0 + 100)  # leaves the south-east out
    geoms = [
        shapely.geometry.shape(transform_geom(UTM, "EPSG:4326", shapely.geometry.mapping(b)))
        for b in (west_box, east_box)
    ]
    pyogrio.raw.write(
        mosaic / "regions.gpkg",
        geometry=np.array([shapely.to_wkb(g) for g in geoms], dtype=object),
        field_data=[np.array(["tundra west", "tundra east"], dtype=object)],
        fields=["name"],
        crs="EPSG:4326",
        driver="GPKG",
        geometry_type="Polygon",
    )
    polys = [*POLYS, blob(east + 200, Y0 - 150, 50, 4)]
    write_gpkg(mosaic / "rts.gpkg", polys, ["x"] * 4)
    splits = {"train": ["tundra west", "tundra east"]}
    cfg = config(mosaic, regions={"path": "regions.gpkg", "name_column": "name"}, splits=splits)
    out = tile_scenes(cfg, mosaic / "tiles")
    assert set(out.regions) == {"tundra west", "tundra east"} and out.counts.skipped_outside_regions > 0
    c = out.counts
    assert c.tiles + c.skipped_outside_regions + c.skipped_no_valid_pixels + c.skipped_sparse == c.candidate_tiles
    write_gpkg(mosaic / "rts.gpkg", [*polys, blob(east + 400, Y0 - 500, 40, 9)], ["x"] * 5)  # in no region
    with pytest.raises(TilingError, match=r"regions.gpkg: tile c-?\d+_r\d+ holds polygons \['RTS-004'\] .* no region"):
        tile_scenes(cfg, mosaic / "tiles2")


def test_splits_yaml_is_written_and_a_region_in_no_split_is_refused(mosaic: Path) -> None:
    cfg = config(mosaic, splits={"train": ["west"], "test": ["east"]})
    tile_scenes(cfg, mosaic / "tiles")
    assert yaml.safe_load((mosaic / "tiles" / "splits.yaml").read_text()) == {"train": ["west"], "test": ["east"]}
    bad = config(mosaic, splits={"train": ["west"], "test": ["East"]}, output="t2")
    with pytest.raises(TilingError, match=r"splits: region\(s\) \['east'\] of the tiles are in no split"):
        tile_scenes(bad, mosaic / "t2")
    assert not (mosaic / "t2").exists(), "refused before the first tile is written"


def test_a_region_in_no_split_is_refused_only_when_it_would_hold_a_tile(tmp_path: Path) -> None:
    """The splits check comes before any tile: a region whose cells are all NoData gives no tile, so it need not be
    in a split; one with a valid pixel must be."""
    import pyogrio

    (tmp_path / "scenes").mkdir()
    write_scene(tmp_path / "scenes" / "a.tif", X0, POLYS[1:2], nodata_cols=SIZE - 60, seed=6)  # valid: x >= 420 m
    write_gpkg(tmp_path / "rts.gpkg", POLYS[1:2], ["west"])
    boxes = [shapely.box(X0 - 100, Y0 - 700, X0 + 150, Y0 + 100), shapely.box(X0 + 150, Y0 - 700, X0 + 800, Y0 + 100)]
    pyogrio.raw.write(
        tmp_path / "regions.gpkg",
        geometry=np.array([shapely.to_wkb(b) for b in boxes], dtype=object),
        field_data=[np.array(["nodata west", "east"], dtype=object)],
        fields=["name"],
        crs=UTM,
        driver="GPKG",
        geometry_type="Polygon",
    )
    regions = {"path": "regions.gpkg", "name_column": "name"}
    out = tile_scenes(config(tmp_path, regions=regions, splits={"train": ["east"]}), tmp_path / "tiles")
    assert set(out.regions) == {"east"} and out.counts.skipped_no_valid_pixels > 0
    with pytest.raises(TilingError, match=r"splits: region\(s\) \['east'\] of the tiles are in no split"):
        tile_scenes(config(tmp_path, regions=regions, splits={"train": ["nodata west"]}), tmp_path / "t2")
    assert not (tmp_path / "t2").exists()


def test_an_empty_inventory_or_region_file_is_refused_as_empty(mosaic: Path) -> None:
    """Issue 21 weak case: an inventory without polygons is named as such, not as missing the id column (an empty
    file has no columns); an empty region file too."""
    import pyogrio

    (mosaic / "empty.geojson").write_text(json.dumps({"type": "FeatureCollection", "features": []}))
    with pytest.raises(TilingError, match=r"empty\.geojson: holds no polygons \(polygons\.path"):
        tile_scenes(config(mosaic, polygons={"path": "empty.geojson", "id_column": "UID"}), mosaic / "tiles")
    pyogrio.raw.write(
        mosaic / "regions.gpkg",
        geometry=np.array([], dtype=object),
        field_data=[np.array([], dtype=object)],
        fields=["name"],
        crs="EPSG:4326",
        driver="GPKG",
        geometry_type="Polygon",
    )
    with pytest.raises(TilingError, match=r"regions\.gpkg: holds no polygons \(regions\.path"):
        tile_scenes(config(mosaic, regions={"path": "regions.gpkg", "name_column": "name"}), mosaic / "tiles")
    assert not (mosaic / "tiles").exists()


# ------------------------------------------------------------------------------------------------ errors


def test_a_scene_without_crs_is_refused_naming_the_file(mosaic: Path) -> None:
    write_scene(mosaic / "scenes" / "c.tif", X0, POLYS, crs=None)
    with pytest.raises(TilingError, match=r"c\.tif: has no CRS"):
        tile_scenes(config(mosaic), mosaic / "tiles")
    assert not (mosaic / "tiles").exists()


def test_uint16_and_unmapped_four_band_scenes_are_refused(tmp_path: Path) -> None:
    (tmp_path / "scenes").mkdir()
    write_scene(tmp_path / "scenes" / "a.tif", X0, POLYS, dtype="uint16")
    write_gpkg(tmp_path / "rts.gpkg", POLYS, ["west"] * 3)
    with pytest.raises(TilingError, match=r"a\.tif: RGB bands are uint16"):
        tile_scenes(config(tmp_path), tmp_path / "tiles")
    data = np.full((4, SIZE, SIZE), 50, np.uint8)  # B, G, R, NIR, no colour interpretation (Planet analytic order)
    profile = {"driver": "GTiff", "height": SIZE, "width": SIZE, "count": 4, "dtype": "uint8", "crs": UTM}
    with rasterio.open(tmp_path / "scenes" / "a.tif", "w", **profile, transform=from_origin(X0, Y0, GSD, GSD)) as f:
        f.write(data)
        f.colorinterp = [ColorInterp.gray, *[ColorInterp.undefined] * 3]
    with pytest.raises(TilingError, match=r"a\.tif: 4 bands .* rgb_bands"):
        tile_scenes(config(tmp_path), tmp_path / "tiles")
    mapped = tile_scenes(config(tmp_path, rgb_bands={"rgb": [2, 1, 0], "alpha": None}), tmp_path / "tiles")
    assert mapped.counts.tiles > 0


def test_polygons_without_crs_are_refused_naming_the_file(mosaic: Path) -> None:
    write_gpkg(mosaic / "rts.gpkg", POLYS, ["west"] * 3, crs=None)
    with pytest.raises(LabelPolygonError, match=r"rts\.gpkg: declares no CRS"):
        tile_scenes(config(mosaic), mosaic / "tiles")


def test_polygons_that_overlap_no_scene_are_refused(mosaic: Path) -> None:
    far = [shapely.affinity.translate(p, 50_000, 0) for p in POLYS]
    write_gpkg(mosaic / "rts.gpkg", far, ["west"] * 3)
    with pytest.raises(TilingError, match=r"rts\.gpkg: none of its 3 polygons overlaps the 2 scene\(s\)"):
        tile_scenes(config(mosaic), mosaic / "tiles")
    assert not (mosaic / "tiles").exists()


def test_unknown_columns_are_refused_naming_the_file_and_its_columns(mosaic: Path) -> None:
    with pytest.raises(TilingError, match=r"regions.column: column 'region' is not in .*rts\.gpkg; its columns are"):
        tile_scenes(config(mosaic, regions={"column": "region"}), mosaic / "tiles")
    with pytest.raises(TilingError, match=r"polygons.id_column: column 'id'"):
        tile_scenes(config(mosaic, polygons={"path": "rts.gpkg", "id_column": "id"}), mosaic / "tiles")


def test_config_rules() -> None:
    with pytest.raises(ConfigError, match="regions: give exactly one of column, path, name"):
        parse_config(TilingConfig, {"scenes": ["a.tif"], "polygons": {"path": "p"}, "regions": {}})
    with pytest.raises(ConfigError, match=r"extra\[0\]: kind 'ndvi' takes exactly \['nir', 'red'\]"):
        parse_config(
            TilingConfig,
            {
                "scenes": ["a.tif"],
                "polygons": {"path": "p"},
                "regions": {"name": "r"},
                "extra": [{"name": "n", "kind": "ndvi"}],
            },
        )
    with pytest.raises(ConfigError, match="grid.crs: must be a projected CRS"):
        parse_config(
            TilingConfig,
            {"scenes": ["a"], "polygons": {"path": "p"}, "regions": {"name": "r"}, "grid": {"crs": "EPSG:4326"}},
        )
    cfg = parse_config(TilingConfig, {"scenes": ["a"], "polygons": {"path": "p"}, "regions": {"name": "r"}})
    assert (cfg.grid.crs, cfg.grid.pixel_size, cfg.grid.tile_size, cfg.resampling) == (
        "EPSG:3857",
        4.77,
        512,
        "bilinear",
    )


def test_cli_tiles_and_errors_are_one_line(mosaic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (mosaic / "tile.yaml").write_text(yaml.safe_dump(base_config(mosaic)))
    assert main(["tile", "--config", str(mosaic / "tile.yaml"), "--output", str(mosaic / "cli")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {mosaic / 'cli'}" in out and "positive" in out
    assert (mosaic / "cli" / "metadata.csv").is_file() and not (mosaic / "tiles").exists()
    write_gpkg(mosaic / "rts.gpkg", POLYS, ["west"] * 3)
    (mosaic / "tile.yaml").write_text(yaml.safe_dump(base_config(mosaic, regions={"column": "Regoin"})))
    assert main(["tile", "--config", str(mosaic / "tile.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rts tile: error: regions.column: column 'Regoin' is not in" in err


def test_the_example_config_loads_with_paths_relative_to_it() -> None:
    root = Path(__file__).resolve().parents[3]
    cfg = load_tiling_config(root / "configs" / "tiling" / "example.yaml")
    assert cfg.output == str(root / "data" / "my-tiles"), "../../data/my-tiles from configs/tiling/, its .. taken off"
    assert [e.name for e in cfg.extra] == ["ndvi"] and cfg.grid.pixel_size == 4.77 and cfg.grid.tile_size == 512


# ------------------------------------------------------------------------------------------------ the plan

SPAN = TILE * PX  # one tile of the grid, in EPSG:3857 units
COL0, ROW0 = -26800, 15742  # a grid cell near the scenes above (~65° N)


def grid_scene(path: Path, cols: int, *, rows: int = 1, strip_px: int = 0, dark: tuple[int, ...] = ()) -> Path:
    """An RGB + alpha scene in EPSG:3857 on the tile grid: cells COL0 .. COL0 + cols - 1 of rows ROW0 and down,
    plus ``strip_px`` pixels into the next column (a sliver); the cell columns in ``dark`` are NoData (alpha 0)."""
    rng = np.random.default_rng(len(path.name))
    h, w = rows * TILE, cols * TILE + strip_px
    rgb = rng.integers(30, 220, (3, h, w), dtype=np.uint8)
    alpha = np.full((1, h, w), 255, np.uint8)
    for c in dark:
        alpha[:, :, c * TILE : (c + 1) * TILE] = 0
    profile = {"driver": "GTiff", "height": h, "width": w, "count": 4, "dtype": "uint8", "crs": "EPSG:3857"}
    with rasterio.open(path, "w", **profile, transform=from_origin(COL0 * SPAN, (ROW0 + 1) * SPAN, PX, PX)) as f:
        f.write(np.concatenate([rgb, alpha]))
        f.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
    return path


def cell_rts(col: int, row: int = ROW0, r: float = 120.0) -> shapely.Polygon:
    """An RTS outline (EPSG:3857) wholly inside grid cell (col, row)."""
    return blob((col + 0.5) * SPAN, (row + 0.5) * SPAN, r, seed=abs(col))


def region_scenes(tmp_path: Path, regions: list[str], *, dark: tuple[int, ...] = ()) -> Path:
    """One grid scene of ``len(regions)`` cells west to east, an RTS wholly inside each, cell k in ``regions[k]``."""
    (tmp_path / "scenes").mkdir()
    grid_scene(tmp_path / "scenes" / "a.tif", len(regions), dark=dark)
    polys = [cell_rts(COL0 + k) for k in range(len(regions))]
    write_gpkg(tmp_path / "rts.gpkg", polys, regions, crs="EPSG:3857", src="EPSG:3857")
    return tmp_path


def test_split_rules_are_checked_on_the_plan_before_any_tile_and_every_problem_is_listed(tmp_path: Path) -> None:
    """Issue 23 point 6: with `splits`, a val split spanning fewer regions than the pipeline's min_val_regions, a
    split whose regions get no tile and regions in no split are all named in one error before any tile is written;
    a region that gets no tile (no cell, or all NoData) is named in a warning."""
    region_scenes(tmp_path, ["r1", "r2", "r3", "r4", "dark"], dark=(4,))
    bad = {"train": ["r1"], "val": ["r2"], "test": ["ghost", "dark"]}
    with pytest.raises(TilingError) as err:
        tile_scenes(config(tmp_path, splits=bad), tmp_path / "tiles")
    text = str(err.value)
    assert "splits: region(s) ['r3', 'r4'] of the tiles are in no split" in text
    assert "splits.val: spans 1 region(s) with a tile ['r2']; split_rules.min_val_regions is 2" in text
    assert "splits.test: none of its regions gets a tile: 'ghost' (no grid cell of the scenes is in it)" in text
    assert re.search(r"'dark' \(none of its \d cell\(s\) has at least 20% valid pixels, min_valid_fraction\)", text)
    assert not (tmp_path / "tiles").exists(), "refused before the first tile"

    # the rule's threshold is the tiling config's split_rules (the pipeline's splits.min_val_regions, default 2)
    one = {"train": ["r1", "dark"], "val": ["r2"], "test": ["r3", "r4", "ghost"]}
    rules = {"min_val_regions": 1}
    out = tile_scenes(config(tmp_path, splits=one, split_rules=rules), tmp_path / "tiles")
    assert set(out.regions) == {"r1", "r2", "r3", "r4"} and out.counts.tiles == 4
    [dark, thin_val, ghost, thin] = out.warnings
    assert dark.startswith("splits.train: region(s) that get no tile: 'dark' (none of its")
    assert "splits.val: about 1 tile(s) hold an RTS whole" in thin_val and "min_val_positives=20" in thin_val
    assert ghost == "splits.test: region(s) that get no tile: 'ghost' (no grid cell of the scenes is in it)"
    assert "splits.test: about 2 tile(s) hold an RTS whole" in thin and "min_test_positives=100" in thin
    assert json.loads((tmp_path / "tiles" / "tiling.json").read_text())["warnings"] == out.warnings

    # issue 38 (5): the same rules are the pipeline config's splits; a pipeline config that ingests this root with
    # other values is refused, naming both files and each rule (the generate-dataset stage and rts data / rts run
    # call this check before any split is generated: tests/data/geotiff, tests/flows/cli/test_main.py)
    from rtscore.config.pipeline import parse_pipeline_config
    from rtscore.data.tiling.rules import check_data_roots

    gen = {"split": "train", "tile_size": 64, "source": "geotiff", "geotiff": {"data_root": str(tmp_path / "tiles")}}
    pipeline = {"data": {"tile_size": 64, "generation": {"train": gen}}, "splits": {"min_val_regions": 2}}
    with pytest.raises(ConfigError) as refused:
        check_data_roots(parse_pipeline_config(pipeline), "pipeline.yaml")
    assert str(refused.value).startswith(
        f"split rules disagree: split_rules.min_val_regions is 1 in {tmp_path / 'tiles' / 'tiling.json'}, "
        "splits.min_val_regions is 2 in pipeline.yaml. They are one rule each (min_val_regions)"
    )
    pipeline["splits"]["min_val_regions"] = 1
    check_data_roots(parse_pipeline_config(pipeline), "pipeline.yaml")  # the same rules: accepted


def test_without_splits_the_derivation_is_run_on_the_plan_and_refused_early(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23 point 6: without `splits`, ingestion derives the split; `rts tile` runs the same derivation on its
    plan (tiles per region, cells holding an RTS whole) and refuses a root it cannot split, naming every rule."""
    from rtscore.config.pipeline import SplitsConfig
    from rtscore.data.geotiff.root_splits import derive_root_splits

    regions = ["r1", "r2", "r3"]
    region_scenes(tmp_path, regions)
    with pytest.raises(TilingError) as err:
        tile_scenes(config(tmp_path, splits=None), tmp_path / "tiles")
    text = str(err.value)
    assert "no splits in the config, so ingestion derives the split" in text
    assert "3 region(s) get a tile; the derivation needs at least 4 (test, split_rules.min_val_regions=2" in text
    assert "at most 3 tile(s) hold an RTS whole; test alone needs split_rules.min_test_positives=100" in text
    assert not (tmp_path / "tiles").exists()

    # ten regions, one positive tile each: 80/10/10 by region; derivable with a test floor of 1 positive tile
    tmp = tmp_path / "ten"
    tmp.mkdir()
    region_scenes(tmp, [f"r{k}" for k in range(10)])
    rules = {"min_val_regions": 1, "min_test_positives": 1}
    caplog.clear()
    with caplog.at_level("INFO", logger="rtscore"):
        out = tile_scenes(config(tmp, splits=None, split_rules=rules), tmp / "tiles")
    [plan] = [r.getMessage() for r in caplog.records if "plan:" in r.getMessage()]
    assert f"plan: {out.counts.candidate_tiles} grid cells of 64 px at 9.54 EPSG:3857 units over 1 scene(s)" in plan
    assert "about 10 tiles (cells at least 20% inside a scene; 0.041 Mpx), about 10 holding an RTS whole" in plan
    assert out.counts.tiles == out.counts.estimated_tiles == out.counts.positive == 10 and out.warnings == []
    assert not (tmp / "tiles" / "splits.yaml").exists()
    derived = derive_root_splits(tmp / "tiles", rules=SplitsConfig(min_val_regions=1, min_test_positives=1))
    assert derived is not None and sorted(r for rs in derived.splits.values() for r in rs) == sorted(out.regions)
    # three positive tiles for test: three regions of ten, 30 % of the tiles, off 80/10/10 (the derivation's rule 4)
    with pytest.raises(TilingError, match=r"no region-level split satisfies .* tile shares off 80/10/10") as err:
        tile_scenes(config(tmp, splits=None, split_rules={"min_val_regions": 1, "min_test_positives": 3}), tmp / "t2")
    assert "in 10 region(s)" in str(err.value) and not (tmp / "t2").exists()


def test_sliver_tiles_under_min_valid_fraction_are_not_written_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23 point 7: a scene whose east edge reaches 3 pixels into a cell column gives two sliver tiles (192
    valid pixels of 4096, 4.7 %): under min_valid_fraction (default 0.2) they are not written, counted in
    tiling.json and the summary line; the fraction is part of the run's identity."""
    (tmp_path / "scenes").mkdir()
    grid_scene(tmp_path / "scenes" / "a.tif", 2, rows=2, strip_px=3)
    write_gpkg(tmp_path / "rts.gpkg", [cell_rts(COL0)], ["west"], crs="EPSG:3857", src="EPSG:3857")
    (tmp_path / "tile.yaml").write_text(yaml.safe_dump(base_config(tmp_path)))
    assert main(["tile", "--config", str(tmp_path / "tile.yaml")]) == 0
    assert "2 sparse (under 20% valid, min_valid_fraction) skipped" in capsys.readouterr().out
    root = tmp_path / "tiles"
    manifest = json.loads((root / "tiling.json").read_text())
    assert manifest["config"]["min_valid_fraction"] == 0.2
    c = manifest["counts"]
    assert (c["candidate_tiles"], c["tiles"], c["skipped_sparse"], c["estimated_tiles"]) == (6, 4, 2, 4)
    slivers = {f"c{COL0 + 2}_r{ROW0}", f"c{COL0 + 2}_r{ROW0 - 1}"}
    assert {r.tile_id for r in iter_records(root) if r.status == "sparse"} == slivers
    assert {p.stem for p in (root / "PLANET-RGB").glob("*.tif")} == {r["Tile_id"] for r in metadata(root)}
    assert not slivers & {r["Tile_id"] for r in metadata(root)}
    assert all(r.valid_fraction == 3 / TILE for r in iter_records(root) if r.status == "sparse")

    every = tile_scenes(config(tmp_path, min_valid_fraction=0.0), root)  # another identity: set aside, re-cut
    assert every.resumed_tiles == 0 and every.counts.tiles == 6 and every.counts.skipped_sparse == 0
    assert len(set_aside_folders(root)) == 1
    with rasterio.open(root / "PLANET-RGB" / f"c{COL0 + 2}_r{ROW0}.tif") as f:
        assert int((f.read(4) > 0).sum()) == 3 * TILE


def test_a_coarse_scene_is_refused_before_any_tile_naming_its_pixel_size_and_both_fixes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23 point 8: a 300 m UTM scene on a ~10 m Web Mercator grid would be upsampled ~74x (710 Mercator
    units at 65° N); refused before any tile, naming each scene, its native pixel, the factor and the two fixes.
    A grid near the native size tiles it; a scene downsampled more than 2x without average resampling warns."""
    (tmp_path / "scenes").mkdir()
    coarse = [blob(X0 + 6000, Y0 - 6000, 3000, 1)]
    write_scene(tmp_path / "scenes" / "a.tif", X0, coarse, size=40, gsd=300.0, seed=1)
    write_scene(tmp_path / "scenes" / "b.tif", X0 + 12_000, coarse, size=40, gsd=300.0, seed=2)
    write_gpkg(tmp_path / "rts.gpkg", coarse, ["west"])
    west = {"train": ["west"]}
    with pytest.raises(TilingError) as err:
        tile_scenes(config(tmp_path, splits=west), tmp_path / "tiles")
    text = str(err.value)
    assert text.startswith("grid: 2 scene(s) would be upsampled more than 4x:")
    for name in ("a.tif", "b.tif"):
        line = next(ln for ln in text.splitlines() if f"{name}:" in ln)
        assert "native pixel 300 x 300 metre (EPSG:32606)" in line and "upsamples it 7" in line
        assert "set grid.pixel_size to about 7" in line and "or raise grid.max_resample_factor to 7" in line
    assert not (tmp_path / "tiles").exists(), "refused before the first tile"

    native = float(text.split("set grid.pixel_size to about ")[1].split(" ")[0])
    out = tile_scenes(config(tmp_path, grid={"pixel_size": native, "tile_size": 32}, splits=west), tmp_path / "tiles")
    assert out.counts.tiles > 0 and out.warnings == []

    # downsampling: 3 m scenes onto a ~28 Mercator-unit grid (4x) warn with bilinear, not with average
    for name in ("a.tif", "b.tif"):
        write_scene(tmp_path / "scenes" / name, X0 if name == "a.tif" else X0 + 600, POLYS, seed=3)
    write_gpkg(tmp_path / "rts.gpkg", POLYS, ["west"] * 3)
    grid = {"pixel_size": 4 * 7.1, "tile_size": 32}
    with caplog.at_level("WARNING", logger="rtscore"):
        warned = tile_scenes(config(tmp_path, grid=grid, splits=west), tmp_path / "down")
    assert len(warned.warnings) == 2 and "downsamples it 4.0x with bilinear" in warned.warnings[0]
    assert "set resampling: average" in warned.warnings[0] and any("a.tif" in r.getMessage() for r in caplog.records)
    assert tile_scenes(config(tmp_path, grid=grid, resampling="average", splits=west), tmp_path / "avg").warnings == []


def test_the_split_rules_default_to_the_pipeline_configs() -> None:
    from rtscore.config.pipeline import SplitsConfig

    cfg = parse_config(TilingConfig, {"scenes": ["a"], "polygons": {"path": "p"}, "regions": {"name": "r"}})
    pipeline = SplitsConfig()
    rules = cfg.split_rules
    assert (rules.min_val_regions, rules.min_test_positives, rules.min_val_positives) == (
        pipeline.min_val_regions,
        pipeline.min_test_positives,
        pipeline.min_val_positives,
    )
    assert cfg.min_valid_fraction == 0.2 and cfg.grid.max_resample_factor == 4.0
    with pytest.raises(ConfigError, match="min_valid_fraction"):
        parse_config(
            TilingConfig,
            {"scenes": ["a"], "polygons": {"path": "p"}, "regions": {"name": "r"}, "min_valid_fraction": 1},
        )


# ------------------------------------------------------------------------------------------------ focus, lineage


def focus_scenes(tmp_path: Path) -> Path:
    """Scene a over cells COL0 .. COL0 + 2, scene b over COL0 .. COL0 + 5 (both on the grid), an RTS in COL0 and an
    area (areas.gpkg) inside cell COL0 + 4."""
    (tmp_path / "scenes").mkdir()
    grid_scene(tmp_path / "scenes" / "a.tif", 3)
    grid_scene(tmp_path / "scenes" / "bb.tif", 6)
    write_gpkg(tmp_path / "rts.gpkg", [cell_rts(COL0)], ["r"], crs="EPSG:3857", src="EPSG:3857")
    write_gpkg(tmp_path / "areas.gpkg", [cell_rts(COL0 + 4, r=60)], ["r"], crs="EPSG:3857", src="EPSG:3857")
    return tmp_path


def test_focus_cuts_its_scenes_only_around_its_areas_and_other_scenes_whole(tmp_path: Path) -> None:
    """Issue 26 (ingest): a scene of focus.scenes gives only the cells touching an area of focus.path; a cell of
    another scene is cut whole as before, even where a focus scene covers it too."""
    focus_scenes(tmp_path)
    over = {"scenes": ["scenes/a.tif", "scenes/bb.tif"], "regions": {"name": "r"}, "splits": {"train": ["r"]}}
    whole = tile_scenes(config(tmp_path, **over), tmp_path / "whole")
    assert whole.counts.tiles == 6
    focus = {"path": "areas.gpkg", "scenes": ["scenes/bb.tif"]}
    out = tile_scenes(config(tmp_path, **over, focus=focus, output="focused"), tmp_path / "focused")
    ids = {r["Tile_id"] for r in metadata(tmp_path / "focused")}
    assert ids == {f"c{COL0 + k}_r{ROW0}" for k in (0, 1, 2, 4)}, "a's three cells whole, bb's only around the area"
    assert out.counts.tiles == 4 and out.counts.candidate_tiles < whole.counts.candidate_tiles
    assert json.loads((tmp_path / "focused" / "tiling.json").read_text())["config"]["focus"]["path"] == str(
        tmp_path / "areas.gpkg"
    )
    stray = {"path": "areas.gpkg", "scenes": ["scenes/nowhere*.tif"]}
    with pytest.raises(TilingError, match=r"scenes/nowhere\*.tif matches no file"):
        tile_scenes(config(tmp_path, **over, focus=stray, output="t3"), tmp_path / "t3")
    (tmp_path / "other.tif").write_bytes((tmp_path / "scenes" / "a.tif").read_bytes())
    outside = {"path": "areas.gpkg", "scenes": ["other.tif"]}
    with pytest.raises(TilingError, match=r"focus.scenes: .*other.tif.* not among the config's scenes"):
        tile_scenes(config(tmp_path, **over, focus=outside, output="t4"), tmp_path / "t4")
    assert not (tmp_path / "t3").exists() and not (tmp_path / "t4").exists()


def tile_bytes(root: Path) -> dict[str, bytes]:
    """Every tile file of a data root (images, EXTRA, labels), by its path under the root."""
    return {
        str(f.relative_to(root)): f.read_bytes()
        for d in ("PLANET-RGB", "EXTRA", "labels")
        if (root / d).is_dir()
        for f in sorted((root / d).iterdir())
    }


def test_a_focus_scene_gives_no_pixel_to_a_cell_away_from_its_areas(tmp_path: Path) -> None:
    """Issue 38: a focus scene filled the NoData of every cell it covers, so a review's added scene changed tiles far
    from the judged objects. Scene a ends in a sliver of cell COL0 + 3 (a tile, mostly NoData); bb, a focus scene,
    covers that cell whole: a's tiles are byte for byte those a alone gives, and bb gives only the area's cell."""
    (tmp_path / "scenes").mkdir()
    grid_scene(tmp_path / "scenes" / "a.tif", 3, strip_px=24)
    grid_scene(tmp_path / "scenes" / "bb.tif", 6)
    write_gpkg(tmp_path / "rts.gpkg", [cell_rts(COL0)], ["r"], crs="EPSG:3857", src="EPSG:3857")
    write_gpkg(tmp_path / "areas.gpkg", [cell_rts(COL0 + 4, r=60)], ["r"], crs="EPSG:3857", src="EPSG:3857")
    over = {"regions": {"name": "r"}, "splits": {"train": ["r"]}}
    tile_scenes(config(tmp_path, **over, scenes=["scenes/a.tif"]), tmp_path / "alone")
    focus = {"path": "areas.gpkg", "scenes": ["scenes/bb.tif"]}
    both = config(tmp_path, **over, scenes=["scenes/a.tif", "scenes/bb.tif"], focus=focus, output="focused")
    out = tile_scenes(both, tmp_path / "focused")
    alone, focused = tile_bytes(tmp_path / "alone"), tile_bytes(tmp_path / "focused")
    assert f"PLANET-RGB/c{COL0 + 3}_r{ROW0}.tif" in alone, "a's sliver is a tile of its own"
    assert {k: focused[k] for k in alone} == alone, "a's tiles as a alone cuts them: bb fills no NoData of theirs"
    assert set(focused) - set(alone) == {f"{d}/c{COL0 + 4}_r{ROW0}.tif" for d in ("PLANET-RGB", "labels")}
    assert out.counts.estimated_tiles == 5, "the plan counts bb only in the area's cell"


def test_with_a_scene_column_each_focus_scene_is_cut_only_around_its_own_areas(tmp_path: Path) -> None:
    """Issue 38, a later round: scene bb (added by round 1) ends in a sliver of cell COL0 + 4, where its judged object
    lies; cc, added by round 2, covers that cell whole. With focus.scene_column, cc gives pixels only around its own
    area (COL0 + 5): round 1's tile is byte for byte what bb alone gives. Without it every area is every focus
    scene's, and cc fills bb's NoData there."""
    (tmp_path / "scenes").mkdir()
    grid_scene(tmp_path / "scenes" / "a.tif", 2)
    grid_scene(tmp_path / "scenes" / "bb.tif", 4, strip_px=24)
    grid_scene(tmp_path / "scenes" / "cc.tif", 6)
    write_gpkg(tmp_path / "rts.gpkg", [cell_rts(COL0)], ["r"], crs="EPSG:3857", src="EPSG:3857")
    areas = [cell_rts(COL0 + 4, r=60), cell_rts(COL0 + 5, r=60)]  # the column "Region" names each area's scene
    write_gpkg(tmp_path / "areas.gpkg", areas, ["bb.tif", "cc.tif"], crs="EPSG:3857", src="EPSG:3857")
    write_gpkg(tmp_path / "round1.gpkg", areas[:1], ["bb.tif"], crs="EPSG:3857", src="EPSG:3857")
    over = {"regions": {"name": "r"}, "splits": {"train": ["r"]}}
    focus1 = {"path": "round1.gpkg", "scenes": ["scenes/bb.tif"]}
    tile_scenes(config(tmp_path, **over, scenes=["scenes/a.tif", "scenes/bb.tif"], focus=focus1), tmp_path / "r1")
    both = {"path": "areas.gpkg", "scenes": ["scenes/bb.tif", "scenes/cc.tif"]}
    scenes = ["scenes/a.tif", "scenes/bb.tif", "scenes/cc.tif"]
    tile_scenes(config(tmp_path, **over, scenes=scenes, focus={**both, "scene_column": "Region"}), tmp_path / "own")
    tile_scenes(config(tmp_path, **over, scenes=scenes, focus=both), tmp_path / "any")
    r1, own, any_ = (tile_bytes(tmp_path / d) for d in ("r1", "own", "any"))
    sliver = f"PLANET-RGB/c{COL0 + 4}_r{ROW0}.tif"
    assert sliver in r1 and {k: own[k] for k in r1} == r1, "round 1's tiles as round 1 cut them"
    assert set(own) - set(r1) == {f"{d}/c{COL0 + 5}_r{ROW0}.tif" for d in ("PLANET-RGB", "labels")}
    assert any_[sliver] != r1[sliver], "without scene_column cc fills bb's NoData in round 1's cell"
    with pytest.raises(TilingError, match=r"focus.scene_column: .*round1.gpkg has no column 'scene'"):
        tile_scenes(config(tmp_path, **over, scenes=scenes, focus={**focus1, "scene_column": "scene"}), tmp_path / "x")


def test_lineage_is_recorded_and_part_of_the_identity_and_a_plain_config_keeps_its_settings(mosaic: Path) -> None:
    """A config without focus and lineage has the identity settings it had before they existed (no new keys); the
    lineage (not its parent's path) enters the identity and tiling.json records it."""
    plain = config(mosaic)
    settings = tiling.identity_settings(plain)
    assert "focus" not in settings and "lineage" not in settings
    assert set(settings) == {
        "schema_version", "scenes", "rgb_bands", "polygons", "regions", "extra", "grid", "resampling",
        "min_valid_fraction",
    }  # fmt: skip
    doc = json.loads(json.dumps(settings))
    assert tiling.fingerprint(plain) == resume_key(tiling.__name__, doc)  # the code and these settings, nothing else
    lineage = {"version": "tiles+r1", "parent": "tiles", "parent_fingerprint": "ab" * 32, "counts": {"confirmed": 1}}
    with_lineage = config(mosaic, lineage=lineage, output="next")
    assert with_lineage.lineage is not None and with_lineage.lineage.parent == str(mosaic / "tiles")
    moved = config(mosaic, lineage={**lineage, "parent": "elsewhere"}, output="next")
    other = config(mosaic, lineage={**lineage, "version": "tiles+r2"}, output="next")
    fp = tiling.fingerprint(with_lineage)
    assert fp != tiling.fingerprint(plain) and fp == tiling.fingerprint(moved) != tiling.fingerprint(other)
    out = tile_scenes(with_lineage, mosaic / "next")
    recorded = json.loads((mosaic / "next" / "tiling.json").read_text())
    assert (
        recorded["lineage"]
        == out.model_dump(mode="json")["lineage"]
        == {**lineage, "parent": str(mosaic / "tiles"), "review": None}
    )
    assert recorded["config"]["lineage"]["version"] == "tiles+r1" and recorded["config_fingerprint"] == fp
    assert "focus" not in recorded["config"]
    plain_out = tile_scenes(plain, mosaic / "tiles")
    assert plain_out.lineage is None and "lineage" not in plain_out.config and "focus" not in plain_out.config


# ------------------------------------------------------------------------------------------------ acceptance

MOSAIC = 400  # scene pixels per side: two scenes of 1.2 km at 3 m


def mosaic_polygons() -> tuple[list[shapely.Polygon], list[str]]:
    """RTS outlines on a jittered grid over both scenes, and their regions: four stripes west to east."""
    rng = np.random.default_rng(12)
    polys, regions = [], []
    for i, cx in enumerate(np.arange(150.0, 2 * MOSAIC * GSD - 100, 300.0)):
        for j, cy in enumerate(np.arange(150.0, MOSAIC * GSD - 100, 300.0)):
            if (i + j) % 2:
                continue
            x, y = X0 + cx + rng.uniform(-40, 40), Y0 - cy + rng.uniform(-40, 40)
            polys.append(blob(x, y, rng.uniform(22, 40), seed=100 * i + j))
            stripe = int(cx // (MOSAIC * GSD / 2))
            regions.append(["north slope", "brooks foothills", "yukon flats", "seward lowland"][stripe])
    return polys, regions


def direct_labels(polys: list[shapely.Polygon], transform: Any) -> list[np.ndarray]:
    """Each polygon reprojected from UTM to EPSG:3857 and rasterised straight onto a tile's grid."""
    return [
        rasterize([transform_geom(UTM, "EPSG:3857", shapely.geometry.mapping(p))], (TILE, TILE), transform=transform)
        > 0
        for p in polys
    ]


def geotiff_generation(split: str, root: Path) -> dict[str, Any]:
    """A generation config (as YAML data) ingesting ``split`` of the tiled data root with its NDVI band."""
    geotiff = {"data_root": str(root), "extra_channels": [{"name": "ndvi", "band": 0}]}
    return {"split": split, "tile_size": TILE, "source": "geotiff", "store": {"shard_tiles": 8}, "geotiff": geotiff}


@pytest.mark.slow
def test_rts_tile_to_ingestion_to_a_package(prefect_harness: None, tmp_path: Path) -> None:
    """Issue 12 acceptance: a UTM scene mosaic and a GeoPackage in EPSG:4326 -> rts tile -> rts generate --source
    geotiff gives labels matching the polygons rasterised directly (IoU >= 0.98 per object) -> rts run packages."""
    from rtscore.data.store.reader import ZarrTileStore
    from tests.flows.configs import tiny_training_config, write_config
    from tests.helpers import quick_training

    polys, regions = mosaic_polygons()
    (tmp_path / "scenes").mkdir()
    east = X0 + MOSAIC * GSD
    write_scene(tmp_path / "scenes" / "a.tif", X0, polys, size=MOSAIC, nir=True, nir_hole=False, seed=1)
    write_scene(tmp_path / "scenes" / "b.tif", east, polys, size=MOSAIC, nir=True, nir_hole=False, seed=2)
    write_gpkg(tmp_path / "rts.gpkg", polys, regions)
    splits = {"train": ["north slope", "brooks foothills"], "val": ["yukon flats"], "test": ["seward lowland"]}
    extra = [{"name": "ndvi", "kind": "ndvi", "nir": {"band": 4}, "red": {"band": 0}}]
    rules = {"min_val_regions": 1, "min_test_positives": 1}  # the pipeline's below (refused unless the same): a 2.4 km
    # mosaic has one val region
    doc = base_config(tmp_path, splits=splits, split_rules=rules, extra=extra)
    (tmp_path / "tile.yaml").write_text(yaml.safe_dump(doc))
    assert main(["tile", "--config", str(tmp_path / "tile.yaml")]) == 0
    root = tmp_path / "tiles"
    rows = metadata(root)
    assert {r["RegionName"] for r in rows} == set(regions)

    # ingestion: every split through `rts generate --source geotiff`
    stores = {}
    for split in ("train", "val", "test"):
        path = write_config(tmp_path / f"gen_{split}.yaml", geotiff_generation(split, root))
        stores[split] = tmp_path / "stores" / f"{split}.zarr"
        assert main(["generate", "--source", "geotiff", "--config", str(path), "--output", str(stores[split])]) == 0
    inter = np.zeros(len(polys))
    union = np.zeros(len(polys))
    for store_path in stores.values():
        store = ZarrTileStore(store_path)
        for i in range(len(store)):
            sample = store[i]
            with rasterio.open(root / "PLANET-RGB" / f"{sample.tile_id}.tif") as f:
                transform = f.transform
            truth = direct_labels(polys, transform)
            for k, t in enumerate(truth):
                if not t.any():
                    continue
                others = np.any([u for j, u in enumerate(truth) if j != k], axis=0)
                region = ~others & (sample.alpha > 0)
                pred = (sample.label != 0) & region
                inter[k] += (pred & t & region).sum()
                union[k] += ((pred | t) & region).sum()
                assert set(np.unique(sample.label[t])) <= {1, 255}
    iou = inter / np.maximum(union, 1)
    assert (union > 0).all(), "every polygon is in some ingested tile"
    assert (iou >= 0.98).all(), dict(enumerate(np.round(iou, 4)))

    # the quickstart-style pipeline on the layout, end to end
    data = quick_training(tiny_training_config([1]))  # the package is asserted, not what it learnt
    data["data"]["tile_size"] = TILE
    data["splits"]["min_val_regions"] = 1  # a 2.4 km mosaic: one val region
    data["data"]["generation"] = {s: geotiff_generation(s, root) for s in ("train", "val", "test")}
    pipeline = write_config(tmp_path / "pipeline.yaml", data)
    run = tmp_path / "run"
    assert main(["run", "--config", str(pipeline), "--run", str(run)]) == 0
    assert (run / "package" / "weights.pth").is_file() and (run / "package" / "model_config.yaml").is_file()
