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

    .venv/bin/python bench/review_export_bench.py            # 1,000 objects over 4 scenes of 2048 px, ~1-2 min
    .venv/bin/python bench/review_export_bench.py --quick    # 60 objects, 2 scenes of 512 px, 1 repeat: a smoke run
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
    p.add_argument("--child", nargs=4, metavar=("CAMPAIGN", "PACKAGE", "OUTPUT", "N"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child_export(a.child[0], a.child[1], a.child[2], int(a.child[3]))
        return
    if a.quick:
        a.objects, a.scenes, a.side, a.repeats, a.rss_objects = 60, 2, 512, 1, [10, 30]
    work = Path(tempfile.mkdtemp(prefix="review-export-bench-"))
    try:
        figures = run(a, work)
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
