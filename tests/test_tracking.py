from __future__ import annotations

from pathlib import Path

import pytest

from rtscore.config.pipeline import MLflowConfig
from rtscore.tracking import Tracker, default_tracking_uri, flatten

IMAGE_SHA = "fedcba9876543210fedcba9876543210fedcba98"
GIT_COMMIT_TAG = "mlflow.source.git.commit"  # MLflow's own tag: its UI shows the commit


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


def test_find_run_open_only_and_by_tags(tmp_path: Path) -> None:
    """What a resumed seed and a re-run sweep continue: an open run of the name under the parent (a finished one is
    not continued), and a sweep's run by its directory tag (another directory's sweep of one name is not)."""
    tracker = Tracker(MLflowConfig(experiment_name="t"), tmp_path / "run")
    parent = tracker.start_run("variant-a")
    done = tracker.start_run("seed_1", parent)
    tracker.end_run(done)
    assert tracker.find_run("seed_1", parent, running_only=True) is None
    assert tracker.find_run("seed_1", parent) == done
    killed = tracker.start_run("seed_2", parent)  # an attempt killed before its first checkpoint: never ended
    assert tracker.find_run("seed_2", parent, running_only=True) == killed
    here = tracker.start_run("sweep-s", tags={"rts.sweep_dir": "/sweeps/a"})
    tracker.start_run("sweep-s", tags={"rts.sweep_dir": "/sweeps/b"})
    assert tracker.find_run("sweep-s", tags={"rts.sweep_dir": "/sweeps/a"}) == here


def test_disabled_tracker_is_a_no_op(tmp_path: Path) -> None:
    tracker = Tracker(MLflowConfig(enabled=False), tmp_path)
    assert tracker.start_run("x") is None
    tracker.log_metrics(None, {"a": 1.0}, step=0)
    tracker.end_run(None)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_runs_go_to_a_tracking_server_tagged_with_the_flow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlflow server` with a SQLite backend and an artifact root, as in the cloud profile (README)."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    port = _free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "server-artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, "mlflow server exited"
            assert time.monotonic() < deadline, "mlflow server did not start"
            time.sleep(0.5)
        monkeypatch.setenv("RTS_FLOW_RUN_ID", "0b6e2c1e-flow-run")
        tracker = Tracker(MLflowConfig(tracking_uri=url, experiment_name="server-test"), tmp_path / "run")
        parent = tracker.start_run("multi-seed")
        child = tracker.start_run("seed_42", parent)
        tracker.log_metrics(child, {"val_realistic_pr_auc_geomean": 0.5}, step=1)
        (tmp_path / "curves.png").write_bytes(b"\x89PNG fake")
        tracker.log_artifact(child, tmp_path / "curves.png")
        tracker.end_run(child)
        run = tracker.client.get_run(child)
        assert run.data.tags["prefect.flow_run_id"] == "0b6e2c1e-flow-run"
        assert run.data.tags["mlflow.parentRunId"] == parent
        assert [a.path for a in tracker.client.list_artifacts(child)] == ["curves.png"]
        assert any((tmp_path / "server-artifacts").rglob("curves.png")), "artifacts land in the server's root"
        assert not (tmp_path / "mlflow.db").exists(), "no local SQLite when a server is configured"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("image_sha", [IMAGE_SHA, None])
def test_every_run_records_the_commit_it_ran_from_without_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, image_sha: str | None
) -> None:
    """An image worker (no .git, guide §10.1): training's and the multi-seed parent's runs carry the image's commit
    (``mlflow.source.git.commit``, as run_metadata.json records it); without the build argument, no commit tag."""
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "no-git"))  # git finds no repository, as in the image
    if image_sha is None:
        monkeypatch.delenv("RTS_GIT_SHA", raising=False)
    else:
        monkeypatch.setenv("RTS_GIT_SHA", image_sha)
        monkeypatch.setenv("RTS_GIT_DIRTY", "true")
    tracker = Tracker(MLflowConfig(experiment_name="t"), tmp_path / "run")
    parent = tracker.start_run("multi-seed")
    child = tracker.start_run("seed_42", parent, {"rts.seed": "42"})
    for run_id in (parent, child):
        tags = tracker.client.get_run(run_id).data.tags
        if image_sha is None:
            assert GIT_COMMIT_TAG not in tags and tags["rts.git_source"] == "none" and "rts.git_dirty" not in tags
        else:
            assert tags[GIT_COMMIT_TAG] == image_sha and tags["rts.git_source"] == "image"
            assert tags["rts.git_dirty"] == "true"
