"""Whether a sweep is running: the record its run keeps fresh in the sweep directory (``runner.json``: host, pid,
heartbeat), and how ``rts sweep --status`` reads it, so that a sweep killed with -9 reads as interrupted, not running.

The sweep flow holds :func:`sweep_running` around its work: the record is written when it starts, its heartbeat
refreshed every :data:`HEARTBEAT_S` seconds by a background thread, and on the way out the record is removed (the
sweep finished) or marked ended with the error (it failed or was stopped). A kill -9 leaves it as it was: a pid that
no longer runs (read on the same host) or a heartbeat older than :data:`STALE_S` (read from another host, e.g. a
sweep in a bucket) says the run is gone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Literal

import psutil
from pydantic import BaseModel, Field, ValidationError

from rtscore.storage import RunDir, StorageError, SweepLayout, atomic_write_text
from rtscore.tracking import FLOW_RUN_ENV

_log = logging.getLogger(__name__)

RUNNER_NAME = SweepLayout.RUNNER.at()
HEARTBEAT_S = 60.0  # how often a running sweep refreshes its record
STALE_S = 300.0  # a heartbeat older than this, read from another host: the run is gone

State = Literal["running", "interrupted", "failed", "stopped"]


class Runner(BaseModel):
    """``runner.json``: the process running a sweep, kept fresh while it runs."""

    host: str = Field(..., description="The host the sweep's run is on.")
    pid: int = Field(..., description="Its process id there.")
    process_started: float = Field(..., description="The process's start time (a reused pid is another process).")
    flow_run_id: str | None = Field(None, description="Its Prefect flow run, when it runs in one.")
    started: datetime = Field(..., description="When the run started.")
    heartbeat: datetime = Field(..., description="When the run last said it was alive.")
    ended: bool = Field(False, description="The run ended without finishing (error below); absent once it finished.")
    error: str | None = Field(None, description="What ended it: the error's type and first line.")

    @classmethod
    def here(cls) -> Runner:
        now = datetime.now(UTC)
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            process_started=psutil.Process().create_time(),
            flow_run_id=os.environ.get(FLOW_RUN_ENV) or None,
            started=now,
            heartbeat=now,
        )


class Liveness(BaseModel):
    """What ``--status`` says of a sweep's run: its state and one sentence on how that is known."""

    state: State
    detail: str


def _write(sweep: RunDir, runner: Runner) -> None:
    atomic_write_text(sweep.path(RUNNER_NAME), runner.model_dump_json(indent=2) + "\n")
    sweep.record(RUNNER_NAME, SweepLayout.STAGE, "")  # a gs:// sweep: uploaded, for --status on any machine


def _beat(sweep: RunDir, runner: Runner, stop: threading.Event, interval_s: float) -> None:
    while not stop.wait(interval_s):
        try:
            _write(sweep, runner.model_copy(update={"heartbeat": datetime.now(UTC)}))
        except (OSError, StorageError) as err:  # a missed beat is not worth stopping the sweep for
            _log.warning(f"sweep {sweep.uri}: the heartbeat of {RUNNER_NAME} was not written ({err})")


@contextmanager
def sweep_running(sweep_dir: str, *, interval_s: float = HEARTBEAT_S) -> Iterator[Runner]:
    """Hold the sweep directory's ``runner.json`` fresh while the body runs; removed when it returns, marked ended
    with the error when it raises (a kill -9 leaves it unchanged: its pid and heartbeat then tell)."""
    sweep = RunDir(sweep_dir)
    runner = Runner.here()
    _write(sweep, runner)
    stop = threading.Event()
    beat = threading.Thread(target=_beat, args=(sweep, runner, stop, interval_s), name="sweep-heartbeat", daemon=True)
    beat.start()
    try:
        yield runner
    except BaseException as err:
        stop.set()
        beat.join()
        first = (str(err).strip().splitlines() or [""])[0]
        error = f"{type(err).__name__}: {first}" if first else type(err).__name__
        _write(sweep, runner.model_copy(update={"heartbeat": datetime.now(UTC), "ended": True, "error": error}))
        raise
    stop.set()
    beat.join()
    sweep.delete(RUNNER_NAME)


def read_runner(sweep: RunDir) -> Runner | None:
    """The sweep's ``runner.json``, or None when it has none (or it cannot be read: a write in between)."""
    for _ in range(2):  # a heartbeat may replace it between the manifest's record and its copy: read once more
        try:
            if sweep.fetch(RUNNER_NAME) is None or not sweep.path(RUNNER_NAME).is_file():
                return None
            return Runner.model_validate_json(sweep.path(RUNNER_NAME).read_text())
        except (StorageError, ValidationError, OSError) as err:
            problem = err
    _log.warning(f"{sweep.uri}: {RUNNER_NAME} is unreadable ({problem})")
    return None


def _alive_here(runner: Runner) -> bool:
    try:
        return abs(psutil.Process(runner.pid).create_time() - runner.process_started) < 1.0
    except psutil.Error:  # no such process (or not ours to look at: then it is not the sweep's either)
        return False


def liveness(runner: Runner | None, now: datetime | None = None) -> Liveness:
    """Whether the run of ``runner`` is alive: on this host by its pid (and the process's start time), from another
    host by the age of its heartbeat. No record: no run holds the sweep (its last one ended before finishing)."""
    if runner is None:
        return Liveness(state="stopped", detail="no run of it is going on (its last run ended before finishing)")
    who = f"pid {runner.pid} on {runner.host}"
    beat = runner.heartbeat.isoformat(timespec="seconds")
    if runner.ended:
        stopped = (runner.error or "").startswith(("KeyboardInterrupt", "SystemExit"))
        state: State = "interrupted" if stopped else "failed"
        return Liveness(state=state, detail=f"its run ({who}) ended at {beat}: {runner.error}")
    age = ((now or datetime.now(UTC)) - runner.heartbeat).total_seconds()
    if runner.host == socket.gethostname():
        if _alive_here(runner):
            return Liveness(state="running", detail=f"{who}, last heartbeat {age:.0f} s ago")
        return Liveness(state="interrupted", detail=f"its run ({who}) is gone (killed?); last heartbeat at {beat}")
    if age <= STALE_S:
        return Liveness(state="running", detail=f"{who}, last heartbeat {age:.0f} s ago")
    return Liveness(
        state="interrupted",
        detail=f"its run ({who}) has sent no heartbeat since {beat} ({age / 60:.0f} min; one is due every "
        f"{HEARTBEAT_S:.0f} s): it is gone",
    )


__all__ = ["HEARTBEAT_S", "RUNNER_NAME", "STALE_S", "Liveness", "Runner", "liveness", "read_runner", "sweep_running"]
