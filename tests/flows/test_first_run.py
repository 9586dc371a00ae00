"""Issue 23 acceptance: a new user's first run on real imagery, in one try.

Two UTM scenes at a coarse pixel size (30 m, Landsat-like), one with an alpha band and one R, G, B, NIR file with a
declared nodata of 0 (its NIR is 0 at scattered valid pixels), and an inventory of RTS outlines in lon/lat GeoJSON:
``rts tile`` with its defaults and a stated grid -> ``rts run`` -> ``rts warp --scenes`` -> ``rts map`` of new ground
(two more scenes of the same kind south of them, laid out as the training pair), every command exactly once, no
``--refresh``, no file edited by hand in between. The commands are the ones docs/geotiff.md's tutorial walks through.
"""

from __future__ import annotations

import json
import math
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
from shapely.affinity import translate

from flows.cli.main import main
from tests.data.tiling.test_run import blob
from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import quick_training

UTM = "EPSG:32606"  # UTM 6N: interior Alaska
X0, Y0 = 420_000.0, 7_330_000.0  # upper-left corner of scene A, ~66° N 148.8° W
GSD = 30.0  # the scenes' pixel size (m)
SIZE = 384  # scene pixels per side: 11.5 km
SHIFT = 288  # scene B starts this many pixels east of scene A: the two overlap by 96 columns
SOUTH = 2 * SIZE * GSD  # the new ground to map: scenes D and E, laid out as A and B, 23 km south of them
TILE = 64
REGIONS = ["chandalar", "koyukuk", "kanuti", "ray mountains", "hodzana", "tanana"]  # six stripes, west to east
SPLITS = {"train": ["chandalar", "kanuti", "hodzana"], "val": ["koyukuk", "ray mountains"], "test": ["tanana"]}


def grid_pixel_size() -> float:
    """The stated grid: EPSG:3857 pixels of about the scenes' 30 ground metres at the scenes' latitude."""
    from rasterio.warp import transform

    _, lat = transform(UTM, "EPSG:4326", [X0 + SIZE * GSD], [Y0 - SIZE * GSD / 2])
    return round(GSD / math.cos(math.radians(lat[0])), 1)


def inventory() -> tuple[list[shapely.Polygon], list[str]]:
    """60 RTS outlines (150-330 m across) on a jittered grid over the northern half of both scenes (the southern
    half is RTS-free ground: the negative tiles), each in the region of its stripe."""
    rng = np.random.default_rng(23)
    width = (SHIFT + SIZE) * GSD
    polys, regions = [], []
    for cx in np.arange(600.0, width - 500, 1000.0):
        for cy in (900.0, 2900.0, 4900.0):
            x, y = X0 + cx + rng.uniform(-250, 250), Y0 - cy + rng.uniform(-250, 250)
            polys.append(blob(x, y, rng.uniform(75, 165), seed=len(polys)))
            regions.append(REGIONS[min(int(cx // (width / len(REGIONS))), len(REGIONS) - 1)])
    return polys, regions


def write_scene(
    path: Path,
    x0: float,
    polys: list[shapely.Polygon],
    seed: int,
    *,
    alpha: bool,
    brightness: float = 0.0,
    y0: float = Y0,
) -> None:
    """A textured 30 m scene with the RTS painted bright and their NIR low. With ``alpha``: bands red, green, blue,
    undefined (NIR), alpha (0 over a ragged corner); else red, green, blue, undefined (NIR) with nodata 0: RGB all-0
    over a strip, and NIR 0 at scattered valid pixels (valid observations, never a NoData mask). ``brightness``
    shifts the ground's grey level (imagery darker than any training region); ``y0`` is the scene's north edge."""
    rng = np.random.default_rng(seed)
    transform = from_origin(x0, y0, GSD, GSD)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    base = 95 + brightness + 20 * np.sin(xx / 9.0 + seed) * np.cos(yy / 13.0)
    rgb = np.stack([base + rng.normal(0, 6, (SIZE, SIZE)) + d for d in (0, 6, -8)])
    inside = rasterize([shapely.geometry.mapping(p) for p in polys], (SIZE, SIZE), transform=transform) > 0
    rgb[:, inside] = np.array([200.0, 168.0, 140.0])[:, None] + rng.normal(0, 6, (3, int(inside.sum())))
    rgb = np.clip(rgb, 12, 250).astype(np.uint8)
    nir = np.clip(150 - 70 * inside + rng.normal(0, 8, (SIZE, SIZE)), 1, 255).astype(np.uint8)
    valid = np.ones((SIZE, SIZE), bool)
    if alpha:
        valid &= yy + xx + 8 * np.sin(yy / 5.0) > 90  # a ragged NoData corner (north-west)
        bands = [*rgb, nir, np.where(valid, 255, 0).astype(np.uint8)]
        interp = ["red", "green", "blue", "undefined", "alpha"]
        kw: dict[str, Any] = {}
    else:
        valid[:, -20:] = False  # a NoData strip on the east edge
        nir[(rng.random((SIZE, SIZE)) < 0.02) & valid] = 0  # dark NIR: valid pixels whatever their NIR
        bands = [*rgb, nir]
        interp = ["red", "green", "blue", "undefined"]
        kw = {"nodata": 0, "alpha": "UNSPECIFIED"}  # GDAL tags a 4th band of an RGB TIFF alpha unless told
    data = np.stack(bands)
    data[:4, :, :][:, ~valid] = 0
    profile = {"driver": "GTiff", "height": SIZE, "width": SIZE, "count": len(bands), "dtype": "uint8"}
    with rasterio.open(path, "w", **profile, crs=UTM, transform=transform, **kw) as f:
        f.write(data)
        f.colorinterp = [ColorInterp[c] for c in interp]


def write_geojson(path: Path, polys: list[shapely.Polygon], regions: list[str]) -> None:
    """The inventory in lon/lat GeoJSON (RFC 7946: no crs member)."""
    features = [
        {
            "type": "Feature",
            "properties": {"uid": f"RTS-{i:03d}", "region": region},
            "geometry": transform_geom(UTM, "EPSG:4326", shapely.geometry.mapping(p)),
        }
        for i, (p, region) in enumerate(zip(polys, regions, strict=True))
    ]
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))


def generation(split: str) -> dict[str, Any]:
    geotiff = {"data_root": "tiles", "extra_channels": [{"name": "ndvi", "band": 0}]}
    return {"split": split, "tile_size": TILE, "source": "geotiff", "store": {"shard_tiles": 8}, "geotiff": geotiff}


@pytest.mark.slow
def test_scenes_and_an_inventory_to_a_map_in_one_try(prefect_harness: None, tmp_path: Path) -> None:
    polys, regions = inventory()
    (tmp_path / "scenes").mkdir()
    write_scene(tmp_path / "scenes" / "a.tif", X0, polys, seed=1, alpha=True)
    write_scene(tmp_path / "scenes" / "b.tif", X0 + SHIFT * GSD, polys, seed=2, alpha=False)
    write_geojson(tmp_path / "rts.geojson", polys, regions)

    tiling = {
        "scenes": ["scenes/*.tif"],
        "polygons": {"path": "rts.geojson", "id_column": "uid"},
        "regions": {"column": "region"},
        "extra": [{"name": "ndvi", "kind": "ndvi", "nir": {"band": 3}, "red": {"band": 0}}],
        "grid": {"pixel_size": grid_pixel_size(), "tile_size": TILE},
        "splits": SPLITS,
        "output": "tiles",
    }
    (tmp_path / "tile.yaml").write_text(yaml.safe_dump(tiling))
    assert main(["tile", "--config", str(tmp_path / "tile.yaml")]) == 0
    counts = json.loads((tmp_path / "tiles" / "tiling.json").read_text())["counts"]
    assert counts["skipped_sparse"] > 0, "the slivers along the scenes' edges are not cut (min_valid_fraction)"
    assert counts["tiles"] == counts["positive"] + counts["negative"] and counts["negative"] > 0

    pipeline = quick_training(tiny_training_config([1]))
    pipeline.pop("splits")  # the split rules of tile.yaml (the defaults), as the docs' pipeline.yaml: one set of rules
    pipeline["data"]["tile_size"] = TILE
    pipeline["data"]["generation"] = {s: generation(s) for s in ("train", "val", "test")}
    write_config(tmp_path / "pipeline.yaml", pipeline)
    run = tmp_path / "run"
    assert main(["run", "--config", str(tmp_path / "pipeline.yaml"), "--run", str(run)]) == 0
    package = run / "package"
    report = json.loads((run / "validation" / "report.json").read_text())
    for split, s in report["splits"].items():  # the stores' counts are a partition of their tiles
        assert s["n_tiles"] == s["n_positive"] + s["n_negative"] + s["n_full_nodata_excluded"], split
    # a thin val is said where the split is decided (rts tile's plan) and again on the stores, never silently
    thin = [w for w in json.loads((tmp_path / "tiles" / "tiling.json").read_text())["warnings"] if "splits.val" in w]
    assert thin and "split_rules.min_val_positives=20" in thin[0]
    assert any("fewer than splits.min_val_positives=20" in w for w in report["warnings"]), report["warnings"]
    stats = json.loads((run / "normalization_stats.json").read_text())
    assert sorted(r["region"] for r in stats["regions"]) == sorted(SPLITS["train"])

    # new ground: two scenes south of the training pair, slumps of the same kind, each with the NoData of its twin
    (tmp_path / "new").mkdir()
    south = [translate(p, yoff=-SOUTH) for p in polys]
    write_scene(tmp_path / "new" / "d.tif", X0, south, seed=4, alpha=True, y0=Y0 - SOUTH)
    write_scene(tmp_path / "new" / "e.tif", X0 + SHIFT * GSD, south, seed=5, alpha=False, y0=Y0 - SOUTH)
    warped = tmp_path / "warped"
    argv = ["warp", "--config", str(tmp_path / "tile.yaml"), "--scenes", str(tmp_path / "new" / "*.tif")]
    assert main([*argv, "--package", str(package), "--output", str(warped)]) == 0
    assert sorted(p.name for p in warped.glob("*.tif")) == ["d.tif", "d_extra.tif", "e.tif", "e_extra.tif"]
    assert nodata_mismatch(warped / "e.tif", Y0 - SOUTH) < 0.005, "NIR == 0 is a valid pixel, never NoData"

    campaign = tmp_path / "campaign"
    rc = main(["map", "--package", str(package), "--input", str(warped), "--output", str(campaign)])
    drift = json.loads((campaign / "drift" / "drift_report.json").read_text())
    assert rc == 0, drift
    for channel in drift["channels"]:  # the gate sets each channel beside the training regions' own means
        assert sorted(channel["regions"]["means"]) == sorted(SPLITS["train"]), channel
    summary = json.loads((campaign / "summary.json").read_text())
    assert summary["done"] == 2 and summary["objects"] > 0
    # the headline is the ground mapped, the overlap of the two scenes counted once (UTM areas: ground within 0.1 %)
    valid_a = int(
        (np.add.outer(np.arange(SIZE), np.arange(SIZE)) + 8 * np.sin(np.arange(SIZE) / 5.0)[:, None] > 90).sum()
    )
    valid_b = SIZE * (SIZE - 20)
    union_km2 = (valid_a + valid_b - (SIZE - SHIFT) * SIZE) * GSD**2 / 1e6
    assert summary["km2_mapped_ground"] == pytest.approx(union_km2, rel=0.01)
    assert summary["km2_scenes_sum"] > 1.1 * summary["km2_mapped_ground"]

    # a new, darker scene east of the others, warped with --scenes into the same folder (D and E are kept): the
    # campaign's pooled sample drifts, the gate refuses, and its report names the scene and the channels that
    # drive the block, with the training regions' spread beside them
    (tmp_path / "darker").mkdir()
    write_scene(tmp_path / "darker" / "c.tif", X0 + 2 * SIZE * GSD, [], seed=3, alpha=True, brightness=-45)
    argv = ["warp", "--config", str(tmp_path / "tile.yaml"), "--scenes", str(tmp_path / "darker" / "c.tif")]
    assert main([*argv, "--package", str(package), "--output", str(warped)]) == 0
    refused = tmp_path / "refused"
    assert main(["map", "--package", str(package), "--input", str(warped), "--output", str(refused)]) == 2
    drift = json.loads((refused / "drift" / "drift_report.json").read_text())
    assert drift["ok"] is False and drift["blocking_files"] == ["c"]
    blocked = [c for c in drift["channels"] if c["blocker"]]
    assert {c["channel"] for c in blocked} >= {"R", "G", "B"}
    for c in blocked:
        if c["channel"] in ("R", "G", "B"):
            assert c["new_mean"] < c["regions"]["mean_min"] and "outside what training covered" in c["coverage"]
    report = (refused / "drift" / "drift_report.md").read_text()
    assert "training regions' means" in report and "kanuti" in report and "`c`" in report


def nodata_mismatch(warped: Path, y0: float) -> float:
    """The share of a warped scene's pixels whose alpha disagrees with its footprint less its NoData strip (a scene
    written as B, without alpha, north edge ``y0``): a NIR-based mask would leave ~2 % of holes inside it."""
    from rasterio.warp import transform

    with rasterio.open(warped) as f:
        alpha = f.read(4) > 0
        rows, cols = np.mgrid[0 : f.height, 0 : f.width]
        xs, ys = f.transform @ (cols.ravel() + 0.5, rows.ravel() + 0.5)
        ux, uy = transform(f.crs, UTM, list(xs), list(ys))
    c = (np.asarray(ux) - (X0 + SHIFT * GSD)) / GSD
    r = (y0 - np.asarray(uy)) / GSD
    expected = ((c >= 0) & (c < SIZE - 20) & (r >= 0) & (r < SIZE)).reshape(alpha.shape)
    return float((expected != alpha).mean())
