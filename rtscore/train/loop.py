"""The training loop of one seed (guide §9.1, §10.2): readable top to bottom, resumable exactly.

:func:`train_seed` comes first; the steps it takes follow in the order it takes them.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

import torch

from rtscore.config.base import config_hash
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.errors import DataValidationError
from rtscore.data.loading.dataset import build_dataset, build_train_dataset
from rtscore.data.loading.loader import train_loader, val_loader
from rtscore.data.loading.sources import class_pixel_counts
from rtscore.data.normalization.stats import load_normalization_stats
from rtscore.identity import SET_ASIDE_DIR, digest, set_aside
from rtscore.identity import resume_key as identity_resume_key
from rtscore.losses import ClassBalancedBCELoss, build_loss, global_batch, loss_soft_targets
from rtscore.metrics import ConfusionCounts, PixelConfusion
from rtscore.models import build_model, decoder_parameters, encoder_parameters, unused_parameters
from rtscore.runtime import check_precision, forward_logits, select_device
from rtscore.storage import RunLayout, layout
from rtscore.tracking import Tracker, flatten
from rtscore.train import checkpoint as ckpt
from rtscore.train import distributed as ddp
from rtscore.train.determinism import (
    check_hash_seed,
    rank_rng_state,
    rng_checkpoint,
    rng_state,
    seed_everything,
    set_rng_state,
)
from rtscore.train.distributed import SINGLE, Ranks
from rtscore.train.early_stopping import Decision, EarlyStopping
from rtscore.train.ema import EMA
from rtscore.train.errors import TrainingError
from rtscore.train.report import write_seed_outputs
from rtscore.train.result import METRIC, SeedResult
from rtscore.train.schedule import EpochLR, lr_at
from rtscore.train.stochastic import make_rank_consistent
from rtscore.train.validate import collect, merge_pools, metric_names, summarize

# Settings that may change between a run and its resume (guide lesson: early stopping comes from the config).
# training.devices among them: the resume hash keys the effective batch instead (resume_hash), so a seed resumes on
# another device count only where batch_size x ranks is the same.
_RESUME_FREE = {
    "training": {"early_stopping", "checkpoint", "device", "devices", "val_frequency"},
    "data": {"loader"},
    "mlflow": None,
    "deployment": None,
    "metrics": {"bootstrap_samples"},
    "calibration": None,
    "evaluation": None,
    "package": None,
}


class CheckpointHooks(Protocol):
    """What the stage around the loop does with a seed's progress (rtscore.train.records records it in
    the run root, so a pre-empted seed resumes on another worker)."""

    def started(self, first_epoch: int) -> None:
        """Training starts at ``first_epoch`` (1, or the epoch after the resumed checkpoint)."""

    def checkpoint_saved(self, epoch: int) -> None:
        """The resume checkpoint of ``epoch`` and the best weights and metrics so far are on local disk."""

    def set_aside(self) -> None:
        """The seed's earlier checkpoints were of another identity and were set aside: forget their records."""


def train_seed(
    cfg: PipelineConfig,
    run_dir: str | Path,
    seed: int,
    *,
    fresh: bool = False,
    parent_run_id: str | None = None,
    progress: bool = False,
    on_epoch_end: Callable[[int, dict[str, float]], None] | None = None,
    hooks: CheckpointHooks | None = None,
    resume_key: str | None = None,
    ranks: Ranks = SINGLE,
) -> SeedResult:
    """Train one seed into ``<run_dir>/seeds/seed_<seed>/``; re-running resumes from resume_latest.pth (the newest
    readable resume checkpoint when it is truncated or corrupt). ``hooks`` hears of the start and of every
    resume checkpoint written.

    ``ranks``: this process's place among the ranks of a seed trained on several devices (started by
    :mod:`rtscore.train.launch`, which gives the hooks and callbacks to rank 0 alone): every rank trains its slice
    of each global batch and validates its shard of the pool; rank 0 alone writes files, MLflow and logs.

    A checkpoint is a resume point only for the identity that wrote it: ``resume_key`` (the stage's code,
    config and inputs, :func:`rtscore.stages.spec.resume_key`; by default the settings of :func:`resume_hash`
    and this module's code closure). One of another identity is set aside with the seed's best weights and
    metrics (``set_aside/`` in the seed directory, named in one warning) and the seed trains from scratch."""
    run = Path(run_dir)
    key = resume_key or default_resume_key(cfg, ranks.world_size)
    s = build_setup(cfg, run, seed, ranks)
    stopper = EarlyStopping(cfg.training.early_stopping)
    if ranks.main:
        s.seed_dir.mkdir(parents=True, exist_ok=True)
        start, state = resume_point(s, seed, stopper, key, fresh=fresh, hooks=hooks)
    ddp.barrier()  # rank 0 has set aside or deleted what is not a resume point: the others read what it kept
    if not ranks.main:
        start, state = resume_point(s, seed, stopper, key, fresh=False, hooks=None, writer=False)
    if hooks is not None:
        hooks.started(start)
    tracker = Tracker(cfg.mlflow if ranks.main else cfg.mlflow.model_copy(update={"enabled": False}), run)
    run_id = start_tracking(tracker, s, seed, state, parent_run_id)
    last = cfg.training.max_epochs if not state.stopped_early else start - 1  # an early-stopped run stays done
    loop = EpochLoop(s, seed, stopper, state, tracker, run_id, key, progress, on_epoch_end, hooks)
    try:
        epoch = loop.run(start, last)
    except BaseException as err:
        tracker.end_run(run_id, status="KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
        raise
    return finish_seed(s, seed, state, tracker, run_id, epoch=epoch, start=start)


def resume_point(
    s: Setup,
    seed: int,
    stopper: EarlyStopping,
    key: str,
    *,
    fresh: bool,
    hooks: CheckpointHooks | None,
    writer: bool = True,
) -> tuple[int, RunState]:
    """The first epoch to train and the run state to carry: epoch 1 and a new state (``fresh``: the seed's
    checkpoints, best weights and metrics deleted; or a checkpoint of another identity set aside), else the
    epoch after the newest readable resume checkpoint, restored into ``s`` and ``stopper``. Only a ``writer``
    (rank 0) changes files; the other ranks read the checkpoint it kept."""
    metrics_path = s.seed_dir / layout.METRICS
    if fresh:
        for p in [*s.seed_dir.glob(layout.RESUME_GLOB), s.seed_dir / layout.BEST, metrics_path]:
            p.unlink(missing_ok=True)
    elif (found := ckpt.load_resume(s.seed_dir)) is not None:  # newest readable: latest, else an older epoch
        saved, path = found
        if saved.get("resume_hash") != key:
            if writer:
                set_aside_seed(s.seed_dir, seed, path, saved, key)
            if hooks is not None:
                hooks.set_aside()
        else:
            start = restore(s, saved, stopper, path) + 1
            if writer:
                _truncate_jsonl(metrics_path, start - 1)
            return start, RunState.from_checkpoint(saved.get("extra", {}))
    return 1, RunState()


def start_tracking(tracker: Tracker, s: Setup, seed: int, state: RunState, parent_run_id: str | None) -> str | None:
    """The seed's MLflow run (the resumed one when this tracking store has it, else the open run of this seed under
    the same parent, else a new one, recorded in ``state``), with the config, the seed, the hash seed, the ranks and
    the effective batch as parameters."""
    cfg = s.cfg
    known = state.mlflow_run_id if tracker.has_run(state.mlflow_run_id) else None  # another worker's store: new run
    if known is None and parent_run_id:  # an attempt killed before its first checkpoint left its run open: continue it
        known = tracker.find_run(f"seed_{seed}", parent_run_id, running_only=True)
    run_id = known or tracker.start_run(
        f"seed_{seed}", parent_run_id, {"rts.seed": str(seed), "rts.config_hash": config_hash(cfg)}
    )
    state.mlflow_run_id = run_id
    hash_seed = check_hash_seed(cfg.training.deterministic)
    params = {**flatten("", cfg.model_dump(mode="json", exclude={"data"})), "seed": seed, **batch_params(cfg, s.ranks)}
    tracker.log_params(run_id, {**params, "python_hash_seed": hash_seed or "random"})
    if isinstance(s.loss_fn, ClassBalancedBCELoss):
        tracker.log_params(run_id, {"loss.class_balanced_pos_weight": s.loss_fn.pos_weight})
    return run_id


@dataclass
class EpochLoop:
    """The epochs of one seed: each trained and validated, its best weights kept, its metrics row written and
    tracked, its resume checkpoint saved on the configured epochs; until the last epoch or early stopping."""

    s: Setup
    seed: int
    stopper: EarlyStopping
    state: RunState
    tracker: Tracker
    run_id: str | None
    key: str
    progress: bool = False
    on_epoch_end: Callable[[int, dict[str, float]], None] | None = None
    hooks: CheckpointHooks | None = None

    def run(self, start: int, last: int) -> int:
        """Epochs ``start`` to ``last``; returns the last epoch run (``start - 1`` when none)."""
        epoch = start - 1
        for epoch in range(start, last + 1):
            if self.epoch(epoch, last):
                break
        return epoch

    def epoch(self, epoch: int, last: int) -> bool:
        """One epoch and what follows it; True when early stopping ends the run."""
        s, cfg, state = self.s, self.s.cfg, self.state
        t0 = time.perf_counter()
        row, decision = run_epoch(s, epoch, self.stopper, self.seed)
        main = s.ranks.main  # every rank takes the same decision (from the same gathered metrics); rank 0 writes
        if decision is not None and decision.is_best:  # best smoothed metric so far: keep these weights
            if main:
                ckpt.save_best(s.seed_dir, s.ema.state_dict() if cfg.ema.enabled else s.model.state_dict())
            state.best_epoch, state.best_metric = epoch, decision.smoothed
        row["epoch_seconds"] = time.perf_counter() - t0
        stop = decision is not None and decision.stop
        state.stopped_early = stop
        if main:
            _append_jsonl(s.seed_dir / layout.METRICS, row)
        self.tracker.log_metrics(self.run_id, row, step=epoch)
        if epoch % cfg.training.checkpoint.save_every_n_epochs == 0 or stop or epoch == last:
            resume = resume_state(s, epoch, self.stopper, state, self.key)
            if main:
                ckpt.save_resume(s.seed_dir, resume, epoch, cfg.training.checkpoint.keep_last_n)
            if self.hooks is not None:
                self.hooks.checkpoint_saved(epoch)
        if self.progress:
            logging.getLogger(__name__).info(progress_line(self.seed, epoch, cfg.training.max_epochs, row))
        if self.on_epoch_end is not None:
            self.on_epoch_end(epoch, row)
        return stop


def progress_line(seed: int, epoch: int, max_epochs: int, row: Mapping[str, Any]) -> str:
    """The log line of one epoch: its train loss, train IoU and validation metric, rounded."""
    shown = {k: round(v, 4) for k, v in row.items() if k in ("train_loss", "train_iou", METRIC)}
    return f"seed {seed} epoch {epoch}/{max_epochs} {shown}"


def finish_seed(
    s: Setup, seed: int, state: RunState, tracker: Tracker, run_id: str | None, *, epoch: int, start: int
) -> SeedResult:
    """The seed's outputs (summary, curves; rank 0), logged to its MLflow run, which ends; the seed's result."""
    if s.ranks.main:
        write_seed_outputs(
            s.seed_dir,
            s.cfg,
            seed,
            best_epoch=state.best_epoch,
            best_metric=state.best_metric,
            mlflow_run_id=run_id,
            stopped_early=state.stopped_early,
        )
        for name in (layout.METRICS, layout.CURVES, layout.RUN_SUMMARY_MD, layout.RUN_SUMMARY):
            tracker.log_artifact(run_id, s.seed_dir / name)
    tracker.log_metrics(run_id, {"best_" + METRIC: state.best_metric_or_nan}, step=epoch)
    tracker.end_run(run_id)
    return SeedResult(
        seed=seed,
        seed_dir=str(s.seed_dir),
        best_epoch=state.best_epoch,
        best_metric=state.best_metric_or_nan,
        epochs_run=max(epoch, start - 1),
        stopped_early=state.stopped_early,
        mlflow_run_id=run_id,
    )


@dataclass
class RunState:
    """What a seed's run carries from epoch to epoch and across resumes (``extra`` of a resume checkpoint)."""

    best_epoch: int = 0
    mlflow_run_id: str | None = None
    stopped_early: bool = False
    best_metric: float | None = None  # the best smoothed METRIC; None until a validation has run

    @property
    def best_metric_or_nan(self) -> float:
        return math.nan if self.best_metric is None else float(self.best_metric)

    @classmethod
    def from_checkpoint(cls, extra: Mapping[str, Any]) -> RunState:
        """The state a resume checkpoint saved (a plain dict of these fields, as every version wrote it)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in extra.items() if k in known})

    def to_checkpoint(self) -> dict[str, Any]:
        """The plain dict a resume checkpoint holds (weights_only loads need plain types); ``best_metric`` only
        once there is one, as earlier versions wrote it."""
        extra: dict[str, Any] = {
            "best_epoch": self.best_epoch,
            "mlflow_run_id": self.mlflow_run_id,
            "stopped_early": self.stopped_early,
        }
        if self.best_metric is not None:
            extra["best_metric"] = self.best_metric
        return extra


@dataclass
class Setup:
    """Everything the loop needs, built once."""

    cfg: PipelineConfig
    device: torch.device
    model: torch.nn.Module
    train_model: Any  # possibly torch.compile'd view of `model` (in DDP with several ranks: see apply_lr)
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    ema: EMA
    loss_fn: torch.nn.Module
    train_loader: Any
    val_loader: Any
    sampler: Any
    seed_dir: Path
    ranks: Ranks = SINGLE
    wrapped_frozen: bool | None = None  # the encoder state train_model's DDP was built for (several ranks)


def build_setup(cfg: PipelineConfig, run_dir: Path, seed: int, ranks: Ranks = SINGLE) -> Setup:
    """Model, data, optimizer, EMA, loss: every error here comes before the first training step. With several
    ranks: this rank's device, its process group, the batch norms made global-batch (see
    :mod:`rtscore.train.distributed`), its slice of each batch and its shard of the validation pool."""
    device = ddp.rank_device(select_device(cfg), ranks)
    check_precision(cfg.training.precision, device)
    ddp.init_process_group(ranks, device)
    seed_everything(seed, cfg.training.deterministic)
    stats = load_normalization_stats(run_dir / RunLayout.NORMALIZATION_STATS.at(), [c.name for c in cfg.channels.extra])
    # train.zarr joined with data.additional_roots (checked here, before any step); stats stay train.zarr's.
    train_ds = build_train_dataset(cfg, run_dir, stats, seed=seed)
    val_ds = build_dataset(cfg, run_dir / RunLayout.DATASET.at(split="val"), stats, train=False)
    loader, sampler = train_loader(cfg, train_ds, seed, rank=ranks.rank, world_size=ranks.world_size)
    # Class-balanced CE: the weight comes from the train split's pixel counts, once (guide §5.4), not per batch.
    counts = class_pixel_counts(train_ds.source, train_ds.indices) if cfg.loss.name == "class_balanced_ce" else None
    model = build_model(cfg.model, cfg.channels).to(device)
    if ranks.distributed:  # global-batch batch norm; dropout / drop-path masks drawn as one device draws them
        model = make_rank_consistent(ddp.convert_batchnorm(model, device), ranks.rank, ranks.world_size)
        ddp.skip_unused(model, unused_parameters(cfg.model, cfg.channels, cfg.data.tile_size))
    if cfg.training.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(model, cfg, cfg.lr_schedule.frozen_lr)
    scaler = torch.amp.GradScaler("cuda") if cfg.training.precision == "fp16" else None
    train_model: Any = torch.compile(model) if cfg.training.torch_compile and not ranks.distributed else model
    return Setup(
        cfg=cfg,
        device=device,
        model=model,
        train_model=train_model,
        optimizer=optimizer,
        scaler=scaler,
        ema=EMA(model, cfg.ema.decay, cfg.ema.warmup),
        loss_fn=build_loss(cfg.loss, counts),
        train_loader=loader,
        val_loader=val_loader(cfg, val_shard(val_ds, ranks)),  # training.batch_size tiles a batch on every rank
        sampler=sampler,
        seed_dir=run_dir / RunLayout.SEED_DIR.at(seed=seed),
        ranks=ranks,
    )


def build_optimizer(model: torch.nn.Module, cfg: PipelineConfig, lr: float) -> torch.optim.AdamW:
    """AdamW over the decoder and encoder parameter groups (named: the schedule sets each group's LR)."""
    return torch.optim.AdamW(
        [
            {"params": decoder_parameters(model), "name": "decoder"},
            {"params": encoder_parameters(model), "name": "encoder"},
        ],
        lr=lr,
        betas=cfg.optimizer.betas,
        weight_decay=cfg.optimizer.weight_decay,
    )


def val_shard(ds: Any, ranks: Ranks) -> Any:
    """This rank's contiguous share of the validation pool (the whole pool with one rank): gathered in rank order,
    the shards' per-tile histograms are the one-process pool's, tile for tile.

    Raises:
        DataValidationError: the pool has fewer tiles than ranks.
    """
    if not ranks.distributed:
        return ds
    n = len(ds)
    if n < ranks.world_size:
        raise DataValidationError(
            f"the val split has {n} usable tile(s), fewer than the {ranks.world_size} ranks of training.devices: "
            "train on fewer devices or validate on more tiles"
        )
    lo, hi = n * ranks.rank // ranks.world_size, n * (ranks.rank + 1) // ranks.world_size
    return torch.utils.data.Subset(ds, range(lo, hi))


def resume_hash(cfg: PipelineConfig, ranks: int = 1) -> str:
    """Hash of the settings a resumed run on ``ranks`` ranks must share with the run that wrote the checkpoint. The
    batch is keyed as the effective batch (``training.batch_size`` x ``ranks``): what a step and the sampler's plan
    depend on, so a seed resumes on another device count at the same effective batch (8 x 4 as 1 x 32), never at
    another. One rank hashes the config as it is."""
    data = cfg.model_dump(mode="json")
    data["training"]["batch_size"] = cfg.training.effective_batch_size(ranks)
    for section, keys in _RESUME_FREE.items():
        if keys is None:
            data.pop(section, None)
        else:
            for k in keys:
                data.get(section, {}).pop(k, None)
    return digest(data)


def default_resume_key(cfg: PipelineConfig, ranks: int = 1) -> str:
    """The resume identity without a stage around the loop: :func:`resume_hash` and this module's code closure."""
    return identity_resume_key(__name__, resume_hash(cfg, ranks))


def batch_params(cfg: PipelineConfig, ranks: Ranks) -> dict[str, int]:
    """The batch as the seed trains it, for MLflow beside the config's ``training.batch_size`` (per device): the
    ranks and the effective batch of one optimizer step (guide §9.1)."""
    n = ranks.world_size
    return {"ranks": n, "effective_batch_size": cfg.training.effective_batch_size(n)}


def set_aside_seed(seed_dir: Path, seed: int, path: Path, saved: dict[str, Any], key: str) -> None:
    """Move a seed's checkpoints, best weights and metrics of another identity into ``set_aside/``."""
    files = [*seed_dir.glob(layout.RESUME_GLOB), seed_dir / layout.BEST, seed_dir / layout.METRICS]
    files += [seed_dir / name for name in (layout.RUN_SUMMARY, layout.RUN_SUMMARY_MD, layout.CURVES)]
    set_aside(
        files,
        seed_dir / SET_ASIDE_DIR,
        base=seed_dir,
        what=f"seed {seed}: the checkpoint {path.name} (epoch {saved.get('epoch')}) and the weights beside it",
        why=f"were written by other code, config or inputs (resume key {str(saved.get('resume_hash'))[:12]} vs "
        f"{key[:12]}); only training.early_stopping/checkpoint/device/val_frequency, data.loader, mlflow and "
        "deployment may change on resume, and training.devices where batch_size x devices stays the same",
    )


def restore(s: Setup, saved: dict[str, Any], stopper: EarlyStopping, path: Path) -> int:
    """Load a resume checkpoint (its identity already checked by the caller)."""
    s.model.load_state_dict(saved["live_state_dict"])
    s.ema.load_state_dict(saved["ema_state_dict"], int(saved["ema_updates"]))
    s.optimizer.load_state_dict(saved["optimizer_state_dict"])
    if s.scaler is not None and saved["scaler_state_dict"]:
        s.scaler.load_state_dict(saved["scaler_state_dict"])
    stopper.load_state_dict(saved["early_stopping"])
    set_rng_state(rank_rng_state(saved, s.ranks.rank, s.ranks.world_size), s.device)  # each rank its own
    return int(saved["epoch"])


def _truncate_jsonl(path: Path, last_epoch: int) -> None:
    """On resume, drop rows of epochs that will be trained again."""
    if not path.exists():
        return
    rows = [r for r in path.read_text().splitlines() if r and json.loads(r)["epoch"] <= last_epoch]
    path.write_text("".join(r + "\n" for r in rows))


def run_epoch(s: Setup, epoch: int, stopper: EarlyStopping, seed: int) -> tuple[dict[str, Any], Decision | None]:
    """Train one epoch; validate on schedule with the EMA weights swapped in and hand back the early-stopping
    decision (None when the epoch was not validated)."""
    cfg = s.cfg
    lr = lr_at(epoch, cfg.lr_schedule, cfg.training.max_epochs)
    apply_lr(s, lr)
    set_train_mode(s, lr.frozen)
    s.sampler.set_epoch(epoch)
    row: dict[str, Any] = {"epoch": epoch, "lr_decoder": lr.decoder, "lr_encoder": lr.encoder}
    row["curriculum_neg_per_pos"] = s.sampler.ratio(epoch)
    row.update(train_one_epoch(s, epoch))
    if epoch % cfg.training.val_frequency != 0 and epoch != cfg.training.max_epochs:
        return row, None
    with s.ema.swapped_in(s.model) if cfg.ema.enabled else nullcontext():
        pool = merge_pools(ddp.gather(collect(s.model, s.val_loader, cfg, s.device, loss_fn=s.loss_fn)))
    row.update(summarize(pool, cfg, seed=seed))
    decision = stopper.update(epoch, row[METRIC])
    row[f"{METRIC}_smoothed"] = decision.smoothed
    row["early_stopping_bad_events"] = decision.bad_events
    return row, decision


def epoch_metric_names(cfg: PipelineConfig) -> list[str]:
    """The validation metrics a validated epoch's row of ``metrics.jsonl`` holds under ``cfg`` (:func:`run_epoch`'s:
    summarize's, and the smoothed early-stopping metric), e.g. to check a sweep's deciding metric before training."""
    return sorted([*metric_names(cfg), f"{METRIC}_smoothed"])


def apply_lr(s: Setup, lr: EpochLR) -> None:
    """Freeze or unfreeze the encoder and set both groups' LRs for this epoch. With several ranks the model is
    wrapped in DDP again when the encoder's state changes (DDP reduces the parameters trainable when wrapped)."""
    encoder: torch.nn.Module = s.model.encoder  # type: ignore[assignment]
    for p in encoder.parameters():
        p.requires_grad_(not lr.frozen)
    for group in s.optimizer.param_groups:
        group["lr"] = lr.encoder if group["name"] == "encoder" else lr.decoder
    if s.ranks.distributed and s.wrapped_frozen != lr.frozen:
        wrapped = ddp.data_parallel(s.model, s.device)
        s.train_model = torch.compile(wrapped) if s.cfg.training.torch_compile else wrapped
        s.wrapped_frozen = lr.frozen


def set_train_mode(s: Setup, frozen: bool) -> None:
    s.model.train()
    if frozen:
        s.model.encoder.eval()  # type: ignore[union-attr]  # frozen backbone: BatchNorm statistics stay put too


def train_one_epoch(s: Setup, epoch: int, on_step: Callable[[int, float], None] | None = None) -> dict[str, float]:
    """One pass over the epoch's balanced batches; returns train loss, IoU at 0.5 and throughput (of the global
    batches, every rank's slice together). ``on_step(step, loss)`` hears each step's loss (the global batch's)."""
    cfg, dev, ranks = s.cfg, s.device, s.ranks
    total, n_batches, n_samples = 0.0, 0, 0
    confusion = PixelConfusion()
    t0 = time.perf_counter()
    for batch in s.train_loader:
        x = batch["image"].to(dev, non_blocking=True)
        y = batch["label"].to(dev, non_blocking=True)
        logits = forward_logits(
            s.train_model, x, precision=cfg.training.precision, channels_last=cfg.training.channels_last
        )
        with global_batch(ranks.world_size):
            loss = s.loss_fn(logits, y, loss_soft_targets(cfg.loss, y))
        step_loss = ddp.sum_across(float(loss.detach()), dev) / ranks.world_size  # the global batch's loss
        if not math.isfinite(step_loss):  # the same on every rank: they stop together
            raise TrainingError(
                f"non-finite training loss ({step_loss}) at epoch {epoch}, batch {n_batches}; stopping. "
                "The last good checkpoint is intact; lower the LR or use fp32 to investigate."
            )
        s.optimizer.zero_grad(set_to_none=True)
        if s.scaler is not None:
            s.scaler.scale(loss).backward()
            s.scaler.unscale_(s.optimizer)
            torch.nn.utils.clip_grad_norm_(s.model.parameters(), cfg.training.grad_clip_norm)
            s.scaler.step(s.optimizer)
            s.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(s.model.parameters(), cfg.training.grad_clip_norm)
            s.optimizer.step()
        if cfg.ema.enabled:
            s.ema.update(s.model)
        confusion.update(logits.detach(), y)
        total += step_loss
        n_batches += 1
        n_samples += x.shape[0]
        if on_step is not None:
            on_step(n_batches, step_loss)
    dt = time.perf_counter() - t0
    if n_batches == 0:
        raise TrainingError(f"epoch {epoch} had no training batches (train split too small for the batch size?)")
    counts = sum(ddp.gather(confusion.compute()), ConfusionCounts())
    n_samples = int(ddp.sum_across(n_samples, dev))
    return {
        "train_loss": total / n_batches,
        "train_iou": counts.iou,
        "train_samples_per_s": n_samples / dt if dt > 0 else math.nan,
        "train_batches": float(n_batches),
    }


def resume_state(s: Setup, epoch: int, stopper: EarlyStopping, state: RunState, key: str) -> dict[str, Any]:
    """Everything :func:`restore` needs to continue exactly where this epoch ended."""
    return {
        "live_state_dict": s.model.state_dict(),
        "ema_state_dict": s.ema.state_dict(),
        "ema_updates": s.ema.updates,
        "optimizer_state_dict": s.optimizer.state_dict(),
        "scheduler_state_dict": {"kind": "epoch_function", "epoch": epoch},
        "scaler_state_dict": s.scaler.state_dict() if s.scaler is not None else {},
        "epoch": epoch,
        "sampler": {"epoch": epoch + 1, "skip_batches": 0},
        **rng_checkpoint(ddp.gather(rng_state(s.device))),  # every rank's states (a collective: all ranks call)
        "early_stopping": stopper.state_dict(),
        "resume_hash": key,
        "extra": state.to_checkpoint(),
    }


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
