"""MLflow wrapper with explicit run ids (no thread-local active run: safe inside Prefect tasks)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtscore.config.pipeline import MLflowConfig
from rtscore.identity.commit import code_commit


def default_tracking_uri(run_dir: Path) -> str:
    """SQLite next to the runs of the artifact root (`<root>/mlflow.db`), so runs of one root compare."""
    return f"sqlite:///{(run_dir.resolve().parent / 'mlflow.db').as_posix()}"


# Set by the orchestration layer (flows/) at the start of a flow run; rtscore never imports Prefect.
FLOW_RUN_ENV = "RTS_FLOW_RUN_ID"


# MLflow's own tag for the source commit (its UI shows it); set only when a commit is known.
GIT_COMMIT_TAG = "mlflow.source.git.commit"


def run_context_tags() -> dict[str, str]:
    """Tags linking an MLflow run to what started it: the Prefect flow run, when there is one, and the code's
    commit (:func:`~rtscore.identity.commit.code_commit`, as ``run_metadata.json`` records it): ``rts.git_source``
    always (``checkout``, ``image`` or ``none``), the commit and ``rts.git_dirty`` when known."""
    tags: dict[str, str] = {}
    if flow_run := os.environ.get(FLOW_RUN_ENV):
        tags["prefect.flow_run_id"] = flow_run
    commit = code_commit()
    tags["rts.git_source"] = commit.source
    if commit.known:
        tags[GIT_COMMIT_TAG] = commit.sha
    if commit.dirty is not None:
        tags["rts.git_dirty"] = str(commit.dirty).lower()
    return tags


class Tracker:
    """A parent run per multi-seed training, a nested run per seed; a no-op when MLflow is disabled."""

    def __init__(self, cfg: MLflowConfig, run_dir: Path) -> None:
        self.enabled = cfg.enabled
        self.client: Any = None
        self.experiment_id: str | None = None
        if not self.enabled:
            return
        os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
        from mlflow.tracking import MlflowClient

        self.uri = cfg.tracking_uri or default_tracking_uri(run_dir)
        self.client = MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(cfg.experiment_name)
        if exp is None:
            location = (run_dir.resolve().parent / "mlruns").as_uri() if cfg.tracking_uri is None else None
            self.experiment_id = self.client.create_experiment(cfg.experiment_name, artifact_location=location)
        else:
            self.experiment_id = exp.experiment_id

    def start_run(
        self, name: str, parent_run_id: str | None = None, tags: Mapping[str, str] | None = None
    ) -> str | None:
        if not self.enabled:
            return None
        all_tags = {**run_context_tags(), **(tags or {})}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        return str(run.info.run_id)

    def find_run(
        self,
        name: str,
        parent_run_id: str | None = None,
        *,
        running_only: bool = False,
        tags: Mapping[str, str] | None = None,
    ) -> str | None:
        """The latest run of this name (under ``parent_run_id``, carrying ``tags``; ``running_only``: one never ended,
        e.g. of an attempt killed before it checkpointed), to continue it instead of opening a second one."""
        if not self.enabled:
            return None
        query = f"tags.mlflow.runName = '{name}'"
        if parent_run_id:
            query += f" and tags.mlflow.parentRunId = '{parent_run_id}'"
        if running_only:
            query += " and attributes.status = 'RUNNING'"
        for key, value in (tags or {}).items():
            query += f" and tags.`{key}` = '{value}'"
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=query, max_results=1, order_by=["attributes.start_time DESC"]
        )
        return str(runs[0].info.run_id) if runs else None

    def has_run(self, run_id: str | None) -> bool:
        """Whether this tracking store knows ``run_id`` (a seed resumed on another worker may carry the id of a
        run in that worker's local store)."""
        if not self.enabled or run_id is None:
            return False
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_run(run_id)
        except MlflowException:
            return False
        return True

    def log_params(self, run_id: str | None, params: Mapping[str, Any]) -> None:
        if not self.enabled or run_id is None:
            return
        from mlflow.entities import Param

        existing = self.client.get_run(run_id).data.params
        fresh = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        for i in range(0, len(fresh), 100):
            self.client.log_batch(run_id, params=fresh[i : i + 100])

    def log_metrics(self, run_id: str | None, metrics: Mapping[str, float], step: int) -> None:
        if not self.enabled or run_id is None:
            return

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [
            Metric(k, float(v), now, step)
            for k, v in metrics.items()
            if isinstance(v, int | float) and math.isfinite(v)
        ]
        for i in range(0, len(batch), 500):
            self.client.log_batch(run_id, metrics=batch[i : i + 500])

    def log_artifact(self, run_id: str | None, path: Path, artifact_path: str | None = None) -> None:
        if self.enabled and run_id is not None and path.exists():
            self.client.log_artifact(run_id, str(path), artifact_path)

    def end_run(self, run_id: str | None, status: str = "FINISHED") -> None:
        if self.enabled and run_id is not None:
            self.client.set_terminated(run_id, status=status)


def flatten(prefix: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """Nested config -> flat MLflow params (``loss.focal_gamma``)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(key, v))
        else:
            out[key] = v
    return out
