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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, TypeVar

from prefect import Task
from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler
from pydantic import ValidationError

from flows.form import FormModel
from flows.params import (
    SPLITS,
    DataParams,
    GenerateParams,
    LogitCacheParams,
    MultiSeedParams,
    RunParams,
    SeedStageParams,
    StageParams,
    TrainSeedParams,
)
from flows.server_watchdog import TOKEN_ENV
from rtscore.config import PipelineConfig, load_pipeline_config
from rtscore.data.tiling.rules import check_data_roots
from rtscore.errors import PipelineError
from rtscore.stages import BY_NAME, ArtifactRef, StageSpec, calibrated_seeds, check_seed_model, trained_seeds
from rtscore.storage import RunDir, RunLayout, StorageError
from rtscore.storage.gcs import check_access
from rtscore.tracking import FLOW_RUN_ENV  # set here for a flow run; rtscore reads it (MLflow tags, records)

LIBRARY_LOGGERS = ("rtscore",)  # loggers whose records go to the Prefect run's logs (the Logs tab)
STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STARTUP_TIMEOUT_S = 180  # Prefect's default (20 s) is too short on a loaded 2-core machine
_WATCHDOG = Path(__file__).with_name("server_watchdog.py")

M = TypeVar("M", bound=FormModel)

__all__ = [
    "FLOW_RUN_ENV",
    "LIBRARY_LOGGERS",
    "STARTUP_TIMEOUT_ENV",
    "STARTUP_TIMEOUT_S",
    "HasArtifacts",
    "PrefectServerError",
    "StageArgs",
    "check_inputs",
    "flow_run_scope",
    "intact",
    "load_config",
    "name_fields",
    "refresh_of",
    "route_library_logs",
    "run_name",
    "run_namer",
    "run_stage",
    "selected_seeds",
    "selections",
    "skip_generation_of",
    "stage_run_name",
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

    ``params.overrides`` set dotted keys of the file first; ``skip_generation`` adopts the run's existing stores
    instead of generating them; ``params.deterministic`` (when set) overrides ``training.deterministic``.
    """
    cfg = load_pipeline_config(params.config, params.overrides)
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
    "multi-seed-train": "rts train",
    "logit-cache": "rts calibrate",
    "calibrate": "rts calibrate",
    "evaluate-test": "rts evaluate-test",
    "package": "rts package build",
}


def check_inputs(stage: str, params: RunParams) -> None:
    """Before a flow command starts Prefect's server: what ``stage``, the first stage the command runs, reads is
    there. Each declared input (for the seeds or splits the command selects, found as the flow will find them:
    :func:`selections`) is recorded in the run's manifest and present (gs://: its objects exist); each location it
    reads outside the run (a GeoTIFF data root, a store to adopt) exists; a data root to ingest was cut with the
    config's split rules (:func:`~rtscore.data.tiling.rules.check_data_roots`); the config describes the model each
    selected seed's weights were trained as (a local run; :func:`rtscore.stages.check_seed_model`). Reads only:
    nothing is written or staged but the calibration summary of a gs:// run that evaluate-test and package take their
    seeds from.

    Raises:
        StorageError: the first missing input, naming it and the command that makes it.
        ConfigError: a data root cut with other split rules, naming its tiling.json, the config and the rules.
        CheckpointError: a seed trained as another model than the config describes (its model overrides missing).
    """
    spec = BY_NAME[stage]
    cfg = load_config(params, skip_generation_of(params))
    run = RunDir(params.run_dir)
    for selection in selections(spec, params, cfg, run):
        for rel in spec.input_paths(selection):
            if not run.has(rel):
                makers = [s.name for s in BY_NAME.values() if any(out.match(rel) is not None for out in s.outputs)]
                how = f"; run {STAGE_COMMANDS.get(makers[0], makers[0])} first" if makers else ""
                raise StorageError(f"run {run.uri} has no {rel} (an input of {stage}){how}")
        for location in spec.source_locations(cfg, selection, run):
            if location.startswith("gs://"):
                check_access(location, must_exist=True)
            elif not Path(location).exists():
                what = ", ".join(f"{k} {v}" for k, v in selection.items())
                raise StorageError(f"{location} does not exist ({stage} reads it for {what})")
        if RunLayout.BEST_WEIGHTS in spec.inputs and not run.remote:
            for seed in _seeds_of(selection):
                check_seed_model(run, cfg, seed)
    if spec.name == "generate-dataset" and not cfg.data.skip_generation:
        check_data_roots(cfg, params.config if not params.overrides else f"{params.config} with its overrides")


def _seeds_of(selection: StageArgs) -> list[int]:
    """The seeds a stage run selects: its ``seed`` or its ``seeds``."""
    one, many = selection.get("seed"), selection.get("seeds")
    return [one] if isinstance(one, int) else list(many) if isinstance(many, list) else []


# The values a stage function takes after (run_dir, cfg) for one run of it: the parameters that select its work
# (split, seed, seeds: StageSpec.params), and for train-seed how it starts (fresh, parent MLflow run).
StageArgs = dict[str, str | int | list[int] | bool | None]


def selections(spec: StageSpec, params: RunParams, cfg: PipelineConfig, run: RunDir) -> list[StageArgs]:
    """One entry per run of ``spec`` that a flow with ``params`` makes: the values of the spec's parameters
    (``[{}]`` for a stage without any). The flows run exactly these, and :func:`check_inputs` checks their inputs."""
    if not spec.params:
        return [{}]
    if "split" in spec.params:
        return [{"split": s} for s in (params.splits if isinstance(params, GenerateParams) else SPLITS)]
    seeds = selected_seeds(spec, params, cfg, run)
    return [{"seed": s} for s in seeds] if "seed" in spec.params else [{"seeds": seeds}]


# The seeds a stage over trained seeds takes when the command names none: every trained seed, or those
# calibrated together last (so `rts train --seed 42` -> calibrate -> evaluate-test -> package needs no --seeds).
TRAINED, CALIBRATED = "trained", "calibrated"
DEFAULT_SEEDS = {"logit-cache": TRAINED, "calibrate": TRAINED, "evaluate-test": CALIBRATED, "package": CALIBRATED}


def selected_seeds(spec: StageSpec, params: RunParams, cfg: PipelineConfig, run: RunDir) -> list[int]:
    """The seeds ``params`` select for ``spec``: given ones (checked to be trained where the stage reads their
    weights), else the config's (training) or the run's (:data:`DEFAULT_SEEDS`)."""
    if isinstance(params, TrainSeedParams):
        return [params.seed_of(cfg)]
    if isinstance(params, LogitCacheParams):
        return [params.seed]
    if isinstance(params, MultiSeedParams):
        return params.seeds or cfg.training.seeds
    if isinstance(params, SeedStageParams) and spec.name in DEFAULT_SEEDS:
        if DEFAULT_SEEDS[spec.name] == TRAINED:
            return trained_seeds(run, params.seeds)
        return params.seeds or calibrated_seeds(run)
    raise TypeError(f"no seeds of stage {spec.name} for {type(params).__name__}")


def skip_generation_of(params: RunParams) -> bool:
    """Whether the flow adopts the run's existing stores (a data flow's ``skip_generation``)."""
    return isinstance(params, DataParams) and params.skip_generation


def refresh_of(params: RunParams) -> bool:
    """Whether the flow recomputes its stages even when a cached result is intact (``refresh``; train-seed and
    multi-seed-train: ``fresh``, which also starts the seeds over)."""
    if isinstance(params, StageParams):
        return params.refresh
    if isinstance(params, TrainSeedParams | MultiSeedParams):
        return params.fresh
    return False


def run_name(flow: str, params: FormModel, fields: Sequence[str]) -> str:
    """A flow run's name: the flow's name, then the value of each of ``fields`` that is not the field's default
    (the run directory always),
    e.g. ``train-seed-42``, ``calibrate-seeds-42-43``, ``map-chunk-3``, ``rts-pipeline-quickstart`` (a list is
    "<field>-<values>", a path its last component)."""
    parts = [flow]
    for name in fields:
        value = getattr(params, name)
        field = type(params).model_fields[name]
        if name != "run_dir" and value == field.get_default(call_default_factory=True, validated_data=dict(params)):
            continue
        if isinstance(value, list | tuple):
            parts += [name, *map(str, value)]
        elif isinstance(value, str):
            parts.append(PurePosixPath(value.rstrip("/")).name or value)
        else:
            parts.append(str(value))
    return "-".join(parts)


def name_fields(spec: StageSpec, model: type[FormModel]) -> tuple[str, ...]:
    """The fields of a stage flow's params that name its runs: the stage's parameters (``seed``, ``seeds``) as the
    model spells them (``split`` -> ``splits``)."""
    return tuple(f for p in spec.params for f in (p, f"{p}s") if f in model.model_fields)


def stage_run_name(spec: StageSpec, params: FormModel) -> str:
    """The name of a run of ``spec``'s flow with ``params`` (what a fan-out names the child runs it starts)."""
    return run_name(spec.name, params, name_fields(spec, type(params)))


def run_namer(flow: str, model: type[M], fields: Sequence[str]) -> Callable[[], str]:
    """The ``flow_run_name`` of a flow: :func:`run_name` of the run's ``params``, for runs started from Python, as a
    subflow, from the UI or by a deployment. A run started under a longer name of its own keeps it (a fan-out's
    ``-retry-<n>``, a sweep's ``train-seed-42-<variant>``); a name that cannot be worked out is the flow's."""

    def name() -> str:
        ctx = FlowRunContext.get()
        raw = ctx.parameters.get("params") if ctx is not None and ctx.parameters else None
        try:
            params = raw if isinstance(raw, model) else model.model_validate(raw)
        except ValidationError:
            return flow
        wanted = run_name(flow, params, fields)
        current = ctx.flow_run.name if ctx is not None and ctx.flow_run is not None else ""
        return current if current.startswith(f"{wanted}-") else wanted

    return name


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


class HasArtifacts(Protocol):
    """A stage result that carries its recorded artifacts (TrainResult, CalibrationResult, TestResult)."""

    artifacts: list[ArtifactRef]


R = TypeVar("R", bound=ArtifactRef | HasArtifacts)


def intact(run_dir: str, result: ArtifactRef | HasArtifacts) -> bool:
    """A cached result is only reusable if its artifacts are still recorded with the same fingerprints and exist."""
    run = RunDir(run_dir)
    refs = [result] if isinstance(result, ArtifactRef) else result.artifacts
    recorded = run.read_manifest().artifacts

    def ok(ref: ArtifactRef) -> bool:
        entry = recorded.get(ref.path)
        if entry is None or entry.sha256 != ref.sha256:
            return False
        # gs://: the objects are in the bucket (a fresh worker's local mirror may not hold them yet)
        return run.has(ref.path) if run.remote else run.path(ref.path).exists()

    return all(ok(r) for r in refs)


def run_stage(
    task: Task[..., R], run_dir: str, *args: Any, refresh: bool = False, redo: StageArgs | None = None, **kwargs: Any
) -> R:
    """Call a stage task (cached unless ``refresh``); recompute if its cached artifacts were lost or changed, then
    with ``redo`` over the keyword arguments (train-seed: ``fresh``, since resuming a finished seed whose weights
    are gone would not write them again)."""
    result = task.with_options(refresh_cache=refresh)(run_dir, *args, **kwargs)
    if not intact(run_dir, result):
        result = task.with_options(refresh_cache=True)(run_dir, *args, **{**kwargs, **(redo or {})})
    return result
