"""A failed run says what failed once (flows/failures.py): the PipelineError's text is the state message of each
flow run it fails, one line, and its traceback is in the logs once; and a worker stops on SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from prefect import task

from flows.failures import flow
from rtscore.errors import PipelineError
from tests.flows.configs import tiny_training_config, write_config
from tests.flows.prefect_server import Server, start_server, tree, wait_final

HINT = "training.device is 'cuda' but no CUDA device is available (set 'auto' or 'cpu')"
TRACEBACK = "Traceback (most recent call last)"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _prefect_records() -> Iterator[list[logging.LogRecord]]:
    handler = _Records()
    logger = logging.getLogger("prefect")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@task
def _stage(error: Exception) -> None:
    raise error


@flow(name="failing-stage")
def _stage_flow(error: Exception) -> None:
    _stage(error)


@flow(name="failing-pipeline")
def _pipeline(error: Exception) -> None:
    _stage_flow(error)


@flow(name="failing-body")
def _body(error: Exception) -> None:
    raise error


def _tracebacks(records: list[logging.LogRecord], error: BaseException) -> int:
    return sum(1 for r in records if r.exc_info and r.exc_info[1] is error)


def test_a_pipeline_error_is_the_state_message_and_its_traceback_is_logged_once(prefect_harness: None) -> None:
    error = PipelineError(HINT)
    with _prefect_records() as records:
        state = _pipeline(error, return_state=True)
    assert state.is_failed()
    assert state.message == HINT  # the hint first: not "Flow run encountered an exception: PipelineError: ..."
    assert _tracebacks(records, error) == 1  # the task run's; no flow run logs it again
    # Issue 38 (6): the parent's own logs (all its run page shows) say at error level what failed, and where.
    parent = str(state.state_details.flow_run_id)
    (line,) = [r for r in records if r.levelno >= logging.ERROR and getattr(r, "flow_run_id", "") == parent]
    (raised,) = [r for r in records if r.exc_info and r.exc_info[1] is error]  # the task run's, in the subflow
    assert raised.flow_run_id != parent  # type: ignore[attr-defined]
    where = f"task run '{raised.task_run_name}' of flow run '{raised.flow_run_name}'"  # type: ignore[attr-defined]
    assert line.getMessage() == f"failed in {where}: {HINT}"
    with pytest.raises(PipelineError, match="no CUDA device"):  # a caller (rts, a parent flow) gets the error
        _pipeline(PipelineError(HINT))


def test_a_pipeline_error_of_a_flow_body_is_logged_once_by_the_flow(prefect_harness: None) -> None:
    error = PipelineError("run r has no seed_1/summary.json\n(an input of calibrate); run rts train first")
    with _prefect_records() as records:
        state = _body(error, return_state=True)
    assert state.message == "run r has no seed_1/summary.json (an input of calibrate); run rts train first"
    assert _tracebacks(records, error) == 1


def test_a_retried_pipeline_run_shows_each_card_once_the_last_attempts(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38 (6): each attempt of a retried run (the same flow run, run again) published its cards again, and the
    run's Artifacts tab showed each key once per attempt, among them a progress card stuck at "training done; next:
    calibrate". The pipeline flow with its stages stubbed: calibrate fails on the first attempt, evaluate-test on
    the second; training publishes a card as a distributed pipeline's training does."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    import flows.pipeline as pipeline
    from flows import ui
    from flows.params import PipelineParams

    calibrations: list[list[int]] = []

    def train(self: pipeline.Local) -> list[SimpleNamespace]:
        ui.publish_table("multi-seed-train", [{"seed": 1}], "Per-seed training results")
        return [SimpleNamespace(result=SimpleNamespace(seed=1))]

    def calibrate(self: pipeline.Local, seeds: list[int]) -> SimpleNamespace:
        calibrations.append(seeds)
        if len(calibrations) == 1:
            raise PipelineError("calibration.target_precision 0.8 is not reachable")
        return SimpleNamespace()

    def evaluate_test(self: pipeline.Local, seeds: list[int]) -> None:
        raise PipelineError("evaluate-test failed")

    monkeypatch.setattr(pipeline, "data_pipeline", lambda params: None)
    monkeypatch.setattr(pipeline.Local, "train", train)
    monkeypatch.setattr(pipeline.Local, "calibrate", calibrate)
    monkeypatch.setattr(pipeline.Local, "evaluate_test", evaluate_test)
    params = PipelineParams(config=str(tmp_path / "p.yaml"), run_dir=str(tmp_path / "run"))
    state = pipeline.pipeline.with_options(retries=1)(params, return_state=True)
    assert state.is_failed() and state.message == "evaluate-test failed" and len(calibrations) == 2
    with get_client(sync_client=True) as client:
        run_id = state.state_details.flow_run_id
        cards = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    assert sorted(card.key or "" for card in cards) == ["multi-seed-train", "rts-pipeline-progress"]
    (progress,) = [card for card in cards if card.type == "progress"]
    assert progress.description == "evaluate-test failed (done: data, training, calibrate)"
    assert progress.data == 60.0


def test_any_other_exception_is_left_to_prefect(prefect_harness: None) -> None:
    error = ValueError("a bug")
    with _prefect_records() as records:
        state = _pipeline(error, return_state=True)
    assert state.is_failed()
    assert state.message is not None and "ValueError: a bug" in state.message
    assert _tracebacks(records, error) > 1  # every traceback Prefect gives a bug


# --- a real server, the README's workers -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("failures-server"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.slow
def test_a_failed_pipeline_run_shows_the_hint_once_as_its_state_and_one_traceback(
    server: Server, tmp_path: Path
) -> None:
    """The pipeline deployment with ``training.device: cuda`` on a machine without one: train-seed's task fails
    inside the multi-seed-train subflow of the pipeline run."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server.start("worker-cpu", "worker", "start", "--pool", "cpu-process")
    data = tiny_training_config([1])
    data["training"]["device"] = "cuda"
    params = {"config": str(write_config(tmp_path / "p.yaml", data)), "run_dir": str(tmp_path / "run")}
    with temporary_settings(updates={PREFECT_API_URL: server.url}):
        created = run_deployment("rts-pipeline/rts-pipeline", parameters={"params": params}, timeout=0)
    wait_final(server, created.id)
    time.sleep(5)  # the last log lines reach the server a moment after the state
    with server.client() as client:
        runs = tree(client, created.id)
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[r.id for r in runs])), limit=200
        )
    failed = {r.name: r.state.message for r in runs if r.state is not None and r.state.is_failed()}
    assert len(failed) == 2, failed  # the pipeline and its multi-seed-train subflow
    assert set(failed.values()) == {HINT}, failed
    text = "\n".join(log.message for log in logs)
    assert text.count(TRACEBACK) == 1, text  # Prefect alone: 4 (task, subflow, pipeline, process exit)
    (traceback,) = [log for log in logs if TRACEBACK in log.message]
    assert traceback.task_run_id is not None  # where it was raised: train-seed's task run
    # Issue 38 (6): the pipeline run's own logs say, at error level, what failed and in which run.
    (line,) = [log.message for log in logs if log.flow_run_id == created.id and log.level >= logging.ERROR]
    assert line.startswith("failed in task run 'train-seed-1") and line.endswith(f"'multi-seed-train': {HINT}"), line


def _started(log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and "started!" in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise AssertionError(f"worker not started after {timeout} s:\n{log.read_text(errors='replace')}")


@pytest.mark.slow
def test_a_worker_started_with_sigint_ignored_stops_on_sigterm(server: Server) -> None:
    """As a script's ``prefect worker start ... &`` (or a CI job) starts it: the worker inherits an ignored SIGINT.
    Prefect's worker stops on SIGTERM by sending itself SIGINT; the fixture's workers start with SIGINT at its
    default, so SIGTERM stops them within seconds, leaving no process behind."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        worker = server.start("worker-sigterm", "worker", "start", "--pool", "gpu")
    finally:
        signal.signal(signal.SIGINT, previous)
    _started(server.logs / "worker-sigterm.log")
    children = psutil.Process(worker.pid).children(recursive=True)
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker still runs 15 s after SIGTERM:\n" + (server.logs / "worker-sigterm.log").read_text())
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
