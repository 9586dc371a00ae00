"""Helpers shared by flows: config loading, the flow-run scope (MLflow tag, library logs in the run's
logs), cached-result checks."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler

from flows.params import RunParams
from rtscore.config import PipelineConfig, load_pipeline_config
from rtscore.stages import ArtifactRef
from rtscore.storage import RunDir

FLOW_RUN_ENV = "RTS_FLOW_RUN_ID"  # rtscore's MLflow tracker tags runs with it
LIBRARY_LOGGERS = ("rtscore",)  # loggers whose records go to the Prefect run's logs (the Logs tab)

__all__ = [
    "FLOW_RUN_ENV",
    "LIBRARY_LOGGERS",
    "flow_run_scope",
    "intact",
    "load_config",
    "route_library_logs",
    "run_stage",
]


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
