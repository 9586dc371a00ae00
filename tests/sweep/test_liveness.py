"""`rts sweep --status` tells a sweep whose run is going on from one whose run is gone: the run's record in the sweep
directory (runner.json: host, pid, heartbeat) is kept fresh while it runs, removed once it finished, marked with the
error when it failed; a kill -9 leaves a pid that no longer runs (this host) or a heartbeat that has gone stale
(another host). A sweep whose run is gone reads as interrupted, with the command that resumes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rtscore.config.base import parse_config
from rtscore.storage import RunDir
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.liveness import RUNNER_NAME, STALE_S, Runner, liveness, read_runner, sweep_running
from rtscore.sweep.plan import PlannedVariant, SweepPlan
from rtscore.sweep.run import write_plan
from rtscore.sweep.status import sweep_status
from tests.flows.configs import tiny_training_config, write_config

ROOT = Path(__file__).resolve().parents[2]
RESUME = "rts sweep sweep.yaml --dir out"


@pytest.fixture
def started(tmp_path: Path) -> tuple[SweepConfig, Path, str]:
    """A sweep that has written its plan (two variants, nothing trained yet), as a run leaves it before training:
    built by hand (no planning, no training)."""
    base = write_config(tmp_path / "base.yaml", tiny_training_config([1, 2]))
    sweep = parse_config(SweepConfig, {"name": "s", "base": str(base), "variants": {"g": {"loss.focal_gamma": 1.0}}})
    sweep_dir = str(tmp_path / "sweep")
    variants = [
        PlannedVariant(name=n, overrides=o, run_dir=f"{sweep_dir}/variants/{n}", stages=[])
        for n, o in sweep.all_variants().items()
    ]
    write_plan(
        SweepPlan(
            name="s",
            base_config=str(base),
            sweep_dir=sweep_dir,
            baseline="baseline",
            seeds=[1, 2],
            metric=sweep.metric,
            variants=variants,
        )
    )
    return sweep, base, sweep_dir


def _status(started: tuple[SweepConfig, Path, str]) -> str:
    return sweep_status(*started, resume=RESUME)


def test_a_sweep_without_a_run_going_on_is_not_said_to_be_running(started: tuple[SweepConfig, Path, str]) -> None:
    """What a sweep killed before this record existed leaves: a plan, no finished report, no run recorded."""
    status = _status(started)
    head = status.splitlines()[0]
    assert head.startswith("sweep s (") and "running" not in head, status
    assert f"resume: {RESUME}" in status


def test_a_sweep_killed_with_minus_9_reads_as_interrupted_with_how_to_resume(
    started: tuple[SweepConfig, Path, str],
) -> None:
    sweep_dir = started[2]
    code = textwrap.dedent(
        f"""
        import time
        from rtscore.sweep.liveness import sweep_running
        with sweep_running({sweep_dir!r}):
            print("ready", flush=True)
            time.sleep(120)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        alive = _status(started)
        assert alive.startswith("sweep s (running)") and f"run: pid {proc.pid} on " in alive, alive
        assert "resume:" not in alive
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    killed = _status(started)
    assert killed.startswith("sweep s (interrupted)"), killed
    assert f"interrupted: its run (pid {proc.pid} on " in killed and "is gone" in killed
    assert f"resume: {RESUME} (with the options it was started with)" in killed


def test_a_finished_run_removes_its_record_and_a_failed_one_says_why(
    started: tuple[SweepConfig, Path, str],
) -> None:
    sweep_dir = started[2]
    with sweep_running(sweep_dir, interval_s=0.01) as runner:
        first = read_runner(RunDir(sweep_dir))
        assert first is not None and first.pid == os.getpid() and first.started == runner.started
        deadline = time.monotonic() + 10
        while (now := read_runner(RunDir(sweep_dir))) is None or now.heartbeat == first.heartbeat:
            assert time.monotonic() < deadline, "the heartbeat is refreshed while the sweep runs"
            time.sleep(0.02)
        assert _status(started).startswith("sweep s (running)")
    assert read_runner(RunDir(sweep_dir)) is None and not (Path(sweep_dir) / RUNNER_NAME).exists()
    assert RUNNER_NAME not in RunDir(sweep_dir).read_manifest().artifacts
    with pytest.raises(RuntimeError), sweep_running(sweep_dir):
        raise RuntimeError("no space left on device\nmore lines")
    failed = _status(started)
    assert failed.startswith("sweep s (failed)"), failed
    assert "RuntimeError: no space left on device" in failed and "more lines" not in failed
    assert f"resume: {RESUME}" in failed


def test_a_run_on_another_host_is_judged_by_its_heartbeat() -> None:
    now = datetime.now(UTC)
    runner = Runner(host="elsewhere", pid=1, process_started=0.0, started=now, heartbeat=now - timedelta(seconds=30))
    assert liveness(runner, now).state == "running"
    stale = runner.model_copy(update={"heartbeat": now - timedelta(seconds=STALE_S + 60)})
    gone = liveness(stale, now)
    assert gone.state == "interrupted" and "no heartbeat since" in gone.detail
