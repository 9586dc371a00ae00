"""Mapping campaign throughput vs the bare model forward, peak RSS vs scene size, and the deployment cost table
(issue 14).

What users run: a deployment package of the project's default pipeline model (``--config``, default
configs/baseline.yaml: UNet++ / EfficientNet-B5, 512 px tiles; random-init weights, numerics cost the same) with
the EXTRA channels of the config stores (ndvi + slope, as configs/generation/synthetic_train_4k.yaml renders
them: 5 input channels) and the default deployment settings (tta none, scales [1.0], weighted-mean fusion). The
precision is the deployment's (bf16) on CUDA; on a CPU without bf16 kernels bf16 autocast is ~30x slower than
fp32 (a 512 px EfficientNet-B5 window: > 290 s vs ~10 s on one AMD EPYC core), so on CPU the package is built at
fp32 (``--precision``): the faster forward is the harder case for the ratio below. Scenes are GeoTIFF mosaics of
``write_synthetic_geotiffs`` tiles (RGB + alpha, and the ``<scene>_extra.tif`` raster with both EXTRA bands),
EPSG:3857 at 4.77 m near 70 N.

(a) throughput: ``run_campaign`` (drift check off: only the mapping is timed, the summary's
    ``wall_seconds_this_run``) over ``--scenes`` scenes of ``--side`` px at predict's stride (half a tile) vs
    ``window_probabilities`` over the SAME windows, read and normalised beforehand, in the same batches (8,
    predict's, filled across scenes as the campaign's window stream fills them), in the same process; after one
    untimed round of each, interleaved ``--repeats`` times (order alternating), torch threads pinned
    (``--threads``) for both. Printed: windows/s and km²/s (ground, cos φ) of each, medians and [min-max], and
    the ratio campaign / bare (target >= 0.8 on CPU). The default, 4 scenes of 768 px (4 windows each), is a whole
    number of batches: the campaign pads a chunk's last batch to the batch shape (docs/mapping.md, "One batch
    shape"), at most 7 windows per chunk, which a 16-window campaign would weigh at up to 44 % but a chunk of the
    guide's 50 quads of 225 windows at 0.06 %; this bench measures the stream's own cost instead. Small scenes
    are the harder case for the rest: every scene pays its open, COG copy, vectorising and record.
(b) peak RSS: one campaign over a single scene of 1x, 4x and 16x the area (``--rss-side`` px, default 768: 4
    windows, and 2x, 4x its side) in a fresh process each, after a warm-up campaign over another scene of the
    smallest size: the first model call's one-off allocations (oneDNN primitives, weight packing) set the process's
    peak before any scene-size-dependent memory (fusion band, queues) exists, so the process peak (``os.wait4``,
    printed too) cannot see scene size; the campaign's own peak is read after resetting the counter (``VmHWM``,
    ``/proc/self/clear_refs``). Ratios to the smallest scene.
(c) cost table at the guide's deployment scale (~7.5 M deployment-time decisions, read as 512 px tiles on the
    full-tile grid): windows at stride full vs half a tile, GPU-hours at the H200 inference rate quoted from the
    anchors (482 img/s, issue 13; not measured here) and CPU-hours at the rate measured in (a).

    .venv/bin/python bench/map_bench.py            # default model; ~25 min on 2 CPU cores, minutes on a GPU
    .venv/bin/python bench/map_bench.py --quick    # quickstart's model, small scenes, 1 repetition: a smoke run

``--model-config`` takes the model section of another pipeline config (``--quick``: configs/quickstart.yaml, Unet +
mobilenet_v2, still at the default config's 512 px tiles and settings); ``--scenes``, ``--side``, ``--rss-side``,
``--repeats`` size the run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_check import H200_INFERENCE_IMG_PER_S  # noqa: E402
from bench.predict_memory_bench import PIXEL, build_bench_package, scene_profile  # noqa: E402

STORE_CONFIG = ROOT / "configs" / "generation" / "synthetic_train_4k.yaml"  # the EXTRA channels users' stores have
DEFAULT_CONFIG = ROOT / "configs" / "baseline.yaml"
QUICK_CONFIG = ROOT / "configs" / "quickstart.yaml"
BATCH = 8  # predict_raster's (and so run_chunk's) batch size
H200_IMG_PER_S = H200_INFERENCE_IMG_PER_S  # quoted from bench/gpu_check.py (issue 13's anchor); not measured here
GUIDE_DECISIONS = 7_500_000  # guide §12.2: "~7.5M deployment-time decisions"
GUIDE_TILE = 512
QUAD = 4096  # a Planet basemap quad's side in px (4.77 m, zoom 15)


def log(msg: str) -> None:
    print(msg, flush=True)


def build_package(out: Path, model_config: Path, precision: str) -> Path:
    """A package of the default pipeline config (its tile size, deployment settings: tta, scales, fusion) at
    ``precision``, with ``model_config``'s model section and the config store's EXTRA channels
    (predict_memory_bench's :func:`build_bench_package`)."""
    import yaml

    from rtscore.config.pipeline import load_pipeline_config, parse_pipeline_config

    store = yaml.safe_load(STORE_CONFIG.read_text())
    extra = [
        {"name": c if isinstance(c, str) else c["name"], "band": i}
        for i, c in enumerate(store["synthetic"]["extra_channels"])
    ]
    data = load_pipeline_config(DEFAULT_CONFIG).model_dump(mode="json")
    data["model"] = load_pipeline_config(model_config).model_dump(mode="json")["model"]
    data["model"]["encoder_weights"] = None
    data["channels"]["extra"] = extra
    data["training"]["precision"] = precision
    data["deployment"]["precision"] = precision
    cfg = parse_pipeline_config(data)
    return build_bench_package(out, cfg, cfg.deployment.model_dump(mode="json"))


def synth_tiles(d: Path, tile: int, n: int) -> list[tuple[Path, Path]]:
    """``n`` synthetic GeoTIFF tiles (RGB + alpha, and their EXTRA raster) of the config store's generator,
    ``tile`` px, no full-NoData tile: (rgb, extra) paths."""
    import yaml

    from rtscore.config.generation import GenerationConfig
    from rtscore.data.geotiff.synth import write_synthetic_geotiffs

    data = yaml.safe_load(STORE_CONFIG.read_text())
    data["tile_size"] = tile
    data["synthetic"].update(n_positive=(n + 1) // 2, n_negative=n // 2, n_full_nodata=0)
    data["processing"]["num_workers"] = 1
    root = d / "synth"
    write_synthetic_geotiffs(GenerationConfig.model_validate(data), root)
    rgb = sorted((root / "PLANET-RGB").glob("*.tif"))
    return [(p, root / "EXTRA" / p.name) for p in rgb]


def write_mosaic(tiles: list[tuple[Path, Path]], path: Path, side: int, offset: int = 0) -> None:
    """A ``side`` x ``side`` scene ``path`` (and ``<stem>_extra.tif``) tiled with the synthetic tiles cycled from
    ``offset``, written tile by tile (the bench never holds a whole scene)."""
    import rasterio
    from rasterio.windows import Window

    with rasterio.open(tiles[0][0]) as t, rasterio.open(tiles[0][1]) as e:
        tile, n_extra = t.width, e.count
    common = scene_profile(side)
    k = offset
    with (
        rasterio.open(path, "w", count=4, dtype="uint8", **common) as f,
        rasterio.open(path.with_name(f"{path.stem}_extra.tif"), "w", count=n_extra, dtype="float32", **common) as g,
    ):
        for row in range(0, side, tile):
            for col in range(0, side, tile):
                rgb_path, extra_path = tiles[k % len(tiles)]
                k += 1
                h, w = min(tile, side - row), min(tile, side - col)
                with rasterio.open(rgb_path) as t, rasterio.open(extra_path) as e:
                    win = Window(0, 0, w, h)
                    f.write(t.read(window=win), window=Window(col, row, w, h))
                    g.write(e.read(window=win).astype(np.float32), window=Window(col, row, w, h))


@dataclass
class Windows:
    """The windows of a campaign's scenes as predict reads them: normalised batches of predict's batch size."""

    batches: list[np.ndarray]
    count: int


def read_windows(pkg: Any, scenes: list[Path]) -> Windows:
    """Every window predict runs on ``scenes`` (its stride, half a tile; full-NoData windows left out, as predict
    skips them), read and normalised as predict does, in batches of predict's batch size filled across scenes as the
    campaign's window stream fills them (row-major per scene, scenes in order; the last batch not padded)."""
    from rasterio.windows import Window

    from rtscore.data.raster.bands import open_checked
    from rtscore.inference.predict import extra_input, gdal_env, window_starts

    tile = pkg.tile_size
    images: list[np.ndarray] = []
    with gdal_env():
        for s in scenes:
            with open_checked(pkg.contract, pkg.binding, s, extra_input(pkg.binding, s, None)) as raster:
                ys = window_starts(raster.height, tile, tile // 2)
                xs = window_starts(raster.width, tile, tile // 2)
                for y in ys:
                    for x in xs:
                        rgb, extra, valid = raster.read(Window(x, y, tile, tile))
                        if valid.any():
                            images.append(pkg.input_transform(rgb, extra, valid.astype(np.uint8)))
    batches = [np.stack(images[i : i + BATCH]) for i in range(0, len(images), BATCH)]
    return Windows(batches, len(images))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def throughput(pkg_dir: Path, scene_dir: Path, scenes: list[Path], work: Path, repeats: int) -> dict[str, Any]:
    """(a): campaign vs bare forward over the same windows, interleaved; per-repetition rates and ratios."""
    import torch

    from rtscore.inference.predict import load_package, window_probabilities
    from rtscore.mapping.campaign import run_campaign

    pkg = load_package(pkg_dir, device="cpu" if not torch.cuda.is_available() else "auto")
    wins = read_windows(pkg, scenes)
    # one untimed round of each (a campaign worker pays its process's first-call costs once per thousands of scenes)
    window_probabilities(pkg, wins.batches[0])
    run_campaign(pkg_dir, scene_dir, work / "campaign-warm-up", drift_check=False, device=str(pkg.device.type))
    sync = torch.cuda.synchronize if pkg.device.type == "cuda" else (lambda: None)
    rows: dict[str, list[float]] = {"campaign_wps": [], "bare_wps": [], "campaign_km2s": [], "bare_km2s": []}
    ratios: list[float] = []
    km2 = 0.0
    for rep in range(repeats):
        got: dict[str, float] = {}
        for what in ("campaign", "bare") if rep % 2 == 0 else ("bare", "campaign"):
            if what == "bare":
                sync()
                t0 = time.perf_counter()
                for b in wins.batches:
                    window_probabilities(pkg, b)
                sync()
                got["bare"] = time.perf_counter() - t0
            else:
                out = work / f"campaign-{rep}"
                s = run_campaign(pkg_dir, scene_dir, out, drift_check=False, device=str(pkg.device.type))
                if s.done != len(scenes) or s.windows != wins.count:
                    sys.exit(
                        f"campaign mapped {s['done']} scenes, {s['windows']} windows; expected {len(scenes)}, "
                        f"{wins.count}: see {out}"
                    )
                got["campaign"] = float(s.wall_seconds_this_run)
                km2 = float(s.km2_scenes_sum)  # the area read and predicted (the scenes may overlap)
        for what in ("campaign", "bare"):
            rows[f"{what}_wps"].append(wins.count / got[what])
            rows[f"{what}_km2s"].append(km2 / got[what])
        ratios.append(got["bare"] / got["campaign"])
        log(
            f"  repetition {rep + 1}: campaign {got['campaign']:.1f} s, bare {got['bare']:.1f} s, "
            f"ratio {ratios[-1]:.3f}"
        )
    return {"windows": wins.count, "km2_ground": km2, "rows": rows, "ratios": ratios, "device": str(pkg.device)}


def child_campaign(pkg: str, scene_dir: str, out: str, warm_dir: str, threads: int) -> None:
    """What (b) measures, in this (fresh) process: a warm-up campaign over ``warm_dir`` (the first model call's
    one-off allocations: oneDNN primitives, weight packing), then the peak RSS counter reset (``VmHWM``, Linux
    ``/proc/self/clear_refs`` 5), then the campaign over ``scene_dir``: its own peak RSS is printed with its
    summary line."""
    import torch

    from rtscore.mapping.campaign import run_campaign

    torch.set_num_threads(threads)
    device = "cpu" if not torch.cuda.is_available() else "auto"
    run_campaign(pkg, warm_dir, f"{out}-warm-up", drift_check=False, device=device)
    Path("/proc/self/clear_refs").write_text("5")
    s = run_campaign(pkg, scene_dir, out, drift_check=False, device=device)
    status = Path("/proc/self/status").read_text()
    hwm_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    line = {"done": s.done, "windows": s.windows, "seconds": s.wall_seconds_this_run}
    print(json.dumps({**line, "campaign_peak_rss_mib": hwm_kib / 1024.0}))


def peak_rss(pkg: Path, scene_dir: Path, warm_dir: Path, out: Path, threads: int) -> tuple[float, dict[str, Any]]:
    """(peak RSS MiB of a fresh process running a warm-up and one campaign (``os.wait4``), the campaign's line:
    its own peak RSS after the warm-up, windows, seconds)."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    argv = [sys.executable, str(Path(__file__)), "--child", str(pkg), str(scene_dir), str(out), str(warm_dir)]
    logf = out.with_name(f"{out.name}.log")
    with logf.open("wb") as f:
        proc = subprocess.Popen([*argv, "--threads", str(threads)], cwd=ROOT, env=env, stdout=f, stderr=f)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"campaign child failed; see {logf}:\n{logf.read_text()[-3000:]}")
    return usage.ru_maxrss / 1024.0, json.loads(logf.read_text().strip().splitlines()[-1])


def cost_table(cpu_windows_per_s: float, ratio: float, quad: int = QUAD) -> list[dict[str, Any]]:
    """(c): windows and hours at the guide's deployment scale, stride a full tile vs half a tile.

    The ~7.5 M decisions are read as 512 px tiles of the full-tile grid, each decided once, over basemap quads of
    ``quad`` px a side (Planet's 4096 px quads at 4.77 m); a stride of half a tile puts ``window_starts`` windows
    on each quad side (15 instead of 8 at 4096 px: 3.52x the windows; 4x on unbounded scenes)."""
    from rtscore.inference.predict import window_starts

    per_quad_full = len(window_starts(quad, GUIDE_TILE, GUIDE_TILE)) ** 2
    quads = GUIDE_DECISIONS / per_quad_full
    rows = []
    for name, stride in (
        ("full tile (512 px)", GUIDE_TILE),
        ("half tile (256 px, predict's default)", GUIDE_TILE // 2),
    ):
        windows = quads * len(window_starts(quad, GUIDE_TILE, stride)) ** 2
        gpu_h = windows / H200_IMG_PER_S / 3600.0
        rows.append(
            {
                "stride": name,
                "windows": windows,
                "gpu_hours_bare": gpu_h,
                "gpu_hours_at_cpu_ratio": gpu_h / ratio if ratio > 0 else math.inf,
                "cpu_hours": windows / cpu_windows_per_s / 3600.0 if cpu_windows_per_s > 0 else math.inf,
            }
        )
    return rows


def deployment_area_km2(quad: int = QUAD) -> tuple[float, float, float]:
    """(projected km², ground km² at 60 N, at 74 N) of the deployment scale's quads (ground = projected x cos² φ)."""
    from rtscore.inference.predict import window_starts

    quads = GUIDE_DECISIONS / len(window_starts(quad, GUIDE_TILE, GUIDE_TILE)) ** 2
    projected = quads * (quad * PIXEL / 1000.0) ** 2
    return projected, projected * math.cos(math.radians(60)) ** 2, projected * math.cos(math.radians(74)) ** 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model-config", type=Path, default=DEFAULT_CONFIG, help="pipeline config whose model section is packaged"
    )
    p.add_argument(
        "--precision",
        default=None,
        help="package precision (default: the config's deployment "
        "precision on CUDA, fp32 on CPU: bf16 autocast has no fast CPU kernels here)",
    )
    p.add_argument("--scenes", type=int, default=4, help="scenes of (a)")
    p.add_argument("--side", type=int, default=768, help="side of (a)'s scenes in px")
    p.add_argument(
        "--rss-side",
        type=int,
        default=768,
        help="side of (b)'s smallest scene (then 2x and 4x it)",
    )
    p.add_argument("--repeats", type=int, default=3, help="interleaved repetitions of (a)")
    p.add_argument("--threads", type=int, default=2, help="torch threads, the same for both sides of (a) and in (b)")
    p.add_argument("--no-rss", action="store_true", help="skip (b)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="quickstart's model, two 768 px scenes (8 windows), 1 repetition, RSS at 1x and 4x: a smoke run",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--child", nargs=4, metavar=("PACKAGE", "INPUT", "OUTPUT", "WARM_UP"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child_campaign(*a.child, threads=a.threads)
        return
    import torch

    if a.quick:
        a.model_config, a.scenes, a.side, a.rss_side, a.repeats = QUICK_CONFIG, 2, 768, 512, 1
    torch.set_num_threads(a.threads)
    from rtscore.config.pipeline import load_pipeline_config

    cfg = load_pipeline_config(DEFAULT_CONFIG)
    model = load_pipeline_config(a.model_config).model
    precision = a.precision or (cfg.deployment.precision if torch.cuda.is_available() else "fp32")
    tile = cfg.data.tile_size
    figures: dict[str, Any] = {"model_config": str(a.model_config), "precision": precision, "tile": tile}
    with tempfile.TemporaryDirectory(prefix="map-bench-") as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        pkg = build_package(d / "pkg", a.model_config, precision)
        tiles = synth_tiles(d, tile, 4)
        scene_dir = d / "scenes"
        scene_dir.mkdir()
        scenes = [scene_dir / f"scene{k}.tif" for k in range(a.scenes)]
        for k, s in enumerate(scenes):
            write_mosaic(tiles, s, a.side, offset=k)
        log(
            f"{model.architecture} / {model.backbone}, {tile} px, {precision}, EXTRA from {STORE_CONFIG.name}; "
            f"package and {a.scenes} scenes of {a.side}^2 px written in {time.perf_counter() - t0:.1f} s; "
            f"torch threads {a.threads}"
        )
        log("(a) campaign vs bare forward, same windows, interleaved:")
        tp = throughput(pkg, scene_dir, scenes, d, a.repeats)
        r = tp["rows"]
        log(f"  {tp['windows']} windows, {tp['km2_ground']:.3f} km² ground per campaign, device {tp['device']}")
        log(f"  campaign: {spread(r['campaign_wps'])} windows/s, {spread(r['campaign_km2s'])} km²/s")
        log(f"  bare:     {spread(r['bare_wps'])} windows/s, {spread(r['bare_km2s'])} km²/s")
        log(f"  ratio campaign / bare: {spread(tp['ratios'])} (target >= 0.8 on CPU)")
        figures["throughput"] = tp
        if not a.no_rss:
            log(
                "(b) peak RSS of one campaign in a fresh process after a warm-up campaign (peak counter reset), "
                "scene of 1x, 4x, 16x the area:"
            )
            rss: list[dict[str, Any]] = []
            warm = d / "rss-warm-up"
            warm.mkdir()
            write_mosaic(tiles, warm / "warm.tif", a.rss_side, offset=1)
            for f in (1, 2) if a.quick else (1, 2, 4):
                side = a.rss_side * f
                sd = d / f"rss-{side}"
                sd.mkdir()
                write_mosaic(tiles, sd / f"scene{side}.tif", side)
                mib, line = peak_rss(pkg, sd, warm, d / f"rss-out-{side}", a.threads)
                rss.append({"side": side, "area_factor": f * f, "process_peak_rss_mib": mib, **line})
                peak = line["campaign_peak_rss_mib"]
                log(
                    f"  {side}^2 px ({f * f}x): campaign peak RSS {peak:.1f} MiB "
                    f"(/ smallest {peak / rss[0]['campaign_peak_rss_mib']:.3f}; process peak {mib:.1f} MiB), "
                    f"{line['windows']} windows, {line['seconds']:.1f} s"
                )
            figures["rss"] = rss
    cpu_rate = statistics.median(r["campaign_wps"])
    ratio = statistics.median(tp["ratios"])
    projected, g60, g74 = deployment_area_km2()
    log(
        f"(c) deployment scale: ~{GUIDE_DECISIONS / 1e6:.1f} M decisions = 512 px tiles of {QUAD} px quads: "
        f"{projected / 1e6:.1f} M km² projected ({g74 / 1e6:.2f}-{g60 / 1e6:.2f} M km² ground at 74-60 N)"
    )
    log(f"  GPU: the H200 rate {H200_IMG_PER_S:.0f} img/s is QUOTED from bench/gpu_check.py (issue 13's anchor)")
    log(f"  {'stride':40} {'windows':>12} {'GPU-h bare':>11} {'GPU-h /ratio':>13} {'CPU-h here':>12}")
    table = cost_table(cpu_rate, ratio)
    for row in table:
        log(
            f"  {row['stride']:40} {row['windows']:12,.0f} {row['gpu_hours_bare']:11.2f} "
            f"{row['gpu_hours_at_cpu_ratio']:13.2f} {row['cpu_hours']:12,.0f}"
        )
    figures["cost"] = table
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
