"""Batch-size profiler: the largest batch that fits the configured model and tile size on this device."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rtscore.config.pipeline import PipelineConfig
from rtscore.models import build_model
from rtscore.runtime import check_precision, forward_logits, select_device


@dataclass
class Trial:
    batch_size: int
    fits: bool
    peak_memory_gib: float
    images_per_s: float
    error: str = ""


class _RssSampler:
    """Peak resident memory of this process while a CPU trial runs (torch allocations are not traced)."""

    def __init__(self, interval_s: float = 0.005) -> None:
        import psutil

        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self.interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def delta_gib(self) -> float:
        return (self.peak - self.base) / 2**30


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    msg = str(err).lower()
    return "out of memory" in msg or "can't allocate memory" in msg or "cannot allocate memory" in msg


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, precision: str) -> None:
    logits = forward_logits(model, x, precision=precision)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def try_batch(
    model: torch.nn.Module,
    cfg: PipelineConfig,
    device: torch.device,
    batch: int,
    *,
    steps: int,
    memory_cap_gib: float | None,
) -> Trial:
    """One warm-up and ``steps`` timed training steps at ``batch``; OOM (or the CPU cap) means it does not fit."""
    size, c = cfg.data.tile_size, cfg.channels.count
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    sampler = _RssSampler() if device.type == "cpu" else None
    try:
        x = torch.randn(batch, c, size, size, device=device)
        y = (torch.rand(batch, size, size, device=device) > 0.99).float()
        if cfg.training.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if sampler is not None:
            sampler.__enter__()
        _step(model, opt, x, y, cfg.training.precision)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            _step(model, opt, x, y, cfg.training.precision)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        rate = batch * steps / (time.perf_counter() - t0)
    except (RuntimeError, MemoryError) as err:
        if not _is_oom(err):
            raise
        return Trial(batch, False, float("nan"), 0.0, "out of memory")
    finally:
        if sampler is not None:
            sampler.__exit__()
        opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**30
    else:
        assert sampler is not None  # a CPU trial runs under the RSS sampler
        peak = sampler.delta_gib
    if memory_cap_gib is not None and peak > memory_cap_gib:
        return Trial(batch, False, peak, rate, f"peak {peak:.2f} GiB above the cap {memory_cap_gib:.2f} GiB")
    return Trial(batch, True, peak, rate)


def profile_batch_sizes(
    cfg: PipelineConfig,
    *,
    device: torch.device | None = None,
    memory_cap_gib: float | None = None,
    max_batch: int = 512,
    steps: int = 2,
) -> dict[str, Any]:
    """Double the batch until it does not fit, then binary-search the boundary; recommend the largest fit."""
    device = device or select_device(cfg)
    check_precision(cfg.training.precision, device)
    model = build_model(cfg.model.model_copy(update={"encoder_weights": None}), cfg.channels).to(device).train()
    if cfg.training.channels_last:
        model = model.to(memory_format=torch.channels_last)
    trials: dict[int, Trial] = {}

    def run(b: int) -> bool:
        trials[b] = try_batch(model, cfg, device, b, steps=steps, memory_cap_gib=memory_cap_gib)
        return trials[b].fits

    good, bad, b = 0, None, 1
    while b <= max_batch and run(b):
        good, b = b, b * 2
    if b <= max_batch:
        bad = b
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        if run(mid):
            good = mid
        else:
            bad = mid
    recommended = good - good % 8 if good >= 16 else good
    best_rate = max((t for t in trials.values() if t.fits), key=lambda t: t.images_per_s, default=None)
    return {
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "architecture": cfg.model.architecture,
        "backbone": cfg.model.backbone,
        "tile_size": cfg.data.tile_size,
        "channels": cfg.channels.count,
        "precision": cfg.training.precision,
        "memory_cap_gib": memory_cap_gib,
        "largest_fitting": good,
        "first_failing": bad,
        "recommended_batch_size": recommended,
        "fastest_batch_size": best_rate.batch_size if best_rate else None,
        "configured_batch_size": cfg.training.batch_size,
        "trials": [asdict(trials[k]) for k in sorted(trials)],
    }


def render_profile(report: dict[str, Any]) -> str:
    lines = [
        f"# Batch-size profile: {report['architecture']} / {report['backbone']}, {report['tile_size']} px, "
        f"{report['channels']} channels, {report['precision']} on {report['device']}",
        "",
        "| batch | fits | peak memory (GiB) | images/s | note |",
        "|---:|---|---:|---:|---|",
    ]
    for t in report["trials"]:
        lines.append(
            f"| {t['batch_size']} | {'yes' if t['fits'] else 'no'} | {t['peak_memory_gib']:.2f} | "
            f"{t['images_per_s']:.1f} | {t['error']} |"
        )
    lines += [
        "",
        f"Largest batch that fits: **{report['largest_fitting']}**"
        + (f" (first failing: {report['first_failing']})" if report["first_failing"] else " (search limit reached)"),
        f"Recommended training.batch_size: **{report['recommended_batch_size']}** "
        f"(configured: {report['configured_batch_size']}; fastest measured: {report['fastest_batch_size']})",
    ]
    if report["memory_cap_gib"] is not None:
        lines.append(f"CPU memory cap: {report['memory_cap_gib']} GiB (peak RSS growth during a step counts as use).")
    return "\n".join(lines) + "\n"
