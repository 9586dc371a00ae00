"""GPU check of the training loop's overhead: the real loop versus the bare model step, measured in one run.

Baseline model (configs/baseline.yaml): UNet++ / EfficientNet-B5, 512 x 512, batch 32, BF16, RGB, focal loss,
AdamW, EMA; random encoder init (``encoder_weights: null``, no download). Measured, in this order:

  (i)   bare model step on in-memory CUDA tensors, eager, NCHW;
  (ii)  the same, eager, channels_last;
  (ii+) the real loop body on in-memory batches (``train_one_epoch`` fed a list: + EMA, train metrics and the
        loop's per-step host syncs; no loader), channels_last;
  (iv)  the REAL loop: ``train_one_epoch`` on a ``build_setup`` Setup over a synthetic 512 px Zarr store
        generated on the fly (TileDataset + full augmentation + balanced curriculum sampler + DataLoader with
        8 workers, pin_memory, prefetch 2, persistent workers), channels_last, EMA;
  (iii) torch.compile'd channels_last bare step (compile time reported, excluded from the timing); optional
        (``--no-compile``), run after (iv) so a slow compile cannot starve the main figure;
  (v)   optional (``--real-compile``): the real loop with the compiled model;
  (vi)  with 2+ GPUs visible: one seed on 1 GPU vs every visible GPU (DDP, the training launcher), img/s and the
        scaling efficiency (``bench/ddp_bench.py --device cuda``); ``--no-scaling`` skips it.

The bare step is exactly the loop's step (autocast forward, focal loss, zero_grad, backward, clip, AdamW
step) on one real batch kept on the device, with no per-step host sync. Every timed figure is the median of
several blocks/epochs after warm-up, with torch.cuda.synchronize() around each timing. The ratio quoted is
real / bare, both eager channels_last: (iv) / (ii).

Reference (one H200, from the issue): bare step 145 img/s eager channels_last, 209 img/s compiled, 75 img/s
eager NCHW; inference (UNet++ / EfficientNet-B5, 512 px, BF16) 482 img/s (``H200_INFERENCE_IMG_PER_S``, which
bench/map_bench.py's deployment cost table quotes until a GPU run measures it).

Usage:
  python bench/gpu_check.py                 # on a CUDA machine; ~4-6 min on one H200
  python bench/gpu_check.py --cpu-smoke     # tiny sizes on CPU, to test the script end to end
Results go to $OUT/gpu_check.json when OUT is set, else ./gpu_check.json (or --json PATH).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEED = 42
H200_INFERENCE_IMG_PER_S = 482.0  # the issue-13 anchor, one H200 (module docstring); not measured by this script yet


def log(msg: str) -> None:
    print(msg, flush=True)


class Clock:
    """Wall clock since start and the --budget-s deadline that timed loops stop at."""

    def __init__(self, budget_s: float) -> None:
        self.t0 = time.perf_counter()
        self.budget_s = budget_s

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    @property
    def left(self) -> float:
        return self.budget_s - self.elapsed

    def over(self) -> bool:
        return self.left <= 0


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- environment
def env_info(device: Any) -> dict[str, Any]:
    import numpy
    import segmentation_models_pytorch as smp
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "smp": smp.__version__,
        "numpy": numpy.__version__,
        "device": str(device),
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(
            gpu_name=p.name,
            gpu_capability=f"{p.major}.{p.minor}",
            gpu_memory_gib=round(p.total_memory / 2**30, 1),
            gpu_count=torch.cuda.device_count(),
            bf16_supported=torch.cuda.is_bf16_supported(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
    return info


# ----------------------------------------------------------------------------- config and data
def build_config(a: argparse.Namespace, device_type: str) -> Any:
    """configs/baseline.yaml with a small on-the-fly synthetic store and the sizes of this check."""
    from rtscore.config.pipeline import load_pipeline_config, parse_pipeline_config

    d = load_pipeline_config(ROOT / "configs" / "baseline.yaml").model_dump(mode="json")

    def gen(split: str, seed: int, n: int, regions: list[str]) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "dataset_version": "gpu-check",
            "split": split,
            "seed": seed,
            "tile_size": a.tile,
            "synthetic": {
                "n_positive": n // 2,
                "n_negative": n - n // 2,
                "n_full_nodata": 0,
                "regions": regions,
                "extra_channels": [],
                "generation_batch_size": 16,
            },
            "processing": {"num_workers": a.gen_workers},
            "store": {"shard_tiles": a.shard_tiles},
        }

    d["data"]["tile_size"] = a.tile
    d["data"]["generation"] = {
        "train": gen("train", 1, a.tiles, ["ga", "gb", "gc", "gd"]),
        "val": gen("val", 2, a.val_tiles, ["va", "vb"]),
        "test": None,
    }
    d["data"]["loader"] = {
        "num_workers": a.loader_workers,
        "pin_memory": True,
        "prefetch_factor": 2,
        "persistent_workers": a.loader_workers > 0,
        "drop_last": True,
    }
    d["channels"]["extra"] = []
    d["normalization"]["max_tiles"] = min(128, a.tiles)
    d["model"].update(architecture=a.arch, backbone=a.backbone, encoder_weights=None)
    d["training"].update(
        device=device_type,
        precision=a.precision,
        batch_size=a.batch,
        steps_per_epoch=a.real_steps,
        torch_compile=False,
        channels_last=True,
        deterministic=a.deterministic,
    )
    d["deployment"]["precision"] = a.precision  # parity check of the config
    return parse_pipeline_config(d)


def build_run_dir(cfg: Any, run_dir: Path) -> dict[str, float]:
    from rtscore.stages import generate_dataset, normalization_stats

    out = {}
    for split in ("train", "val"):
        t = time.perf_counter()
        generate_dataset(str(run_dir), cfg, split)
        out[f"generate_{split}_s"] = time.perf_counter() - t
    t = time.perf_counter()
    normalization_stats(str(run_dir), cfg)
    out["normalization_stats_s"] = time.perf_counter() - t
    return out


def first_epoch(cfg: Any) -> int:
    """First epoch that trains every layer at a cosine LR (after the frozen and warmup phases)."""
    return cfg.lr_schedule.freeze_backbone_epochs + cfg.lr_schedule.warmup_epochs + 1


def start_epoch(s: Any, epoch: int) -> None:
    """What train_seed does before each epoch: LRs, (un)freezing, train mode, the sampler's epoch."""
    from rtscore.train.loop import apply_lr, set_train_mode
    from rtscore.train.schedule import lr_at

    lr = lr_at(epoch, s.cfg.lr_schedule, s.cfg.training.max_epochs)
    apply_lr(s, lr)
    set_train_mode(s, lr.frozen)
    s.sampler.set_epoch(epoch)


def real_batch(s: Any, epoch: int) -> dict[str, Any]:
    """The epoch's first batch, read through the dataset in this process (the loader's workers stay idle)."""
    from torch.utils.data import default_collate

    ds = s.train_loader.dataset
    return default_collate([ds[item] for item in s.sampler.batches(epoch)[0]])


def reset_optimizer_state(opt: Any) -> None:
    """Drop AdamW moments so they are re-created in the parameters' current memory format."""
    from collections import defaultdict

    opt.state = defaultdict(dict)


# ----------------------------------------------------------------------------- timed pieces
def bare_step(s: Any, model: Any, x: Any, y: Any) -> None:
    """The loop's step with nothing around it (no sync, no EMA, no metrics)."""
    import torch

    from rtscore.losses import loss_soft_targets
    from rtscore.runtime import autocast

    cfg = s.cfg
    with autocast(cfg.training.precision, s.device):
        logits = model(x)[:, 0]
    loss = s.loss_fn(logits.float(), y, loss_soft_targets(cfg.loss, y))
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(s.model.parameters(), cfg.training.grad_clip_norm)
    s.optimizer.step()


def timed_blocks(
    run_block: Callable[[], int], device: Any, blocks: int, clock: Clock, label: str
) -> tuple[list[float], list[float]]:
    """(img/s per block, seconds per block); stops early past the budget (always at least one block)."""
    rates, secs = [], []
    for i in range(blocks):
        if i and clock.over():
            log(f"    [{label}] budget reached: {i} of {blocks} blocks timed")
            break
        sync(device)
        t0 = time.perf_counter()
        n = run_block()
        sync(device)
        dt = time.perf_counter() - t0
        rates.append(n / dt)
        secs.append(dt)
        log(f"    [{label}] block {i + 1}/{blocks}: {n / dt:8.2f} img/s ({dt:.2f} s)")
    return rates, secs


def peak_mem(device: Any) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


def reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def summarize(rates: list[float], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"img_per_s": statistics.median(rates), "blocks": rates, **(extra or {})}


def measure_bare(s: Any, model: Any, x: Any, y: Any, a: argparse.Namespace, clock: Clock, label: str) -> dict[str, Any]:
    reset_peak(s.device)
    sync(s.device)
    t0 = time.perf_counter()
    for _ in range(a.warmup_steps):
        bare_step(s, model, x, y)
    sync(s.device)
    warm_s = time.perf_counter() - t0

    def block() -> int:
        for _ in range(a.steps):
            bare_step(s, model, x, y)
        return a.steps * x.shape[0]

    rates, _ = timed_blocks(block, s.device, a.blocks, clock, label)
    return summarize(rates, {"warmup_s": warm_s, "steps_per_block": a.steps, "peak_mem_gib": peak_mem(s.device)})


def measure_loop(s: Any, epochs: list[int], warmup: int, clock: Clock, label: str) -> dict[str, Any]:
    """train_one_epoch over ``epochs`` (the first ``warmup`` untimed): img/s per epoch, and steady state.

    Steady state drops each epoch's first step, which also waits for the epoch's first batch (the loader's
    per-epoch pipeline fill), from the figure.
    """
    from rtscore.train.loop import train_one_epoch

    reset_peak(s.device)
    rates, steady, first_wait = [], [], []
    for i, epoch in enumerate(epochs):
        if i > warmup and clock.over():
            log(f"    [{label}] budget reached: {i - warmup} of {len(epochs) - warmup} epochs timed")
            break
        start_epoch(s, epoch)
        stamps: list[float] = []
        sync(s.device)
        t0 = time.perf_counter()
        row = train_one_epoch(s, epoch, on_step=lambda _n, _loss, st=stamps: st.append(time.perf_counter()))
        sync(s.device)
        dt = time.perf_counter() - t0
        bs = s.cfg.training.batch_size
        n = int(row["train_batches"]) * bs
        tag = "warm-up" if i < warmup else f"epoch {i - warmup + 1}/{len(epochs) - warmup}"
        log(f"    [{label}] {tag}: {n / dt:8.2f} img/s ({dt:.2f} s, {int(row['train_batches'])} steps)")
        if i < warmup:
            continue
        rates.append(n / dt)
        first_wait.append(stamps[0] - t0)
        if len(stamps) > 1:
            steady.append((len(stamps) - 1) * bs / (stamps[-1] - stamps[0]))
    return summarize(
        rates,
        {
            "steady_img_per_s": statistics.median(steady) if steady else None,
            "first_step_s": statistics.median(first_wait) if first_wait else None,
            "steps_per_epoch": s.cfg.training.steps_per_epoch,
            "peak_mem_gib": peak_mem(s.device),
        },
    )


def guarded(results: dict[str, Any], key: str, fn: Callable[[], dict[str, Any]]) -> None:
    """Run one measurement; an error (OOM, compile failure) is recorded and the check goes on."""
    try:
        results[key] = fn()
    except Exception as err:
        traceback.print_exc()
        results[key] = {"error": f"{type(err).__name__}: {err}"[:2000]}
        log(f"    [{key}] FAILED: {results[key]['error'][:300]}")
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass


# ----------------------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU (64 px, batch 2, efficientnet-b0)")
    p.add_argument("--arch", default="unetplusplus", choices=["unetplusplus", "unet"], help="smp architecture")
    p.add_argument("--backbone", default=None, help="encoder (default efficientnet-b5; smoke efficientnet-b0)")
    p.add_argument("--tile", type=int, default=None, help="tile size (default 512; smoke 64)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 32; smoke 2)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32", "fp16"], help="autocast precision")
    p.add_argument("--warmup-steps", type=int, default=None, help="untimed bare steps first (default 5; smoke 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per timed bare block (default 10; smoke 2)")
    p.add_argument("--blocks", type=int, default=None, help="timed blocks per bare variant (default 3; smoke 2)")
    p.add_argument("--real-steps", type=int, default=None, help="steps per real-loop epoch (default 40; smoke 2)")
    p.add_argument("--real-epochs", type=int, default=None, help="timed real-loop epochs (default 3; smoke 2)")
    p.add_argument("--tiles", type=int, default=None, help="tiles in the generated train store (512; smoke 16)")
    p.add_argument("--val-tiles", type=int, default=None, help="tiles in the val store (default 16; smoke 4)")
    p.add_argument("--gen-workers", type=int, default=None, help="generation processes (min(8, cpu_count))")
    p.add_argument("--loader-workers", type=int, default=None, help="DataLoader workers (default 8; smoke 1)")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the torch.compile'd bare step (default: on with CUDA, off in --cpu-smoke)",
    )
    p.add_argument("--real-compile", action="store_true", help="also time the real loop with the compiled model")
    p.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="training.deterministic as in baseline.yaml (cudnn.benchmark off); --no-deterministic to compare",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=330.0,
        help="wall-clock budget from start: past it, timed loops stop after one block/epoch and the compiled "
        "variants are skipped (the real loop always runs)",
    )
    p.add_argument(
        "--no-scaling",
        dest="scaling",
        action="store_false",
        help="skip (vi), one seed on 1 GPU vs every visible GPU (bench/ddp_bench.py; needs 2+ GPUs)",
    )
    p.add_argument("--workdir", default=None, help="scratch directory for the stores (default: a temp dir)")
    p.add_argument("--json", default=None, help="result path (default $OUT/gpu_check.json or ./gpu_check.json)")
    a = p.parse_args()
    smoke = a.cpu_smoke
    defaults = {
        "backbone": ("efficientnet-b5", "efficientnet-b0"),
        "tile": (512, 64),
        "batch": (32, 2),
        "warmup_steps": (5, 1),
        "steps": (10, 2),
        "blocks": (3, 2),
        "real_steps": (40, 2),
        "real_epochs": (3, 2),
        "tiles": (512, 16),
        "val_tiles": (16, 4),
        "gen_workers": (min(8, os.cpu_count() or 1), min(2, os.cpu_count() or 1)),
        "loader_workers": (8, 1),
        "compile": (True, False),
    }
    for k, (full, tiny) in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, tiny if smoke else full)
    a.shard_tiles = 8 if a.tiles < 64 else 32
    return a


def main() -> int:
    a = parse_args()
    clock = Clock(a.budget_s)
    import torch

    if a.cpu_smoke:
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device is visible to torch "
            f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}). "
            "Run it on a GPU machine, or use --cpu-smoke to test the script on CPU.",
            file=sys.stderr,
        )
        return 2
    else:
        device = torch.device("cuda")

    from rtscore.train.determinism import seed_everything
    from rtscore.train.loop import build_setup

    seed_everything(SEED, a.deterministic)  # before any CUDA work: the same flags for every variant
    info = env_info(device)
    log("gpu_check: " + json.dumps(info))
    settings = {k: v for k, v in vars(a).items() if k not in ("workdir", "json")}
    log("settings: " + json.dumps(settings))
    results: dict[str, Any] = {"env": info, "settings": settings, "notes": []}

    out_path = Path(a.json) if a.json else Path(os.environ.get("OUT") or ".") / "gpu_check.json"
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="rts-gpu-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    compiled_model: dict[str, Any] = {}
    try:
        cfg = build_config(a, device.type)
        log(f"[data] generating {a.tiles} train + {a.val_tiles} val tiles at {a.tile} px, {a.gen_workers} workers")
        results["data"] = build_run_dir(cfg, workdir / "run")
        log(f"[data] {json.dumps({k: round(v, 1) for k, v in results['data'].items()})}")

        t = time.perf_counter()
        s = build_setup(cfg, workdir / "run", SEED)
        e0 = first_epoch(cfg)
        start_epoch(s, e0)
        batch = real_batch(s, e0)
        x = batch["image"].to(device)
        y = batch["label"].to(device)
        n_params = sum(p.numel() for p in s.model.parameters())
        results["setup_s"] = time.perf_counter() - t
        log(
            f"[setup] {a.arch}/{a.backbone}, {n_params / 1e6:.1f}M params, batch {tuple(x.shape)}, "
            f"{a.precision}, epoch {e0} (unfrozen), built in {results['setup_s']:.1f} s"
        )
        cl = torch.channels_last if device.type == "cuda" else torch.contiguous_format  # as build_setup does
        if device.type != "cuda":
            results["notes"].append("CPU: build_setup keeps NCHW off CUDA, so (ii) uses NCHW like (i)")

        # (i) eager NCHW
        s.model.to(memory_format=torch.contiguous_format)
        reset_optimizer_state(s.optimizer)
        log("(i) bare step, eager, NCHW")
        guarded(results, "bare_nchw", lambda: measure_bare(s, s.model, x.contiguous(), y, a, clock, "i"))

        # (ii) eager channels_last (the memory format build_setup gives on CUDA)
        s.model.to(memory_format=cl)
        reset_optimizer_state(s.optimizer)
        x_cl = x.contiguous(memory_format=cl)
        log("(ii) bare step, eager, channels_last")
        guarded(results, "bare_cl", lambda: measure_bare(s, s.model, x_cl, y, a, clock, "ii"))

        # (ii+) the loop body on in-memory batches: + EMA, metrics, per-step syncs; no loader
        in_mem = dataclasses.replace(s, train_loader=[{"image": x_cl, "label": y}] * a.steps)
        n_loop = 1 + a.blocks
        log("(ii+) train_one_epoch on in-memory batches (EMA + train metrics + syncs, no loader), channels_last")
        guarded(results, "loop_in_memory", lambda: measure_loop(in_mem, [e0] * n_loop, 1, clock, "ii+"))

        # (iv) the real loop
        log(f"(iv) real loop: train_one_epoch, {a.loader_workers} loader workers, {a.real_steps} steps per epoch")
        epochs = [e0 + i for i in range(1 + a.real_epochs)]  # always run: past the budget, one timed epoch
        guarded(results, "real", lambda: measure_loop(s, epochs, 1, clock, "iv"))

        # (iii) compiled channels_last
        if a.compile:
            log("(iii) bare step, torch.compile, channels_last (compile = first warm-up step, not timed)")
            if clock.left < 60:
                results["notes"].append(f"(iii) skipped: {clock.left:.0f} s of budget left")
                log("    skipped: budget")
            else:

                def compiled() -> dict[str, Any]:
                    cm = torch.compile(s.model)
                    sync(device)
                    t = time.perf_counter()
                    bare_step(s, cm, x_cl, y)
                    sync(device)
                    compile_s = time.perf_counter() - t
                    log(f"    [iii] compile + first step: {compile_s:.1f} s")
                    r = measure_bare(s, cm, x_cl, y, a, clock, "iii")
                    r["compile_s"] = compile_s
                    compiled_model["cm"] = cm
                    return r

                guarded(results, "bare_compiled", compiled)
        cm = compiled_model.get("cm")
        if a.real_compile and cm is not None:
            log("(v) real loop with the compiled model")
            if clock.over():
                results["notes"].append("(v) skipped: budget reached")
            else:
                sc = dataclasses.replace(s, train_model=cm)
                e1 = e0 + 1 + a.real_epochs
                epochs = [e1 + i for i in range(1 + a.real_epochs)]
                guarded(results, "real_compiled", lambda: measure_loop(sc, epochs, 1, clock, "v"))
        # (vi) one seed on every visible GPU vs one (DDP through the training launcher), the users' baseline
        if a.scaling and device.type == "cuda" and torch.cuda.device_count() > 1 and not clock.over():
            from bench.ddp_bench import run_bench

            log(f"(vi) one seed on 1 GPU vs {torch.cuda.device_count()} GPUs (DDP), baseline at global batch 32")
            guarded(
                results,
                "scaling",
                lambda: run_bench("cuda", quick=False, rounds=2, epochs=2, steps=8, workdir=workdir / "scaling"),
            )
        elif a.scaling:
            results["notes"].append(f"(vi) skipped: {torch.cuda.device_count()} CUDA device(s) visible")
    except Exception as err:  # data generation or setup failed: still write what is known
        traceback.print_exc()
        results["fatal"] = f"{type(err).__name__}: {err}"[:2000]
        log(f"FATAL: {results['fatal'][:300]}")
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    def rate(key: str, field: str = "img_per_s") -> float | None:
        r = results.get(key) or {}
        return r.get(field)

    ratios = {}
    if rate("real") and rate("bare_cl"):
        ratios["real_over_bare_cl"] = rate("real") / rate("bare_cl")
    if rate("real", "steady_img_per_s") and rate("bare_cl"):
        ratios["real_steady_over_bare_cl"] = rate("real", "steady_img_per_s") / rate("bare_cl")
    if rate("loop_in_memory") and rate("bare_cl"):
        ratios["loop_in_memory_over_bare_cl"] = rate("loop_in_memory") / rate("bare_cl")
    if rate("real") and rate("loop_in_memory"):
        ratios["real_over_loop_in_memory"] = rate("real") / rate("loop_in_memory")
    if rate("bare_cl") and rate("bare_nchw"):
        ratios["bare_cl_over_nchw"] = rate("bare_cl") / rate("bare_nchw")
    if rate("bare_compiled") and rate("bare_cl"):
        ratios["bare_compiled_over_cl"] = rate("bare_compiled") / rate("bare_cl")
    if rate("real_compiled") and rate("bare_compiled"):
        ratios["real_compiled_over_bare_compiled"] = rate("real_compiled") / rate("bare_compiled")
    scaling = results.get("scaling") or {}
    if "scaling_efficiency" in scaling:
        ratios["ddp_speedup"] = scaling["ratio_train_img_per_s"]
        ratios["ddp_scaling_efficiency"] = scaling["scaling_efficiency"]
    results["ratios"] = ratios
    results["total_s"] = clock.elapsed
    results["reference_h200_img_per_s"] = {"bare_nchw": 75.0, "bare_cl": 145.0, "bare_compiled": 209.0}

    def show(key: str, label: str, ref: float | None = None) -> None:
        r = results.get(key)
        if r is None:
            log(f"  {label}: not run")
        elif "error" in r:
            log(f"  {label}: FAILED ({r['error'][:200]})")
        else:
            mem = f", peak {r['peak_mem_gib']:.1f} GiB" if r.get("peak_mem_gib") is not None else ""
            extra = f"   (reference H200: {ref:.0f})" if ref and device.type == "cuda" else ""
            log(f"  {label}: {r['img_per_s']:8.2f} img/s{mem}{extra}")

    log("")
    log(f"summary: {a.arch}/{a.backbone}, {a.tile}x{a.tile}, batch {a.batch}, {a.precision}, {device}")
    show("bare_nchw", "(i)   bare step, eager NCHW          ", 75.0)
    show("bare_cl", "(ii)  bare step, eager channels_last ", 145.0)
    show("bare_compiled", "(iii) bare step, compiled CL         ", 209.0)
    show("loop_in_memory", "(ii+) loop on in-memory batches, CL  ")
    show("real", "(iv)  REAL loop, channels_last       ")
    if (results.get("real") or {}).get("steady_img_per_s"):
        r = results["real"]
        log(f"        steady state (first step of each epoch dropped): {r['steady_img_per_s']:8.2f} img/s")
        log(f"        first step of an epoch (incl. first-batch wait): {r['first_step_s']:.2f} s")
    if a.real_compile:
        show("real_compiled", "(v)   REAL loop, compiled            ")
    for k, v in ratios.items():
        log(f"  ratio {k}: {v:.3f}" + ("   (target >= 0.9)" if k == "real_over_bare_cl" else ""))
    if "fatal" in results:
        log(f"  FATAL: {results['fatal'][:300]}")
    for n in results["notes"]:
        log(f"  note: {n}")
    log(f"  total {clock.elapsed:.0f} s")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    log(f"wrote {out_path}")
    log(json.dumps({"ratios": ratios, "total_s": clock.elapsed}))
    failed = [k for k in ("bare_cl", "real") if "error" in (results.get(k) or {"error": "not run"})]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
