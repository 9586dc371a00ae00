"""Training-stage benchmarks, measured side by side in one run (figures go to bench/README.md).

(a) the REAL training loop, ``rtscore.train.loop.train_one_epoch`` on a ``Setup`` from ``build_setup``:
    Zarr store -> TileDataset (NoData, normalization, full augmentation) -> balanced curriculum batch
    sampler -> DataLoader -> autocast forward/backward/clip/AdamW step -> EMA update (+ train metrics),
    with DataLoader num_workers 0 and 1 (prefetch 2, persistent workers); plus, to show where the time
    goes, the same loop fed in-memory batches (no loader) and the DataLoader iterated without the model;
(b) the BARE model step on in-memory tensors: same model, optimizer, loss and batch shape, the same number
    of steps, no loader, no EMA, no metrics;
(c) PR-AUC of 26.2M pixels (100 tiles of 512 x 512): per-tile logit histograms (TileHistogramAccumulator)
    summed and passed to average_precision_from_hist, versus sklearn.metrics.average_precision_score.

The model and data are configs/quickstart.yaml (Unet + mobilenet_v2, decoder [64,32,16,16,8], 128 px tiles,
batch 16, RGB + ndvi, fp32 on CPU) with a fixed ``training.steps_per_epoch`` so epochs are equal length.
Epochs, bare blocks and loader passes are interleaved round by round; figures are medians over rounds.

Usage: python bench/train_bench.py [--quick] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEED = 42
FIRST_EPOCH = 3  # quickstart: epoch 1 frozen backbone, epoch 2 warmup; from 3 on every layer trains
# The worker count quoted as "the" ratio, fixed in advance (not picked per run): one worker prefetching 2 batches
# overlaps loading with compute wherever a core is free; torch keeps its default threads for compute. On 2 cores
# it is within run-to-run noise of num_workers=0 (both are printed); see bench/README.md.
HEADLINE_WORKERS = 1


# ----------------------------------------------------------------------------- run directory
def bench_config(*, quick: bool, steps: int, workers: int) -> Any:
    """configs/quickstart.yaml with equal-length epochs and the given DataLoader worker count."""
    from rtscore.config.pipeline import load_pipeline_config, parse_pipeline_config

    data = load_pipeline_config(ROOT / "configs" / "quickstart.yaml").model_dump(mode="json")
    data["training"]["steps_per_epoch"] = steps
    data["data"]["loader"].update(
        num_workers=workers, prefetch_factor=2, persistent_workers=workers > 0, pin_memory=False
    )
    if quick:  # smoke: tiny tiles, tiny splits, small batches
        tile = 64
        data["data"]["tile_size"] = tile
        data["training"]["batch_size"] = 8
        for split, (pos, neg) in (("train", (24, 24)), ("val", (4, 12))):
            gen = data["data"]["generation"][split]
            gen["tile_size"] = tile
            gen["synthetic"].update(n_positive=pos, n_negative=neg, n_full_nodata=1)
    data["data"]["generation"]["test"] = None  # training reads train + val only
    return parse_pipeline_config(data)


def build_run_dir(cfg: Any, run_dir: Path) -> float:
    """Generate train/val stores and normalization stats as the pipeline stages do; returns seconds."""
    from rtscore.stages import generate_dataset, normalization_stats

    t0 = time.perf_counter()
    for split in ("train", "val"):
        generate_dataset(str(run_dir), cfg, split)
    normalization_stats(str(run_dir), cfg)
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- (a)/(b) training throughput
def start_epoch(s: Any, epoch: int) -> None:
    """What train_seed does before each epoch: LRs, (un)freezing, train mode, the sampler's epoch."""
    from rtscore.train.loop import apply_lr, set_train_mode
    from rtscore.train.schedule import lr_at

    lr = lr_at(epoch, s.cfg.lr_schedule, s.cfg.training.max_epochs)
    apply_lr(s, lr)
    set_train_mode(s, lr.frozen)
    s.sampler.set_epoch(epoch)


def bare_block(s: Any, x: Any, y: Any, steps: int) -> float:
    """samples/s of ``steps`` bare model steps on in-memory tensors (the loop's step, nothing around it)."""
    import torch

    from rtscore.losses import loss_soft_targets
    from rtscore.runtime import autocast

    cfg = s.cfg
    t0 = time.perf_counter()
    for _ in range(steps):
        with autocast(cfg.training.precision, s.device):
            logits = s.train_model(x)[:, 0]
        loss = s.loss_fn(logits.float(), y, loss_soft_targets(cfg.loss, y))
        s.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), cfg.training.grad_clip_norm)
        s.optimizer.step()
    return steps * x.shape[0] / (time.perf_counter() - t0)


def loop_epoch(s: Any, epoch: int) -> float:
    """samples/s of one train_one_epoch (the loop's own throughput figure)."""
    from rtscore.train.loop import train_one_epoch

    start_epoch(s, epoch)
    return train_one_epoch(s, epoch)["train_samples_per_s"]


def loader_epoch(s: Any, epoch: int) -> float:
    """samples/s of iterating the epoch's DataLoader alone (no model)."""
    s.sampler.set_epoch(epoch)
    t0, n = time.perf_counter(), 0
    for batch in s.train_loader:
        n += batch["image"].shape[0]
    return n / (time.perf_counter() - t0)


def per_step_extras_ms(s: Any, x: Any, y: Any, reps: int = 20) -> dict[str, float]:
    """Median ms of what the loop adds to each step besides loading: the EMA update and the train metrics."""
    import torch

    from rtscore.metrics import PixelConfusion

    with torch.no_grad():
        logits = s.model(x)[:, 0].float()
    confusion = PixelConfusion()
    out = {}
    for name, fn in (
        ("ema_update", lambda: s.ema.update(s.model)),
        ("train_metrics", lambda: confusion.update(logits, y)),
    ):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = 1000.0 * statistics.median(times)
    return out


def with_threads(n: int, fn: Any) -> float:
    """Run ``fn`` with torch limited to ``n`` intra-op threads, then restore the previous count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return float(fn())
    finally:
        torch.set_num_threads(before)


def bench_training(
    run_dir: Path, *, quick: bool, steps: int, rounds: int, min_rounds: int, deadline: float
) -> dict[str, Any]:
    import torch

    from rtscore.train.loop import build_setup

    setups = {w: build_setup(bench_config(quick=quick, steps=steps, workers=w), run_dir, SEED) for w in (0, 1)}
    # The bare step gets its own identically built Setup (same seed, so the same initial weights).
    sb = build_setup(bench_config(quick=quick, steps=steps, workers=0), run_dir, SEED)
    start_epoch(sb, FIRST_EPOCH)
    batch = next(iter(sb.train_loader))
    x, y = batch["image"].to(sb.device), batch["label"].to(sb.device)
    in_memory = dataclasses.replace(sb, train_loader=[batch] * steps)  # the loop minus the loader

    measures = {
        "real_w0": lambda e: loop_epoch(setups[0], e),
        "real_w1": lambda e: loop_epoch(setups[1], e),
        "bare": lambda e: bare_block(sb, x, y, steps),
        "loop_in_memory": lambda e: loop_epoch(in_memory, e),
        "loader_w0": lambda e: loader_epoch(setups[0], e),
        "loader_w1": lambda e: loader_epoch(setups[1], e),
        # The loader with a core of its own (as on a GPU host, where workers never share the compute cores):
        # compute on one torch thread, one DataLoader worker on the other core, against the bare step on one thread.
        "bare_1t": lambda e: with_threads(1, lambda: bare_block(sb, x, y, steps)),
        "real_w1_1t": lambda e: with_threads(1, lambda: loop_epoch(setups[1], e)),
    }
    names = list(measures)
    runs: dict[str, list[float]] = {k: [] for k in names}

    def one_round(r: int, epoch: int) -> dict[str, float]:
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate: no variant always follows another
        return {k: measures[k](epoch) for k in order}

    t0 = time.perf_counter()
    warm = one_round(0, FIRST_EPOCH)  # warm-up: worker start-up, allocator, first-touch; not counted
    done = 0
    for r in range(rounds):
        if r >= min_rounds and time.perf_counter() > deadline:
            break
        for k, v in one_round(r, FIRST_EPOCH + 1 + r).items():
            runs[k].append(v)
        done += 1
    med = {k: statistics.median(v) for k, v in runs.items()}
    extras_ms = per_step_extras_ms(sb, x, y)
    per_round = {
        w: statistics.median(a / b for a, b in zip(runs[f"real_w{w}"], runs["bare"], strict=True)) for w in (0, 1)
    }
    out: dict[str, Any] = {
        "steps_per_epoch": steps,
        "batch_size": int(x.shape[0]),
        "samples_per_epoch": steps * int(x.shape[0]),
        "rounds": done,
        "input_shape": list(x.shape),
        "torch_threads": torch.get_num_threads(),
        "precision": sb.cfg.training.precision,
        "seconds": time.perf_counter() - t0,
        "warmup": warm,
        "runs": runs,
        "median_samples_per_s": med,
        "ratio_real_w0_over_bare": med["real_w0"] / med["bare"],
        "ratio_real_w1_over_bare": med["real_w1"] / med["bare"],
        "median_per_round_ratio_real_w0_over_bare": per_round[0],
        "median_per_round_ratio_real_w1_over_bare": per_round[1],
        "ratio_loop_in_memory_over_bare": med["loop_in_memory"] / med["bare"],
        "ratio_real_w1_1t_over_bare_1t": med["real_w1_1t"] / med["bare_1t"],
        "per_step_extras_ms": extras_ms,
        "bare_step_ms": 1000.0 * x.shape[0] / med["bare"],
    }
    # Simple models of where the time goes, from the parts measured alone:
    # workers=0 runs loading and compute in series; workers=1 can at best lose the worker's CPU time from the
    # two cores the compute threads use (perfect packing, no straggler or IPC cost).
    out["predicted_w0_serial"] = 1.0 / (1.0 / med["loop_in_memory"] + 1.0 / med["loader_w0"])
    out["predicted_w1_packed"] = 1.0 / (1.0 / med["loop_in_memory"] + 1.0 / (2.0 * med["loader_w1"]))
    out["headline_workers"] = HEADLINE_WORKERS
    out["ratio_real_over_bare"] = med[f"real_w{HEADLINE_WORKERS}"] / med["bare"]
    return out


# ----------------------------------------------------------------------------- (d) the CPU path
@dataclasses.dataclass(frozen=True)
class Variant:
    """One way to run the quickstart's training loop on CPU: compile, memory format, threads, loader workers."""

    name: str
    compile: bool = False
    channels_last: bool = True
    threads: int = 2
    workers: int = 0
    repeat_of: str | None = None  # an identical copy of this variant: the determinism check (and A/A noise)

    def describe(self) -> str:
        mode = "compiled" if self.compile else "eager"
        fmt = "channels_last" if self.channels_last else "NCHW"
        return f"{mode}, {fmt}, {self.threads} thread(s) + {self.workers} worker(s)"


def cpu_variants(threads: int, *, compile_: bool) -> list[Variant]:
    """The quickstart's current setting first (the reference), then one factor changed at a time.

    ``threads`` is torch's default intra-op thread count (the physical cores): on 2 cores the loader variants are
    2 threads + 0 workers (the default), 1 thread + 1 worker (a core each) and 2 threads + 1 worker (oversubscribed).
    """
    t = threads
    out = [Variant("default", threads=t), Variant("default_repeat", threads=t, repeat_of="default")]
    out.append(Variant("nchw", channels_last=False, threads=t))
    if compile_:
        out += [
            Variant("compile", compile=True, threads=t),
            Variant("compile_repeat", compile=True, threads=t, repeat_of="compile"),
        ]
    if t > 1:
        out.append(Variant(f"t{t - 1}_w1", threads=t - 1, workers=1))
    out.append(Variant(f"t{t}_w1", threads=t, workers=1))
    return out


def variant_config(v: Variant, *, quick: bool, steps: int | None) -> Any:
    from rtscore.config.pipeline import parse_pipeline_config

    data = bench_config(quick=quick, steps=steps or 1, workers=v.workers).model_dump(mode="json")
    data["training"]["steps_per_epoch"] = steps  # None: the quickstart's own epoch length
    data["training"].update(torch_compile=v.compile, channels_last=v.channels_last)
    return parse_pipeline_config(data)


def weights_digest(model: Any) -> tuple[str, dict[str, Any]]:
    """sha256 over the state_dict's tensors in order (names and bytes), and a CPU copy of the tensors."""
    import hashlib

    h = hashlib.sha256()
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    for k, v in state.items():
        h.update(k.encode())
        h.update(v.numpy().tobytes())
    return h.hexdigest(), state


def max_abs_diff(a: dict[str, Any], b: dict[str, Any], keys: list[str]) -> float:
    """Largest absolute difference of the tensors named ``keys`` (the trainable weights: BatchNorm's running
    variances are large numbers whose differences would say little)."""
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in keys)


def spread(values: list[float]) -> dict[str, float]:
    """Median and [min, max] of a list of figures."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def break_even_steps(compile_s: float, eager_step_s: float, compiled_step_s: float) -> float:
    """Steps after which the compiled model has paid back its compile time (inf: it never does)."""
    gain = eager_step_s - compiled_step_s
    return compile_s / gain if gain > 0 else math.inf


def val_frequency_costs(
    epoch_steps: list[int], step_s: float, val_s: float, frequencies: tuple[int, ...] = (2, 3, 4)
) -> dict[int, dict[str, float]]:
    """Training + validation seconds of one seed for each ``training.val_frequency`` (as run_epoch validates:
    every f-th epoch and the last one), from the measured seconds per training step and per validation pass."""
    n_epochs = len(epoch_steps)
    train_s = step_s * sum(epoch_steps)
    out = {}
    for f in frequencies:
        n_val = sum(1 for e in range(1, n_epochs + 1) if e % f == 0 or e == n_epochs)
        out[f] = {"validations": n_val, "train_s": train_s, "val_s": n_val * val_s, "total_s": train_s + n_val * val_s}
    return out


def soundness(loss: float, ref_loss: float, deterministic: bool | None, *, loss_rtol: float = 0.02) -> tuple[bool, str]:
    """Numerically sound: a finite loss within ``loss_rtol`` of the reference's after the same steps, and (when
    a repeat was run) bit-identical to its repeat."""
    if not math.isfinite(loss):
        return False, "non-finite loss"
    if abs(loss - ref_loss) > loss_rtol * abs(ref_loss):
        return False, f"loss {loss:.5f} vs {ref_loss:.5f}: beyond {loss_rtol:.0%}"
    if deterministic is False:
        return False, "two identical runs differ"
    return True, "ok"


def bench_cpu_path(
    run_dir: Path, *, quick: bool, steps: int, rounds: int, min_rounds: int, deadline: float, compile_: bool
) -> dict[str, Any]:
    """(d): the variants of :func:`cpu_variants`, epochs of ``steps`` steps interleaved round by round, then the
    numerics of each against the default after the same epochs; and one validation pass vs one real epoch."""
    import torch

    from rtscore.train.loop import build_setup
    from rtscore.train.validate import evaluate

    threads = torch.get_num_threads()
    variants = cpu_variants(threads, compile_=compile_)
    setups = {v.name: build_setup(variant_config(v, quick=quick, steps=steps), run_dir, SEED) for v in variants}
    # (d) validation cost: the quickstart's own epoch length (no steps_per_epoch) at the default setting.
    real = build_setup(variant_config(variants[0], quick=quick, steps=None), run_dir, SEED)
    cfg = real.cfg
    epoch_steps = []
    for e in range(1, cfg.training.max_epochs + 1):
        real.sampler.set_epoch(e)
        epoch_steps.append(len(real.sampler))
    last: dict[str, dict[str, float]] = {}

    def timed_epoch(v: Variant, epoch: int) -> float:
        def run() -> float:
            from rtscore.train.loop import train_one_epoch

            start_epoch(setups[v.name], epoch)
            last[v.name] = train_one_epoch(setups[v.name], epoch)
            return last[v.name]["train_samples_per_s"]

        return with_threads(v.threads, run)

    def real_epoch_s(epoch: int) -> float:
        t0 = time.perf_counter()
        with_threads(threads, lambda: loop_epoch(real, epoch))
        return time.perf_counter() - t0

    def val_pass_s(epoch: int) -> float:
        t0 = time.perf_counter()
        with real.ema.swapped_in(real.model):
            evaluate(real.model, real.val_loader, cfg, real.device, loss_fn=real.loss_fn, seed=SEED)
        return time.perf_counter() - t0

    extra = {"real_epoch_s": real_epoch_s, "val_pass_s": val_pass_s}
    names = [v.name for v in variants] + list(extra)
    by_name = {v.name: v for v in variants}

    def measure(name: str, epoch: int) -> float:
        return extra[name](epoch) if name in extra else timed_epoch(by_name[name], epoch)

    runs: dict[str, list[float]] = {k: [] for k in names}
    t0 = time.perf_counter()
    warm_s: dict[str, float] = {}
    for name in names:  # warm-up in list order: "compile" compiles cold, "compile_repeat" then finds the caches warm
        t = time.perf_counter()
        measure(name, FIRST_EPOCH)
        warm_s[name] = time.perf_counter() - t
    done = 0
    for r in range(rounds):
        if r >= min_rounds and time.perf_counter() > deadline:
            break
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            runs[name].append(measure(name, FIRST_EPOCH + 1 + r))
        done += 1

    samples = steps * cfg.training.batch_size
    ref = "default"
    digests = {v.name: weights_digest(setups[v.name].model) for v in variants}
    param_names = [k for k, _ in setups[ref].model.named_parameters()]
    per_variant: dict[str, Any] = {}
    # A change of the thread count changes only the order of float sums (oneDNN splits them by thread), yet
    # training amplifies it (measured 2026-12-02: the 1-thread loss 6 % off the 2-thread one after 96 steps).
    # So a variant's loss counts as sound within twice that reduction-order spread (at least 2 %).
    ref_loss = last[ref]["train_loss"]
    order_only = [abs(last[n]["train_loss"] - ref_loss) / abs(ref_loss) for n in ("t1_w1",) if n in last]
    loss_rtol = max([0.02, *(2 * x for x in order_only)])
    for v in variants:
        sps = runs[v.name]
        ratios = [a / b for a, b in zip(sps, runs[ref], strict=True)]
        repeat = next((w.name for w in variants if w.repeat_of == v.name), v.repeat_of)
        deterministic = None if repeat is None else digests[v.name][0] == digests[repeat][0]
        loss = last[v.name]["train_loss"]
        ok, why = soundness(loss, ref_loss, deterministic, loss_rtol=loss_rtol)
        per_variant[v.name] = {
            "describe": v.describe(),
            "samples_per_s": spread(sps),
            "step_s": samples / statistics.median(sps) / steps,
            "ratio_vs_default": spread(ratios),
            "runs": sps,
            "first_epoch_s": warm_s[v.name],
            "final_train_loss": loss,
            "weights_sha256": digests[v.name][0],
            "identical_to_default": digests[v.name][0] == digests[ref][0],
            "max_abs_weight_diff_vs_default": max_abs_diff(digests[v.name][1], digests[ref][1], param_names),
            "deterministic": deterministic,
            "sound": ok,
            "sound_reason": why,
        }
    out: dict[str, Any] = {
        "threads": threads,
        "steps_per_epoch": steps,
        "batch_size": cfg.training.batch_size,
        "tile_size": cfg.data.tile_size,
        "epochs_trained": 1 + done,
        "steps_trained": (1 + done) * steps,
        "rounds": done,
        "seconds": time.perf_counter() - t0,
        "variants": per_variant,
    }
    if compile_:
        eager_s, comp_s = per_variant[ref]["step_s"], per_variant["compile"]["step_s"]
        block_s = steps * comp_s
        cold = warm_s["compile"] - block_s  # the warm-up epoch less what the same steps take once compiled
        warm = warm_s["compile_repeat"] - block_s
        seed_steps = sum(epoch_steps)
        out["compile"] = {
            "cold_compile_s": cold,
            "warm_compile_s": warm,
            "eager_step_s": eager_s,
            "compiled_step_s": comp_s,
            "break_even_steps_cold": break_even_steps(cold, eager_s, comp_s),
            "break_even_steps_warm": break_even_steps(warm, eager_s, comp_s),
            "quickstart_steps_per_seed": seed_steps,
            # 3 seeds: the first compiles cold, the others find inductor's on-disk caches warm
            "quickstart_3_seeds_gain_s": 3 * seed_steps * (eager_s - comp_s) - cold - 2 * warm,
        }
    real_s = statistics.median(runs["real_epoch_s"])
    val_s = statistics.median(runs["val_pass_s"])
    # the real epochs timed are epochs FIRST_EPOCH + 1 on: the curriculum's last stage, all of one length
    step_s = real_s / epoch_steps[min(FIRST_EPOCH, len(epoch_steps) - 1)]
    out["validation"] = {
        "val_tiles": len(real.val_loader.dataset),
        "train_epoch_steps": epoch_steps,
        "real_epoch_s": spread(runs["real_epoch_s"]),
        "val_pass_s": spread(runs["val_pass_s"]),
        "val_over_epoch": val_s / real_s,
        "per_frequency": val_frequency_costs(epoch_steps, step_s, val_s),
    }
    sound = [n for n, d in per_variant.items() if d["sound"] and by_name[n].repeat_of is None]
    out["loss_rtol"] = loss_rtol
    out["fastest_sound"] = max(sound, key=lambda n: per_variant[n]["ratio_vs_default"]["median"]) if sound else None
    # for a 10-minute quickstart the compile time counts: compile only where it gains over 3 seeds, cold
    gain = (out.get("compile") or {}).get("quickstart_3_seeds_gain_s")
    quick = [n for n in sound if not (n.startswith("compile") and (gain is None or gain <= 0))]
    out["fastest_for_quickstart"] = (
        max(quick, key=lambda n: per_variant[n]["ratio_vs_default"]["median"]) if quick else None
    )
    return out


def print_cpu_path(d: dict[str, Any]) -> None:
    def rng(x: dict[str, float], fmt: str) -> str:
        return f"{x['median']:{fmt}} [{x['min']:{fmt}}-{x['max']:{fmt}}]"

    print(
        f"(d) the CPU path: quickstart model, batch {d['batch_size']} at {d['tile_size']} px, {d['threads']} torch "
        f"threads by default, {d['steps_per_epoch']} steps per epoch, median [min-max] of {d['rounds']} interleaved "
        f"rounds after a warm-up epoch; numerics after the same {d['epochs_trained']} epochs ({d['steps_trained']} "
        "steps, the same batches) from the same init"
    )
    hdr = f"    {'variant':16s} {'setting':50s} {'samples/s':>22s} {'vs default':>22s} {'loss':>9s} "
    print(hdr + f"{'max|dw|':>9s} {'=def':>5s} {'repeat':>6s} sound")
    for name, v in d["variants"].items():
        det = {None: "-", True: "same", False: "DIFF"}[v["deterministic"]]
        print(
            f"    {name:16s} {v['describe']:50s} {rng(v['samples_per_s'], '6.1f'):>22s} "
            f"{rng(v['ratio_vs_default'], '5.3f'):>22s} {v['final_train_loss']:9.5f} "
            f"{v['max_abs_weight_diff_vs_default']:9.2e} {'yes' if v['identical_to_default'] else 'no':>5s} "
            f"{det:>6s} {'yes' if v['sound'] else 'NO: ' + v['sound_reason']}"
        )
    c = d.get("compile")
    if c:
        print(
            f"    torch.compile (inductor): compile {c['cold_compile_s']:.1f} s cold, {c['warm_compile_s']:.1f} s with "
            f"warm caches; step {1000 * c['compiled_step_s']:.0f} ms vs eager {1000 * c['eager_step_s']:.0f} ms; "
            f"break-even after {c['break_even_steps_cold']:.0f} steps cold / {c['break_even_steps_warm']:.0f} warm; "
            f"a quickstart seed is {c['quickstart_steps_per_seed']} steps: 3 seeds gain "
            f"{c['quickstart_3_seeds_gain_s']:+.0f} s"
        )
    v = d["validation"]
    print(
        f"    validation: one pass over the val pool ({v['val_tiles']} tiles) {rng(v['val_pass_s'], '.2f')} s vs "
        f"one training epoch {rng(v['real_epoch_s'], '.2f')} s: {v['val_over_epoch']:.2f} of an epoch"
    )
    for f, x in v["per_frequency"].items():
        print(
            f"      training.val_frequency {f}: {x['validations']} validations, {x['val_s']:.0f} s of validation + "
            f"{x['train_s']:.0f} s of training per seed = {x['total_s']:.0f} s"
        )
    print(
        f"    fastest numerically sound setting (loss within {d.get('loss_rtol', 0.02):.1%} of the default's, twice "
        f"the spread a thread-count change gives; repeats bit-identical): {d['fastest_sound']}; for a 3-seed "
        f"quickstart, compile time counted: {d.get('fastest_for_quickstart')}"
    )


# ----------------------------------------------------------------------------- (c) PR-AUC
def synthetic_scores(n_tiles: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Realistic validation outputs: (T,H,W) float32 logits and uint8 labels in {0, 1, 255}.

    ~0.5% positive pixels in elliptic blobs on ~35% of tiles; logits = a negative bias + gaussian-smoothed
    noise (spatially correlated errors) + hard-negative bumps + a smoothed signal over the positives, so the
    AP is moderate, not trivially 1; some tiles carry an ignore (NoData) band.
    """
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    logits = np.empty((n_tiles, size, size), np.float32)
    labels = np.zeros((n_tiles, size, size), np.uint8)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    scale = size / 512.0

    def ellipse(r_lo: float, r_hi: float) -> np.ndarray:
        cy, cx = rng.uniform(0, size, 2)
        ry, rx = rng.uniform(r_lo * scale, r_hi * scale, 2)
        a = rng.uniform(0, np.pi)
        dy, dx = yy - cy, xx - cx
        u, v = dy * np.cos(a) + dx * np.sin(a), -dy * np.sin(a) + dx * np.cos(a)
        return (u / ry) ** 2 + (v / rx) ** 2 <= 1.0

    for t in range(n_tiles):
        lab = np.zeros((size, size), bool)
        if rng.random() < 0.35:
            for _ in range(rng.integers(1, 4)):
                lab |= ellipse(10, 34)
        hard = np.zeros((size, size), np.float32)
        for _ in range(rng.integers(0, 4)):
            hard[ellipse(6, 25)] = rng.uniform(2.0, 5.0)  # lakes, roads ... the model half-believes
        noise = gaussian_filter(rng.standard_normal((size, size)).astype(np.float32), 3 * scale + 0.5)
        noise *= 1.6 / (noise.std() + 1e-6)
        signal = gaussian_filter(lab.astype(np.float32), 2.0) * rng.uniform(4.0, 8.0)
        logits[t] = -5.5 + noise + gaussian_filter(hard, 2.0) + signal
        labels[t] = lab
        if rng.random() < 0.1:  # a NoData band: ignore
            r0 = rng.integers(0, size // 2)
            labels[t, r0 : r0 + size // 4] = 255
    return logits, labels


def hist_ap(logits: np.ndarray, labels: np.ndarray, batch: int = 10) -> float:
    """Our path: stream batches of tiles into per-tile histograms, then AP of the summed histograms."""
    from rtscore.metrics import TileHistogramAccumulator, average_precision_from_hist, weighted_hist

    acc = TileHistogramAccumulator()
    for a in range(0, logits.shape[0], batch):
        acc.add_batch(logits[a : a + batch], labels[a : a + batch], range(a, min(a + batch, logits.shape[0])))
    pos, neg = weighted_hist(acc.result(), None)  # the natural pool: plain sums over tiles
    return average_precision_from_hist(pos, neg)


def sklearn_ap(logits: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import average_precision_score

    valid = labels != 255
    return float(average_precision_score(labels[valid], logits[valid]))


def bench_prauc(n_tiles: int, size: int, reps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    logits, labels = synthetic_scores(n_tiles, size)
    gen_s = time.perf_counter() - t0
    times: dict[str, list[float]] = {"hist": [], "sklearn": []}
    aps: dict[str, float] = {}
    k = int(np.argmax((labels == 1).any(axis=(1, 2))))  # warm-up on one positive tile: imports stay out of timing
    hist_ap(logits[k : k + 1], labels[k : k + 1])
    sklearn_ap(logits[k : k + 1], labels[k : k + 1])
    for _ in range(reps):  # interleaved
        for name, fn in (("hist", hist_ap), ("sklearn", sklearn_ap)):
            t = time.perf_counter()
            aps[name] = fn(logits, labels)
            times[name].append(time.perf_counter() - t)
    n_valid = int((labels != 255).sum())
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "tiles": n_tiles,
        "tile_size": size,
        "pixels": int(labels.size),
        "valid_pixels": n_valid,
        "positive_fraction": float((labels == 1).sum() / n_valid),
        "positive_tiles": int((labels == 1).any(axis=(1, 2)).sum()),
        "data_gen_s": gen_s,
        "reps": reps,
        "times": times,
        "hist_s": med["hist"],
        "sklearn_s": med["sklearn"],
        "speedup": med["sklearn"] / med["hist"],
        "ap_hist": aps["hist"],
        "ap_sklearn": aps["sklearn"],
        "ap_abs_diff": abs(aps["hist"] - aps["sklearn"]),
    }


# ----------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not the quoted figures)")
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, removed after)")
    p.add_argument("--steps", type=int, default=None, help="steps per epoch / bare block (default 12; quick 3)")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 7; quick 2)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop timing training rounds past this many seconds from start, after at least 3 (quick 2) rounds "
        "(default 450; the machine is shared, so a slow spell can stretch a round several-fold)",
    )
    p.add_argument(
        "--sections",
        default="loop,prauc,cpu",
        help="comma-separated parts to run: loop ((a)/(b)), prauc ((c)), cpu ((d) the CPU path); default all",
    )
    p.add_argument("--no-compile", action="store_true", help="(d) without the torch.compile variants")
    p.add_argument("--cpu-steps", type=int, default=None, help="(d) steps per epoch (default 12; quick 2)")
    p.add_argument("--cpu-rounds", type=int, default=None, help="(d) timed rounds (default 7; quick 1)")
    p.add_argument("--cpu-budget-s", type=float, default=None, help="(d) like --budget-s (default 900; quick 60)")
    args = p.parse_args()
    sections = set(args.sections.split(","))
    unknown = sections - {"loop", "prauc", "cpu"}
    if unknown:
        p.error(f"--sections: unknown {sorted(unknown)}; use loop, prauc, cpu")
    steps = args.steps or (3 if args.quick else 12)
    rounds = args.rounds or (2 if args.quick else 7)
    min_rounds = min(rounds, 2 if args.quick else 3)
    budget = args.budget_s if args.budget_s is not None else (60.0 if args.quick else 450.0)
    pr_tiles, pr_size, pr_reps = (8, 256, 2) if args.quick else (100, 512, 3)
    t_start = time.perf_counter()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rts-train-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # (d) times a cold compile: inductor's caches start empty in the scratch directory (read when torch loads)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(workdir / "inductor-cache")
    import torch

    tr: dict[str, Any] | None = None
    cpu: dict[str, Any] | None = None
    gen_s = math.nan
    try:
        run_dir = workdir / "run"
        if sections & {"loop", "cpu"}:
            gen_s = build_run_dir(bench_config(quick=args.quick, steps=steps, workers=0), run_dir)
        if "loop" in sections:
            tr = bench_training(
                run_dir, quick=args.quick, steps=steps, rounds=rounds, min_rounds=min_rounds, deadline=t_start + budget
            )
        if "cpu" in sections:
            t_cpu = time.perf_counter()
            cpu_rounds = args.cpu_rounds or (1 if args.quick else 7)
            cpu_budget = args.cpu_budget_s if args.cpu_budget_s is not None else (60.0 if args.quick else 900.0)
            cpu = bench_cpu_path(
                run_dir,
                quick=args.quick,
                steps=args.cpu_steps or (2 if args.quick else 12),
                rounds=cpu_rounds,
                min_rounds=min(cpu_rounds, 1 if args.quick else 3),
                deadline=t_cpu + cpu_budget,
                compile_=not args.no_compile,
            )
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    pr = bench_prauc(pr_tiles, pr_size, pr_reps) if "prauc" in sections else None
    total_s = time.perf_counter() - t_start
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}; run dir (train + val stores, stats) built in "
        f"{gen_s:.1f} s"
    )
    if tr is not None:
        print_training(tr)
    if pr is not None:
        print_prauc(pr)
    if cpu is not None:
        print_cpu_path(cpu)
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"total {total_s:.0f} s, peak RSS of this process {peak_rss_mib:.0f} MiB")
    summary = {
        "generation_s": gen_s,
        "training": tr,
        "prauc": pr,
        "cpu_path": cpu,
        "total_s": total_s,
        "peak_rss_mib": peak_rss_mib,
    }
    print(json.dumps(summary))


def print_training(tr: dict[str, Any]) -> None:
    m = tr["median_samples_per_s"]
    b, h, w, c = tr["input_shape"][0], tr["input_shape"][2], tr["input_shape"][3], tr["input_shape"][1]
    print(
        f"(a)/(b) Unet/mobilenet_v2, batch {b} x {c} x {h} x {w}, {tr['precision']}, {tr['torch_threads']} torch "
        f"threads, {tr['steps_per_epoch']} steps per epoch/block, median of {tr['rounds']} interleaved rounds "
        "(after 1 warm-up round)"
    )
    print(f"    (a) real loop, num_workers=0           : {m['real_w0']:7.1f} samples/s")
    print(f"    (a) real loop, num_workers=1 (prefetch): {m['real_w1']:7.1f} samples/s")
    print(f"    (b) bare model step, in-memory tensors : {m['bare']:7.1f} samples/s")
    for w in (0, 1):
        print(
            f"    ratio real/bare, num_workers={w}: {tr[f'ratio_real_w{w}_over_bare']:.3f} "
            f"(median of per-round ratios {tr[f'median_per_round_ratio_real_w{w}_over_bare']:.3f})"
        )
    print("    where the time goes:")
    print(
        f"      loop on in-memory batches (EMA + train metrics, no loader): {m['loop_in_memory']:7.1f} samples/s "
        f"({tr['ratio_loop_in_memory_over_bare']:.3f} of bare)"
    )
    ex = tr["per_step_extras_ms"]
    print(
        f"      per step, timed alone: EMA update {ex['ema_update']:.1f} ms, "
        f"train metrics {ex['train_metrics']:.1f} ms, vs bare step {tr['bare_step_ms']:.0f} ms"
    )
    print(f"      DataLoader alone, num_workers=0: {m['loader_w0']:7.1f} samples/s")
    print(f"      DataLoader alone, num_workers=1: {m['loader_w1']:7.1f} samples/s")
    print(
        f"      predicted num_workers=0, loader in series (1/(1/loop + 1/loader_w0))         : "
        f"{tr['predicted_w0_serial']:7.1f} samples/s ({tr['predicted_w0_serial'] / m['bare']:.3f} of bare)"
    )
    print(
        f"      predicted num_workers=1, perfect packing on 2 cores (1/(1/loop + 1/(2 loader_w1))): "
        f"{tr['predicted_w1_packed']:7.1f} samples/s ({tr['predicted_w1_packed'] / m['bare']:.3f} of bare)"
    )
    print(
        f"    loader on its own core (1 compute thread + 1 DataLoader worker): real {m['real_w1_1t']:.1f} vs bare "
        f"{m['bare_1t']:.1f} samples/s on 1 thread: ratio {tr['ratio_real_w1_1t_over_bare_1t']:.3f}"
    )
    print(
        f"    headline (data.loader.num_workers={HEADLINE_WORKERS}, prefetch 2, persistent workers): "
        f"real/bare {tr['ratio_real_over_bare']:.3f} (target >= 0.9)"
    )


def print_prauc(pr: dict[str, Any]) -> None:
    print(
        f"(c) PR-AUC over {pr['tiles']} tiles of {pr['tile_size']}x{pr['tile_size']} = {pr['pixels'] / 1e6:.1f}M px "
        f"({pr['valid_pixels'] / 1e6:.1f}M valid, {100 * pr['positive_fraction']:.2f}% positive, "
        f"{pr['positive_tiles']} positive tiles), median of {pr['reps']}"
    )
    print(f"    histograms (TileHistogramAccumulator + average_precision_from_hist): {pr['hist_s']:7.3f} s")
    print(f"    sklearn.metrics.average_precision_score                           : {pr['sklearn_s']:7.3f} s")
    print(f"    speed-up: {pr['speedup']:.1f}x (target >= 50x)")
    print(f"    AP histograms {pr['ap_hist']:.6f} vs sklearn {pr['ap_sklearn']:.6f}: |diff| {pr['ap_abs_diff']:.2e}")


if __name__ == "__main__":
    main()
