"""Batch-size profiler: the largest batch that fits on this device what training really holds, per device.

Each trial builds what a training run holds and takes the steps it takes, as :func:`rtscore.train.loop.train_one_epoch`
and :func:`rtscore.train.loop.run_epoch` do: the model (all of it trainable: the phase after the backbone is
unfrozen, the larger one), AdamW with the loop's two parameter groups, the EMA copy (``ema.enabled``), the
configured loss and its soft boundary targets, the GradScaler (fp16), gradient clipping at
``training.grad_clip_norm``, the EMA update after the step, ``torch.compile`` (``training.torch_compile``); then
one validation forward pass with the EMA weights swapped in (eval, inference mode, the per-tile histograms), the
gradients of the last step still held, as they are when an epoch ends. For ``devices`` N > 1 each trial also
holds what DDP adds per rank: its gradient buckets, one fp32 copy of the trainable parameters' gradients (an
estimate from the parameter count). The batch searched is ``training.batch_size`` itself, the batch of one device
(guide §9.1: per GPU); the effective batch of a step on N devices is N times it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.tiles import ClassPixelCounts
from rtscore.losses import build_loss, loss_soft_targets, uses_soft_targets
from rtscore.metrics import LogitBins, PixelConfusion, TileHistogramAccumulator
from rtscore.models import build_model
from rtscore.report import md_table
from rtscore.runtime import check_precision, forward_logits, select_device
from rtscore.train.distributed import resolve_devices
from rtscore.train.ema import EMA
from rtscore.train.loop import build_optimizer

GIB = 2**30


@dataclass
class Trial:
    """One batch size per device tried: peaks per device, the training steps' throughput per device."""

    batch_size: int  # per device (rank): a training.batch_size
    effective_batch: int  # devices x batch_size: the tiles of one optimizer step
    fits: bool
    peak_memory_gib: float  # the larger of the two below
    train_peak_gib: float = float("nan")  # training steps (forward, loss, backward, clip, step, EMA update)
    val_peak_gib: float = float("nan")  # the validation forward pass, EMA swapped in, gradients still held
    images_per_s: float = 0.0  # per device, training steps only
    error: str = ""


@dataclass(frozen=True)
class Held:
    """What training holds whatever the batch, per rank, in bytes (the activations come on top)."""

    parameters: int
    gradients: int
    optimizer: int  # AdamW: exp_avg and exp_avg_sq of every trainable parameter
    ema: int  # the EMA's fp32 copy of the state dict (0 when ema.enabled is off)
    ddp_buckets: int  # estimate: one fp32 copy of the trainable parameters' gradients (0 for one device)
    trainable_parameters: int = 0

    def gib(self) -> HeldGib:
        return HeldGib(**{k: v / GIB for k, v in asdict(self).items() if k != "trainable_parameters"})


class HeldGib(BaseModel):
    """:class:`Held` in GiB per rank, as the profile reports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    parameters: float = Field(..., description="The model's parameters.")
    gradients: float = Field(..., description="The trainable parameters' gradients.")
    optimizer: float = Field(..., description="AdamW's exp_avg and exp_avg_sq of every trainable parameter.")
    ema: float = Field(..., description="The EMA's fp32 copy of the state dict (0: ema.enabled off).")
    ddp_buckets: float = Field(..., description="DDP's gradient buckets, estimated (0: one device).")


class BatchProfile(BaseModel):
    """What :func:`profile_batch_sizes` found: the run's shape, what each trial holds, every trial and the batch it
    recommends. The gpu check records it in its JSON report (as these fields, in this order) and
    :func:`render_profile` renders it; a field, not a string key, is what a reader depends on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str = Field(..., description="The device profiled: cpu, or the GPU's name.")
    device_memory_gib: float | None = Field(..., description="The GPU's total memory (None on CPU).")
    devices: int = Field(..., ge=1, description="N ranks (devices), each holding the batch profiled.")
    architecture: str = Field(..., description="model.architecture.")
    backbone: str = Field(..., description="model.backbone.")
    tile_size: int = Field(..., description="data.tile_size.")
    channels: int = Field(..., description="The model's input channels.")
    precision: str = Field(..., description="training.precision.")
    loss: str = Field(..., description="loss.name.")
    ema: bool = Field(..., description="ema.enabled.")
    torch_compile: bool = Field(..., description="training.torch_compile.")
    memory_cap_gib: float | None = Field(..., description="The memory cap a trial must stay under (None: none).")
    included: list[str] = Field(..., description="What each trial holds and runs, in words.")
    held_gib: HeldGib = Field(..., description="What a rank holds whatever the batch.")
    trainable_parameters: int = Field(..., description="Trainable parameters of the model.")
    largest_fitting: int = Field(..., description="The largest batch per device that fits (0: none).")
    largest_fitting_effective: int = Field(..., description="devices x largest_fitting: its effective batch.")
    first_failing: int | None = Field(
        ..., description="The smallest batch per device that does not fit (None: none up to the search limit)."
    )
    recommended_batch_size: int = Field(
        ...,
        description="The recommended training.batch_size (per device): largest_fitting, rounded down to a "
        "multiple of 8 from 16 on.",
    )
    fastest_batch_size: int | None = Field(..., description="The batch per device with the most images/s.")
    configured_batch_size: int = Field(..., description="training.batch_size (per device).")
    configured_fits: bool | None = Field(..., description="Whether it fits (None: beyond the search limit).")
    trials: list[Trial] = Field(..., description="Every batch per device tried, smallest first.")


def held_memory(model: torch.nn.Module, cfg: PipelineConfig, devices: int) -> Held:
    """The bytes a rank holds whatever the batch, from the model's parameters and state dict."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    p_bytes = sum(p.numel() * p.element_size() for p in params)
    g_bytes = sum(p.numel() * p.element_size() for p in trainable)
    n_trainable = sum(p.numel() for p in trainable)
    ema = sum(v.numel() * v.element_size() for v in model.state_dict().values()) if cfg.ema.enabled else 0
    return Held(
        parameters=p_bytes,
        gradients=g_bytes,
        optimizer=2 * n_trainable * 4,
        ema=ema,
        ddp_buckets=n_trainable * 4 if devices > 1 else 0,
        trainable_parameters=n_trainable,
    )


def included(cfg: PipelineConfig, devices: int) -> list[str]:
    """What each trial holds and runs, in words (the report lists it)."""

    parts = ["model (all parameters trainable)", "gradients", "AdamW state (decoder and encoder groups)"]
    parts.append("EMA fp32 copy and its update after each step" if cfg.ema.enabled else "no EMA (ema.enabled off)")
    loss = f"loss {cfg.loss.name}" + (" with soft boundary targets" if uses_soft_targets(cfg.loss) else "")
    parts += [loss, f"gradient clipping at {cfg.training.grad_clip_norm}"]
    if cfg.training.precision == "fp16":
        parts.append("GradScaler (fp16)")
    if cfg.training.torch_compile:
        parts.append("torch.compile")
    parts.append(
        "one validation forward pass at the batch (the validation loader's training.batch_size, per device)"
        + (" with the EMA weights swapped in" if cfg.ema.enabled else "")
        + ", the last step's gradients still held"
    )
    if devices > 1:
        parts.append(f"DDP gradient buckets for {devices} devices (estimate: one fp32 copy of the gradients)")
    return parts


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

    def mark(self) -> int:
        """The peak growth so far in bytes; the peak starts again from the current RSS."""
        now = self.proc.memory_info().rss
        peak, self.peak = max(self.peak, now), now
        return peak - self.base


def _release_freed_memory(device: torch.device) -> None:
    """Give freed memory back before a trial, so its peak starts from what is really held."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif sys.platform.startswith("linux"):
        # glibc keeps freed heap pages resident; trimming makes each CPU trial start from the same base
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    msg = str(err).lower()
    return "out of memory" in msg or "can't allocate memory" in msg or "cannot allocate memory" in msg


def _batch(cfg: PipelineConfig, n: int, device: torch.device) -> dict[str, Any]:
    """A batch as the loaders give it: normalised images, {0, 1, 255} int64 labels (1 % RTS, a NoData band)."""
    size, c = cfg.data.tile_size, cfg.channels.count
    g = torch.Generator().manual_seed(n)
    label = (torch.rand(n, size, size, generator=g) > 0.99).long()
    label[:, :, : max(1, size // 32)] = 255
    return {
        "image": torch.randn(n, c, size, size, generator=g).to(device),
        "label": label.to(device),
        "tile_id": [f"profile-{i}" for i in range(n)],
    }


@dataclass
class _TrainingState:
    """What one trial builds on top of the model, dropped when the trial ends."""

    optimizer: torch.optim.Optimizer
    ema: Any = None
    scaler: Any = None
    buckets: torch.Tensor | None = None
    tensors: list[Any] = field(default_factory=list)


def _training_state(model: torch.nn.Module, cfg: PipelineConfig, device: torch.device, held: Held) -> _TrainingState:
    """The optimizer, EMA, scaler and DDP buckets as :func:`rtscore.train.loop.build_setup` builds them."""

    optimizer = build_optimizer(model, cfg, cfg.lr_schedule.base_lr)
    return _TrainingState(
        optimizer=optimizer,
        ema=EMA(model, cfg.ema.decay, cfg.ema.warmup) if cfg.ema.enabled else None,
        scaler=torch.amp.GradScaler("cuda") if cfg.training.precision == "fp16" else None,
        # zeros, not empty: the pages are touched, so a CPU trial's RSS holds them as DDP's buckets are held
        buckets=torch.zeros(held.ddp_buckets // 4, device=device) if held.ddp_buckets else None,
    )


def _train_step(
    model: torch.nn.Module,
    train_model: Any,
    st: _TrainingState,
    loss_fn: torch.nn.Module,
    batch: dict[str, Any],
    cfg: PipelineConfig,
) -> None:
    """One step of :func:`rtscore.train.loop.train_one_epoch`, as it takes it."""

    x, y = batch["image"], batch["label"]
    logits = forward_logits(train_model, x, precision=cfg.training.precision, channels_last=cfg.training.channels_last)
    loss = loss_fn(logits, y, loss_soft_targets(cfg.loss, y))
    st.optimizer.zero_grad(set_to_none=True)
    if st.scaler is not None:
        st.scaler.scale(loss).backward()
        st.scaler.unscale_(st.optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.grad_clip_norm)
        st.scaler.step(st.optimizer)
        st.scaler.update()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.grad_clip_norm)
        st.optimizer.step()
    if st.ema is not None:
        st.ema.update(model)
    PixelConfusion().update(logits.detach(), y)


def _val_forward(
    model: torch.nn.Module, st: _TrainingState, loss_fn: torch.nn.Module, batch: dict[str, Any], cfg: PipelineConfig
) -> None:
    """One batch of :func:`rtscore.train.validate.collect` with the EMA swapped in, as :func:`run_epoch` runs it
    (the object counts, host-side, are left out)."""

    acc = TileHistogramAccumulator(LogitBins(core_bins=cfg.metrics.pr_bins))
    with st.ema.swapped_in(model) if st.ema is not None else nullcontext(), torch.inference_mode():
        model.eval()
        try:
            logits = forward_logits(
                model, batch["image"], precision=cfg.training.precision, channels_last=cfg.training.channels_last
            )
            float(loss_fn(logits, batch["label"]))
            acc.add_batch(logits, batch["label"], batch["tile_id"])
        finally:
            model.train()


def try_batch(
    model: torch.nn.Module,
    cfg: PipelineConfig,
    device: torch.device,
    batch: int,
    *,
    steps: int,
    memory_cap_gib: float | None,
    devices: int = 1,
    train_model: Any = None,
    loss_fn: torch.nn.Module | None = None,
    val_batch: int | None = None,
) -> Trial:
    """One warm-up and ``steps`` timed training steps at ``batch`` per device, then one validation forward pass
    (at ``val_batch``, default ``batch``: each rank validates in batches of training.batch_size); OOM (or, on CPU,
    ``devices`` ranks' peaks above ``memory_cap_gib``) means it does not fit."""
    train_model = model if train_model is None else train_model
    loss_fn = loss_fn if loss_fn is not None else build_loss(cfg.loss, _stand_in_counts(cfg))
    val_n = val_batch if val_batch is not None else batch
    held = held_memory(model, cfg, devices)
    model.train()
    _release_freed_memory(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    sampler = _RssSampler() if device.type == "cpu" else None
    st: _TrainingState | None = None
    train_peak = val_peak = float("nan")
    try:
        if sampler is not None:
            sampler.__enter__()
        st = _training_state(model, cfg, device, held)
        data = _batch(cfg, batch, device)
        _train_step(model, train_model, st, loss_fn, data, cfg)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            _train_step(model, train_model, st, loss_fn, data, cfg)
        _sync(device)
        rate = batch * steps / max(time.perf_counter() - t0, 1e-9)
        train_peak = _peak(device, sampler, held)
        del data
        _val_forward(model, st, loss_fn, _batch(cfg, val_n, device), cfg)
        _sync(device)
        val_peak = _peak(device, sampler, held)
    except (RuntimeError, MemoryError) as err:
        if not _is_oom(err):
            raise
        return Trial(batch, batch * devices, False, float("nan"), train_peak, val_peak, 0.0, "out of memory")
    finally:
        if sampler is not None:
            sampler.__exit__()
        model.zero_grad(set_to_none=True)
        del st
        _release_freed_memory(device)
    ran = Trial(batch, batch * devices, True, max(train_peak, val_peak), train_peak, val_peak, rate)
    return _under_cap(ran, device, devices, memory_cap_gib)


def _under_cap(trial: Trial, device: torch.device, devices: int, memory_cap_gib: float | None) -> Trial:
    """A trial that ran without running out of memory, judged against ``memory_cap_gib``: over it, it does not fit
    either. Its own step because it is the rule of what fitting means, apart from measuring: on CPU the ``devices``
    ranks share this machine's memory, so their peaks count together; a GPU rank has its own device."""
    peak = trial.peak_memory_gib
    shared = device.type == "cpu" and devices > 1  # CPU ranks share this machine's memory
    if memory_cap_gib is not None and (peak * devices if shared else peak) > memory_cap_gib:
        ranks = f"{devices} ranks x {peak:.2f}" if shared else f"{peak:.2f}"
        return replace(trial, fits=False, error=f"peak {ranks} GiB above the cap {memory_cap_gib:.2f} GiB")
    return trial


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak(device: torch.device, sampler: _RssSampler | None, held: Held) -> float:
    """The peak since the last call, GiB per rank; the next call measures from here. On CPU the RSS growth plus
    the model's weights and buffers, which the process held before the trial."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / GIB
        torch.cuda.reset_peak_memory_stats(device)
        return peak
    assert sampler is not None  # a CPU trial runs under the RSS sampler
    return (sampler.mark() + held.parameters) / GIB


def _stand_in_counts(cfg: PipelineConfig) -> Any:
    """Class-balanced CE weighs by the train split's pixel counts; the profile's batches are 1 % RTS."""
    if cfg.loss.name != "class_balanced_ce":
        return None

    return ClassPixelCounts(background=99, rts=1)


@dataclass
class _Search:
    """What the search found: what a rank holds whatever the batch, every trial by batch per device, the boundary."""

    held: Held
    trials: dict[int, Trial]
    largest_fitting: int  # 0: none fits
    first_failing: int | None  # None: every batch up to the search limit fits


def _search(
    cfg: PipelineConfig, device: torch.device, n: int, memory_cap_gib: float | None, max_batch: int, steps: int
) -> _Search:
    """Build what every trial shares, as a training run holds it (the model, without downloading pretrained weights:
    their values change nothing of what it holds; channels_last; the compiled view the steps go through; the
    configured loss), then run the trials :func:`_boundary` asks for. Its own step: the measuring, apart from the
    report and the recommendation drawn from it."""
    model = build_model(cfg.model.model_copy(update={"encoder_weights": None}), cfg.channels).to(device).train()
    if cfg.training.channels_last:
        model = model.to(memory_format=torch.channels_last)
    train_model: Any = torch.compile(model) if cfg.training.torch_compile else model
    loss_fn = build_loss(cfg.loss, _stand_in_counts(cfg))
    held = held_memory(model, cfg, n)
    trials: dict[int, Trial] = {}

    def run(b: int) -> bool:
        trials[b] = try_batch(
            model,
            cfg,
            device,
            b,
            steps=steps,
            memory_cap_gib=memory_cap_gib,
            devices=n,
            train_model=train_model,
            loss_fn=loss_fn,
        )
        return trials[b].fits

    if device.type == "cpu":  # a first step's one-off allocations (thread pools, kernels) stay out of the trials
        try_batch(model, cfg, device, 1, steps=0, memory_cap_gib=None, train_model=train_model, loss_fn=loss_fn)
    good, bad = _boundary(run, max_batch)
    return _Search(held, trials, good, bad)


def _boundary(fits: Callable[[int], bool], max_batch: int) -> tuple[int, int | None]:
    """(the largest batch that fits, the smallest that does not; None: none up to ``max_batch``): double the batch
    from 1 until it does not fit or passes ``max_batch``, then bisect between the last that fitted and the first that
    did not. Its own step: the order of the trials (each costs a training run's memory and steps) is this rule's."""
    good, bad, b = 0, None, 1
    while b <= max_batch and fits(b):
        good, b = b, b * 2
    if b <= max_batch:
        bad = b
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good, bad


def profile_batch_sizes(
    cfg: PipelineConfig,
    *,
    device: torch.device | None = None,
    devices: int | str | None = None,
    memory_cap_gib: float | None = None,
    max_batch: int = 512,
    steps: int = 2,
) -> BatchProfile:
    """Double the batch per device until it does not fit, then binary-search the boundary; recommend the largest
    ``training.batch_size`` (per device) that fits. ``devices``: N ranks (default ``training.devices``), each
    holding that batch and, with N > 1, DDP's buckets; a step's effective batch is N times it."""
    device = device or select_device(cfg)
    check_precision(cfg.training.precision, device)
    n = resolve_devices(cfg, devices, this_machine=False)  # a profile may be for a larger machine's ranks
    configured = cfg.training.batch_size
    found = _search(cfg, device, n, memory_cap_gib, max_batch, steps)
    good, bad = found.largest_fitting, found.first_failing
    recommended = good - good % 8 if good >= 16 else good
    best_rate = max((t for t in found.trials.values() if t.fits), key=lambda t: t.images_per_s, default=None)
    configured_fits = configured <= good if configured <= good or bad is not None else None  # None: not tried
    return BatchProfile(
        device=str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        device_memory_gib=torch.cuda.get_device_properties(device).total_memory / GIB
        if device.type == "cuda"
        else None,
        devices=n,
        architecture=cfg.model.architecture,
        backbone=cfg.model.backbone,
        tile_size=cfg.data.tile_size,
        channels=cfg.channels.count,
        precision=cfg.training.precision,
        loss=cfg.loss.name,
        ema=cfg.ema.enabled,
        torch_compile=cfg.training.torch_compile,
        memory_cap_gib=memory_cap_gib,
        included=included(cfg, n),
        held_gib=found.held.gib(),
        trainable_parameters=found.held.trainable_parameters,
        largest_fitting=good,
        largest_fitting_effective=good * n,
        first_failing=bad,
        recommended_batch_size=recommended,
        fastest_batch_size=best_rate.batch_size if best_rate else None,
        configured_batch_size=configured,
        configured_fits=configured_fits,
        trials=[found.trials[k] for k in sorted(found.trials)],
    )


def _gib(v: float) -> str:
    return "-" if v != v else f"{v:.2f}"  # NaN: not measured


def render_profile(report: BatchProfile) -> str:
    n = report.devices
    per = f"per rank of {n} devices" if n > 1 else "one device"
    lines = [
        f"# Batch-size profile: {report.architecture} / {report.backbone}, {report.tile_size} px, "
        f"{report.channels} channels, {report.precision} on {report.device} ({per})",
        "",
        "Each trial holds and runs: " + "; ".join(report.included) + ".",
        "",
        *md_table(
            ["batch/device", "effective batch", "fits", "peak GiB (train / validation)", "images/s/device", "note"],
            [
                [
                    t.batch_size,
                    t.effective_batch,
                    "yes" if t.fits else "no",
                    f"{_gib(t.peak_memory_gib)} ({_gib(t.train_peak_gib)} / {_gib(t.val_peak_gib)})",
                    f"{t.images_per_s:.1f}",
                    t.error,
                ]
                for t in report.trials
            ],
            align=["right", "right", "", "right", "right", ""],
        ),
    ]
    h = report.held_gib
    held = (
        f"Held whatever the batch, per rank: parameters {h.parameters:.3f} GiB, gradients {h.gradients:.3f}, "
        f"AdamW state {h.optimizer:.3f}, EMA {h.ema:.3f}"
    )
    if n > 1:
        held += f", DDP gradient buckets {h.ddp_buckets:.3f} (estimate from the parameter count)"
    lines += ["", held + " GiB; the activations come on top."]
    if report.device_memory_gib:
        lines.append(f"Device memory: {report.device_memory_gib:.1f} GiB.")
    limit = (
        f" (first failing batch per device: {report.first_failing})"
        if report.first_failing
        else " (search limit reached)"
    )
    lines += [
        f"Largest batch that fits: **{report.largest_fitting}** per device"
        + (f" (effective batch {report.largest_fitting_effective} on {n} devices)" if n > 1 else "")
        + limit,
        f"Recommended training.batch_size (per device): **{report.recommended_batch_size}**"
        + (f" (effective {report.recommended_batch_size * n})" if n > 1 else "")
        + f"; configured: {report.configured_batch_size}"
        + (f" (effective {report.configured_batch_size * n})" if n > 1 else "")
        + {True: ", fits", False: ", does NOT fit", None: ", beyond the search limit"}[report.configured_fits]
        + f"; fastest measured batch per device: {report.fastest_batch_size}.",
    ]
    if report.memory_cap_gib is not None:
        lines.append(
            f"Memory cap: {report.memory_cap_gib} GiB per device; on CPU for all {n} rank(s) together (a CPU rank's "
            "peak: its RSS growth during a trial plus the model's weights)."
        )
    lines.append("Not counted: the CUDA context, NCCL buffers, DataLoader workers and pinned host memory.")
    return "\n".join(lines) + "\n"
