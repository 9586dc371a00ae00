"""Review export: time per chip and peak RSS vs the number of objects exported (issue 26).

A synthetic campaign is written directly (no model, no mapping): ``--scenes`` scenes of ``--side`` px (RGB +
alpha GeoTIFFs, tiled and deflated, EPSG:3857 at 4.77 m near 70 N, side by side, a NoData corner in each), an
objects layer of ``--objects`` objects (``objects_layer.write_objects``: irregular polygons of 4 to 60 px
across, some on a scene's edge or NoData, probabilities spread over [0.5, 1]), ``index.geojson`` (each scene's id,
URI and footprint) and ``summary.json`` (its ``mapping_identity.package_sha256``), and a package of which only
``model_config.yaml`` is read (the raster contract: EPSG:3857, 4.77 m) but whose sha256 the summary names.

(a) time per chip: ``export_review`` of every object (selection ``all``, default chip settings) into a fresh
    directory, ``--repeats`` times in this process; printed: seconds per chip (wall / objects), median and
    [min-max], and the chips' sizes.
(b) peak RSS: in a fresh process each, the export of 100, 300 and all objects of the same campaign (selection
    ``stratified`` n=100, n=300, seed 0; ``all``): the peak counter is reset (``VmHWM``, Linux
    ``/proc/self/clear_refs`` 5) after the imports and before the export, so the figure is the export's own peak
    (the interpreter, torch pulled in by the mapping modules, GDAL: the baseline is printed too). Ratios to 100.

(c) ``--select-only N``: the selection step alone at N objects (issue 37: ~10^6), before and after it read the
    layer's columns: an objects layer of N objects (``write_large_layer``: the layer ``write_objects`` writes, its
    fields and MultiPolygon WKB, written with pyogrio in batches: no RtsObject is made) and a tiling config (4 x 4
    regions over the objects, 1,000 inventory polygons). In a fresh process each, the peak counter reset after the
    imports: *before*, ``read_objects`` then ``select`` (with regions: every object's region as the export placed
    it then, object by object); *after*, what ``export_review`` calls now (``export._choose``: the columns, the
    selection on them, the chosen objects read). Stratified n=100 seed 0, without and with the tiling config's
    regions; ``--repeats`` times, before and after alternating; medians and [min-max] of wall time and peak RSS.

    .venv/bin/python bench/review_export_bench.py            # 1,000 objects over 4 scenes of 2048 px, ~1-2 min
    .venv/bin/python bench/review_export_bench.py --quick    # 60 objects, 2 scenes of 512 px, 1 repeat: a smoke run
    .venv/bin/python bench/review_export_bench.py --select-only 1000000   # (c) at 10^6 objects, ~15 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PIXEL = 4.77  # m, EPSG:3857 (Web Mercator zoom 15)
ORIGIN_Y = 11_050_000.0  # EPSG:3857 northing ~70 N
ORIGIN_X = 5_000_000.0
SIZE_EDGES = (0.0, 2000.0, 10000.0, 50000.0, 1e12)


def log(msg: str) -> None:
    print(msg, flush=True)


def write_package(pkg: Path) -> Path:
    """A package of which only model_config.yaml is read (R, G, B; contract EPSG:3857 at 4.77 m) and a
    deployment_config.yaml with a threshold (for ``uncertain``)."""
    import yaml

    from rtscore.config.binding import RasterContract
    from rtscore.package.format import DEPLOYMENT, MODEL, PackagedChannels, PackagedModelConfig

    pkg.mkdir(parents=True, exist_ok=True)
    mc = PackagedModelConfig(
        architecture="unet",
        backbone="mobilenet_v2",
        in_channels=3,
        channels=PackagedChannels(rgb=["R", "G", "B"], extra=[]),
        tile_size=128,
        raster=RasterContract(crs="EPSG:3857", pixel_size=PIXEL),
    )
    (pkg / MODEL).write_text(yaml.safe_dump(mc.model_dump(mode="json"), sort_keys=False))
    (pkg / DEPLOYMENT).write_text(yaml.safe_dump({"threshold": 0.5}, sort_keys=False))
    return pkg


def scene_transform(k: int, side: int) -> Any:
    from rasterio.transform import Affine

    return Affine(PIXEL, 0.0, ORIGIN_X + k * side * PIXEL, 0.0, -PIXEL, ORIGIN_Y)


def write_scene(path: Path, k: int, side: int, *, nodata_value: bool = False) -> Path:
    """A textured RGB + alpha scene (alpha 0 in its top-left corner triangle); ``nodata_value``: RGB only with
    ``nodata=0`` instead (its corner all zero)."""
    import rasterio

    rng = np.random.default_rng(100 + k)
    yy, xx = np.mgrid[0:side, 0:side]
    base = (np.sin(xx / 17.0 + k) * 40 + np.cos(yy / 23.0) * 40 + 120).astype(np.int16)
    rgb = np.clip(base[None] + rng.integers(-30, 31, (3, side, side)), 1, 255).astype(np.uint8)
    corner = (xx + yy) < side // 6
    profile: dict[str, Any] = {
        "driver": "GTiff",
        "height": side,
        "width": side,
        "dtype": "uint8",
        "crs": "EPSG:3857",
        "transform": scene_transform(k, side),
        "tiled": True,
        "blockxsize": 256,
        "blockysize": 256,
        "compress": "deflate",
    }
    if nodata_value:
        rgb[:, corner] = 0
        with rasterio.open(path, "w", count=3, nodata=0, **profile) as f:
            f.write(rgb)
    else:
        alpha = np.where(corner, 0, 255).astype(np.uint8)[None]
        with rasterio.open(path, "w", count=4, **profile) as f:
            f.write(np.concatenate([rgb, alpha]))
            f.colorinterp = [rasterio.enums.ColorInterp[c] for c in ("red", "green", "blue", "alpha")]
    return path


def synthetic_objects(n: int, n_scenes: int, side: int, seed: int = 0) -> list[Any]:
    """``n`` RtsObjects (EPSG:3857) over the scenes: irregular polygons of 4-60 px across; every 25th on a scene's
    outer edge (its chip leaves the scene), every 25th by its NoData corner, the rest inside."""
    import shapely

    from rtscore.data.raster.ground import web_mercator_latitude
    from rtscore.mapping.polygons import RtsObject, size_bin

    rng = np.random.default_rng(seed)
    objects = []
    for i in range(n):
        k = i % n_scenes
        r_px = float(rng.uniform(2, 30))
        if i % 25 == 0:
            cx, cy = float(rng.uniform(r_px, side - r_px)), 1.0  # on the top edge
        elif i % 25 == 1:
            cx = cy = r_px + 2.0  # by the top-left corner: its chip covers the scene's NoData corner
        else:
            cx, cy = (float(v) for v in rng.uniform(r_px + 1, side - r_px - 1, 2))
        angles = np.sort(rng.uniform(0, 2 * math.pi, 9))
        radii = r_px * rng.uniform(0.6, 1.0, 9)
        x0, y0 = ORIGIN_X + k * side * PIXEL, ORIGIN_Y
        pts = [
            (x0 + (cx + r * math.cos(a)) * PIXEL, y0 - (cy + r * math.sin(a)) * PIXEL)
            for a, r in zip(angles, radii, strict=True)
        ]
        geom = shapely.make_valid(shapely.Polygon(pts))
        if geom.geom_type != "Polygon":
            geom = shapely.convex_hull(geom)
        lat = web_mercator_latitude(geom.centroid.y)
        ground = geom.area * math.cos(math.radians(lat)) ** 2
        p_max = float(rng.uniform(0.55, 1.0))
        objects.append(
            RtsObject(
                object_id=i + 1,
                geometry=shapely.MultiPolygon([geom]),
                scene_ids=(f"s{k}",),
                n_pixels=int(geom.area / PIXEL**2),
                prob_mean=float(rng.uniform(0.5, p_max)),
                prob_max=p_max,
                area_m2=geom.area,
                ground_area_m2=ground,
                bbox=tuple(geom.bounds),
                size_bin=size_bin(ground, SIZE_EDGES),
                partial=i % 25 == 0,
            )
        )
    return objects


def write_campaign(
    root: Path, n_objects: int, n_scenes: int, side: int, *, nodata_value_scene: int | None = None
) -> tuple[Path, Path]:
    """(campaign directory, package directory) of a synthetic campaign (module docstring) under ``root``; scene
    ``nodata_value_scene`` (an index) is an RGB scene with ``nodata=0`` instead of alpha."""
    from rasterio.warp import transform_geom
    from shapely.geometry import box, mapping

    from rtscore.mapping.campaign import INDEX_FILE, OBJECTS_FILE, SUMMARY_JSON
    from rtscore.mapping.chunk import package_sha256
    from rtscore.mapping.objects_layer import write_objects

    pkg = write_package(root / "package")
    campaign = root / "campaign"
    scenes = root / "scenes"
    scenes.mkdir(parents=True, exist_ok=True)
    features = []
    for k in range(n_scenes):
        path = write_scene(scenes / f"s{k}.tif", k, side, nodata_value=k == nodata_value_scene)
        t = scene_transform(k, side)
        foot = box(t.c, t.f - side * PIXEL, t.c + side * PIXEL, t.f)
        features.append(
            {
                "type": "Feature",
                "geometry": transform_geom("EPSG:3857", "EPSG:4326", mapping(foot)),
                "properties": {"scene_id": f"s{k}", "uri": str(path)},
            }
        )
    campaign.mkdir(parents=True, exist_ok=True)
    write_objects(campaign / OBJECTS_FILE, synthetic_objects(n_objects, n_scenes, side), "EPSG:3857")
    (campaign / INDEX_FILE).write_text(json.dumps({"type": "FeatureCollection", "features": features}) + "\n")
    summary = {"mapping_identity": {"package_sha256": package_sha256(pkg)}, "objects": n_objects}
    (campaign / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    return campaign, pkg


# ------------------------------------------------------------------------------------------------ (c) layer
EXTENT_M = 200_000.0  # (c): the objects' square, EPSG:3857 metres west-east and north-south
LAYER_BATCH = 50_000


def large_batch(k0: int, k1: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Objects ``k0 + 1``..``k1`` (ids) of the large layer: star-shaped polygons of 9 vertices, 4-60 px across,
    spread over :data:`EXTENT_M`; (MultiPolygon WKB, the layer's columns in ``FIELDS`` order)."""
    import shapely

    from rtscore.mapping.objects_layer import FIELDS
    from rtscore.mapping.polygons import size_bin

    n = k1 - k0
    cx = ORIGIN_X + rng.uniform(0, EXTENT_M, n)
    cy = ORIGIN_Y - rng.uniform(0, EXTENT_M, n)
    r = rng.uniform(2, 30, n) * PIXEL
    angles = np.sort(rng.uniform(0, 2 * math.pi, (n, 9)), axis=1)
    radii = r[:, None] * rng.uniform(0.6, 1.0, (n, 9))
    ring = np.stack([cx[:, None] + radii * np.cos(angles), cy[:, None] + radii * np.sin(angles)], axis=-1)
    polys = shapely.polygons(np.concatenate([ring, ring[:, :1]], axis=1))
    area = shapely.area(polys)
    lat = np.degrees(2 * np.arctan(np.exp(cy / 6378137.0)) - math.pi / 2)
    ground = area * np.cos(np.radians(lat)) ** 2
    bounds = shapely.bounds(polys)
    p_max = rng.uniform(0.55, 1.0, n)
    ids = np.arange(k0 + 1, k1 + 1, dtype=np.int64)
    cols = {
        "object_id": ids,
        "scene_ids": np.array([f'["s{i % 4}"]' for i in ids.tolist()], dtype=object),
        "n_pixels": (area / PIXEL**2).astype(np.int64),
        "prob_mean": rng.uniform(0.5, p_max),
        "prob_max": p_max,
        "area_m2": area,
        "ground_area_m2": ground,
        "bbox_minx": bounds[:, 0],
        "bbox_miny": bounds[:, 1],
        "bbox_maxx": bounds[:, 2],
        "bbox_maxy": bounds[:, 3],
        "size_bin": np.array([size_bin(g, SIZE_EDGES) for g in ground.tolist()], dtype=object),
        "partial": ids % 25 == 0,
    }
    assert tuple(cols) == FIELDS
    wkb = np.asarray(shapely.to_wkb(shapely.multipolygons(polys[:, None])), dtype=object)
    return wkb, cols


def write_large_layer(path: Path, n: int, seed: int = 0) -> Path:
    """An objects layer of ``n`` objects (:func:`large_batch`), written as ``write_objects`` writes one (its layer,
    fields, MultiPolygon WKB, CRS, GPKG) a batch at a time: no RtsObject made, memory bounded by the batch."""
    import pyogrio
    from rasterio.crs import CRS

    from rtscore.mapping.objects_layer import OBJECTS_LAYER

    rng = np.random.default_rng(seed)
    wkt = CRS.from_user_input("EPSG:3857").to_wkt()
    for k0 in range(0, n, LAYER_BATCH):
        wkb, cols = large_batch(k0, min(k0 + LAYER_BATCH, n), rng)
        pyogrio.raw.write(
            path,
            geometry=wkb,
            field_data=list(cols.values()),
            fields=list(cols),
            crs=wkt,
            driver="GPKG",
            layer=OBJECTS_LAYER,
            geometry_type="MultiPolygon",
            encoding="UTF-8",
            append=k0 > 0,
        )
    return path


def write_large_tiling(root: Path, n_inventory: int = 1000, seed: int = 1) -> Path:
    """A tiling config over the large layer's square: 4 x 4 regions (``name``), ``n_inventory`` inventory boxes."""
    import pyogrio
    import shapely
    import yaml

    step = EXTENT_M / 4
    regions = [
        shapely.box(ORIGIN_X + i * step, ORIGIN_Y - (j + 1) * step, ORIGIN_X + (i + 1) * step, ORIGIN_Y - j * step)
        for j in range(4)
        for i in range(4)
    ]
    rng = np.random.default_rng(seed)
    x, y = ORIGIN_X + rng.uniform(0, EXTENT_M, n_inventory), ORIGIN_Y - rng.uniform(0, EXTENT_M, n_inventory)
    inventory = shapely.box(x, y, x + 200.0, y + 200.0)
    for name, geoms in (("regions.gpkg", regions), ("rts.gpkg", list(inventory))):
        pyogrio.raw.write(
            root / name,
            geometry=np.array([shapely.to_wkb(g) for g in geoms], dtype=object),
            field_data=[np.array([f"r{i}" for i in range(len(geoms))], dtype=object)],
            fields=["name"],
            crs="EPSG:3857",
            driver="GPKG",
            geometry_type="Polygon",
        )
    cfg = {
        "scenes": ["scenes/*.tif"],
        "polygons": {"path": "rts.gpkg"},
        "regions": {"path": "regions.gpkg", "name_column": "name"},
        "grid": {"pixel_size": PIXEL, "tile_size": 128},
    }
    (root / "tile.yaml").write_text(yaml.safe_dump(cfg))
    return root / "tile.yaml"


# ------------------------------------------------------------------------------------------------ (c) children
def regions_before(objects: list[Any], crs: Any, cfg: Any) -> dict[int, str | None]:
    """Every object's region as the export placed it before issue 37 (every object read whole, looked up one by
    one): the centroids reprojected to the grid, each object's grid cell's region."""
    from rasterio.warp import transform as warp

    from rtscore.data.tiling.inventory import RegionOf, read_inventory
    from rtscore.data.tiling.pixels import GridCell

    inventory = read_inventory(cfg)
    region_of = RegionOf(cfg, inventory)
    cents = [o.geometry.centroid for o in objects]
    xs, ys = warp(crs, cfg.grid.crs, [c.x for c in cents], [c.y for c in cents])
    span = cfg.grid.tile_size * cfg.grid.pixel_size
    out: dict[int, str | None] = {}
    for o, x, y in zip(objects, xs, ys, strict=True):
        cell = GridCell(math.floor(x / span), math.floor(y / span), cfg.grid.tile_size, cfg.grid.pixel_size)
        out[o.object_id] = region_of(cell, inventory.touching(cell))
    return out


def child_select(way: str, layer: str, tiling: str, n: int) -> None:
    """(c) in this fresh process: imports, peak counter reset, one selection ``way`` (before, after); prints its
    line: seconds, peak and baseline RSS, the chosen ids' count and a digest of them (before and after agree)."""
    import hashlib

    import pyogrio
    import rasterio.warp
    import shapely

    from rtscore.config.tiling import load_tiling_config
    from rtscore.mapping.objects_layer import read_objects
    from rtscore.review import export
    from rtscore.review.manifest import Selection
    from rtscore.review.select import select

    sel = Selection(mode="stratified", n=n, seed=0)
    cfg = load_tiling_config(tiling) if tiling else None
    pyogrio.read_info(layer)  # GDAL's drivers registered, the lazy imports done: outside the figure, both ways
    rasterio.warp.transform("EPSG:3857", "EPSG:4326", [0.0], [0.0])
    shapely.from_wkb(shapely.to_wkb(shapely.Point(0, 0)))
    base_kib = _vm_kib("VmRSS:")
    Path("/proc/self/clear_refs").write_text("5")
    t0, c0 = time.perf_counter(), time.process_time()
    if way == "before":
        crs, objects = read_objects(layer)
        regions = regions_before(objects, crs, cfg) if cfg is not None else {}
        chosen = select(objects, sel, regions)
        ids = [(o.object_id, regions.get(o.object_id)) for o in chosen]
    else:
        chosen, placed, _, _ = export._choose(export._read_columns(Path(layer)), sel, cfg)
        ids = [(o.object_id, placed.get(o.object_id)) for o in chosen]
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:12]
    line = {"seconds": dt, "cpu_s": cpu, "base_mib": base_kib / 1024, "peak_mib": _vm_kib("VmHWM:") / 1024}
    print(json.dumps({**line, "chosen": len(ids), "digest": digest}))


def _vm_kib(key: str) -> int:
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith(key))


def select_only(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """(c): the selection step before and after, without and with regions, ``a.repeats`` times each."""
    t0 = time.perf_counter()
    layer = write_large_layer(work / "objects.gpkg", a.select_only)
    tiling = write_large_tiling(work)
    log(
        f"(c) layer of {a.select_only:,} objects written in {time.perf_counter() - t0:.0f} s "
        f"({layer.stat().st_size / 2**20:.0f} MiB)"
    )
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    figures: dict[str, Any] = {"objects": a.select_only, "n": a.select_n}
    for label, cfg in (("stratified", ""), ("stratified + regions", str(tiling))):
        rows: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for r in range(a.repeats):
            for way in ("before", "after"):
                argv = [sys.executable, str(Path(__file__)), "--select-child", way, str(layer), cfg, str(a.select_n)]
                res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
                if res.returncode != 0:
                    sys.exit(f"select child failed:\n{res.stderr[-3000:]}")
                row = dict(json.loads(res.stdout.strip().splitlines()[-1]))
                rows[way].append(row)
                log(
                    f"  {label}, {way}, repeat {r + 1}: {row['seconds']:.1f} s ({row['cpu_s']:.1f} s CPU), "
                    f"peak {row['peak_mib']:.0f} MiB "
                    f"(after imports {row['base_mib']:.0f} MiB), {row['chosen']} chosen, digest {row['digest']}"
                )
        digests = {row["digest"] for way in rows for row in rows[way]}
        if len(digests) != 1:
            sys.exit(f"{label}: before and after chose different objects ({sorted(digests)})")
        figures[label] = {way: _summary(rows[way]) for way in rows}
        for way in rows:
            f = figures[label][way]
            log(
                f"  {label:>22}, {way:>6}: {f['seconds']:.1f} s "
                f"[{f['seconds_range'][0]:.1f}-{f['seconds_range'][1]:.1f}] ({f['cpu_s']:.1f} s CPU "
                f"[{f['cpu_range'][0]:.1f}-{f['cpu_range'][1]:.1f}])"
                f", peak {f['peak_mib']:.0f} MiB [{f['peak_range'][0]:.0f}-{f['peak_range'][1]:.0f}]"
                f" ({f['own_mib']:.0f} MiB above the imports' {f['base_mib']:.0f})"
            )
    return figures


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    secs, peaks, cpus = [r["seconds"] for r in rows], [r["peak_mib"] for r in rows], [r["cpu_s"] for r in rows]
    base = statistics.median(r["base_mib"] for r in rows)
    return {
        "seconds": statistics.median(secs),
        "seconds_range": [min(secs), max(secs)],
        "cpu_s": statistics.median(cpus),
        "cpu_range": [min(cpus), max(cpus)],
        "peak_mib": statistics.median(peaks),
        "peak_range": [min(peaks), max(peaks)],
        "base_mib": base,
        "own_mib": statistics.median(r["peak_mib"] - r["base_mib"] for r in rows),
        "repeats": len(rows),
    }


# ------------------------------------------------------------------------------------------------ (a)
def time_per_chip(campaign: Path, pkg: Path, work: Path, repeats: int) -> dict[str, Any]:
    from rtscore.review.export import export_review
    from rtscore.review.manifest import Selection

    per_chip, n = [], 0
    for r in range(repeats):
        out = work / f"review-{r}"
        t0 = time.perf_counter()
        header = export_review(str(campaign), str(pkg), str(out), Selection(mode="all"))
        dt = time.perf_counter() - t0
        n = header.n_objects
        per_chip.append(dt / n)
        log(f"  repeat {r + 1}: {n} chips in {dt:.2f} s = {1000 * dt / n:.2f} ms per chip")
    sizes = [
        int(json.loads(line)["chip_window"][2])
        for line in (work / "review-0" / "manifest.jsonl").read_text().splitlines()
    ]
    return {
        "objects": n,
        "ms_per_chip_median": 1000 * statistics.median(per_chip),
        "ms_per_chip_range": [1000 * min(per_chip), 1000 * max(per_chip)],
        "chip_px_median": statistics.median(sizes),
        "chip_px_range": [min(sizes), max(sizes)],
    }


# ------------------------------------------------------------------------------------------------ (b)
def child_export(campaign: str, pkg: str, out: str, n: int) -> None:
    """(b) in this fresh process: imports, peak counter reset, one export of ``n`` objects; prints its line."""
    from rtscore.review.export import export_review
    from rtscore.review.manifest import Selection

    status = Path("/proc/self/status").read_text()
    base_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    Path("/proc/self/clear_refs").write_text("5")
    sel = Selection(mode="all") if n <= 0 else Selection(mode="stratified", n=n, seed=0)
    t0 = time.perf_counter()
    header = export_review(campaign, pkg, out, sel)
    dt = time.perf_counter() - t0
    status = Path("/proc/self/status").read_text()
    hwm_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    print(
        json.dumps(
            {"objects": header.n_objects, "seconds": dt, "base_mib": base_kib / 1024, "peak_mib": hwm_kib / 1024}
        )
    )


def peak_rss(campaign: Path, pkg: Path, out: Path, n: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    argv = [sys.executable, str(Path(__file__)), "--child", str(campaign), str(pkg), str(out), str(n)]
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"export child failed:\n{res.stderr[-3000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=1000, help="objects in the campaign")
    p.add_argument("--scenes", type=int, default=4, help="scenes")
    p.add_argument("--side", type=int, default=2048, help="scene side in px")
    p.add_argument("--repeats", type=int, default=3, help="repetitions of (a)")
    p.add_argument("--rss-objects", type=int, nargs="+", default=[100, 300], help="(b): stratified samples (+ all)")
    p.add_argument("--no-rss", action="store_true", help="skip (b)")
    p.add_argument("--quick", action="store_true", help="smoke run: 60 objects, 2 scenes of 512 px, 1 repeat")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--select-only", type=int, default=0, metavar="N", help="(c) only: the selection at N objects")
    p.add_argument("--select-n", type=int, default=100, help="(c): the stratified sample's n")
    p.add_argument("--select-child", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--child", nargs=4, metavar=("CAMPAIGN", "PACKAGE", "OUTPUT", "N"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child_export(a.child[0], a.child[1], a.child[2], int(a.child[3]))
        return
    if a.select_child:
        child_select(a.select_child[0], a.select_child[1], a.select_child[2], int(a.select_child[3]))
        return
    if a.quick:
        a.objects, a.scenes, a.side, a.repeats, a.rss_objects = 60, 2, 512, 1, [10, 30]
    work = Path(tempfile.mkdtemp(prefix="review-export-bench-"))
    try:
        figures = select_only(a, work) if a.select_only else run(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json is not None:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


def run(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    log(f"campaign: {a.objects} objects over {a.scenes} scenes of {a.side} px")
    campaign, pkg = write_campaign(work, a.objects, a.scenes, a.side)
    log("(a) time per chip, export of every object:")
    figures: dict[str, Any] = {"time": time_per_chip(campaign, pkg, work, a.repeats)}
    t = figures["time"]
    lo, hi = t["ms_per_chip_range"]
    px_lo, px_hi = t["chip_px_range"]
    log(
        f"  {t['objects']} chips of {t['chip_px_median']:g} px median [{px_lo}-{px_hi}]: "
        f"{t['ms_per_chip_median']:.2f} ms per chip, median [{lo:.2f}-{hi:.2f}] over {a.repeats}"
    )
    if a.no_rss:
        return figures
    log("(b) peak RSS of the export, fresh process each:")
    rows = []
    for n in [*a.rss_objects, 0]:
        row = peak_rss(campaign, pkg, work / f"rss-{n}", n)
        rows.append(row)
        log(
            f"  {row['objects']:>5} objects: peak {row['peak_mib']:.1f} MiB (after imports {row['base_mib']:.1f} MiB), "
            f"{row['seconds']:.1f} s"
        )
    for row in rows[1:]:
        log(f"  peak RSS {row['objects']} / {rows[0]['objects']} objects: {row['peak_mib'] / rows[0]['peak_mib']:.3f}")
    figures["rss"] = rows
    return figures


if __name__ == "__main__":
    main()
