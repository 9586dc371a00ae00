"""Data-stage benchmarks, measured side by side in one run (figures go to bench/README.md).

(a) synthetic generation: tiles/s and peak RSS for N and 4N tiles at 512 x 512 (each in a fresh process);
(b) shuffled sample reads through the training reader (TileDataset), one core, on the 4,000-tile 512 px config
    store with two EXTRA channels (configs/generation/synthetic_train_4k.yaml): store format 2 vs format 1 vs
    the legacy batched .npz layout behind an LRU of 3 batches, interleaved repetitions, medians and ranges;
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
from typing import Any

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
    from rtscore.data.synthetic.producer import generate_synthetic

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
CONFIG_STORE = ROOT / "configs" / "generation" / "synthetic_train_4k.yaml"  # 512 px, EXTRA [ndvi, slope], zstd 3


class CycledProducer:
    """``n`` stored tiles cycling over ``unique`` rendered synthetic tiles (same content in every layout)."""

    def __init__(self, tiles: list[RawTile], n: int) -> None:
        self.tiles, self.n = tiles, n

    def tile(self, i: int) -> RawTile:
        t = self.tiles[i % len(self.tiles)]
        return dataclasses.replace(t, tile_id=f"t{i:06d}", source_index=i)

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        tiles = [self.tile(i) for i in range(start, stop)]
        yield tiles, [KIND_CODES["positive" if t.n_objects else "negative"] for t in tiles]


def config_store_cfg(unique: int) -> GenerationConfig:
    """The config store's generation config (configs/generation/synthetic_train_4k.yaml: 512 px, EXTRA ndvi +
    slope, shard 32, zstd level 3), rendering ``unique`` scenes."""
    import yaml

    doc = yaml.safe_load(CONFIG_STORE.read_text())
    doc["synthetic"].update(n_positive=unique // 2, n_negative=unique - unique // 2, n_full_nodata=0)
    return GenerationConfig.model_validate(doc)


def _one_core() -> None:
    """Pin this process to one core and keep every library at one thread (the reader of one DataLoader worker)."""
    import cv2
    import torch
    from numcodecs import blosc

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    blosc.set_nthreads(1)


def _warm(path: Path) -> None:
    """Read every file of a layout once, so that each is timed from the page cache (the same for all)."""
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with f.open("rb") as fh:
                while fh.read(1 << 24):
                    pass


def _rate(read: Any, order: np.ndarray, budget_s: float, max_reads: int) -> float:
    """Samples/s of ``read(i)`` over a shuffled order, for ``budget_s`` seconds or ``max_reads`` reads."""
    t0, k = time.perf_counter(), 0
    for i in order[:max_reads]:
        read(int(i))
        k += 1
        if time.perf_counter() - t0 > budget_s:
            break
    return k / (time.perf_counter() - t0)


def bench_random_access(n: int, unique: int, workdir: Path, budget_s: float, reps: int) -> dict[str, Any]:
    """Shuffled sample reads through the training reader (TileDataset: read + NoData + normalization, no
    augmentation), one core: format 2 vs format 1 vs the legacy npz + LRU(3) layout, same tiles, same order,
    interleaved repetitions."""
    from rtscore.data.loading.dataset import TileDataset
    from rtscore.data.normalization.compute import compute_normalization_stats
    from rtscore.data.store.format import FORMAT_VERSION
    from rtscore.data.store.legacy_npz import BatchedNpzSource, BatchWriter
    from rtscore.data.store.reader import ZarrTileStore
    from rtscore.data.store.writer import base_attrs, write_store
    from rtscore.data.synthetic import plan_tiles, render_tile
    from rtscore.data.synthetic.producer import layout_for

    cfg = config_store_cfg(unique)
    tiles = [render_tile(p, cfg) for p in plan_tiles(cfg)]
    producer = CycledProducer(tiles, n)
    extra = list(layout_for(cfg).extra_channel_names)
    paths: dict[str, Path] = {}
    write_s: dict[str, float] = {}
    for version in (FORMAT_VERSION, 1):
        layout = dataclasses.replace(layout_for(cfg), n_tiles=n, format_version=version)
        attrs = base_attrs(
            split="train",
            source="bench",
            tile_size=TILE,
            extra=extra,
            mask_types=["exact", "noisy"],
            dataset_version="bench",
        )
        attrs.update({"config": {}, "config_hash": f"bench-v{version}", "seed": 0, "shard_tiles": layout.shard_tiles})
        paths[f"v{version}"] = workdir / f"ra_v{version}.zarr"
        t0 = time.perf_counter()
        write_store(producer, layout, paths[f"v{version}"], attrs, overwrite=True)
        write_s[f"v{version}"] = time.perf_counter() - t0
    npz_dir = workdir / "legacy" / "exact_masks"
    t0 = time.perf_counter()
    writer = BatchWriter(npz_dir, samples_per_batch=100)  # the notes' layout: uncompressed batches of 100
    for i in range(n):
        writer.add(producer.tile(i))
    writer.finalize(extra_channel_names=extra)
    write_s["npz"] = time.perf_counter() - t0
    paths["npz"] = npz_dir
    del tiles, producer

    stats = compute_normalization_stats(paths[f"v{FORMAT_VERSION}"], max_tiles=256)
    everything = np.arange(n)  # all tiles are usable (no full-NoData one): the same indices for every layout
    sources: dict[str, Any] = {
        f"v{FORMAT_VERSION}": ZarrTileStore(paths[f"v{FORMAT_VERSION}"]),
        "v1": ZarrTileStore(paths["v1"]),
        "npz": BatchedNpzSource(npz_dir, cache_size=3),
    }
    datasets = {k: TileDataset(src, stats, indices=everything, seed=0) for k, src in sources.items()}
    _one_core()
    rates: dict[str, list[float]] = {k: [] for k in datasets}
    raw: dict[str, list[float]] = {k: [] for k in datasets}
    for rep in range(reps):
        order = np.random.default_rng(rep).permutation(n)
        for k, ds in datasets.items():
            _warm(paths[k])
            ds.source[0]  # open arrays outside the timing, as a DataLoader worker would once
            rates[k].append(_rate(ds.__getitem__, order, budget_s, n))
            raw[k].append(_rate(sources[k].__getitem__, order[::-1], budget_s / 2, n))
    size = {k: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**30 for k, p in paths.items()}
    shutil.rmtree(workdir / "legacy", ignore_errors=True)
    shutil.rmtree(paths["v1"], ignore_errors=True)
    new = f"v{FORMAT_VERSION}"

    def summary(xs: list[float]) -> dict[str, float]:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    return {
        "tiles": n,
        "unique_scenes": unique,
        "extra_channels": extra,
        "codec": f"{cfg.store.compressor} level {cfg.store.clevel}",
        "reps": reps,
        "dataset_samples_per_s": {k: summary(v) for k, v in rates.items()},
        "source_tiles_per_s": {k: summary(v) for k, v in raw.items()},
        "speedup": statistics.median(rates[new]) / statistics.median(rates["npz"]),
        "speedup_range": [min(rates[new]) / max(rates["npz"]), max(rates[new]) / min(rates["npz"])],
        "v2_over_v1": statistics.median(rates[new]) / statistics.median(rates["v1"]),
        "source_speedup": statistics.median(raw[new]) / statistics.median(raw["npz"]),
        "gib": size,
        "write_s": write_s,
        "store": str(paths[new]),
    }


# ----------------------------------------------------------------------------- (c) augmentation cost
def _read_rate(source: object, order: np.ndarray, budget_s: float) -> tuple[float, int]:
    """Samples/s over a shuffled order, stopping after ``budget_s`` seconds (median of 3 slices)."""
    rates, done = [], 0
    for part in np.array_split(order, 3):
        t0, k = time.perf_counter(), 0
        for i in part:
            _ = source[int(i)]  # type: ignore[index]
            k += 1
            if time.perf_counter() - t0 > budget_s / 3:
                break
        rates.append(k / (time.perf_counter() - t0))
        done += k
    return statistics.median(rates), done


def bench_reader(store_path: Path, budget_s: float) -> dict[str, float]:
    from rtscore.config.pipeline import AugmentationConfig
    from rtscore.data.loading.dataset import TileDataset
    from rtscore.data.normalization.compute import compute_normalization_stats
    from rtscore.data.store.reader import ZarrTileStore

    store = ZarrTileStore(store_path)
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
    p.add_argument("--tiles", type=int, default=None, help="tiles in the (b) stores (default 4000; --quick 400)")
    p.add_argument("--budget-s", type=float, default=None, help="seconds per timed read pass in (b) (default 15)")
    p.add_argument("--no-generation", action="store_true", help="skip (a) (generation tiles/s and peak RSS)")
    p.add_argument("--child-generate", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child_generate:
        _child_generate(int(args.child_generate[0]), args.child_generate[1])
        return
    n_gen, n_ra, unique, budget, reps = (8, 400, 20, 2.0, 3) if args.quick else (48, 4000, 100, 15.0, 3)
    n_ra = args.tiles or n_ra
    budget = args.budget_s or budget
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rts-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        gen = None if args.no_generation else bench_generation(n_gen, workdir)
        ra = bench_random_access(n_ra, unique, workdir, budget, reps)
        rd = bench_reader(Path(ra["store"]), budget)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if gen is not None:
        print(f"(a) generation at {TILE}x{TILE}, 1 worker, fresh process each")
        for k, r in gen.items():
            print(
                f"    {k:>2} = {r['n']:5d} tiles: {r['tiles_per_s']:6.2f} tiles/s, "
                f"peak RSS {r['peak_rss_mib']:7.1f} MiB"
            )
        print(f"    peak RSS ratio 4N/N: {gen['4N']['peak_rss_mib'] / gen['N']['peak_rss_mib']:.3f} (target <= 1.2)")
    print(
        f"(b) shuffled sample reads, {ra['tiles']} tiles at {TILE}x{TILE}, EXTRA {ra['extra_channels']}, "
        f"{ra['codec']}; TileDataset (read + NoData + normalization, no augmentation), one core; "
        f"median [min-max] of {ra['reps']} repetitions"
    )
    names = {"v2": "format 2 (pixels + extra)", "v1": "format 1 (4 arrays)", "npz": "legacy npz + LRU(3)"}
    for k, label in names.items():
        d, r = ra["dataset_samples_per_s"][k], ra["source_tiles_per_s"][k]
        print(
            f"    {label:26s}: {d['median']:7.1f} [{d['min']:.1f}-{d['max']:.1f}] samples/s; "
            f"source alone {r['median']:7.1f} [{r['min']:.1f}-{r['max']:.1f}] tiles/s; {ra['gib'][k]:.2f} GiB"
        )
    lo, hi = ra["speedup_range"]
    print(f"    speed-up format 2 / legacy : {ra['speedup']:7.1f}x [{lo:.1f}-{hi:.1f}] (target >= 30x)")
    print(f"    source alone, same ratio   : {ra['source_speedup']:7.1f}x")
    print(f"    format 2 / format 1        : {ra['v2_over_v1']:7.2f}x")
    print("(c) training reader on one core (format-2 store above: Zarr + NoData + normalization)")
    print(f"    augmentation off: {rd['aug_off_samples_per_s']:7.1f} samples/s")
    print(f"    augmentation on : {rd['aug_on_samples_per_s']:7.1f} samples/s (guide §9.2 defaults)")
    print(f"    cost of augmentation: {rd['aug_cost_ratio']:.2f}x")
    print(json.dumps({"generation": gen, "random_access": ra, "reader": rd}))


if __name__ == "__main__":
    main()
