"""Helpers shared by flows: config loading, the flow-run tag for MLflow, cached-result checks."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from flows.params import RunParams
from flows.ui import publish_summary
from rtscore.config import PipelineConfig, load_pipeline_config
from rtscore.stages import ArtifactRef
from rtscore.storage import RunDir

FLOW_RUN_ENV = "RTS_FLOW_RUN_ID"  # rtscore's MLflow tracker tags runs with it

__all__ = ["FLOW_RUN_ENV", "flow_run_scope", "intact", "load_config", "publish_summary", "run_stage"]


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


@contextlib.contextmanager
def flow_run_scope() -> Iterator[str | None]:
    """Set ``RTS_FLOW_RUN_ID`` to the current flow run's id for the body of a flow (restored afterwards).

    A subflow sets its own id and gives the parent's back when it returns, so what the parent logs after
    a subflow is still tagged with the parent.
    """
    from prefect.runtime import flow_run

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
