"""Peak memory of `rts predict` and `rts drift` on a raster and on one 16x its area (issue 12).

A real deployment package is built with the package builder (`rtscore.package.build_package`, audited as
`rts package build` audits it) from the model of configs/quickstart.yaml (Unet + mobilenet_v2, 128 px tiles,
R, G, B + ndvi), random-init weights (memory does not depend on what the weights learnt), calibrated numerics
with TTA none, and the raster contract of 4.77 m EPSG:3857 rasters. Two scenes are written: R (`--size`, default
512 x 512, RGB + alpha with a NoData corner, and its ndvi EXTRA raster) and a scene `--factor` times wider and
taller (default 4: 16x the area) whose top-left `--size` x `--size` pixels are R. predict runs at `--stride`
(default predict's own, half a tile, as users run it; `--stride 128` takes a quarter of the model calls for a
quicker run: the reads, the fusion band and the writes are the same code either way). Each command runs on each scene
in a fresh process (`python -m flows.cli.main`, as `rts` runs it), 3 times; the peak RSS of that child is its own
(`os.wait4`). Printed: medians and ranges, the ratio big / small per command (target <= 1.5), and whether the
probabilities are identical on the common windows (the pixels covered only by stride-grid windows lying inside R
away from its right and bottom border: the same windows, run in whole batches, in both scenes), printing the largest
difference too: the windows are batched differently in the two scenes (a row of R has fewer windows), and CPU
convolution kernels may round a sample differently in a batch of another size.

    .venv/bin/python bench/predict_memory_bench.py            # a few minutes on 2 cores
    .venv/bin/python bench/predict_memory_bench.py --quick    # 256 px scene, 1 repetition: a smoke run
"""

from __future__ import annotations

import argparse
import os
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

PIXEL = 4.77
ORIGIN = (-16_000_000.0, 11_000_000.0)  # Arctic Alaska in EPSG:3857


def build_quickstart_package(out: Path) -> Path:
    """A package of the quickstart model (tta none, its training precision), built by :func:`build_bench_package`."""
    from rtscore.config.pipeline import load_pipeline_config, parse_pipeline_config

    data = load_pipeline_config(ROOT / "configs" / "quickstart.yaml").model_dump(mode="json")
    data["model"]["encoder_weights"] = None
    cfg = parse_pipeline_config(data)
    return build_bench_package(out, cfg, {"tta": "none", "precision": cfg.training.precision})


def build_bench_package(out: Path, cfg: Any, deployment: dict[str, Any]) -> Path:
    """A package of ``cfg``'s model (random weights, seeded: numerics cost what trained ones cost) with fixed
    normalisation moments per channel, calibrated as threshold 0.5 / temperature 1.0 over ``deployment``'s fields,
    built and audited by the package builder (``<out>/package``)."""
    import torch
    import yaml

    from rtscore.config.binding import RasterContract
    from rtscore.config.deployment import DeploymentConfig
    from rtscore.data.normalization.stats import NormalizationStats, write_normalization_stats
    from rtscore.models import build_model
    from rtscore.package import build_package
    from rtscore.train.result import SeedSummary

    run = out / "run"
    run.mkdir(parents=True)
    torch.manual_seed(0)
    weights = run / "best_deployment.pth"
    torch.save({k: v.detach().clone() for k, v in build_model(cfg.model, cfg.channels).state_dict().items()}, weights)
    names = cfg.channels.names
    stats = run / "normalization_stats.json"
    write_normalization_stats(
        NormalizationStats(
            channel_names=names,
            mean=np.array([110.0, 115.0, 100.0] + [0.3] * (len(names) - 3)),
            std=np.array([45.0, 45.0, 40.0] + [0.2] * (len(names) - 3)),
            n_tiles_used=64,
            dataset_version="bench",
            computed_date="2026-12-01T00:00:00Z",
        ),
        stats,
    )
    dep = DeploymentConfig.model_validate(
        {**deployment, "threshold": 0.5, "temperature": 1.0, "threshold_source": "target_precision"}
    )
    dep = dep.model_copy(update={"calibrated_with": dep.numerics()})
    dep_file = run / "deployment_config.yaml"
    dep_file.write_text(yaml.safe_dump(dep.model_dump(mode="json"), sort_keys=False))
    seed = SeedSummary(
        seed=0,
        epochs_run=0,
        stopped_early=False,
        best_epoch=0,
        best_val_realistic_pr_auc_geomean_smoothed=None,
        last_validation={},
        overfitting={},
        model=cfg.model,
        mlflow_run_id=None,
    )
    contract = RasterContract(crs="EPSG:3857", pixel_size=PIXEL)
    info = build_package(
        out / "package", cfg, seed=seed, weights=weights, deployment=dep_file, stats=stats, contract=contract
    )
    return Path(info.path)


def scene_profile(side: int) -> dict[str, Any]:
    """The GeoTIFF profile (without band count and dtype) of a bench scene of ``side`` x ``side`` px at ORIGIN:
    EPSG:3857 at 4.77 m, tiled 256 px, deflate."""
    from rasterio.transform import from_origin

    return {
        "driver": "GTiff",
        "height": side,
        "width": side,
        "crs": "EPSG:3857",
        "transform": from_origin(*ORIGIN, PIXEL, PIXEL),
        "tiled": True,
        "blockxsize": 256,
        "blockysize": 256,
        "compress": "deflate",
    }


def scenes(d: Path, size: int, factor: int) -> tuple[Path, Path]:
    """R (``small.tif``, R, G, B, alpha with a NoData corner, and ``small_extra.tif``, float32 ndvi) and the
    scene ``factor`` x ``factor`` its size whose top-left corner is R (``big.tif``, ``big_extra.tif``); tiled,
    deflate, written band of rows by band of rows, so the bench itself never holds the big scene."""
    import rasterio
    from rasterio.windows import Window

    rng = np.random.default_rng(0)

    def rows(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        rgba = np.empty((4, h, w), np.uint8)
        rgba[:3] = rng.integers(0, 256, (3, h, w))
        rgba[3] = 255
        return rgba, rng.normal(0.3, 0.2, (1, h, w)).astype(np.float32)

    r_rgba, r_ndvi = rows(size, size)
    r_rgba[3, : size // 8, : size // 8] = 0  # a NoData corner: full-NoData windows are skipped
    out = []
    for name, side in (("small", size), ("big", size * factor)):
        common = scene_profile(side)
        rgb_path, extra_path = d / f"{name}.tif", d / f"{name}_extra.tif"
        with (
            rasterio.open(rgb_path, "w", count=4, dtype="uint8", **common) as f,  # GDAL: R, G, B, alpha
            rasterio.open(extra_path, "w", count=1, dtype="float32", **common) as e,
        ):
            for row in range(0, side, size):
                rgba, ndvi = rows(size, side)
                if row == 0:
                    rgba[:, :, :size], ndvi[:, :, :size] = r_rgba, r_ndvi
                window = Window(0, row, side, size)
                f.write(rgba, window=window)
                e.write(ndvi, window=window)
        out.append(rgb_path)
    return out[0], out[1]


def peak_rss_mib(args: list[str], log: Path) -> tuple[float, float, int]:
    """(peak RSS of the child in MiB, wall seconds, exit code) of one `rts` command in a fresh process."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    t0 = time.perf_counter()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flows.cli.main", *args], cwd=ROOT, env=env, stdout=out, stderr=out
        )
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024.0, time.perf_counter() - t0, proc.returncode


def common_window_pixels(size: int, tile: int, stride: int) -> tuple[slice, slice]:
    """The pixels of R covered only by windows lying inside R away from its right and bottom border (square R: the
    same along both axes). Those windows are the same in both scenes and run in whole batches of predict's batch size
    in both; R's border windows, last in row-major order, may share R's last, shorter batch, and a CPU kernel rounds
    a sample differently in a batch of another size (about 1e-9 in a probability), so they are left out."""
    starts = list(range(0, size - tile + 1, stride))
    if starts[-1] != size - tile:
        starts.append(size - tile)  # predict's clamped last window
    end = min(s for s in starts if s + tile >= size)
    return slice(0, end), slice(0, end)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=512, help="side of the small scene R in pixels")
    p.add_argument("--factor", type=int, default=4, help="the big scene is factor x factor times R")
    p.add_argument("--repeats", type=int, default=3, help="runs of each command on each scene")
    p.add_argument(
        "--stride",
        type=int,
        default=None,
        help="predict's --stride (default: predict's own, half a tile, as users run it; the tile size takes 4x "
        "fewer model calls for a quicker run, with the same reads, fusion band and writes)",
    )
    p.add_argument("--quick", action="store_true", help="256 px R, 1 repetition (a smoke run)")
    a = p.parse_args()
    if a.quick:
        a.size, a.repeats = 256, 1
    tile = 128  # configs/quickstart.yaml data.tile_size (checked against the package below)
    stride = a.stride or tile // 2  # rts predict's default
    import rasterio
    import yaml

    with tempfile.TemporaryDirectory(prefix="predict-memory-bench-") as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        pkg = build_quickstart_package(d / "pkg")
        small, big = scenes(d, a.size, a.factor)
        took = time.perf_counter() - t0
        print(f"package built and audited, scenes {a.size}^2 and {a.size * a.factor}^2 px written in {took:.1f} s")
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        log = d / "commands.log"
        for rep in range(a.repeats):
            for command in ("predict", "drift"):
                for name, scene in (("small", small), ("big", big)):
                    out = d / f"{command}-{name}-{rep}"
                    args = [command, "--package", str(pkg), "--input", str(scene), "--output", str(out)]
                    more = ["--device", "cpu", "--stride", str(stride)] if command == "predict" else []
                    rss, wall, rc = peak_rss_mib(args + more, log)
                    if rc not in (0, 1):  # drift exits 1 on a blocker: random imagery drifts
                        sys.exit(f"{' '.join(args)} exited {rc}; see {log}:\n{log.read_text()[-3000:]}")
                    figures.setdefault((command, name), []).append((rss, wall))
        print(f"\n{'command':8} {'scene':6} {'peak RSS MiB: median [range]':32} {'wall s: median':14}")
        for (command, name), runs in figures.items():
            peaks = [r for r, _ in runs]
            wall = statistics.median([w for _, w in runs])
            spread = f"{statistics.median(peaks):8.1f} [{min(peaks):.1f}, {max(peaks):.1f}]"
            print(f"{command:8} {name:6} {spread:32} {wall:8.1f}")
        for command in ("predict", "drift"):
            big_rss = statistics.median([r for r, _ in figures[(command, "big")]])
            ratio = big_rss / statistics.median([r for r, _ in figures[(command, "small")]])
            print(f"peak RSS big / small, {command}: {ratio:.2f} (target <= 1.5; area x{a.factor**2})")
        assert tile == int(yaml.safe_load((pkg / "model_config.yaml").read_text())["tile_size"])
        rows, cols = common_window_pixels(a.size, tile, stride)
        with rasterio.open(d / "predict-small-0" / "small_prob.tif") as f:
            p_small = f.read(1)[rows, cols]
        with rasterio.open(d / "predict-big-0" / "big_prob.tif") as f:
            p_big = f.read(1, window=((rows.start, rows.stop), (cols.start, cols.stop)))
        same = bool(np.array_equal(p_small, p_big))
        diff = float(np.abs(p_small.astype(np.float64) - p_big).max())
        print(
            f"probabilities on the common windows ({rows.stop} x {cols.stop} px of R): identical {same}, "
            f"max |difference| {diff:.3g} ({int((p_small != p_big).sum())} pixels differ)"
        )


if __name__ == "__main__":
    main()
