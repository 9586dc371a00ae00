"""One seed on every device of ``training.devices``: one process per device, started by torch's elastic agent
(what ``torchrun --standalone`` runs) from the process that trains the seed (a train-seed task on a worker).

The calling process keeps what it had for one device: it hears of every resume checkpoint (to record it in the
run root before rank 0 trains on), of every epoch (progress, Prefect's progress artifact) and of the start, and it
returns the seed's result. Rank 0 sends these through a queue and waits for each checkpoint to be recorded, as
the one-device loop waits for its hooks.

A rank that fails (an exception, a kill -9, a lost GPU) takes the seed down: the agent stops the other ranks (a
rank blocked in a collective gives up after the collective timeout at the latest) and :func:`train_on_devices`
raises one :class:`~rtscore.train.errors.TrainingError` naming the rank and the cause. Running the seed again
resumes from its last checkpoint, on any number of devices: nothing in a checkpoint depends on the rank count.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

from rtscore.config.pipeline import PipelineConfig
from rtscore.train import distributed as ddp
from rtscore.train.errors import TrainingError
from rtscore.train.loop import CheckpointHooks, progress_line, train_seed
from rtscore.train.result import SeedResult

_log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 3600.0  # rank 0 waits this long for a checkpoint to be recorded (an upload of a large checkpoint)


def train_on_devices(
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
) -> SeedResult:
    """:func:`rtscore.train.loop.train_seed` on the ranks ``training.devices`` resolves to on this machine: in this
    process for one, else one process per device under torch's elastic agent.

    Raises:
        DeviceError: more devices than this machine has.
        TrainingError: a rank failed (its rank, and what it raised or the signal that ended it).
    """
    n = ddp.resolve_devices(cfg)
    _log.log(logging.WARNING if n > 1 else logging.INFO, batch_line(cfg, seed, n))
    if n == 1:
        return train_seed(
            cfg,
            run_dir,
            seed,
            fresh=fresh,
            parent_run_id=parent_run_id,
            progress=progress,
            on_epoch_end=on_epoch_end,
            hooks=hooks,
            resume_key=resume_key,
        )
    return _launch(n, cfg, Path(run_dir), seed, fresh, parent_run_id, progress, on_epoch_end, hooks, resume_key)


def _launch(
    n: int,
    cfg: PipelineConfig,
    run_dir: Path,
    seed: int,
    fresh: bool,
    parent_run_id: str | None,
    progress: bool,
    on_epoch_end: Callable[[int, dict[str, float]], None] | None,
    hooks: CheckpointHooks | None,
    resume_key: str | None,
) -> SeedResult:
    import multiprocessing

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    config = launch_config(n, f"seed-{seed}-{uuid.uuid4().hex[:8]}")
    agent_log = logging.getLogger("torch.distributed.elastic")
    agent_level = agent_log.level
    # The agent logs a failed rank as a page of tracebacks at ERROR, and warns that it cannot install signal
    # handlers off the main thread; the seed fails with one line naming the rank and the cause (its traceback at
    # DEBUG), and each rank dies with this process (_die_with_parent), so the warning's orphans cannot happen.
    agent_log.setLevel(logging.CRITICAL)
    outcome: dict[str, Any] = {}
    try:
        with multiprocessing.get_context("spawn").Manager() as manager:
            events, acks = manager.Queue(), manager.Queue()
            args = (cfg, str(run_dir), seed, fresh, parent_run_id, resume_key, events, acks)

            def run() -> None:
                try:
                    outcome["results"] = elastic_launch(config, _rank_main)(*args)
                except BaseException as err:  # handed to the calling thread
                    outcome["error"] = err

            launcher = threading.Thread(target=run, name=f"rts-seed-{seed}-launch", daemon=True)
            launcher.start()
            relay = _Relay(seed, cfg.training.max_epochs, progress, on_epoch_end, hooks, acks)
            while launcher.is_alive() or not events.empty():
                try:
                    relay.handle(events.get(timeout=0.2))
                except queue.Empty:
                    continue
            launcher.join()
    finally:
        agent_log.setLevel(agent_level)
    err = outcome.get("error")
    if isinstance(err, ChildFailedError):
        raise TrainingError(f"seed {seed}: {_failure_line(err)}; {relay.resume_hint()}") from None
    if err is not None:
        raise err
    dumped = outcome["results"][0]
    return SeedResult.model_validate(dumped)


def launch_config(n: int, run_id: str) -> Any:
    """torch's elastic launch of ``n`` ranks on this machine, as ``torchrun --standalone`` starts them: a local
    rendezvous on a free port, spawned processes, no restart (a failed rank fails the seed; running the seed
    again resumes it from its checkpoint)."""
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=n,
        run_id=run_id,
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=0.5,
        start_method="spawn",
    )


def batch_line(cfg: PipelineConfig, seed: int, n: int) -> str:
    """The seed's batch in one line, logged as it starts (a warning on several ranks): per device and effective
    (guide §9.1). ``training.batch_size`` was the global batch until issue 35; a config written then for N > 1
    devices now trains N times its batch, and this line says so before the first step."""
    b = cfg.training.batch_size
    ranks = f"{n} {_kind(cfg)} ranks" if n > 1 else "one device"
    line = f"seed {seed}: {ranks}, training.batch_size {b} per device: effective batch {b * n} per optimizer step"
    if n > 1:
        line += f" (= {b} x {n}, guide §9.1; the learning rates are as configured, not scaled with the batch)"
    return line


def _kind(cfg: PipelineConfig) -> str:
    return "CPU (gloo)" if cfg.training.device == "cpu" else "device"


def _failure_line(err: Any) -> str:
    """One line for the first failed rank: its rank, pid and the exception it raised or the signal that ended it."""
    rank, failure = err.get_first_failure()
    data = failure.error_file_data or {}
    message = data.get("message", {}) if isinstance(data, dict) else {}
    raised = message.get("message") if isinstance(message, dict) else None
    trace = message.get("extraInfo", {}).get("py_callstack") if isinstance(message, dict) else None
    if trace:
        _log.debug(f"rank {rank} failed:\n{trace}")
    if raised:
        cause = str(raised).strip().splitlines()[-1]
    elif failure.signal_name() and failure.signal_name() != "<N/A>":
        cause = f"killed by {failure.signal_name()}"
    else:
        cause = f"exit code {failure.exitcode}"
    return f"rank {rank} (pid {failure.pid}) failed: {cause}"


class _Relay:
    """The calling process's side of rank 0's events: checkpoints recorded (then acknowledged), epochs reported."""

    def __init__(
        self,
        seed: int,
        max_epochs: int,
        progress: bool,
        on_epoch_end: Callable[[int, dict[str, float]], None] | None,
        hooks: CheckpointHooks | None,
        acks: Any,
    ) -> None:
        self.seed, self.max_epochs, self.progress = seed, max_epochs, progress
        self.on_epoch_end, self.hooks, self.acks = on_epoch_end, hooks, acks
        self.last_checkpoint = 0

    def handle(self, event: tuple[Any, ...]) -> None:
        kind = event[0]
        if kind == "started" and self.hooks is not None:
            self.hooks.started(int(event[1]))
        elif kind == "set_aside" and self.hooks is not None:
            self.hooks.set_aside()
        elif kind == "checkpoint":
            self.last_checkpoint = int(event[1])
            try:
                if self.hooks is not None:
                    self.hooks.checkpoint_saved(self.last_checkpoint)
            finally:
                self.acks.put(self.last_checkpoint)
        elif kind == "epoch":
            epoch, row = int(event[1]), dict(event[2])
            if self.progress:
                logging.getLogger("rtscore.train.loop").info(progress_line(self.seed, epoch, self.max_epochs, row))
            if self.on_epoch_end is not None:
                self.on_epoch_end(epoch, row)

    def resume_hint(self) -> str:
        if self.last_checkpoint:
            return f"its checkpoint of epoch {self.last_checkpoint} is kept: run it again to resume (any device count)"
        return "no checkpoint was written: running it again starts it from scratch"


class _RankHooks:
    """Rank 0's hooks: each event sent to the calling process; a checkpoint waits until it is recorded there."""

    def __init__(self, events: Any, acks: Any) -> None:
        self.events, self.acks = events, acks

    def started(self, first_epoch: int) -> None:
        self.events.put(("started", first_epoch))

    def checkpoint_saved(self, epoch: int) -> None:
        self.events.put(("checkpoint", epoch))
        self.acks.get(timeout=ACK_TIMEOUT_S)

    def set_aside(self) -> None:
        self.events.put(("set_aside",))

    def epoch_end(self, epoch: int, row: dict[str, float]) -> None:
        self.events.put(("epoch", epoch, row))


def _die_with_parent() -> None:
    """Linux: this rank is killed when the process that launched it dies (kill -9 included), instead of waiting on
    its peers until the collective timeout."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() == 1:  # the launcher died before the line above: go now
        os._exit(1)


@record  # the rank's exception reaches the agent's failure report (and thus the seed's one-line error)
def _rank_main(
    cfg: PipelineConfig,
    run_dir: str,
    seed: int,
    fresh: bool,
    parent_run_id: str | None,
    resume_key: str | None,
    events: Any,
    acks: Any,
) -> dict[str, Any] | None:
    """One rank of the seed (the elastic agent's entry point, in a spawned process)."""
    import torch

    _die_with_parent()
    ranks = ddp.Ranks.from_env()
    if cfg.training.device == "cpu" or not torch.cuda.is_available():
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks.world_size))
    hooks = _RankHooks(events, acks) if ranks.main else None
    try:
        result = train_seed(
            cfg,
            run_dir,
            seed,
            fresh=fresh,
            parent_run_id=parent_run_id,
            on_epoch_end=hooks.epoch_end if hooks is not None else None,
            hooks=hooks,
            resume_key=resume_key,
            ranks=ranks,
        )
    finally:
        ddp.destroy_process_group()
    return result.model_dump(mode="json") if ranks.main else None
