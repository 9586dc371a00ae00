"""Peak memory of a calibration decision on a logit cache of N and of 10 N tiles (issue 13, point 4).

The decision is what the calibrate stage decides from a seed's cache: the TTA and scale gates (`run_gates`), then
the temperature, the thresholds at every ratio and the object metrics (`calibrate_seed`). The gates, the
temperature and the thresholds read only class sums, streamed from the cache chunk by chunk (`LogitCache.sums`);
the object metrics read the full-resolution tiles one at a time. Memory should therefore not grow with the tiles.

Two caches are written with the cache writer (`build_logit_cache`, the code the logit-cache stage runs) from
synthetic logits: a 1x1 convolution passing through a synthetic image (negative tiles far below the object floor,
2 % positive tiles holding one square RTS of 4-20 px, some of them large), 32 x 32 px tiles (a cache's histogram
part does not depend on the tile size: 3 rows x n_bins per tile and configuration), the default bins
(`metrics.pr_bins` 2048: 3330 bins with tails), loader batches of 32 tiles (one cache chunk each) and two
configurations (TTA none and minimal at scale 1.0). One configuration's per-tile histograms are 40 kB per tile:
200 MB at N = 5,000 tiles and 2 GB at 50,000, what a decision held in memory before this bench existed.

Each decision runs in a fresh process (`python bench/calibration_memory_bench.py --decide CACHE`), 3 times per
size; the peak RSS of that child is its own (`os.wait4`). Printed: medians and ranges per size, the ratio 10 N / N
(target <= 1.2), and whether every repetition decided the same (T, threshold, gates).

    .venv/bin/python bench/calibration_memory_bench.py            # a few minutes on 2 cores
    .venv/bin/python bench/calibration_memory_bench.py --quick    # 500 vs 5,000 tiles, 1 repetition: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TILE = 32
BATCH = 32
PIXEL_AREA_M2 = 4.77**2


def bench_config() -> Any:
    """The quickstart config with the candidates this bench caches: TTA none and minimal, scale 1.0 only."""
    from rtscore.config.pipeline import load_pipeline_config

    cfg = load_pipeline_config(ROOT / "configs" / "quickstart.yaml")
    cal = cfg.calibration.model_copy(
        update={
            "tta_candidates": ["none", "minimal"],
            "scale_candidates": [1.0],
            "allow_multiscale_deployment": False,
            "allow_max_f1_fallback": True,
        }
    )
    dep = cfg.deployment.model_copy(
        update={"precision": "fp32", "torch_compile": False, "tta": "none", "scales": [1.0]}
    )
    return cfg.model_copy(update={"calibration": cal, "deployment": dep})


class SyntheticLoader:
    """Batches of synthetic tiles as the validation loader yields them (image, label, tile_id, region, pixel area)."""

    def __init__(self, n_tiles: int, seed: int = 0) -> None:
        self.n_tiles, self.batch_size, self.seed = n_tiles, BATCH, seed

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import torch

        rng = np.random.default_rng(self.seed)
        for start in range(0, self.n_tiles, BATCH):
            b = min(BATCH, self.n_tiles - start)
            label = np.zeros((b, TILE, TILE), np.uint8)
            for i in np.flatnonzero(rng.random(b) < 0.02):
                side = int(rng.integers(4, 21))
                r, c = rng.integers(0, TILE - side, size=2)
                label[i, r : r + side, c : c + side] = 1
            image = rng.normal(-8.0, 1.0, label.shape) + 10.0 * label
            yield {
                "image": torch.from_numpy(image[:, None].astype(np.float32)),
                "label": torch.from_numpy(label),
                "tile_id": [f"t{start + i:07d}" for i in range(b)],
                "region": ["bench"] * b,
                "pixel_area_m2": [PIXEL_AREA_M2] * b,
            }


def build_cache(out: Path, n_tiles: int) -> Path:
    """A logit cache of `n_tiles` synthetic tiles, written by the logit-cache stage's writer."""
    import torch

    from rtscore.calibrate.cache import build_logit_cache

    model = torch.nn.Conv2d(1, 1, 1)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.zero_()
    return build_logit_cache(model, SyntheticLoader(n_tiles), bench_config(), out, n_tiles=n_tiles)


def decide(cache_path: Path) -> dict[str, Any]:
    """The calibration decision on one cache: gates, then temperature, thresholds and object metrics."""
    from rtscore.calibrate.cache import LogitCache
    from rtscore.calibrate.run import calibrate_seed, run_gates

    cfg = bench_config()
    cache = LogitCache(cache_path)
    gated, gates = run_gates(cfg, [cache])
    frozen, report = calibrate_seed(gated, cache, cfg, None, source=cache_path.parent / "deployment_config.yaml")
    return {
        "tta": gates["tta"]["chosen"],
        "scales": gates["scales"]["chosen"],
        "T": frozen.temperature,
        "threshold": frozen.threshold,
        "tiles_at_full_resolution": report.val_objects["tiles_at_full_resolution"],
    }


def peak_rss(cache_path: Path) -> tuple[float, float, dict[str, Any]]:
    """(peak RSS of the child in MiB, wall seconds, its decision) of one decision in a fresh process."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--decide", str(cache_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the decision on {cache_path} failed (exit {os.waitstatus_to_exitcode(status)})")
    return usage.ru_maxrss / 1024.0, time.perf_counter() - t0, json.loads(out.decode().strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", type=int, default=5000, help="N: the small cache's tiles (the large one has 10 N)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 500, 1 repetition")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--decide", type=Path, default=None, help=argparse.SUPPRESS)  # the child's mode
    args = ap.parse_args()
    if args.decide is not None:
        print(json.dumps(decide(args.decide)))
        return
    if args.quick:
        args.tiles, args.repeats = 500, 1
    root = Path(args.workdir or tempfile.mkdtemp(prefix="rts-calib-mem-bench-"))
    try:
        from rtscore.calibrate.cache import LogitCache

        sizes = [args.tiles, 10 * args.tiles]
        results: dict[int, list[tuple[float, float, dict[str, Any]]]] = {}
        for n in sizes:
            t0 = time.perf_counter()
            path = build_cache(root / f"cache_{n}" / "logit_cache.zarr", n)
            cache = LogitCache(path)
            per_conf = cache.n_tiles * 3 * cache.bins.n_bins * 4
            print(
                f"cache of {n} tiles ({len(cache.keys)} configurations, {cache.bins.n_bins} bins, chunks of {BATCH} "
                f"tiles): built in {time.perf_counter() - t0:.1f} s, {cache.nbytes()['total'] / 1e6:.1f} MB on disk; "
                f"one configuration's per-tile histograms would be {per_conf / 2**20:.0f} MiB in memory",
                flush=True,
            )
            results[n] = [peak_rss(path) for _ in range(args.repeats)]
        medians = {}
        for n in sizes:
            rss = [r[0] for r in results[n]]
            secs = [r[1] for r in results[n]]
            medians[n] = statistics.median(rss)
            print(
                f"decision on {n:>6} tiles: peak RSS median {medians[n]:.1f} MiB "
                f"(range {min(rss):.1f}-{max(rss):.1f}), "
                f"{statistics.median(secs):.1f} s per decision (median of {len(rss)}); {results[n][0][2]}"
            )
        ratio = medians[sizes[1]] / medians[sizes[0]]
        print(f"peak RSS {sizes[1]} / {sizes[0]} tiles: {ratio:.3f}  (target <= 1.2)")
        same = all(r[2] == results[n][0][2] for n in sizes for r in results[n])
        print(f"every repetition decided the same: {'yes' if same else 'NO'}")
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
