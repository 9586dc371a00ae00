"""Post-training benchmark: every gate and calibration decision from the logit cache versus one inference pass.

Measured side by side in one run, on one validation pool (synthetic, guide tile size 512 x 512 by default):

(a) ONE inference pass: the deployment path (`calibrate.infer.predict_logits`, no TTA, native scale) over the
    pool through the real DataLoader, logits reduced to nothing (the cheapest possible model pass);
(b) the logit cache of one seed: one pass per (scale, TTA transform) for every candidate, histogrammed;
(c) ALL decisions from the caches of the seeds: TTA gate, scale gate (run_gates: reading every candidate's
    histograms from Zarr), then per seed the temperature fit, thresholds at every ratio and per-region
    thresholds (without figures: plotting is reporting, timed separately).

Target: (c) <= 10% of (a). Also printed: the cache's size per tile and extrapolated to 100,000 tiles.
Figures are medians over --repeats rounds; (a) and (c) alternate within each round.

Usage: python bench/calibration_bench.py [--tiles 96] [--tile-size 512] [--seeds 2] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bench_config(tile: int, tiles: int) -> Any:
    """configs/quickstart.yaml (model, channels, candidates) at `tile` px, one val split of `tiles` tiles."""
    from rtscore.config.pipeline import load_pipeline_config, parse_pipeline_config

    data = load_pipeline_config(ROOT / "configs" / "quickstart.yaml").model_dump(mode="json")
    n_pos = max(tiles // 10, 2)
    val = data["data"]["generation"]["val"]
    val.update(tile_size=tile)
    val["synthetic"].update(n_positive=n_pos, n_negative=tiles - n_pos, n_full_nodata=0)
    train = {**val, "split": "train", "seed": 7, "synthetic": {**val["synthetic"], "n_positive": 4, "n_negative": 4}}
    train["synthetic"]["regions"] = data["data"]["generation"]["train"]["synthetic"]["regions"]
    data["data"]["generation"] = {"train": train, "val": val}  # train: only for the normalization stats
    data["data"]["tile_size"] = tile
    data["training"]["batch_size"] = 8
    data["mlflow"]["enabled"] = False
    return parse_pipeline_config(data)


def make_run(root: Path, cfg: Any, seeds: list[int]) -> Path:
    import torch

    from rtscore import stages
    from rtscore.models import build_model
    from rtscore.stages.spec import record
    from rtscore.stages.train import SPEC as TRAIN_SEED
    from rtscore.storage import RunDir, RunLayout
    from rtscore.train.checkpoint import save_best

    run = root / "run"
    for split in ("train", "val"):
        stages.generate_dataset(str(run), cfg, split)
    stages.normalization_stats(str(run), cfg)
    for s in seeds:  # untrained weights stand in for a trained seed: the cost does not depend on them
        torch.manual_seed(s)
        save_best(run / RunLayout.SEED_DIR.at(seed=s), build_model(cfg.model, cfg.channels).state_dict())
        record(TRAIN_SEED, RunDir(run), RunLayout.BEST_WEIGHTS.at(seed=s), cfg)
    return run


def one_pass(run: Path, cfg: Any, seed: int) -> float:
    """Seconds of one deployment-path pass (no TTA, native scale) over the pool, model already loaded."""
    import torch

    from rtscore.inference.numerics import predict_logits, prepare_model
    from rtscore.stages.seeds import seed_model_and_loader
    from rtscore.storage import RunDir

    model, loader, _ = seed_model_and_loader(RunDir(run), cfg, seed, "val")
    run_model = prepare_model(model, False)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in loader:
            z = predict_logits(
                run_model, b["image"], tta="none", scales=[1.0], fusion="weighted_mean", precision="fp32"
            )
            float(z[0, 0, 0])
    return time.perf_counter() - t0


def decisions(run: Path, cfg: Any, seeds: list[int]) -> float:
    """Seconds of every decision from the caches: gates, then per seed temperature and thresholds."""
    from rtscore.calibrate.cache import Combo, LogitCache
    from rtscore.calibrate.decisions import thresholds_at_ratios
    from rtscore.calibrate.run import run_gates
    from rtscore.calibrate.temperature import fit_temperature

    cal = cfg.calibration
    t0 = time.perf_counter()
    caches = [LogitCache(run / f"calibration/seed_{s}/logit_cache.zarr") for s in seeds]
    dep, _ = run_gates(cfg, caches)
    for cache in caches:
        ch = cache.sums(Combo.of(dep))
        t = fit_temperature(ch.hist, cal.ratio, bounds=cal.temperature_bounds).temperature
        thresholds_at_ratios(ch.hist, sorted({*cfg.metrics.ratios, cal.ratio}), cal.target_precision, t)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", type=int, default=96)
    ap.add_argument("--tile-size", type=int, default=512)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smoke run: 24 tiles of 128 px, 1 repeat")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.tiles, args.tile_size, args.repeats = 24, 128, 1
    seeds = [42 + i for i in range(args.seeds)]
    root = Path(args.workdir or tempfile.mkdtemp(prefix="rts-calib-bench-"))
    try:
        from rtscore import stages
        from rtscore.calibrate.cache import LogitCache, candidate_combos

        cfg = bench_config(args.tile_size, args.tiles)
        run = make_run(root, cfg, seeds)
        print(
            f"pool: {args.tiles} tiles of {args.tile_size}x{args.tile_size}, model {cfg.model.architecture}/"
            f"{cfg.model.backbone}, {len(candidate_combos(cfg.calibration))} candidate configurations "
            f"(TTA {cfg.calibration.tta_candidates} x scales {cfg.calibration.scale_candidates}), {len(seeds)} seeds"
        )
        cache_s = []
        for s in seeds:
            t0 = time.perf_counter()
            stages.logit_cache(str(run), cfg, s)
            cache_s.append(time.perf_counter() - t0)
        passes, decided = [], []
        for _ in range(args.repeats):
            passes.append(one_pass(run, cfg, seeds[0]))
            decided.append(decisions(run, cfg, seeds))
        p, d = statistics.median(passes), statistics.median(decided)
        cache = LogitCache(run / f"calibration/seed_{seeds[0]}/logit_cache.zarr")
        size = cache.nbytes()
        per_tile = size["hist"] / cache.n_tiles
        n_conf = len(cache.keys)
        mem = cache.n_tiles * 3 * cache.bins.n_bins * 4
        print(f"(a) one inference pass (no TTA, 1x):      {p:8.2f} s  ({args.tiles / p:.1f} tiles/s)")
        print(
            f"(b) logit cache, one seed (incl. model load): {statistics.median(cache_s):8.2f} s  "
            f"= {statistics.median(cache_s) / p:.1f} x one pass"
        )
        print(f"(c) all decisions, {len(seeds)} seeds, from the caches: {d:8.3f} s")
        print(f"    decisions / one pass = {d / p:.3%}  (target <= 10%)  [medians of {args.repeats}]")
        print(
            f"cache size: histograms {size['hist'] / 1e6:.2f} MB on disk = {per_tile / 1e3:.1f} kB/tile for {n_conf} "
            f"configurations x 3 rows x {cache.bins.n_bins} bins (uint32, zstd) -> {per_tile * 1e5 / 1e9:.2f} GB "
            f"per seed at 100,000 tiles; one configuration's per-tile histograms {mem / cache.n_tiles / 1e3:.1f} "
            f"kB/tile -> {mem / cache.n_tiles * 1e5 / 1e9:.2f} GB at 100,000 tiles (the decisions stream class sums "
            "instead: bench/calibration_memory_bench.py)"
        )
        kept = int(cache._group["dense/row"].shape[0])
        print(
            f"full-resolution part: {size['dense'] / 1e6:.2f} MB for {kept} of {cache.n_tiles} tiles kept "
            f"(GT objects or p >= {cfg.calibration.object_prob_floor}); grows with those tiles' pixels only"
        )
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
