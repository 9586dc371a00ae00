"""Data-stage benchmarks, measured side by side in one run (figures go to bench/README.md).

(a) synthetic generation: tiles/s and peak RSS for N and 4N tiles at 512 x 512 (each in a fresh process);
(b) shuffled random-access reads: Zarr tile store vs the legacy batched .npz layout behind an LRU of 3 batches;
(c) the training reader (Zarr + NoData + normalization) with augmentation off vs on, one core.

Usage: python bench/data_bench.py [--quick] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rtscore.config.generation import GenerationConfig  # noqa: E402
from rtscore.data.tiles import KIND_CODES, RawTile  # noqa: E402

TILE = 512


def gen_config(n: int, split: str = "train", shard: int = 16, batch: int = 8) -> GenerationConfig:
    return GenerationConfig(
        split=split,  # type: ignore[arg-type]
        tile_size=TILE,
        seed=1,
        synthetic={
            "n_positive": n // 2,
            "n_negative": n - n // 2,
            "regions": ["a", "b", "c"],
            "generation_batch_size": batch,
        },
        store={"shard_tiles": shard},
    )


# ----------------------------------------------------------------------------- (a) generation
def _child_generate(n: int, out: str) -> None:
    from rtscore.data.generate import generate_synthetic

    t0 = time.perf_counter()
    generate_synthetic(gen_config(n), Path(out), overwrite=True, num_workers=1)
    dt = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"n": n, "seconds": dt, "tiles_per_s": n / dt, "peak_rss_mib": peak_kib / 1024}))


def bench_generation(n: int, workdir: Path) -> dict[str, dict[str, float]]:
    results = {}
    for label, count in (("N", n), ("4N", 4 * n)):
        out = workdir / f"gen_{count}.zarr"
        proc = subprocess.run(
            [sys.executable, __file__, "--child-generate", str(count), str(out)],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        results[label] = json.loads(proc.stdout.strip().splitlines()[-1])
        shutil.rmtree(out, ignore_errors=True)
    return results


# ----------------------------------------------------------------------------- (b) random access
class CycledProducer:
    """``n`` stored tiles cycling over ``unique`` rendered synthetic tiles (same content in both layouts)."""

    def __init__(self, tiles: list[RawTile], n: int) -> None:
        self.tiles, self.n = tiles, n

    def tile(self, i: int) -> RawTile:
        t = self.tiles[i % len(self.tiles)]
        return dataclasses.replace(t, tile_id=f"t{i:06d}", source_index=i)

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        tiles = [self.tile(i) for i in range(start, stop)]
        yield tiles, [KIND_CODES["positive" if t.n_objects else "negative"] for t in tiles]


def _read_rate(source: object, order: np.ndarray, budget_s: float) -> tuple[float, int]:
    """Tiles/s over a shuffled order, stopping after ``budget_s`` seconds (median of 3 slices)."""
    rates, done = [], 0
    slices = np.array_split(order, 3)
    for part in slices:
        t0, k = time.perf_counter(), 0
        for i in part:
            _ = source[int(i)]  # type: ignore[index]
            k += 1
            if time.perf_counter() - t0 > budget_s / 3:
                break
        rates.append(k / (time.perf_counter() - t0))
        done += k
    return statistics.median(rates), done


def bench_random_access(n: int, unique: int, workdir: Path, budget_s: float) -> dict[str, float]:
    from rtscore.data.legacy_npz import BatchedNpzSource, BatchWriter
    from rtscore.data.store import StoreLayout, ZarrTileStore
    from rtscore.data.synthetic import plan_tiles, render_tile
    from rtscore.data.writer import base_attrs, write_store

    cfg = gen_config(unique)
    tiles = [render_tile(p, cfg) for p in plan_tiles(cfg)]
    producer = CycledProducer(tiles, n)
    zpath = workdir / "ra.zarr"
    layout = StoreLayout(n_tiles=n, tile_size=TILE, extra_channel_names=(), shard_tiles=32)
    attrs = base_attrs(
        split="train", source="bench", tile_size=TILE, extra=[], mask_types=["exact", "noisy"], dataset_version="bench"
    )
    attrs.update({"config": {}, "config_hash": "bench", "seed": 0, "shard_tiles": 32})
    write_store(producer, layout, zpath, attrs, overwrite=True)
    npz_dir = workdir / "legacy" / "exact_masks"
    writer = BatchWriter(npz_dir, samples_per_batch=100)
    for i in range(n):
        writer.add(producer.tile(i))
    writer.finalize()
    order = np.random.default_rng(0).permutation(n)
    zarr_store = ZarrTileStore(zpath)
    _ = zarr_store[0]  # open arrays outside the timing, as a DataLoader worker would once
    z_rate, z_n = _read_rate(zarr_store, order, budget_s)
    legacy = BatchedNpzSource(npz_dir, cache_size=3)
    l_rate, l_n = _read_rate(legacy, order, budget_s)
    zarr_bytes = sum(p.stat().st_size for p in zpath.rglob("*") if p.is_file())
    npz_bytes = sum(p.stat().st_size for p in npz_dir.rglob("*") if p.is_file())
    shutil.rmtree(workdir / "legacy", ignore_errors=True)
    return {
        "tiles": n,
        "zarr_tiles_per_s": z_rate,
        "zarr_reads": z_n,
        "npz_lru3_tiles_per_s": l_rate,
        "npz_reads": l_n,
        "speedup": z_rate / l_rate,
        "zarr_gib": zarr_bytes / 2**30,
        "npz_gib": npz_bytes / 2**30,
    }


# ----------------------------------------------------------------------------- (c) augmentation cost
def bench_reader(workdir: Path, budget_s: float) -> dict[str, float]:
    import cv2
    import torch

    from rtscore.config.pipeline import AugmentationConfig
    from rtscore.data.dataset import TileDataset
    from rtscore.data.normalization import compute_normalization_stats
    from rtscore.data.store import ZarrTileStore

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    store = ZarrTileStore(workdir / "ra.zarr")
    stats = compute_normalization_stats(store.path, max_tiles=256)
    out = {}
    for name, aug in (("off", None), ("on", AugmentationConfig())):
        ds = TileDataset(store, stats, augmentation=aug, seed=0)
        order = np.random.default_rng(1).permutation(len(ds))
        rate, _ = _read_rate(ds, order, budget_s)
        out[f"aug_{name}_samples_per_s"] = rate
    out["aug_cost_ratio"] = out["aug_off_samples_per_s"] / out["aug_on_samples_per_s"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not the quoted figures)")
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, removed after)")
    p.add_argument("--child-generate", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child_generate:
        _child_generate(int(args.child_generate[0]), args.child_generate[1])
        return
    n_gen, n_ra, unique, budget = (8, 400, 20, 3.0) if args.quick else (48, 4000, 100, 30.0)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rts-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        gen = bench_generation(n_gen, workdir)
        ra = bench_random_access(n_ra, unique, workdir, budget)
        rd = bench_reader(workdir, budget)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"(a) generation at {TILE}x{TILE}, 1 worker, fresh process each")
    for k, r in gen.items():
        print(f"    {k:>2} = {r['n']:5d} tiles: {r['tiles_per_s']:6.2f} tiles/s, peak RSS {r['peak_rss_mib']:7.1f} MiB")
    print(f"    peak RSS ratio 4N/N: {gen['4N']['peak_rss_mib'] / gen['N']['peak_rss_mib']:.3f} (target <= 1.2)")
    print(f"(b) shuffled random access, {ra['tiles']} tiles at {TILE}x{TILE} (median of 3 slices)")
    print(f"    zarr store          : {ra['zarr_tiles_per_s']:8.1f} tiles/s  ({ra['zarr_gib']:.2f} GiB on disk)")
    print(f"    legacy npz + LRU(3) : {ra['npz_lru3_tiles_per_s']:8.1f} tiles/s  ({ra['npz_gib']:.2f} GiB on disk)")
    print(f"    speed-up            : {ra['speedup']:8.1f}x (target >= 30x)")
    print("(c) training reader on one core (Zarr + NoData + normalization)")
    print(f"    augmentation off: {rd['aug_off_samples_per_s']:7.1f} samples/s")
    print(f"    augmentation on : {rd['aug_on_samples_per_s']:7.1f} samples/s (guide §9.2 defaults)")
    print(f"    cost of augmentation: {rd['aug_cost_ratio']:.2f}x")
    print(json.dumps({"generation": gen, "random_access": ra, "reader": rd}))


if __name__ == "__main__":
    main()
