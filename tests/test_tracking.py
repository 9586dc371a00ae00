from __future__ import annotations

from pathlib import Path

import pytest

from rtscore.config.pipeline import MLflowConfig
from rtscore.tracking import Tracker, default_tracking_uri, flatten


def test_flatten() -> None:
    assert flatten("", {"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_default_uri_is_sqlite_under_the_artifact_root(tmp_path: Path) -> None:
    assert default_tracking_uri(tmp_path / "run") == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


@pytest.mark.slow
def test_parent_and_nested_runs_with_explicit_ids(tmp_path: Path) -> None:
    tracker = Tracker(MLflowConfig(experiment_name="t"), tmp_path / "run")
    parent = tracker.start_run("multi-seed")
    child = tracker.start_run("seed_42", parent, {"rts.seed": "42"})
    tracker.log_params(child, {"loss.name": "focal", "seed": 42})
    tracker.log_params(child, {"seed": 42})  # re-logging on resume is harmless
    tracker.log_metrics(child, {"val_realistic_pr_auc_geomean": 0.25, "nan_metric": float("nan")}, step=3)
    (tmp_path / "m.txt").write_text("x")
    tracker.log_artifact(child, tmp_path / "m.txt")
    tracker.end_run(child)
    run = tracker.client.get_run(child)
    assert run.data.tags["mlflow.parentRunId"] == parent and run.data.params["loss.name"] == "focal"
    assert run.data.metrics == {"val_realistic_pr_auc_geomean": 0.25} and run.info.status == "FINISHED"
    assert [a.path for a in tracker.client.list_artifacts(child)] == ["m.txt"]
    assert tracker.find_run("seed_42", parent) == child
    assert (tmp_path / "mlflow.db").exists()


def test_disabled_tracker_is_a_no_op(tmp_path: Path) -> None:
    tracker = Tracker(MLflowConfig(enabled=False), tmp_path)
    assert tracker.start_run("x") is None
    tracker.log_metrics(None, {"a": 1.0}, step=0)
    tracker.end_run(None)
