"""A sweep survives losing a training worker, and its retry trains nothing (issue 24): a real Prefect server, a cpu
worker and two gpu workers.

A tiny sweep (the baseline and one loss variant, seeds 1 and 2) runs as the `sweep` deployment with `execution:
distributed`: the sweep run (cpu pool) computes the baseline's data stages, adopts them into the variant, and fans the
4 variant x seed trainings out as train-seed runs on the `gpu` pool, keyed `<variant>/<seed>` on the sweep's flow run.
Gpu worker A (`--limit 1`) takes the first; once it recorded a checkpoint, worker A and its flow-run process are killed
with SIGKILL (a pre-empted VM). The zombie automation (deployments/zombie_automation.py) marks the run Crashed, the
fan-out re-submits it, and worker B resumes it from the recorded checkpoint and trains the other seeds. The sweep
completes: noise floor, report.json with every variant x seed, then the chosen variant's logit caches and test
evaluation on the gpu pool and its package. A retry of the sweep run from the UI (back to Scheduled, same flow run)
completes again without a new train-seed run, every seed's best weights and attempts unchanged, the same report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import pytest
import yaml

from rtscore.storage import CACHE_ENV, RunDir, RunLayout
from rtscore.sweep.config import load_sweep_config
from rtscore.sweep.plan import SweepPlan, plan_sweep
from rtscore.sweep.run import REPORT_JSON
from rtscore.train.records import read_attempts
from tests.flows.configs import tiny_training_config, write_config
from tests.flows.prefect_server import RUN_TIMEOUT_S, Server, all_flow_runs, borrow, kill_machine, wait_final

SEEDS = [1, 2]
EPOCHS = 4  # a checkpoint every epoch: the kill lands after one and before the last
VARIANTS = {"gamma1": {"loss.focal_gamma": 1.0}}
CHILD_KEY = "rts-pipeline/{parent}/"  # flows.fanout.idempotency_key's prefix of the sweep's child runs


@pytest.fixture(scope="module")
def server(prefect_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The session's server, with the zombie automation; the workers are started by the test."""
    with borrow(prefect_server, tmp_path_factory.mktemp("sweep-server") / "logs") as srv:
        yield srv


def _sweep_file(tmp_path: Path) -> Path:
    data = tiny_training_config(SEEDS)
    data["training"].update({"max_epochs": EPOCHS, "checkpoint": {"save_every_n_epochs": 1, "keep_last_n": 2}})
    write_config(tmp_path / "base.yaml", data)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml", "seeds": SEEDS, "variants": VARIANTS}))
    return path


def _children(srv: Server, parent: UUID) -> dict[str, Any]:
    """The sweep's child flow runs by key after "rts-pipeline/<sweep flow run>/" (flows.fanout.idempotency_key):
    "train-seed/<variant>/<seed>[/attempt-N]" on train-seed/stage-train-seed, and the chosen variant's
    "<variant>/logit-cache/<seed>" and "<variant>/evaluate-test/all"; each checked to be a child of the sweep run, a
    run of the deployment its key names, on the gpu pool."""
    prefix = CHILD_KEY.format(parent=parent)
    with srv.client() as client:
        deployments = {
            stage: client.read_deployment_by_name(f"{stage}/stage-{stage}").id
            for stage in ("train-seed", "logit-cache", "evaluate-test")
        }
        mine = [r for r in all_flow_runs(client) if (r.idempotency_key or "").startswith(prefix)]
        parents = {r.id: client.read_task_run(r.parent_task_run_id).flow_run_id for r in mine}
    runs = {r.idempotency_key.removeprefix(prefix): r for r in mine}
    for key, r in runs.items():
        stage = "train-seed" if key.startswith("train-seed/") else key.split("/")[1]
        assert parents[r.id] == parent and r.work_pool_name == "gpu" and r.deployment_id == deployments[stage], key
    return runs


def _train_runs(srv: Server, parent: UUID) -> dict[str, Any]:
    """The sweep's train-seed runs by item ("<variant>/<seed>[/attempt-N]")."""
    runs = _children(srv, parent).items()
    return {k.removeprefix("train-seed/"): r for k, r in runs if k.startswith("train-seed/")}


def _mid_training(plan: SweepPlan) -> tuple[str, int] | None:
    """A (variant, seed) with a recorded checkpoint but no run summary yet: caught mid-training."""
    for v in plan.variants:
        run = RunDir(v.run_dir)
        if not run.path("manifest.json").is_file():
            continue
        rels = run.read_manifest().artifacts
        for seed in SEEDS:
            if RunLayout.SEED_SUMMARY.at(seed=seed) in rels:
                continue
            if any(RunLayout.RESUME_EPOCH.bind(seed=seed).match(rel) for rel in rels):
                return v.name, seed
    return None


def _trained(plan: SweepPlan) -> dict[str, Any]:
    """Per variant x seed: the recorded best weights' sha256 and attempts.json as recorded."""
    out: dict[str, Any] = {}
    for v in plan.variants:
        run = RunDir(v.run_dir)
        for seed in SEEDS:
            entry = run.require(RunLayout.BEST_WEIGHTS.at(seed=seed))
            attempts = run.require(RunLayout.SEED_ATTEMPTS.at(seed=seed))
            out[f"{v.name}/{seed}"] = (entry.sha256, attempts.sha256, run.path(attempts.path).read_bytes())
    return out


@pytest.mark.slow
def test_a_distributed_sweep_whose_gpu_worker_is_killed_completes_and_its_retry_trains_nothing(
    server: Server, tmp_path: Path
) -> None:
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import AwaitingRetry

    started = time.monotonic()
    sweep_file = _sweep_file(tmp_path)
    sweep_dir = tmp_path / "sweep"
    sweep_cfg, base = load_sweep_config(sweep_file)
    plan = plan_sweep(sweep_cfg, base, str(sweep_dir))  # the flow's plan: the variants' run directories
    items = sorted(f"{v.name}/{s}" for v in plan.variants for s in SEEDS)
    assert len(items) == 4 and plan.baseline == "baseline"

    server.env[CACHE_ENV] = str(tmp_path / "cpu-cache")
    server.start("worker-cpu", "worker", "start", "--pool", "cpu-process")
    server.env[CACHE_ENV] = str(tmp_path / "gpu-a-cache")
    worker_a = server.start("worker-gpu-a", "worker", "start", "--pool", "gpu", "--limit", "1")

    params = {
        "sweep": str(sweep_file),
        "sweep_dir": str(sweep_dir),
        "execution": "distributed",
        "distributed": {"poll_interval_s": 1.0, "timeout_s": RUN_TIMEOUT_S, "max_attempts": 3},
    }
    with temporary_settings(updates={PREFECT_API_URL: server.url}):
        # run_deployment is typed sync-or-async; called sync, it returns the FlowRun
        sweep = cast(FlowRun, run_deployment("sweep/rts-sweep", parameters={"params": params}, timeout=0))

    # Kill worker A while its seed is mid-training: a checkpoint recorded, the seed not finished.
    deadline = time.monotonic() + RUN_TIMEOUT_S
    caught: tuple[str, int] | None = None
    next_check = 0.0
    while caught is None:
        assert time.monotonic() < deadline, f"no seed caught mid-training:\n{server.log_tail()}"
        caught = _mid_training(plan)
        if caught is None and time.monotonic() > next_check:  # a sweep that ended (or failed) first: say so
            next_check = time.monotonic() + 5
            with server.client() as client:
                state = client.read_flow_run(sweep.id).state
            assert not state.is_final(), f"the sweep ended {state} before a seed was caught:\n{server.log_tail()}"
        time.sleep(0.1)
    kill_machine(worker_a)
    killed = f"{caught[0]}/{caught[1]}"

    server.env[CACHE_ENV] = str(tmp_path / "gpu-b-cache")
    server.start("worker-gpu-b", "worker", "start", "--pool", "gpu", "--limit", "2")
    first = wait_final(server, sweep.id)
    assert first.state.is_completed(), f"the sweep ended {first.state}:\n{server.log_tail()}"

    # One train-seed run per variant x seed, children of the sweep run; the killed one Crashed and re-submitted.
    runs = _train_runs(server, sweep.id)
    assert sorted(runs) == sorted([*items, f"{killed}/attempt-1"]), sorted(runs)
    crashed = runs[killed]
    assert crashed.state.is_crashed() and "heartbeat" in (crashed.state.message or ""), crashed.state
    assert all(r.state.is_completed() for key, r in runs.items() if key != killed), runs
    resumed = runs[f"{killed}/attempt-1"]
    attempts = read_attempts(RunDir(plan.variant(caught[0]).run_dir), caught[1]).attempts
    assert [(a.flow_run_id, a.status) for a in attempts] == [
        (str(crashed.id), "interrupted"),
        (str(resumed.id), "completed"),
    ]
    assert 1 <= attempts[0].last_epoch < EPOCHS and attempts[1].resumed_from_epoch == attempts[0].last_epoch
    assert attempts[1].last_epoch == EPOCHS
    for key, r in runs.items():
        if "/attempt-" not in key:
            name, seed = key.split("/")
            p = r.parameters["params"]
            assert (p["seed"], p["overrides"]) == (int(seed), plan.variant(name).overrides), key

    # The report: every variant x seed, judged, a choice, the chosen variant tested after the choice.
    sweep_run = RunDir(str(sweep_dir))
    report = json.loads(sweep_run.path(REPORT_JSON).read_text())
    assert report["status"] == "finished"
    assert {v["name"]: v["seeds"] for v in report["variants"]} == {v.name: SEEDS for v in plan.variants}
    assert all(sorted(v["metric"]["values"]) == [str(s) for s in SEEDS] for v in report["variants"])
    assert report["noise_floor"] is not None and report["chosen"] in {v.name for v in plan.variants}
    gamma = next(v for v in report["variants"] if v["name"] == "gamma1")
    assert gamma["judgement"]["verdict"] and gamma["shared"], "the variant adopted the baseline's data stages"
    if sweep_cfg.after_training:
        assert report["tested"] == [report["chosen"]] and report["test"][report["chosen"]]
        chosen = RunDir(plan.variant(report["chosen"]).run_dir)
        assert chosen.entry(RunLayout.TEST_REPORT.at()) is not None and chosen.entry(RunLayout.PACKAGE.at())
        after = sorted(k for k in _children(server, sweep.id) if not k.startswith("train-seed/"))
        c = report["chosen"]
        assert after == sorted([f"{c}/evaluate-test/all", *(f"{c}/logit-cache/{s}" for s in SEEDS)]), after

    # A retry of the sweep from the UI (same flow run back to Scheduled): completes, trains nothing again.
    trained = _trained(plan)
    children = {k: r.id for k, r in _children(server, sweep.id).items()}
    report_bytes = sweep_run.path(REPORT_JSON).read_bytes()
    with server.client() as client:
        result = client.set_flow_run_state(sweep.id, AwaitingRetry(message="Retry from the test"))
        assert result.status.value == "ACCEPT", result
    again = wait_final(server, sweep.id)
    assert again.state.is_completed(), f"the retry ended {again.state}:\n{server.log_tail()}"
    assert {k: r.id for k, r in _train_runs(server, sweep.id).items()} == {k: r.id for k, r in runs.items()}
    assert {k: r.id for k, r in _children(server, sweep.id).items()} == children, "no new child run of any stage"
    assert _trained(plan) == trained
    assert sweep_run.path(REPORT_JSON).read_bytes() == report_bytes
    print(f"sweep server test: {time.monotonic() - started:.0f} s after the server started")
