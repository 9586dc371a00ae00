"""Helpers shared by flows: config loading, the flow-run scope (MLflow tag, library logs in the run's
logs), cached-result checks."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler

from flows.params import SPLITS, GenerateParams, MultiSeedParams, RunParams, SeedStageParams, TrainSeedParams
from flows.server_watchdog import TOKEN_ENV
from rtscore.config import PipelineConfig, load_pipeline_config
from rtscore.errors import PipelineError
from rtscore.stages import BY_NAME, STAGES, ArtifactRef, calibrated_seeds, trained_seeds
from rtscore.storage import RunDir, StorageError
from rtscore.storage.gcs import check_access

FLOW_RUN_ENV = "RTS_FLOW_RUN_ID"  # rtscore's MLflow tracker tags runs with it
LIBRARY_LOGGERS = ("rtscore",)  # loggers whose records go to the Prefect run's logs (the Logs tab)
STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STARTUP_TIMEOUT_S = 180  # Prefect's default (20 s) is too short on a loaded 2-core machine
_WATCHDOG = Path(__file__).with_name("server_watchdog.py")

__all__ = [
    "FLOW_RUN_ENV",
    "LIBRARY_LOGGERS",
    "STARTUP_TIMEOUT_ENV",
    "STARTUP_TIMEOUT_S",
    "PrefectServerError",
    "check_inputs",
    "flow_run_scope",
    "intact",
    "load_config",
    "route_library_logs",
    "run_stage",
    "start_local_api",
]


class PrefectServerError(PipelineError):
    """Prefect's temporary local API server did not start; the message says which setting to change."""


def start_local_api() -> int | None:
    """Start Prefect's temporary (ephemeral) API server now, for a flow command run without a server.

    Prefect would start it at the flow's first API call with a 20 s start-up limit and leave it running
    when the command is killed with SIGKILL. Started here instead: the limit is ``$PREFECT_SERVER_EPHEMERAL_
    STARTUP_TIMEOUT_SECONDS`` if set, else :data:`STARTUP_TIMEOUT_S`; a watchdog process
    (``flows/server_watchdog.py``), armed before the server starts, stops it when this process dies in any way,
    also during the start-up; the flow's own calls then reuse this server (Prefect keeps one instance per
    process). Returns the server's pid, or None when ``PREFECT_API_URL`` names a server (nothing to start).

    Raises:
        PrefectServerError: the server did not answer within the limit (naming the setting to raise).
    """
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return None
    raw = os.environ.get(STARTUP_TIMEOUT_ENV, "").strip()
    timeout = int(raw) if raw.isdigit() and int(raw) > 0 else STARTUP_TIMEOUT_S
    os.environ[STARTUP_TIMEOUT_ENV] = str(timeout)  # processes started from here wait as long
    server = SubprocessASGIServer()
    if server.running and server.server_process is not None:
        return int(server.server_process.pid)
    token = secrets.token_hex(16)
    watchdog = subprocess.Popen(
        [sys.executable, str(_WATCHDOG), str(os.getpid()), token],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Registered before the server's own stop (atexit is LIFO): on a normal exit Prefect stops the server first,
    # still watched, then the watchdog is stopped.
    atexit.register(_stop_watchdog, watchdog)
    os.environ[TOKEN_ENV] = token  # every server process started now carries it: that is how the watchdog knows it
    try:
        server.start(timeout=timeout)
    except RuntimeError as err:
        server.stop()  # a server still starting up would otherwise outlive us
        first = (str(err).splitlines() or [type(err).__name__])[0][:200]  # not the server's whole stdout/stderr
        raise PrefectServerError(
            f"Prefect's temporary API server did not start within {timeout} s ({first}); on a loaded machine "
            f"set {STARTUP_TIMEOUT_ENV} higher (e.g. 600), or set PREFECT_API_URL to a running Prefect server"
        ) from None
    finally:
        os.environ.pop(TOKEN_ENV, None)  # not for the processes the flow starts later
    assert server.server_process is not None, "a started server has a process"
    return int(server.server_process.pid)


def _stop_watchdog(watchdog: subprocess.Popen[bytes]) -> None:
    watchdog.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=5)


def load_config(params: RunParams, skip_generation: bool = False) -> PipelineConfig:
    """The pipeline config of ``params.config`` with the flow's overrides applied.

    ``skip_generation`` adopts the run's existing stores instead of generating them; ``params.deterministic``
    (when set) overrides ``training.deterministic``.
    """
    cfg = load_pipeline_config(params.config)
    if skip_generation:
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"skip_generation": True})})
    if params.deterministic is not None and params.deterministic != cfg.training.deterministic:
        training = cfg.training.model_copy(update={"deterministic": params.deterministic})
        cfg = cfg.model_copy(update={"training": training})
    return cfg


# The command that runs each stage, for "run it first" (rts run runs them all).
STAGE_COMMANDS = {
    "generate-dataset": "rts data",
    "normalization-stats": "rts data",
    "validate-data": "rts data",
    "train-seed": "rts train",
    "logit-cache": "rts calibrate",
    "calibrate": "rts calibrate",
    "evaluate-test": "rts evaluate-test",
    "package": "rts package build",
}


def check_inputs(stage: str, params: RunParams) -> None:
    """Before a flow command starts Prefect's server: what ``stage``, the first stage the command runs, reads is
    there. Each declared input (for the seeds or splits the command selects, found as the flow will find them)
    is recorded in the run's manifest and present (gs://: its objects exist); each location it reads outside
    the run (a GeoTIFF data root, a store to adopt) exists. Reads only: nothing is written or staged but the
    calibration summary of a gs:// run that evaluate-test and package take their seeds from.

    Raises:
        StorageError: the first missing input, naming it and the command that makes it.
    """
    spec = BY_NAME[stage]
    cfg = load_config(params, bool(getattr(params, "skip_generation", False)))
    run = RunDir(params.run_dir)
    for selection in _selections(stage, params, cfg, run):
        for rel in spec.input_paths(selection):
            if not run.has(rel):
                makers = [s.name for s in STAGES if any(out.match(rel) is not None for out in s.outputs)]
                how = f"; run {STAGE_COMMANDS.get(makers[0], makers[0])} first" if makers else ""
                raise StorageError(f"run {run.uri} has no {rel} (an input of {stage}){how}")
        for location in spec.source_locations(cfg, selection, run):
            if location.startswith("gs://"):
                check_access(location, must_exist=True)
            elif not Path(location).exists():
                what = ", ".join(f"{k} {v}" for k, v in selection.items())
                raise StorageError(f"{location} does not exist ({stage} reads it for {what})")


def _selections(stage: str, params: RunParams, cfg: PipelineConfig, run: RunDir) -> list[dict[str, Any]]:
    """The parameter values selecting the work of ``stage`` in this command (splits, a seed, the seeds)."""
    if stage == "generate-dataset":
        return [{"split": s} for s in (params.splits if isinstance(params, GenerateParams) else SPLITS)]
    if isinstance(params, TrainSeedParams):
        return [{"seed": params.seed_of(cfg)}]
    if isinstance(params, MultiSeedParams):
        return [{"seed": s} for s in params.seeds or cfg.training.seeds]
    if not isinstance(params, SeedStageParams):
        raise TypeError(f"no input check for stage {stage} with {type(params).__name__}")
    if stage == "logit-cache":  # rts calibrate: every trained seed unless --seeds
        return [{"seed": s} for s in trained_seeds(run, params.seeds)]
    return [{"seeds": params.seeds or calibrated_seeds(run)}]  # evaluate-test, package: the last calibration's


def _in_a_run(record: logging.LogRecord) -> bool:
    """Whether a record belongs to a flow or task run (outside one, e.g. a script calling rtscore after a
    flow returned, it stays local instead of making Prefect warn about a log without a run)."""
    return (
        getattr(record, "flow_run_id", None) is not None
        or FlowRunContext.get() is not None
        or TaskRunContext.get() is not None
    )


def route_library_logs() -> None:
    """Send the records of :data:`LIBRARY_LOGGERS` (INFO and above) to the current Prefect run's logs.

    Prefect's setting for this, ``PREFECT_LOGGING_EXTRA_LOGGERS=rtscore``, only acts when Prefect configures
    logging (at its import, so it must be in the environment of every worker and flow-run process before
    that), and it leaves the logger's level unset: the root logger's WARNING then drops the INFO lines. So
    each flow does it here, at its start: Prefect's API log handler on the logger (once; none is added if
    the setting already attached one) and level INFO unless something (the ``rts`` CLI) chose a level.
    Records still propagate to the root logger, i.e. a worker's console.
    """
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, APILogHandler) for h in logger.handlers):
            handler = APILogHandler()
            handler.addFilter(_in_a_run)
            logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)


@contextlib.contextmanager
def flow_run_scope() -> Iterator[str | None]:
    """The body of a flow: its library logs go to the run's logs (:func:`route_library_logs`), and
    ``RTS_FLOW_RUN_ID`` is the flow run's id (restored afterwards).

    A subflow sets its own id and gives the parent's back when it returns, so what the parent logs after
    a subflow is still tagged with the parent.
    """
    from prefect.runtime import flow_run

    route_library_logs()
    run_id = str(flow_run.id) if flow_run.id else None
    previous = os.environ.get(FLOW_RUN_ENV)
    if run_id is not None:
        os.environ[FLOW_RUN_ENV] = run_id
    try:
        yield run_id
    finally:
        if previous is None:
            os.environ.pop(FLOW_RUN_ENV, None)
        else:
            os.environ[FLOW_RUN_ENV] = previous


def intact(run_dir: str, result: Any) -> bool:
    """A cached result is only reusable if its artifacts are still recorded with the same fingerprints and exist.

    ``result`` is an ArtifactRef, or a model with an ``artifacts`` list of them.
    """
    run = RunDir(run_dir)
    refs: list[ArtifactRef] = result.artifacts if hasattr(result, "artifacts") else [result]
    recorded = run.read_manifest().artifacts

    def ok(ref: ArtifactRef) -> bool:
        entry = recorded.get(ref.path)
        if entry is None or entry.sha256 != ref.sha256:
            return False
        # gs://: the objects are in the bucket (a fresh worker's local mirror may not hold them yet)
        return run.has(ref.path) if run.remote else run.path(ref.path).exists()

    return all(ok(r) for r in refs)


def run_stage(task: Any, run_dir: str, *args: Any, refresh: bool = False, **kwargs: Any) -> Any:
    """Call a stage task (cached unless ``refresh``); recompute if its cached artifacts were lost or changed."""
    result = task.with_options(refresh_cache=refresh)(run_dir, *args, **kwargs)
    if not intact(run_dir, result):
        result = task.with_options(refresh_cache=True)(run_dir, *args, **kwargs)
    return result
