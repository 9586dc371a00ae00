"""The review loop measured (issue 26): map -> review export -> review by the known truth -> ingest -> retrain, and
the Test-Realistic PR-AUC of round 2 beside round 1's.

The world, built in code (UTM 6N, 30 m pixels, Landsat-like, as the first-run test's scenes): two scenes A and B
(round 1) over six region stripes (three train, two val, one test), RTS painted bright with a low NIR, and an RTS
inventory of every slump of A and B; lookalikes, bright bars of bare ground (river bars, ridges: the slumps' colour
and NIR, another shape), lie only in the test stripe. A third scene C south of them (region "south", in no split)
holds slumps and lookalikes, none of them in the inventory. Round 1 never trains on a lookalike, so its model may
call them RTS: its false positives on the test stripe cost PR-AUC.

The loop, every step a project command as a user runs it: ``rts tile`` -> ``rts run`` (round 1) -> ``rts warp`` of
C onto the grid -> ``rts map`` over C -> ``rts review export`` (every object) -> the reviewer: an object is ``rts``
when it overlaps a true slump, else ``not_rts`` (the truth the world was drawn from) -> ``rts review ingest``
(``--new-regions train``: C's region joins train; its confirmed slumps join the inventory, its false positives are
cut as hard-negative tiles) -> ``rts run`` on the new data root (round 2). The test split is the same tiles in both
rounds (C is not in the test region), so the two PR-AUCs are like for like.

    .venv/bin/python bench/review_loop.py            # 3 seeds per round, ~25 min on 2 CPU cores
    .venv/bin/python bench/review_loop.py --quick    # 1 seed, a few epochs: a smoke run of the loop

Printed: the review's counts (objects, confirmed, false positives), the tiles of each round, and Test-Realistic
PR-AUC at the config's ratios (1:200, 1:500, 1:1000) of each round (mean ± std over seeds) with the difference;
``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

UTM = "EPSG:32606"
X0, Y0 = 420_000.0, 7_330_000.0  # upper-left corner of scene A, ~66° N 148.8° W
GSD = 30.0
SIZE = 384  # scene side in pixels: 11.5 km
SHIFT = 288  # scene B starts this many pixels east of A
TILE = 64
STRIPES = ["chandalar", "koyukuk", "kanuti", "ray mountains", "hodzana", "tanana"]  # west to east over A and B
SPLITS = {"train": ["chandalar", "kanuti", "hodzana"], "val": ["koyukuk", "ray mountains"], "test": ["tanana"]}
RTS_RGB = (200.0, 168.0, 140.0)


@dataclass
class World:
    """Where the loop's inputs lie, and the truth the reviewer judges by (every slump, UTM)."""

    root: Path
    tiling: Path
    pipeline: Path
    campaign_scenes: Path
    truth: list[Any]
    lookalikes: list[Any]


def blob(x: float, y: float, r: float, seed: int) -> Any:
    """An irregular slump-like outline around (x, y), radius ~r metres."""
    import shapely

    rng = np.random.default_rng(seed)
    t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    radii = r * (1 + 0.25 * np.sin(3 * t + rng.uniform(0, 6)) + rng.uniform(-0.1, 0.1, t.size))
    return shapely.Polygon(np.c_[x + radii * np.cos(t), y + 0.7 * radii * np.sin(t)])


def _slumps(x0: float, y0: float, width: float, rows: tuple[float, ...], seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for cx in np.arange(600.0, width - 500, 1000.0):
        for cy in rows:
            x, y = x0 + cx + rng.uniform(-250, 250), y0 - cy + rng.uniform(-250, 250)
            out.append(blob(x, y, rng.uniform(75, 165), seed=seed * 1000 + len(out)))
    return out


def _lookalikes(x0: float, x1: float, y0: float, rows: tuple[float, ...], seed: int) -> list[Any]:
    """Bright bars (river bars, bare ridges): the slumps' colour and NIR, another shape (~600 x 90 m, any angle)."""
    import shapely
    from shapely import affinity

    rng = np.random.default_rng(seed)
    out = []
    for cx in np.arange(x0 + 500.0, x1 - 400, 900.0):
        for cy in rows:
            x, y = cx + rng.uniform(-200, 200), y0 - cy + rng.uniform(-200, 200)
            bar = shapely.box(x - rng.uniform(250, 350), y - 45, x + rng.uniform(250, 350), y + 45)
            out.append(affinity.rotate(bar, rng.uniform(0, 180), origin=(x, y)))
    return out


def write_scene(path: Path, x0: float, y0: float, slumps: list[Any], fakes: list[Any], seed: int) -> None:
    """A textured 30 m scene (R, G, B, NIR, alpha): slumps and lookalikes bright with a low NIR (bare ground)."""
    import rasterio
    import shapely
    from rasterio.enums import ColorInterp
    from rasterio.features import rasterize
    from rasterio.transform import from_origin

    rng = np.random.default_rng(seed)
    transform = from_origin(x0, y0, GSD, GSD)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    base = 95 + 20 * np.sin(xx / 9.0 + seed) * np.cos(yy / 13.0)
    rgb = np.stack([base + rng.normal(0, 6, (SIZE, SIZE)) + d for d in (0, 6, -8)])
    nir = 150 + rng.normal(0, 8, (SIZE, SIZE))

    def mask(geoms: list[Any]) -> np.ndarray:
        shapes = [shapely.geometry.mapping(g) for g in geoms]
        return rasterize(shapes, (SIZE, SIZE), transform=transform) > 0 if shapes else np.zeros((SIZE, SIZE), bool)

    for geoms, nir_level in ((slumps, 80.0), (fakes, 80.0)):
        m = mask(geoms)
        rgb[:, m] = np.array(RTS_RGB)[:, None] + rng.normal(0, 6, (3, int(m.sum())))
        nir[m] = nir_level + rng.normal(0, 8, int(m.sum()))
    data = np.concatenate([np.clip(rgb, 12, 250), np.clip(nir, 1, 255)[None], np.full((1, SIZE, SIZE), 255.0)]).astype(
        np.uint8
    )
    profile = {"driver": "GTiff", "height": SIZE, "width": SIZE, "count": 5, "dtype": "uint8"}
    with rasterio.open(path, "w", **profile, crs=UTM, transform=transform) as f:
        f.write(data)
        f.colorinterp = [ColorInterp[c] for c in ("red", "green", "blue", "undefined", "alpha")]


def _lonlat_features(geoms: list[Any], props: list[dict[str, Any]]) -> dict[str, Any]:
    import shapely
    from rasterio.warp import transform_geom

    return {
        "type": "FeatureCollection",
        "features": [
            {
                "type": "Feature",
                "properties": p,
                "geometry": transform_geom(UTM, "EPSG:4326", shapely.geometry.mapping(g)),
            }
            for g, p in zip(geoms, props, strict=True)
        ],
    }


def grid_pixel_size() -> float:
    """EPSG:3857 pixels of about the scenes' 30 ground metres at their latitude."""
    from rasterio.warp import transform

    _, lat = transform(UTM, "EPSG:4326", [X0 + SIZE * GSD], [Y0 - SIZE * GSD / 2])
    return round(GSD / math.cos(math.radians(lat[0])), 1)


def build_world(root: Path, *, seeds: list[int], epochs: int) -> World:
    """Scenes, inventory, regions, tiling config and pipeline config of round 1 under ``root``."""
    import shapely

    root.mkdir(parents=True, exist_ok=True)
    width = (SHIFT + SIZE) * GSD
    slumps_ab = _slumps(X0, Y0, width, (900.0, 2900.0, 4900.0), seed=1)
    stripe_w = width / len(STRIPES)
    test_x0 = X0 + stripe_w * (len(STRIPES) - 1)
    fakes_ab = _lookalikes(test_x0, X0 + width, Y0, (6900.0, 8900.0, 10600.0), seed=2)
    y_c = Y0 - SIZE * GSD
    slumps_c = _slumps(X0, y_c, SIZE * GSD, (900.0, 4900.0, 8900.0), seed=3)
    fakes_c = _lookalikes(X0, X0 + SIZE * GSD, y_c, (2900.0, 6900.0, 10600.0), seed=4)

    (root / "scenes").mkdir(exist_ok=True)
    (root / "campaign-scenes").mkdir(exist_ok=True)
    write_scene(root / "scenes" / "a.tif", X0, Y0, slumps_ab, fakes_ab, seed=1)
    write_scene(root / "scenes" / "b.tif", X0 + SHIFT * GSD, Y0, slumps_ab, fakes_ab, seed=2)
    write_scene(root / "campaign-scenes" / "c.tif", X0, y_c, slumps_c, fakes_c, seed=3)

    inventory = _lonlat_features(slumps_ab, [{"uid": f"RTS-{i:03d}"} for i in range(len(slumps_ab))])
    (root / "rts.geojson").write_text(json.dumps(inventory))
    edges = [X0 + k * stripe_w for k in range(6)] + [X0 + width + 3000]
    edges[0] = X0 - 3000  # the outer stripes reach past the scenes: grid cells over their edges have a region
    stripes = [shapely.box(edges[k], y_c, edges[k + 1], Y0 + 3000) for k in range(6)]
    south = shapely.box(X0 - 3000, y_c - SIZE * GSD - 3000, X0 + width + 3000, y_c)
    regions = _lonlat_features([*stripes, south], [{"name": n} for n in [*STRIPES, "south"]])
    (root / "regions.geojson").write_text(json.dumps(regions))

    tiling = {
        "scenes": ["scenes/*.tif"],
        "polygons": {"path": "rts.geojson", "id_column": "uid"},
        "regions": {"path": "regions.geojson", "name_column": "name"},
        "extra": [{"name": "ndvi", "kind": "ndvi", "nir": {"band": 3}, "red": {"band": 0}}],
        "grid": {"pixel_size": grid_pixel_size(), "tile_size": TILE},
        "splits": SPLITS,
        "split_rules": {"min_test_positives": 1, "min_val_positives": 1},  # the pipeline config's splits: the same
        "output": "tiles",
    }
    (root / "tile.yaml").write_text(yaml.safe_dump(tiling, sort_keys=False))
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipeline_config(seeds, epochs), sort_keys=False))
    return World(
        root, root / "tile.yaml", root / "pipeline.yaml", root / "campaign-scenes", slumps_ab + slumps_c, fakes_ab
    )


def pipeline_config(seeds: list[int], epochs: int) -> dict[str, Any]:
    """configs/quickstart_geotiff.yaml on the loop's data root: 64 px tiles, NDVI as the EXTRA channel, the given
    seeds and epochs, the default object metrics (guide §6.2: every connected component, no minimum area) and
    quickstart_geotiff's package.min_object_area_m2 for the map (43 m²: under one 30 m pixel, so every object is
    written)."""
    cfg = yaml.safe_load((ROOT / "configs" / "quickstart_geotiff.yaml").read_text())
    geotiff = {"data_root": "tiles", "extra_channels": [{"name": "ndvi", "band": 0}]}
    cfg["data"]["tile_size"] = TILE
    cfg["data"]["generation"] = {
        s: {"split": s, "tile_size": TILE, "source": "geotiff", "geotiff": geotiff} for s in ("train", "val", "test")
    }
    cfg["splits"] = {"min_test_positives": 1, "min_val_positives": 1}
    cfg["training"].update({"seeds": seeds, "max_epochs": epochs, "batch_size": 8, "val_frequency": 1})
    cfg["training"]["early_stopping"] = {"patience": 4, "min_delta": 0.005, "start_epoch": max(2, epochs // 2)}
    cfg["training"]["checkpoint"] = {"save_every_n_epochs": 2, "keep_last_n": 1}
    cfg["sampling"] = {"curriculum_schedule": [{"start_epoch": 1, "end_epoch": None, "neg_per_pos": 1}]}
    cfg["model"]["decoder_channels"] = [32, 16, 16, 8, 8]
    cfg["metrics"] = {"bootstrap_samples": 50}
    cfg["mlflow"] = {"enabled": False}
    cfg["calibration"] = {"tta_candidates": ["none"], "allow_max_f1_fallback": True}
    return cfg


def truth_verdicts(review: Path, truth: list[Any]) -> dict[int, str]:
    """What the scripted reviewer says of each exported object, in review order: ``rts`` when it overlaps a true
    slump (the truth the world was drawn from), else ``not_rts``."""
    import shapely
    from rasterio.warp import transform_geom
    from shapely import wkt

    from rtscore.review.manifest import HEADER_FILE, MANIFEST_FILE, iter_objects, read_header

    crs = read_header(review / HEADER_FILE).campaign.crs_wkt
    tree = shapely.STRtree(truth)
    out: dict[int, str] = {}
    for o in iter_objects(review / MANIFEST_FILE):
        geom = shapely.geometry.shape(transform_geom(crs, UTM, shapely.geometry.mapping(wkt.loads(o.geometry_wkt))))
        out[o.object_id] = "rts" if len(tree.query(geom, predicate="intersects")) else "not_rts"
    return out


def judge(review: Path, truth: list[Any], out: Path) -> None:
    """The scripted reviewer: every exported object judged by :func:`truth_verdicts`, written as the verdict file
    the review page exports."""
    from rtscore.review.manifest import HEADER_FILE, MANIFEST_FILE, iter_objects, read_header
    from rtscore.review.verdicts import Verdict, verdicts_geojson

    verdicts = [
        Verdict(object_id=k, verdict=v, reviewer="truth")  # type: ignore[arg-type]
        for k, v in truth_verdicts(review, truth).items()
    ]
    header = read_header(review / HEADER_FILE)
    objects = iter_objects(review / MANIFEST_FILE)
    doc = verdicts_geojson(header, objects, verdicts, reviewer="truth", exported="2026-12-02T00:00:00Z")
    out.write_text(json.dumps(doc))


def test_pr_auc(run: Path) -> dict[str, dict[str, Any]]:
    """Test-Realistic PR-AUC of a run's test report at each ratio: mean and std over seeds, and each seed's."""
    report = json.loads((run / "evaluation" / "test_report.json").read_text())
    out: dict[str, dict[str, Any]] = {}
    for tag, metrics in report["aggregate"].items():
        s = metrics["pr_auc"]
        per_seed = {str(r["seed"]): float(r["metrics"][tag]["pr_auc"]) for r in report["per_seed"]}
        out[tag] = {"mean": float(s["mean"]), "std": float(s["std"]), "per_seed": per_seed}
    return out


def rts(*argv: str) -> None:
    """One project command, as a user runs it; a failure stops the loop naming the command."""
    from flows.cli.main import main

    rc = main(list(argv))
    if rc != 0:
        raise SystemExit(f"rts {' '.join(argv)}: exit status {rc}")


Reviewer = Callable[[Path, list[Any], Path], None]


def run_loop(work: Path, *, seeds: list[int], epochs: int, reviewer: Reviewer = judge) -> dict[str, Any]:
    """Both rounds of the loop under ``work``; the figures. ``reviewer(review dir, truth, verdict file)`` judges the
    exported objects and writes the verdict file (default: :func:`judge`, every object by the truth)."""
    w = build_world(work, seeds=seeds, epochs=epochs)
    started = time.perf_counter()
    rts("tile", "--config", str(w.tiling))
    rts("run", "--config", str(w.pipeline), "--run", str(work / "run-1"))
    package = work / "run-1" / "package"
    warped = work / "warped"
    rts("warp", "--config", str(w.tiling), "--package", str(package), "--output", str(warped),
        "--scenes", str(w.campaign_scenes / "c.tif"))  # fmt: skip
    rts("map", "--package", str(package), "--input", str(warped), "--output", str(work / "campaign"), "--allow-drift")
    review = work / "review"
    rts("review", "export", "--campaign", str(work / "campaign"), "--package", str(package), "--output", str(review),
        "--tiling-config", str(w.tiling))  # fmt: skip
    from rtscore.review.manifest import HEADER_FILE, read_header
    from rtscore.review.verdict_file import read_verdicts

    verdicts = work / "verdicts.geojson"
    reviewer(review, w.truth, verdicts)
    counts: dict[str, int] = dict(Counter(str(v.verdict) for v in read_verdicts(verdicts).verdicts))
    counts["objects"] = read_header(review / HEADER_FILE).n_objects
    rts("review", "ingest", "--review", str(review), "--verdicts", str(verdicts), "--tiling-config", str(w.tiling),
        "--output", str(work / "tiles-r2"), "--new-regions", "train", "--pipeline-config", str(w.pipeline))  # fmt: skip
    rts("run", "--config", str(work / "tiles-r2" / "review" / "pipeline.yaml"), "--run", str(work / "run-2"))
    ingest = json.loads((work / "tiles-r2" / "review" / "ingest.json").read_text())
    tiles = {}
    for name, root in (("round 1", work / "tiles"), ("round 2", work / "tiles-r2")):
        c = json.loads((root / "tiling.json").read_text())["counts"]
        tiles[name] = {"tiles": c["tiles"], "positive": c["positive"], "negative": c["negative"]}
    r1, r2 = test_pr_auc(work / "run-1"), test_pr_auc(work / "run-2")
    return {
        "settings": {"seeds": seeds, "epochs": epochs, "tile": TILE, "gsd_m": GSD},
        "review": counts,
        "ingest": ingest["counts"],
        "tiles": tiles,
        "test_pr_auc": {"round 1": r1, "round 2": r2},
        "delta": {tag: r2[tag]["mean"] - r1[tag]["mean"] for tag in r1},
        "seconds": time.perf_counter() - started,
    }


def render(f: dict[str, Any]) -> str:
    r = f["review"]
    lines = [
        f"review: {r['objects']} objects exported, {r.get('rts', 0)} confirmed RTS, {r.get('not_rts', 0)} false "
        f"positives, {r.get('unsure', 0)} unsure",
    ]
    for name, t in f["tiles"].items():
        lines.append(f"{name}: {t['tiles']} tiles ({t['positive']} positive, {t['negative']} negative)")
    for tag in f["delta"]:
        r1, r2 = f["test_pr_auc"]["round 1"][tag], f["test_pr_auc"]["round 2"][tag]
        pairs = [(seed, r1["per_seed"][seed], r2["per_seed"][seed]) for seed in r1["per_seed"]]
        better = sum(b > a for _, a, b in pairs)
        lines.append(
            f"Test-Realistic PR-AUC@{tag.replace('_', ':')}: round 1 {r1['mean']:.3f} ± {r1['std']:.3f}, "
            f"round 2 {r2['mean']:.3f} ± {r2['std']:.3f} (difference {f['delta'][tag]:+.3f}; "
            f"{len(f['settings']['seeds'])} seed(s), {f['settings']['epochs']} epochs); per seed "
            + ", ".join(f"{seed}: {a:.3f} -> {b:.3f}" for seed, a, b in pairs)
            + f"; round 2 higher for {better} of {len(pairs)} seeds"
        )
    lines.append(f"loop wall time {f['seconds'] / 60:.1f} min")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44], help="seeds of each round")
    p.add_argument("--epochs", type=int, default=20, help="max epochs of each seed")
    p.add_argument("--quick", action="store_true", help="1 seed, 4 epochs: a smoke run of the loop")
    p.add_argument("--workdir", type=Path, default=None, help="where the loop writes (default: a temporary dir)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args(argv)
    seeds, epochs = ([a.seeds[0]], 4) if a.quick else (a.seeds, a.epochs)
    if a.workdir is None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="review-loop-") as tmp:
            figures = run_loop(Path(tmp), seeds=seeds, epochs=epochs)
    else:
        figures = run_loop(a.workdir, seeds=seeds, epochs=epochs)
    print(render(figures))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
