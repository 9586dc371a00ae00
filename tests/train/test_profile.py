"""The batch-size profiler measures what training holds: EMA, the configured loss, clipping, a validation pass,
compile, and per rank of N devices with DDP's buckets."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from rtscore.config.pipeline import PipelineConfig
from rtscore.models import build_model
from rtscore.runtime import DeviceError
from rtscore.train import profile
from rtscore.train.distributed import resolve_devices
from rtscore.train.ema import EMA
from rtscore.train.profile import (
    GIB,
    BatchProfile,
    Trial,
    held_memory,
    profile_batch_sizes,
    render_profile,
    try_batch,
)
from tests.train.conftest import tiny_train_config

CPU = torch.device("cpu")


def _cfg(**sections: Any) -> PipelineConfig:
    cfg = tiny_train_config()
    return cfg.model_copy(update={k: getattr(cfg, k).model_copy(update=v) for k, v in sections.items()})


def _model(cfg: PipelineConfig) -> torch.nn.Module:
    return build_model(cfg.model, cfg.channels).to(memory_format=torch.channels_last)


def test_profile_batch_finds_the_boundary_under_a_cpu_cap() -> None:
    cfg = tiny_train_config()
    # steps=0: each trial its warm-up step and validation pass, no timed step (the boundary does not depend on them;
    # the timed steps: test_a_trial_takes_the_training_step_of_the_loop, test_compile_is_the_trained_view)
    report = profile_batch_sizes(cfg, memory_cap_gib=10.0, max_batch=3, steps=0)
    assert report.largest_fitting == 2 and report.first_failing is None
    assert [t.batch_size for t in report.trials] == [1, 2]
    assert report.configured_fits is None  # training.batch_size 4: beyond the search limit
    tight = profile_batch_sizes(cfg, memory_cap_gib=1e-6, max_batch=4, steps=0)
    assert tight.largest_fitting == 0 and tight.first_failing == 1 and tight.configured_fits is False
    md = render_profile(report)
    assert "| 2 | 2 | yes |" in md and "Recommended training.batch_size (per device): **2**" in md
    assert "EMA fp32 copy" in md and "loss focal" in md and "validation forward pass" in md


def test_the_ema_copy_raises_the_peak() -> None:
    """The EMA's fp32 copy (and its swap for validation) is held: the measured peak grows by about its size."""
    peaks, held = {}, {}
    for enabled in (True, False):
        cfg = _cfg(
            ema={"enabled": enabled}, model={"backbone": "resnet18"}
        )  # 11 M parameters: the EMA's 42 MiB stand out of the RSS noise
        report = profile_batch_sizes(cfg, max_batch=1, steps=0)  # the copy is held from before the warm-up step
        peaks[enabled] = report.trials[0].peak_memory_gib
        held[enabled] = report.held_gib.ema
    model = build_model(_cfg(model={"backbone": "resnet18"}).model, tiny_train_config().channels)
    state_bytes = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    assert held[True] == pytest.approx(state_bytes / GIB) and held[False] == 0.0
    assert peaks[True] - peaks[False] > 0.5 * held[True]


def test_a_trial_takes_the_training_step_of_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The configured loss with its soft targets, clipping at grad_clip_norm, the EMA update after each step, then
    a validation forward pass with the EMA swapped in, in eval and inference mode."""
    cfg = _cfg(loss={"name": "dice", "boundary_handling": "soft_labels"}, training={"grad_clip_norm": 0.25})
    real = profile.build_loss(cfg.loss)
    calls: list[tuple[bool, bool, bool]] = []

    class Spy(torch.nn.Module):
        def forward(self, logits: torch.Tensor, target: torch.Tensor, soft: Any = None) -> torch.Tensor:
            calls.append((soft is not None, torch.is_inference_mode_enabled(), model.training))
            return real(logits, target, soft)

    seen: dict[str, list[Any]] = {"built": [], "clips": [], "updates": [], "swaps": []}
    real_clip, real_update, real_swap = torch.nn.utils.clip_grad_norm_, EMA.update, EMA.swapped_in

    def build(loss_cfg: Any, counts: Any = None) -> torch.nn.Module:
        seen["built"].append(loss_cfg)
        return Spy()

    def clip(params: Any, max_norm: float, **kw: Any) -> torch.Tensor:
        seen["clips"].append(max_norm)
        return real_clip(params, max_norm)

    def update(self: EMA, m: torch.nn.Module) -> None:
        seen["updates"].append(m)
        real_update(self, m)

    def swapped_in(self: EMA, m: torch.nn.Module) -> Any:
        seen["swaps"].append(m)
        return real_swap(self, m)

    monkeypatch.setattr(profile, "build_loss", build)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    monkeypatch.setattr(EMA, "update", update)
    monkeypatch.setattr(EMA, "swapped_in", swapped_in)

    model = _model(cfg)
    trial = try_batch(model, cfg, CPU, 2, steps=2, memory_cap_gib=None)
    assert trial.fits and trial.train_peak_gib > 0 and trial.val_peak_gib > 0
    assert seen["built"] == [cfg.loss]
    # warm-up + 2 timed steps with soft targets in training mode; then validation: plain targets, eval, inference
    assert calls == [(True, False, True)] * 3 + [(False, True, False)]
    assert seen["clips"] == [0.25] * 3 and len(seen["updates"]) == 3 and seen["swaps"] == [model]
    assert model.training and all(p.grad is None for p in model.parameters())  # the trial leaves nothing held


def test_no_ema_no_swap() -> None:
    cfg = _cfg(ema={"enabled": False})
    model = _model(cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert try_batch(model, cfg, CPU, 1, steps=0, memory_cap_gib=None).fits
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # the warm-up step trained it


def test_compile_is_the_trained_view(monkeypatch: pytest.MonkeyPatch) -> None:
    class Compiled:
        """Stands in for torch.compile's view: counts the training forwards that go through it."""

        def __init__(self, m: torch.nn.Module) -> None:
            self.m, self.forwards = m, 0

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            self.forwards += 1
            return self.m(x)

    views: list[Compiled] = []

    def compile_(m: torch.nn.Module, **kw: Any) -> Compiled:
        views.append(Compiled(m))
        return views[-1]

    monkeypatch.setattr(torch, "compile", compile_)
    report = profile_batch_sizes(_cfg(training={"torch_compile": True}), max_batch=1, steps=1)
    assert report.torch_compile and "torch.compile" in report.included
    assert (
        len(views) == 1 and views[0].forwards == 3
    )  # the CPU warm-up trial's step, the trial's warm-up and timed step


def test_the_batch_profiled_is_per_device_and_the_effective_batch_is_n_times_it() -> None:
    cfg = tiny_train_config()  # training.batch_size 4, per device
    report = profile_batch_sizes(cfg, devices=2, max_batch=2, steps=0)  # no timed step: the batches are the point
    assert report.devices == 2 and report.configured_batch_size == 4
    assert [(t.batch_size, t.effective_batch) for t in report.trials] == [(1, 2), (2, 4)]
    assert report.largest_fitting == 2 and report.largest_fitting_effective == 4
    assert report.recommended_batch_size == 2 and report.configured_fits is None  # 4: beyond the search limit
    model = build_model(cfg.model, cfg.channels)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert report.held_gib.ddp_buckets == pytest.approx(trainable * 4 / GIB)
    assert held_memory(model, cfg, 1).ddp_buckets == 0
    md = render_profile(report)
    assert "**2** per device (effective batch 4 on 2 devices)" in md and "DDP gradient buckets" in md
    assert "configured: 4 (effective 8)" in md and "estimate" in md


def test_any_device_count_is_profiled() -> None:
    """3 devices with batch_size 4: each holds 4 (main refused 4 / 3), with the profile's validation pass at the
    batch of the trial, as each rank validates in batches of training.batch_size."""
    report = profile_batch_sizes(tiny_train_config(), devices=3, max_batch=1, steps=0)
    assert report.devices == 3 and [(t.batch_size, t.effective_batch) for t in report.trials] == [(1, 3)]


def test_devices_default_to_the_config() -> None:
    """The profile's N is training's (one rule: rtscore.train.distributed.resolve_devices), ``devices`` over
    ``training.devices``."""
    cfg = tiny_train_config()  # training.device cpu
    assert resolve_devices(cfg, 2) == 2
    assert resolve_devices(cfg) == 1  # training.devices defaults to 1
    assert resolve_devices(cfg, "auto") == 1  # training.device cpu: one rank whatever GPUs this machine has
    on_gpu = tiny_train_config(device="auto")
    assert resolve_devices(on_gpu, "auto") == (torch.cuda.device_count() or 1)
    with pytest.raises(DeviceError):
        resolve_devices(cfg, 0)


def test_cpu_ranks_share_the_cap() -> None:
    """On CPU, N ranks share the machine's memory: N x the per-rank peak counts against the cap."""
    cfg = tiny_train_config()
    model = _model(cfg)
    one = try_batch(model, cfg, CPU, 1, steps=0, memory_cap_gib=None)  # the warm-up step and the validation pass
    cap = one.peak_memory_gib * 1.5
    two = try_batch(model, cfg, CPU, 1, steps=0, memory_cap_gib=cap, devices=8)
    assert not two.fits and "8 ranks" in two.error


# A profile as the gpu check records it (2 devices, a GPU, a trial that did not fit) and the markdown it renders:
# the typed profile keeps both, byte for byte (issue 34; the batch per device and the effective batch since issue 35).
PROFILE_DOC: dict[str, Any] = {
    "device": "NVIDIA H100 80GB HBM3",
    "device_memory_gib": 79.19,
    "devices": 2,
    "architecture": "unet",
    "backbone": "mobilenet_v2",
    "tile_size": 64,
    "channels": 4,
    "precision": "fp32",
    "loss": "focal",
    "ema": True,
    "torch_compile": False,
    "memory_cap_gib": 3.0,
    "included": ["model (all parameters trainable)", "gradients"],
    "held_gib": {
        "parameters": 0.009093556553125381,
        "gradients": 0.009093556553125381,
        "optimizer": 0.018187113106250763,
        "ema": 0.009221930056810379,
        "ddp_buckets": 0.009093556553125381,
    },
    "trainable_parameters": 2441033,
    "largest_fitting": 5,
    "largest_fitting_effective": 10,
    "first_failing": 6,
    "recommended_batch_size": 5,
    "fastest_batch_size": 1,
    "configured_batch_size": 4,
    "configured_fits": True,
    "trials": [
        {
            "batch_size": 1,
            "effective_batch": 2,
            "fits": True,
            "peak_memory_gib": 0.625,
            "train_peak_gib": 0.3125,
            "val_peak_gib": 0.625,
            "images_per_s": 100.123456,
            "error": "",
        },
        {
            "batch_size": 5,
            "effective_batch": 10,
            "fits": True,
            "peak_memory_gib": 1.125,
            "train_peak_gib": 0.5625,
            "val_peak_gib": 1.125,
            "images_per_s": 20.123456,
            "error": "",
        },
        {
            "batch_size": 6,
            "effective_batch": 12,
            "fits": False,
            "peak_memory_gib": float("nan"),
            "train_peak_gib": 1.5,
            "val_peak_gib": float("nan"),
            "images_per_s": 0.0,
            "error": "out of memory",
        },
    ],
}

PROFILE_MD = (
    "# Batch-size profile: unet / mobilenet_v2, 64 px, 4 channels, fp32 on NVIDIA H100 80GB"
    " HBM3 (per rank of 2 devices)\n"
    "\n"
    "Each trial holds and runs: model (all parameters trainable); gradients.\n"
    "\n"
    "| batch/device | effective batch | fits | peak GiB (train / validation) | images/s/device"
    " | note |\n"
    "|---:|---:|---|---:|---:|---|\n"
    "| 1 | 2 | yes | 0.62 (0.31 / 0.62) | 100.1 |  |\n"
    "| 5 | 10 | yes | 1.12 (0.56 / 1.12) | 20.1 |  |\n"
    "| 6 | 12 | no | - (1.50 / -) | 0.0 | out of memory |\n"
    "\n"
    "Held whatever the batch, per rank: parameters 0.009 GiB, gradients 0.009, AdamW state"
    " 0.018, EMA 0.009, DDP gradient buckets 0.009 (estimate from the parameter count) GiB;"
    " the activations come on top.\n"
    "Device memory: 79.2 GiB.\n"
    "Largest batch that fits: **5** per device (effective batch 10 on 2 devices) (first failing batch per"
    " device: 6)\n"
    "Recommended training.batch_size (per device): **5** (effective 10); configured: 4 (effective 8),"
    " fits; fastest measured batch per device: 1.\n"
    "Memory cap: 3.0 GiB per device; on CPU for all 2 rank(s) together (a CPU rank's peak: its"
    " RSS growth during a trial plus the model's weights).\n"
    "Not counted: the CUDA context, NCCL buffers, DataLoader workers and pinned host memory.\n"
)


def test_the_typed_profile_keeps_its_json_and_its_markdown() -> None:
    profile = BatchProfile.model_validate(PROFILE_DOC)
    assert json.dumps(profile.model_dump(), indent=2) == json.dumps(PROFILE_DOC, indent=2)  # keys, order, values
    assert all(isinstance(t, Trial) for t in profile.trials)
    assert render_profile(profile) == PROFILE_MD
