"""One seed on N ranks against one rank, side by side in one run: what the collective path costs (issue 25).

CPU (the default): ``configs/quickstart.yaml`` as users run it (UNet / MobileNetV2, 128 px, RGB + NDVI, batch 16,
fp32, its loader), **2 ranks x 1 thread** (gloo) against **1 rank x 2 threads**, each started by torch's elastic
launcher as training starts them, the two set-ups alternated round by round. A round: a warm-up epoch, then
``--epochs`` timed epochs of ``--steps`` steps of the same effective batch on both set-ups (N ranks of
``training.batch_size / N`` each, batch_size being per device; the real ``train_one_epoch``: loader, augmentation,
balanced sampler, loss, clipping, EMA; with 2 ranks also DDP's gradient all-reduce, global-batch batch norm and
loss), then one validation pass over the val pool (sharded and gathered with 2 ranks).

GPU (``--device cuda``): ``configs/baseline.yaml`` (UNet++ / EfficientNet-B5, 512 px, bf16, effective batch 32:
32 / N per GPU), **1 GPU vs every visible GPU**; the scaling efficiency is img/s on N / (N x img/s on 1).
``bench/gpu_check.py`` runs this section on a lent GPU machine.

Figures: medians over rounds with the [min-max] range, and the ratio of the medians (N ranks / 1 rank).

Usage:
  python bench/ddp_bench.py                  # CPU, ~6 min on 2 cores
  python bench/ddp_bench.py --quick          # a smoke run (not the quoted figures)
  python bench/ddp_bench.py --device cuda    # on a GPU machine
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEED = 42


def bench_config(device: str, *, quick: bool, steps: int) -> Any:
    """The users' config for ``device`` (quickstart on CPU, baseline on CUDA), at the bench's sizes."""
    from rtscore.config.pipeline import load_pipeline_config, parse_pipeline_config

    name = "quickstart.yaml" if device == "cpu" else "baseline.yaml"
    d = load_pipeline_config(ROOT / "configs" / name).model_dump(mode="json")
    if device == "cuda":
        for split, n in (("train", 512), ("val", 128)):
            gen = d["data"]["generation"][split]
            gen["synthetic"].update(n_positive=n // 2, n_negative=n // 2, n_full_nodata=0)
        d["data"]["generation"]["test"] = None
    if quick:
        d["data"]["tile_size"] = 64
        for split in ("train", "val", "test"):
            gen = d["data"]["generation"].get(split)
            if gen:
                gen["tile_size"] = 64
                gen["synthetic"].update(n_positive=12, n_negative=12, n_full_nodata=0)
    d["training"].update(steps_per_epoch=steps, devices=1)
    d["mlflow"]["enabled"] = False
    return parse_pipeline_config(d)


def build_run(cfg: Any, run: Path) -> None:
    from rtscore.stages import generate_dataset, normalization_stats

    for split in ("train", "val"):
        generate_dataset(str(run), cfg, split)
    normalization_stats(str(run), cfg)


def rank_round(cfg: Any, run: str, threads: int, epochs: int) -> dict[str, Any] | None:
    """On each rank: a warm-up epoch, ``epochs`` timed ones, a validation pass; rank 0 returns the times."""
    import torch

    from rtscore.train import distributed as ddp
    from rtscore.train.loop import apply_lr, build_setup, set_train_mode, train_one_epoch
    from rtscore.train.schedule import lr_at
    from rtscore.train.validate import collect, merge_pools

    torch.set_num_threads(threads)
    ranks = ddp.Ranks.from_env()
    s = build_setup(cfg, Path(run), SEED, ranks)
    first = cfg.lr_schedule.freeze_backbone_epochs + 1  # the unfrozen phase: the whole model trains

    def sync() -> None:
        if s.device.type == "cuda":
            torch.cuda.synchronize(s.device)
        ddp.barrier()

    out: dict[str, Any] = {"epoch_s": [], "samples": []}
    try:
        for i in range(1 + epochs):
            epoch = first + i
            lr = lr_at(epoch, cfg.lr_schedule, cfg.training.max_epochs)
            apply_lr(s, lr)
            set_train_mode(s, lr.frozen)
            s.sampler.set_epoch(epoch)
            sync()
            t = time.perf_counter()
            row = train_one_epoch(s, epoch)
            sync()
            if i:  # the first epoch warms up (allocations, DDP's buckets, loader)
                out["epoch_s"].append(time.perf_counter() - t)
                out["samples"].append(row["train_batches"] * cfg.training.effective_batch_size(ranks.world_size))
        sync()
        t = time.perf_counter()
        merge_pools(ddp.gather(collect(s.model, s.val_loader, cfg, s.device)))
        sync()
        out["val_s"] = time.perf_counter() - t
    finally:
        ddp.destroy_process_group()
    return out if ranks.main else None


def launch_round(cfg: Any, run: Path, n: int, threads: int, epochs: int) -> dict[str, Any]:
    from torch.distributed.launcher.api import elastic_launch

    from rtscore.train.launch import launch_config

    # the same effective batch on n ranks as on one (training.batch_size is per device): the same work, split
    b = cfg.training.batch_size
    if b % n:
        raise SystemExit(f"the bench compares one effective batch: batch_size {b} does not split over {n} ranks")
    cfg_n = cfg.model_copy(update={"training": cfg.training.model_copy(update={"devices": n, "batch_size": b // n})})
    result = elastic_launch(launch_config(n, f"bench-{uuid.uuid4().hex[:8]}"), rank_round)(
        cfg_n, str(run), threads, epochs
    )[0]
    assert result is not None
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per set-up: training img/s and validation seconds (median, range over rounds); the ratio of the medians."""
    out: dict[str, Any] = {}
    for name, rs in rounds.items():
        rates = [sum(r["samples"]) / sum(r["epoch_s"]) for r in rs]
        out[name] = {"train_img_per_s": spread(rates), "val_s": spread([r["val_s"] for r in rs])}
    names = list(rounds)
    if len(names) == 2:
        one, many = out[names[0]], out[names[1]]
        out["ratio_train_img_per_s"] = many["train_img_per_s"]["median"] / one["train_img_per_s"]["median"]
        out["ratio_val_s"] = many["val_s"]["median"] / one["val_s"]["median"]
    return out


def run_bench(device: str, *, quick: bool, rounds: int, epochs: int, steps: int, workdir: Path) -> dict[str, Any]:
    import os

    import torch

    cfg = bench_config(device, quick=quick, steps=steps)
    run = workdir / "run"
    t = time.perf_counter()
    build_run(cfg, run)
    print(f"[data] stores in {time.perf_counter() - t:.0f} s", flush=True)
    cores = os.cpu_count() or 1
    if device == "cpu":
        setups = {"1 rank x 2 threads": (1, min(2, cores)), "2 ranks x 1 thread": (2, 1)}
    else:
        n_gpu = torch.cuda.device_count()
        setups = {"1 GPU": (1, cores), f"{n_gpu} GPUs": (n_gpu, max(1, cores // n_gpu))}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in setups}
    for r in range(rounds):
        for name, (n, threads) in setups.items():
            t = time.perf_counter()
            res = launch_round(cfg, run, n, threads, epochs)
            results[name].append(res)
            rate = sum(res["samples"]) / sum(res["epoch_s"])
            print(
                f"[round {r + 1}/{rounds}] {name}: {rate:.1f} img/s training, validation {res['val_s']:.2f} s "
                f"({time.perf_counter() - t:.0f} s with start-up)",
                flush=True,
            )
    summary = summarize(results)
    n_many = list(setups.values())[1][0]
    if "ratio_train_img_per_s" in summary:  # img/s on N / (N x img/s on 1)
        summary["scaling_efficiency"] = summary["ratio_train_img_per_s"] / n_many
    summary["settings"] = {
        "device": device,
        "config": "quickstart.yaml" if device == "cpu" else "baseline.yaml",
        "global_batch": cfg.training.batch_size,
        "tile_size": cfg.data.tile_size,
        "channels": cfg.channels.count,
        "epochs_timed": epochs,
        "steps_per_epoch": steps,
        "rounds": rounds,
    }
    return summary


def print_summary(s: dict[str, Any]) -> None:
    print("\nset-up                  training img/s (median [min-max])   validation s (median [min-max])")
    for name, v in s.items():
        if isinstance(v, dict) and "train_img_per_s" in v:
            t, val = v["train_img_per_s"], v["val_s"]
            print(
                f"{name:<22}  {t['median']:8.1f} [{t['min']:.1f}-{t['max']:.1f}]"
                f"               {val['median']:6.2f} [{val['min']:.2f}-{val['max']:.2f}]"
            )
    if "ratio_train_img_per_s" in s:
        print(
            f"ratio (second / first): training img/s {s['ratio_train_img_per_s']:.3f} (scaling efficiency "
            f"{s['scaling_efficiency']:.3f}), validation time {s['ratio_val_s']:.3f}"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not the quoted figures")
    p.add_argument("--rounds", type=int, default=None, help="rounds per set-up (default 3; quick 1)")
    p.add_argument("--epochs", type=int, default=None, help="timed epochs per round (default 2; quick 1)")
    p.add_argument("--steps", type=int, default=None, help="global batches per epoch (default 8; quick 2)")
    p.add_argument("--json", default=None, help="write the summary here too")
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, removed after)")
    a = p.parse_args()
    if a.device == "cuda":
        import torch

        if torch.cuda.device_count() < 2:
            print(f"ddp_bench: {torch.cuda.device_count()} CUDA device(s) visible; 1 vs N needs two or more")
            return 2
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="rts-ddp-bench-"))
    try:
        summary = run_bench(
            a.device,
            quick=a.quick,
            rounds=a.rounds or (1 if a.quick else 3),
            epochs=a.epochs or (1 if a.quick else 2),
            steps=a.steps or (2 if a.quick else 8),
            workdir=workdir,
        )
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print_summary(summary)
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
