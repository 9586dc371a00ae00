"""The GPU validation sequence of the batched-dataset notes, on this machine, as one report.

Generate a train store and a val store (the notes' 4k + 1k: ``configs/baseline.yaml`` generates exactly those),
their normalization stats, profile the batch size (:func:`rtscore.train.profile.profile_batch_sizes`: what
training holds, per rank of N devices), train one seed briefly at the configured batch (the recommended one when
the configured does not fit) with a validation pass every epoch, and report each step's figures. Every step runs
the pipeline's own stage functions into a run directory, so what it measures is what a run does. Small sizes
(``train_tiles``, ``val_tiles``, ``steps_per_epoch``) make it a CPU smoke test.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.overrides import apply_overrides
from rtscore.config.pipeline import PipelineConfig, parse_pipeline_config
from rtscore.data.store.format import read_store_attrs
from rtscore.errors import PipelineError
from rtscore.report import md_table
from rtscore.stages.generate import generate_dataset
from rtscore.stages.normalization import normalization_stats
from rtscore.stages.train import train_seed
from rtscore.storage import RunLayout, atomic_write_text
from rtscore.train.distributed import resolve_devices
from rtscore.train.profile import BatchProfile, profile_batch_sizes, render_profile

GIB = 2**30
log = logging.getLogger(__name__)


class GpuCheckError(PipelineError):
    """The check cannot run as asked (a config it cannot generate from, no batch that fits)."""


@dataclass(frozen=True)
class GpuCheckOptions:
    """The sizes of a check: ``None`` keeps the config's value. Named as `rts gpu-check` names its options
    (flows.cli.command_params.GpuCheckParams), which hands over each of these fields by its name."""

    train_tiles: int | None = None  # tiles of the train store (before rotation), the config's proportions
    val_tiles: int | None = None
    devices: int | str | None = None  # N ranks, each with the batch profiled (default training.devices)
    epochs: int = 2
    steps_per_epoch: int | None = 20  # None: the curriculum's whole epoch (the command always gives one)
    batch_size: int | None = None  # per device; None: the configured one if it fits, else the recommended
    max_batch: int = 512  # the profile's search limit (per device)
    profile_steps: int = 2
    max_memory_gb: float | None = None  # the profile's memory cap, GiB (CPU: all ranks together)
    workers: int | None = None  # generation worker processes (None: each generation config's)


class GpuInfo(BaseModel):
    """One visible GPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., description="The device's name.")
    memory_gib: float = Field(..., description="Its total memory, GiB (2 decimals).")
    capability: str = Field(..., description="Its CUDA compute capability, e.g. 9.0.")


class DeviceInfo(BaseModel):
    """What this machine offers training (the report's ``device``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    torch: str = Field(..., description="torch's version.")
    cuda: str | None = Field(..., description="The CUDA torch was built with (None: a CPU build).")
    cuda_available: bool = Field(..., description="Whether CUDA is usable here.")
    bf16_supported: bool = Field(..., description="Whether the GPU supports bf16.")
    gpus: list[GpuInfo] = Field(..., description="The visible GPUs.")
    cpu_cores: int | None = Field(..., description="os.cpu_count().")
    platform: str = Field(..., description="platform.platform().")


class CheckStep(BaseModel):
    """One step of the check: its name, its time and its figures (each step has its own, named: the figures are
    the model's extra fields, kept in the order given)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    step: str = Field(..., description="The step's name.")
    seconds: float = Field(..., description="Its wall time, rounded to 0.01 s.")

    @property
    def figures(self) -> dict[str, float]:
        """The step's figures by name (counts, rates, sizes: numbers)."""
        return dict(self.model_extra or {})


_METRIC = "val_realistic_pr_auc_geomean"


class EpochFigures(BaseModel):
    """One epoch of the short training, from the seed's metrics.jsonl (None: the row has no such figure)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch: int | None = None
    train_loss: float | None = None
    train_samples_per_s: float | None = None
    train_batches: float | None = None
    epoch_seconds: float | None = None
    val_loss: float | None = None
    val_realistic_pr_auc_geomean: float | None = None  # _METRIC


class TrainingFigures(BaseModel):
    """The short training's figures (the report's ``training``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_size: int = Field(..., description="The training.batch_size trained at (per device).")
    devices: int = Field(..., description="The ranks trained on.")
    effective_batch_size: int = Field(..., description="batch_size x devices: the tiles of one optimizer step.")
    seed: int = Field(..., description="training.seed.")
    seconds: float = Field(..., description="Wall time of the train-seed stage.")
    train_samples_per_s: float = Field(..., description="Images per second of the training steps.")
    val_seconds: float = Field(..., description="Seconds of a validation pass (an epoch's time less its steps').")
    peak_memory_gib: float | None = Field(..., description="Peak GPU memory of this process (None: no GPU).")
    epochs: list[EpochFigures] = Field(..., description="Each epoch's figures.")


class GpuCheckReport(BaseModel):
    """The check's report as it grows: written after each step (:meth:`to_json`), so a step that fails leaves the
    ones before; ``profile``, ``training`` and ``error`` appear once they are known."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = Field(False, description="Whether every step ran.")
    work_dir: str = Field(..., description="Where the stores and the training went.")
    options: dict[str, Any] = Field(..., description="The check's options (GpuCheckOptions), as given.")
    device: DeviceInfo = Field(..., description="This machine.")
    steps: list[CheckStep] = Field(default_factory=list, description="The steps run, in order.")
    profile: BatchProfile | None = Field(None, description="The batch-size profile (once run).")
    training: TrainingFigures | None = Field(None, description="The short training's figures (once run).")
    error: str | None = Field(None, description="The failing step's error.")

    def to_json(self) -> str:
        """The report file's text: the fields in order, those not known yet left out."""
        data = self.model_dump()
        for key in ("profile", "training", "error"):
            if data[key] is None:
                del data[key]
        return json.dumps(data, indent=2, default=str) + "\n"


def device_info() -> DeviceInfo:
    """What this machine offers training: torch, CUDA, the GPUs and their memory, the CPU cores."""
    import torch

    gpus = [
        GpuInfo(
            name=torch.cuda.get_device_name(i),
            memory_gib=round(torch.cuda.get_device_properties(i).total_memory / GIB, 2),
            capability=".".join(map(str, torch.cuda.get_device_capability(i))),
        )
        for i in range(torch.cuda.device_count())
    ]
    return DeviceInfo(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cuda_available=torch.cuda.is_available(),
        bf16_supported=bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
        gpus=gpus,
        cpu_cores=os.cpu_count(),
        platform=platform.platform(),
    )


def check_config(cfg: PipelineConfig, opts: GpuCheckOptions) -> PipelineConfig:
    """The config of the check's stores: the tile counts of ``opts`` in the config's proportions, no 0.5x context
    store (the check trains and validates at 1x), generation workers, MLflow off."""
    data = cfg.model_dump(mode="json")
    updates: dict[str, Any] = {
        "mlflow.enabled": False,
        "calibration.scale_candidates": [1.0],
        "deployment.scales": [1.0],
    }
    for split, tiles in (("train", opts.train_tiles), ("val", opts.val_tiles)):
        gen = data["data"]["generation"].get(split)
        if gen is None or gen.get("source", "synthetic") != "synthetic" or gen.get("synthetic") is None:
            raise GpuCheckError(
                f"data.generation.{split} of the config is not a synthetic generation config; the GPU check "
                "generates synthetic stores: give a config that does (e.g. configs/baseline.yaml)"
            )
        if tiles is not None:
            s = gen["synthetic"]
            for key, value in _scaled(s["n_positive"], s["n_negative"], s.get("n_full_nodata", 0), tiles).items():
                updates[f"data.generation.{split}.synthetic.{key}"] = value
        if opts.workers is not None:
            updates[f"data.generation.{split}.processing.num_workers"] = opts.workers
    return parse_pipeline_config(apply_overrides(data, updates, "the GPU check's settings"))


def _scaled(pos: int, neg: int, nodata: int, tiles: int) -> dict[str, int]:
    """``tiles`` split as positive / negative / full NoData in the proportions of the config (at least one
    positive and one negative)."""
    if tiles < 2:
        raise GpuCheckError(f"a store of the check needs at least 2 tiles (a positive and a negative); got {tiles}")
    total = pos + neg + nodata
    p = max(1, round(tiles * pos / total))
    f = min(round(tiles * nodata / total), tiles - p - 1)
    return {"n_positive": p, "n_negative": tiles - p - f, "n_full_nodata": f}


def training_config(cfg: PipelineConfig, opts: GpuCheckOptions, batch_size: int, devices: int) -> PipelineConfig:
    """The short training: ``opts.epochs`` epochs of ``opts.steps_per_epoch`` steps at ``batch_size``, validated
    every epoch, the backbone unfrozen from the second epoch on (both phases run), no early stop."""
    updates: dict[str, Any] = {
        "training.batch_size": batch_size,
        "training.max_epochs": opts.epochs,
        "training.steps_per_epoch": opts.steps_per_epoch,
        "training.val_frequency": 1,
        "training.early_stopping.start_epoch": opts.epochs + 1,
        "lr_schedule.freeze_backbone_epochs": 1 if opts.epochs > 1 else 0,
        "lr_schedule.warmup_epochs": 0,
        "training.devices": devices,
    }
    return parse_pipeline_config(apply_overrides(cfg.model_dump(mode="json"), updates, "the GPU check's training"))


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass
class _Report:
    """The report as it grows, written (atomically) after each step, so a step that fails leaves the ones before."""

    path: Path
    data: GpuCheckReport

    def step(self, name: str, seconds: float, **figures: Any) -> None:
        self.data.steps.append(CheckStep(step=name, seconds=round(seconds, 2), **figures))
        self.save()

    def save(self) -> None:
        atomic_write_text(self.path, self.data.to_json())


def run_gpu_check(
    cfg: PipelineConfig,
    work_dir: str | Path,
    report_path: str | Path,
    opts: GpuCheckOptions | None = None,
    *,
    echo: Callable[[str], None] = print,
) -> GpuCheckReport:
    """Generate, normalise, profile, train and validate in ``work_dir``; the report (also written to
    ``report_path`` as JSON after every step; ``ok`` false and ``error`` set when a step fails)."""

    opts = opts or GpuCheckOptions()
    work = Path(work_dir)
    cfg = check_config(cfg, opts)
    n = resolve_devices(cfg, opts.devices)
    report = _Report(
        Path(report_path),
        GpuCheckReport(ok=False, work_dir=str(work), options=asdict(opts), device=device_info(), steps=[]),
    )
    dev = report.data.device
    gpus = ", ".join(f"{g.name} ({g.memory_gib} GiB)" for g in dev.gpus) or "none"
    echo(f"GPU check: torch {dev.torch}, CUDA {dev.cuda}, GPUs: {gpus}, {dev.cpu_cores} CPU cores")
    report.save()
    try:
        _generate_stores(work, cfg, report, echo)
        t0 = time.perf_counter()
        normalization_stats(str(work), cfg)
        dt = time.perf_counter() - t0
        echo(f"[3/5] normalization stats of train: {dt:.1f} s")
        report.step("normalization stats", dt)

        t0 = time.perf_counter()
        profile = profile_batch_sizes(
            cfg, devices=n, memory_cap_gib=opts.max_memory_gb, max_batch=opts.max_batch, steps=opts.profile_steps
        )
        dt = time.perf_counter() - t0
        batch = _training_batch(profile, opts)
        echo(f"[4/5] batch-size profile ({dt:.1f} s):\n" + render_profile(profile))
        report.data.profile = profile
        report.step("profile", dt, training_batch_size=batch, devices=n)

        report.data.training = train = _train(work, cfg, opts, batch, n)
        echo(_training_line(train))
        report.step("train and validate", train.seconds, batch_size=batch)
    except Exception as err:
        report.data.error = f"{type(err).__name__}: {err}"
        report.save()
        raise
    report.data.ok = True
    report.save()
    echo(f"wrote {report.path}")
    return report.data


def _generate_stores(work: Path, cfg: PipelineConfig, report: _Report, echo: Callable[[str], None]) -> None:
    """Steps 1 and 2: the train store, then the val store, through the generate stage; each timed, with its tiles,
    positives, rate and size on disk echoed and recorded. Its own step: the one step the check runs per split, and
    the only one that measures a store rather than training."""
    for i, split in enumerate(("train", "val"), start=1):
        t0 = time.perf_counter()
        generate_dataset(str(work), cfg, split, progress=False)
        dt = time.perf_counter() - t0
        store = work / RunLayout.DATASET.at(split=split)
        counts = read_store_attrs(store).counts
        size = _du(store) / 2**20
        echo(
            f"[{i}/5] generate {split}: {counts.n_tiles} tiles ({counts.n_positive} positive) in {dt:.1f} s, "
            f"{counts.n_tiles / dt:.1f} tiles/s, {size:.1f} MiB on disk"
        )
        report.step(
            f"generate {split}",
            dt,
            tiles=counts.n_tiles,
            positive=counts.n_positive,
            tiles_per_s=counts.n_tiles / dt,
            store_mib=size,
        )


def _training_line(train: TrainingFigures) -> str:
    """What step 5 echoes of the short training: epochs, batch, time, images/s, a validation pass's time, the peak
    GPU memory (when there is a GPU) and the last epoch's deciding metric. Its own step: the one figure-to-words
    summary of the training (the report records the figures themselves)."""
    last = train.epochs[-1].val_realistic_pr_auc_geomean if train.epochs else None
    return (
        f"[5/5] training: {len(train.epochs)} epoch(s) at batch {train.batch_size}"
        + (f" per device (effective {train.effective_batch_size})" if train.devices > 1 else "")
        + f" in {train.seconds:.1f} s, "
        f"{train.train_samples_per_s:.1f} images/s training, validation {train.val_seconds:.1f} s per "
        f"pass"
        + (f"; peak GPU memory {train.peak_memory_gib:.2f} GiB" if train.peak_memory_gib else "")
        + f"; last {_METRIC} {_fmt(last)}"
    )


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def _training_batch(profile: BatchProfile, opts: GpuCheckOptions) -> int:
    """The batch per device of the short training: asked for, else the configured one if it fits, else the
    recommended one."""
    if opts.batch_size is not None:
        return opts.batch_size
    if profile.configured_fits is not False:
        return profile.configured_batch_size
    if profile.recommended_batch_size < 1:
        raise GpuCheckError(
            f"no batch fits on {profile.device}: even a batch of 1 per device ran out of memory (or above "
            "--max-memory-gb); use a smaller model or tile size"
        )
    log.warning(
        f"training.batch_size {profile.configured_batch_size} does not fit; the check trains at the recommended "
        f"{profile.recommended_batch_size}"
    )
    return profile.recommended_batch_size


def _train(work: Path, cfg: PipelineConfig, opts: GpuCheckOptions, batch: int, devices: int) -> TrainingFigures:
    """The short training through the train-seed stage; its figures from the seed's metrics.jsonl."""
    import torch

    tcfg = training_config(cfg, opts, batch, devices)
    seed = tcfg.training.seed
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    train_seed(str(work), tcfg, seed, fresh=True, progress=True)
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / GIB if cuda else None  # this process (rank 0 of a launch: none)
    rows = [json.loads(r) for r in (work / RunLayout.SEED_METRICS.at(seed=seed)).read_text().splitlines() if r]
    epochs = [EpochFigures(**{k: r.get(k) for k in EpochFigures.model_fields}) for r in rows]
    step = tcfg.training.effective_batch_size(devices)  # train_samples_per_s counts every rank's tiles
    train_s = [r["train_batches"] * step / r["train_samples_per_s"] for r in rows if r.get("train_samples_per_s")]
    val_s = [r["epoch_seconds"] - t for r, t in zip(rows, train_s, strict=False)]
    return TrainingFigures(
        batch_size=batch,
        devices=devices,
        effective_batch_size=step,
        seed=seed,
        seconds=seconds,
        train_samples_per_s=sum(r["train_batches"] * step for r in rows) / sum(train_s) if train_s else 0.0,
        val_seconds=sum(val_s) / len(val_s) if val_s else 0.0,
        peak_memory_gib=peak if peak else None,
        epochs=epochs,
    )


def render_gpu_check(report: GpuCheckReport) -> str:
    """The report's steps as a markdown table."""
    rows = [
        [
            s.step,
            f"{s.seconds:.1f}",
            ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in s.figures.items()),
        ]
        for s in report.steps
    ]
    return "\n".join(md_table(["step", "seconds", "figures"], rows, align=["", "right", ""])) + "\n"
