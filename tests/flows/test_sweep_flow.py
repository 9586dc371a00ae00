"""A 3-variant x 2-seed sweep end to end on CPU (`rts sweep`, local execution), killed with SIGKILL mid-way and run
again: the stages the variants share are computed once (their records in each variant's manifest are adopted from the
baseline's), no variant x seed is trained twice, the report has every verdict, and a third run changes nothing.

Each run talks to the session's Prefect server (``prefect_harness``, named by PREFECT_API_URL) rather than starting a
temporary one of its own: a command killed with its temporary server is tests/flows/test_local_api.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import quick_training

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("baseline", "gamma1", "ignore")
SEEDS = (1, 2)


def _sweep_cmd(sweep: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "flows.cli.main", "sweep", str(sweep), "--dir", str(out)]


def _env(home: Path) -> dict[str, str]:
    """The commands' environment: their own Prefect home (its result storage holds the stage caches of the three
    runs), the session's Prefect server."""
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(ROOT))
    env.update(PREFECT_API_URL=str(PREFECT_API_URL.value()))
    return env


def _manifest(run: Path) -> dict[str, Any]:
    path = run / "manifest.json"
    return json.loads(path.read_text())["artifacts"] if path.exists() else {}


def _attempts(out: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    found = {}
    for v in VARIANTS:
        for s in SEEDS:
            p = out / "variants" / v / "seeds" / f"seed_{s}" / "attempts.json"
            if p.exists():
                found[(v, s)] = json.loads(p.read_text())["attempts"]
    return found


def _trained(out: Path) -> set[tuple[str, int]]:
    """The variant x seeds whose training is recorded: their summary in the manifest and their last attempt
    completed (a kill between the two, which a loaded machine makes likely, leaves a stage that resumes)."""
    attempts = _attempts(out)
    return {
        (v, s)
        for v in VARIANTS
        for s in SEEDS
        if f"seeds/seed_{s}/run_summary.json" in _manifest(out / "variants" / v)
        and attempts.get((v, s), [{}])[-1].get("status") == "completed"
    }


@pytest.mark.slow
def test_sweep_shares_stages_survives_kill_and_reports(prefect_harness: None, tmp_path: Path) -> None:
    base = write_config(tmp_path / "base.yaml", quick_training(tiny_training_config(list(SEEDS))))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "base": base.name,
                "variants": {"gamma1": {"loss.focal_gamma": 1.0}, "ignore": {"loss.boundary_handling": "ignore"}},
                "after_training": False,
            }
        )
    )
    out = tmp_path / "out"
    env = _env(tmp_path / "prefect-home")

    # First run, killed (the whole process group: the command and anything it started) once gamma1 has a trained seed.
    proc = subprocess.Popen(
        _sweep_cmd(sweep, out),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while ("gamma1", 1) not in _trained(out):
        assert proc.poll() is None, "the sweep ended before it could be killed mid-way"
        assert time.monotonic() < deadline, "gamma1 seed 1 not trained within 10 minutes"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _attempts(out)
    done_before = _trained(out)
    assert ("baseline", 1) in done_before and ("baseline", 2) in done_before
    assert not (out / "report.json").exists(), "killed before the report"
    from rtscore.sweep.config import load_sweep_config
    from rtscore.sweep.status import sweep_status

    killed = sweep_status(*load_sweep_config(sweep), str(out))  # its run's record says it is gone, not running
    assert killed.startswith("sweep sweep (interrupted)") and f"pid {proc.pid} on " in killed, killed
    assert "resume: start it again as it was started" in killed

    # Run again: completes; what was trained before is not trained again.
    again = subprocess.run(_sweep_cmd(sweep, out), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "verdict" in again.stdout and "gamma1" in again.stdout, again.stdout[-2000:]
    assert not (out / "runner.json").exists(), "a finished run removes its record"
    after = _attempts(out)
    assert _trained(out) == {(v, s) for v in VARIANTS for s in SEEDS}
    for key in done_before:
        assert after[key] == before[key], f"{key} was trained before the kill and must not train again"
    for key, attempts in after.items():
        assert [a["status"] for a in attempts].count("completed") == 1, f"{key} completed once: {attempts}"

    # Shared stage runs were computed once, in the baseline, and adopted by the others (same content).
    base_m = _manifest(out / "variants" / "baseline")
    for v in ("gamma1", "ignore"):
        m = _manifest(out / "variants" / v)
        for split in ("train", "val", "test"):
            rel = f"datasets/{split}.zarr"
            assert m[rel]["sha256"] == base_m[rel]["sha256"]
            assert m[rel]["adopted_from"].endswith(f"variants/baseline/{rel}"), (v, rel)
        assert m["normalization_stats.json"]["adopted_from"].endswith("variants/baseline/normalization_stats.json")
    gamma_validation = _manifest(out / "variants" / "gamma1")["validation"]
    assert gamma_validation.get("adopted_from"), "loss.focal_gamma: the validation is shared"
    assert not _manifest(out / "variants" / "ignore")["validation"].get("adopted_from"), (
        "validate-data reads loss.boundary_handling: the registry gives 'ignore' its own validation"
    )
    assert all("adopted_from" not in e for e in base_m.values())
    plan = json.loads((out / "plan.json").read_text())
    shared = {v["name"]: {s["stage"] for s in v["stages"] if s["owner"] != v["name"]} for v in plan["variants"]}
    assert shared == {
        "baseline": set(),
        "gamma1": {"generate-dataset", "normalization-stats", "validate-data"},
        "ignore": {"generate-dataset", "normalization-stats"},
    }

    # The report: every variant x seed, a verdict for each non-baseline variant, the noise floor beside them.
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "finished" and report["chosen"] in VARIANTS
    by_name = {v["name"]: v for v in report["variants"]}
    assert list(by_name) == list(VARIANTS)
    for v in VARIANTS:
        assert by_name[v]["seeds"] == list(SEEDS) and set(by_name[v]["metric"]["values"]) == {"1", "2"}
    for v in ("gamma1", "ignore"):
        j = by_name[v]["judgement"]
        assert j["verdict"] in ("better", "worse", "within noise", "undecided") and j["seeds"] == list(SEEDS)
    assert report["noise_floor"]["seed"] == 1 and report["tested"] == []
    md = (out / "report.md").read_text()
    assert "Test-Realistic: not run" in md or "not run" in md
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # A third run: nothing trains, and the report is the same.
    first = (out / "report.json").read_text()
    third = subprocess.run(_sweep_cmd(sweep, out), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert _attempts(out) == after
    assert (out / "report.json").read_text() == first

    # --status prints the same table from the directory, without running anything.
    status = subprocess.run(
        [*_sweep_cmd(sweep, out), "--status"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0 and "gamma1" in status.stdout and "finished" in status.stdout

    # MLflow: a parent run per sweep, a child per variant (its overrides as params), the seeds' runs under those.
    from rtscore.config import load_pipeline_config
    from rtscore.tracking import Tracker

    tracker = Tracker(load_pipeline_config(base).mlflow, out / "variants" / "baseline")
    client, exp = tracker.client, [tracker.experiment_id]
    parents = client.search_runs(exp, "tags.mlflow.runName = 'sweep-sweep'")
    assert len(parents) == 1
    children = client.search_runs(exp, f"tags.mlflow.parentRunId = '{parents[0].info.run_id}'")
    names = sorted(c.info.run_name for c in children)
    assert names == ["variant-baseline", "variant-gamma1", "variant-ignore"], "one run per variant over all 3 runs"
    gamma = next(c for c in children if c.info.run_name == "variant-gamma1")
    assert gamma.data.params["override.loss.focal_gamma"] == "1.0"
    seeds = client.search_runs(exp, f"tags.mlflow.parentRunId = '{gamma.info.run_id}'")
    assert sorted(s.info.run_name for s in seeds) == ["seed_1", "seed_2"]
