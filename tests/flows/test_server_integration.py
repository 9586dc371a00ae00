"""The production path end to end: a real Prefect server, process work pools, `prefect deploy --all` from
prefect.yaml, workers, and the pipeline deployment triggered through the API.

One scenario serves the tests (training is the expensive part, and CI has two cores): the pipeline
deployment runs with ``execution: distributed`` and two seeds: per seed a train-seed and a logit-cache run on
the `gpu` pool (a local process pool standing in for the GPU pool), then one evaluate-test run there; the
pipeline run itself (cpu pool) only decides the calibration and packages. The decision fails on the first
attempt (its output path is blocked by a directory); the test unblocks it and retries the failed flow run
through the API as the UI's Retry button does. Then:

- the run completed with every stage's artifacts in its manifest and its artifacts in the UI;
- exactly one train-seed and one logit-cache run per seed and one evaluate-test run exist, on the gpu pool,
  children of the pipeline run, also after the retry (idempotency keys);
- the retry executed only calibrate, evaluate-test and package (task runs not served from the cache);
- the same pipeline with ``execution: local`` on the cpu pool then executes nothing: the cache is shared;
- the same config run with ``execution: local`` into a second run directory gives the same package, test
  report and calibration (only the run's own metadata differs: MLflow run id and dates).

The server, pools and workers are subprocesses with their own PREFECT_HOME and PREFECT_API_URL (the server is
the one the server tests of this test process share, tests/flows/conftest.py; the workers are this module's); the
test process talks to the server inside ``temporary_settings``, so the session's in-process test harness
(conftest.prefect_harness) is left alone. The commands are the README's ("Three ways to run").
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from rtscore.package.format import METADATA, STATS, SUMS
from rtscore.stages import STAGES
from rtscore.storage import RunLayout
from tests.flows.configs import tiny_training_config, write_config
from tests.flows.prefect_server import RUN_TIMEOUT_S, Server, borrow, tree, wait_final

STAGE_TASKS = tuple(s.name for s in STAGES)  # the cached stage tasks, first to last


@pytest.fixture(scope="module")
def server(prefect_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The session's server (`prefect server start`, two process pools, `prefect deploy --all`), a worker per
    pool."""
    with borrow(prefect_server, tmp_path_factory.mktemp("integration-workers") / "logs") as srv:
        srv.start("worker-cpu", "worker", "start", "--pool", "cpu-process")
        srv.start("worker-gpu", "worker", "start", "--pool", "gpu", "--limit", "1")
        yield srv


def _stage_task_runs(srv: Server, root: UUID) -> dict[str, tuple[str, str]]:
    """Task run id -> (stage name, state name) of the stage tasks in a flow run's tree, once all are final.

    Task run states reach the server as events, a moment after the flow run itself finishes: poll until the
    set of task runs is final and stable. Tasks that only track a subflow (named like the subflow) are left out.
    """
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId

    previous: dict[str, tuple[str, str]] | None = None
    deadline = time.monotonic() + 60
    with srv.client() as client:
        while True:
            runs = tree(client, root)
            tracking = {str(r.parent_task_run_id) for r in runs if r.parent_task_run_id}
            tasks = client.read_task_runs(
                task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[r.id for r in runs])),
                limit=200,
            )
            current = {
                str(t.id): (_task_name(t.name), t.state.name if t.state else "?")
                for t in tasks
                if str(t.id) not in tracking and _task_name(t.name) in STAGE_TASKS
            }
            final = all(t.state is not None and t.state.is_final() for t in tasks if str(t.id) in current)
            if final and current and current == previous:
                return current
            if time.monotonic() > deadline:
                raise AssertionError(f"task runs of {root} not final: {current}")
            previous = current
            time.sleep(1.0)


def _task_name(run_name: str) -> str:
    """The stage of a task run from the run's name, which names the split or seed (tasks/stages.py):
    `generate-dataset-train` -> `generate-dataset`, `train-seed-2` -> `train-seed`; other tasks as they are."""
    for stage in sorted(STAGE_TASKS, key=len, reverse=True):
        if run_name == stage or run_name.startswith(f"{stage}-"):
            return stage
    return run_name


def _executed(task_runs: dict[str, tuple[str, str]], ids: set[str] | None = None) -> Counter[str]:
    """Stage executions: task runs that ran (Completed or Failed), not the ones served from the cache."""
    return Counter(
        name
        for tid, (name, state) in task_runs.items()
        if (ids is None or tid in ids) and state in ("Completed", "Failed", "Crashed")
    )


@dataclass
class Scenario:
    run_dir: Path
    config: Path
    flow_run: Any
    first_state: str
    first: dict[str, tuple[str, str]]
    second: dict[str, tuple[str, str]]
    twin: UUID  # the same config with execution local into twin_dir, started alongside (see local_twin)
    twin_dir: Path


@pytest.fixture(scope="module")
def scenario(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """The distributed pipeline run through the deployment; calibrate fails once; a retry finishes it."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import AwaitingRetry

    base = tmp_path_factory.mktemp("deployed-run")
    config = write_config(base / "pipeline.yaml", tiny_training_config([1, 2]))
    run_dir = base / "run"
    blocker = run_dir / "calibration" / "gates.json"  # calibrate cannot write its gates: it fails
    blocker.mkdir(parents=True)
    (blocker / "blocked").write_text("the test removes this directory before the retry\n")
    params = {
        "config": str(config),
        "run_dir": str(run_dir),
        "execution": "distributed",
        "distributed": {
            "deployment": "train-seed/stage-train-seed",
            "poll_interval_s": 1.0,
            "timeout_s": RUN_TIMEOUT_S,
        },
    }
    # The local twin (test_the_distributed_package_equals_the_local_executions) runs on the cpu pool while the
    # distributed run's children run on the gpu pool: the two trainings overlap instead of adding up.
    twin_dir = tmp_path_factory.mktemp("local-twin") / "run"
    twin_params = {"config": str(config), "run_dir": str(twin_dir), "execution": "local"}
    with temporary_settings(updates={PREFECT_API_URL: server.url}):
        twin = run_deployment("rts-pipeline/rts-pipeline", parameters={"params": twin_params}, timeout=0)
        created = run_deployment("rts-pipeline/rts-pipeline", parameters={"params": params}, timeout=0)
    first = wait_final(server, created.id)
    first_tasks = _stage_task_runs(server, created.id)

    shutil.rmtree(blocker)
    with server.client() as client:
        # What the UI's Retry button does: the failed run goes back to Scheduled (AwaitingRetry), same id.
        result = client.set_flow_run_state(created.id, AwaitingRetry(message="Retry from the test"))
        assert result.status.value == "ACCEPT", result
    final = wait_final(server, created.id)
    assert final.state.is_completed(), f"retry ended {final.state}:\n{server.log_tail()}"
    second = _stage_task_runs(server, created.id)
    return Scenario(run_dir, config, final, first.state.name, first_tasks, second, twin.id, twin_dir)


@pytest.mark.slow
def test_pipeline_deployment_runs_every_stage_into_the_manifest(server: Server, scenario: Scenario) -> None:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    assert scenario.first_state == "Failed", "calibrate was blocked on the first attempt"
    assert scenario.flow_run.run_count == 2
    manifest = json.loads((scenario.run_dir / "manifest.json").read_text())["artifacts"]
    expected = {
        "config.resolved.yaml": "config",
        "datasets/train.zarr": "generate-dataset",
        "datasets/val.zarr": "generate-dataset",
        "datasets/test.zarr": "generate-dataset",
        "normalization_stats.json": "normalization-stats",
        "validation": "validate-data",
        "seeds/seed_1/best_deployment.pth": "train-seed",
        "seeds/seed_2/best_deployment.pth": "train-seed",
        "seeds/seed_2/run_summary.json": "train-seed",
        "seeds/summary.json": "multi-seed-train",
        "calibration/seed_1/logit_cache.zarr": "logit-cache",
        "calibration/deployment_config.yaml": "calibrate",
        "calibration/gates.json": "calibrate",
        "evaluation/test_report.json": "evaluate-test",
        "package": "package",
    }
    assert {k: manifest[k]["stage"] for k in expected if k in manifest} == expected
    summary = json.loads((scenario.run_dir / "seeds/summary.json").read_text())
    assert [s["seed"] for s in summary["seeds"]] == [1, 2]
    from rtscore.package import verify_package

    verdict = verify_package(scenario.run_dir / "package", allow_fallback_threshold=True)
    assert verdict.ok, verdict.failures()

    # What the UI shows: summaries, tables, links, images inline (a local PNG as a data: URI), progress.
    with server.client() as client:
        runs = tree(client, scenario.flow_run.id)
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[r.id for r in runs]))
        )
    kinds = Counter(a.type for a in artifacts)
    assert {"markdown", "table", "progress"} <= set(kinds), kinds
    keys = {a.key for a in artifacts if a.key}
    assert {"data-pipeline", "multi-seed-train", "calibration", "test-report", "test-report-per-seed"} <= keys
    # Issue 38 (6): the retried pipeline run shows each of its cards once, its last attempt's (the first attempt's
    # training and attempts cards and its progress card, stuck at "training done; next: calibrate", are gone).
    own_cards = Counter(a.key for a in artifacts if a.flow_run_id == scenario.flow_run.id)
    assert own_cards and set(own_cards.values()) == {1}, own_cards
    (progress,) = [a for a in artifacts if a.type == "progress" and a.flow_run_id == scenario.flow_run.id]
    assert float(progress.data) == 100.0 and progress.description == "package done; pipeline finished"
    # The pipeline run itself carries the final test table and the package (not only its subflows).
    own = {a.key: a for a in artifacts if a.flow_run_id == scenario.flow_run.id and a.key}
    assert {"rts-pipeline-test-results", "rts-pipeline-summary", "rts-pipeline-progress"} <= set(own), set(own)
    table = own["rts-pipeline-test-results"].data
    rows = json.loads(table) if isinstance(table, str) else table  # the API hands a table back as JSON text
    assert any("±" in str(cell) for row in rows for cell in row.values()), rows
    # Every card titled (a key, stage first); no file:// link a browser will not open (a local run's files are
    # listed in its stage summary); an image of a local run is inline markdown `![rel](data:...)`.
    assert all(a.key for a in artifacts), [a.description for a in artifacts if not a.key]
    markdown = [str(a.data) for a in artifacts if a.type == "markdown"]
    assert not any("file://" in md for md in markdown), [md[:80] for md in markdown if "file://" in md]
    assert any(md.startswith("![") and "curves.png](data:image/png;base64," in md for md in markdown)
    summary = next(md for md in markdown if md.startswith("# Data pipeline"))
    assert "![samples](data:image/png;base64," in summary, "the validation report's image shows inline"


@pytest.mark.slow
def test_distributed_run_starts_its_gpu_stages_as_gpu_pool_runs_once_even_when_retried(
    server: Server, scenario: Scenario
) -> None:
    """train-seed and logit-cache once per seed, evaluate-test once: flow runs of their deployments on the gpu
    pool, children of the pipeline run, each under its idempotency key, also after the pipeline's retry."""
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        DeploymentFilter,
        DeploymentFilterId,
    )
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.fanout import idempotency_key

    parent = str(scenario.flow_run.id)
    children: dict[str, list[Any]] = {}
    with server.client() as client:
        for name in (
            "train-seed/stage-train-seed",
            "logit-cache/stage-logit-cache",
            "evaluate-test/stage-evaluate-test",
        ):
            deployment = client.read_deployment_by_name(name)
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
            )
            mine = [r for r in runs if (r.idempotency_key or "").startswith(f"rts-pipeline/{parent}/")]
            children[name] = mine
            assert mine and all(r.state.is_completed() for r in mine), name
            assert all(r.work_pool_name == "gpu" and r.deployment_id == deployment.id for r in mine), name
            assert {r.parameters["params"]["run_dir"] for r in mine} == {str(scenario.run_dir)}, name
            # A child of the pipeline run: run_deployment links it to a task run of the parent.
            assert all(client.read_task_run(r.parent_task_run_id).flow_run_id == scenario.flow_run.id for r in mine)
        attempts = client.read_artifacts(  # the server's other modules' artifacts left out
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[scenario.flow_run.id]))
        )
    assert sorted(r.parameters["params"]["seed"] for r in children["train-seed/stage-train-seed"]) == [1, 2]
    assert sorted(r.parameters["params"]["seed"] for r in children["logit-cache/stage-logit-cache"]) == [1, 2]
    (test_run,) = children["evaluate-test/stage-evaluate-test"]
    assert test_run.parameters["params"]["seeds"] == [1, 2]
    assert test_run.idempotency_key == idempotency_key(parent, "evaluate-test", "all")
    # The attempts tables on the pipeline run: every child completed at its first attempt.
    own = {a.key: a for a in attempts if a.flow_run_id == scenario.flow_run.id and a.key}
    for stage, n in (("train-seed", 2), ("logit-cache", 2), ("evaluate-test", 1)):
        table = own[f"{stage}-attempts"].data
        rows = json.loads(table) if isinstance(table, str) else table
        assert [(r["attempt"], r["final state"]) for r in rows] == [(1, "COMPLETED")] * n, (stage, rows)

    # The key is the whole scheme: asking again for seed 1 of this parent returns the same run.
    again = children["train-seed/stage-train-seed"][0]
    with temporary_settings(updates={PREFECT_API_URL: server.url}):
        same = run_deployment(
            "train-seed/stage-train-seed",
            parameters={"params": again.parameters["params"]},
            timeout=0,
            idempotency_key=idempotency_key(parent, "train-seed", again.parameters["params"]["seed"]),
        )
    assert same.id == again.id


@pytest.mark.slow
def test_a_retry_after_a_failed_calibrate_reruns_only_calibrate_and_what_follows(scenario: Scenario) -> None:
    first = _executed(scenario.first)
    assert first == Counter(
        {
            "generate-dataset": 3,
            "normalization-stats": 1,
            "validate-data": 1,
            "train-seed": 2,
            "logit-cache": 2,
            "calibrate": 1,
        }
    ), first
    assert [s for n, s in scenario.first.values() if n == "calibrate"] == ["Failed"]
    retry = _executed(scenario.second, set(scenario.second) - set(scenario.first))
    assert retry == Counter({"calibrate": 1, "evaluate-test": 1, "package": 1}), retry
    cached = Counter(n for tid, (n, s) in scenario.second.items() if tid not in scenario.first and s == "Cached")
    assert {"generate-dataset", "normalization-stats", "validate-data"} <= set(cached), cached
    # The logit caches were built by logit-cache runs on the gpu pool; the retry reused those runs (their keys),
    # so it has no logit-cache task run at all, not even a cached one.
    assert "logit-cache" not in {n for tid, (n, s) in scenario.second.items() if tid not in scenario.first}


@pytest.mark.slow
def test_a_local_run_on_the_cpu_pool_reuses_what_the_gpu_pool_computed(server: Server, scenario: Scenario) -> None:
    """Results and cache keys are shared across pools: the same pipeline with `execution: local` on the
    `cpu-process` pool executes no stage (training ran in train-seed runs on the `gpu` pool)."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    params = {"config": str(scenario.config), "run_dir": str(scenario.run_dir), "execution": "local"}
    with temporary_settings(updates={PREFECT_API_URL: server.url}):
        created = run_deployment("rts-pipeline/rts-pipeline", parameters={"params": params}, timeout=0)
    final = wait_final(server, created.id)
    assert final.state.is_completed(), f"{final.state}:\n{server.log_tail()}"
    tasks = _stage_task_runs(server, created.id)
    assert _executed(tasks) == Counter(), tasks
    assert Counter(n for n, s in tasks.values() if s == "Cached") == Counter(
        {
            "generate-dataset": 3,
            "normalization-stats": 1,
            "validate-data": 1,
            "train-seed": 2,
            "logit-cache": 2,
            "calibrate": 1,
            "evaluate-test": 1,
            "package": 1,
        }
    )


@pytest.fixture(scope="module")
def local_twin(server: Server, scenario: Scenario) -> Path:
    """The scenario's config run with ``execution: local`` (every stage inside the pipeline run, cpu pool) into
    a second run directory."""
    final = wait_final(server, scenario.twin)
    assert final.state.is_completed(), f"{final.state}:\n{server.log_tail()}"
    return scenario.twin_dir


# Package files whose JSON holds fields that belong to the run, not to what was computed; they differ between
# two runs of one config: the shipped seed's MLflow run, when its weights were written and the package built
# (run_metadata.json), when the normalization statistics were computed (normalization_stats.json).
RUN_OWN_FIELDS = {METADATA: {"mlflow_run_id", "training_date", "package_date"}, STATS: {"computed_date"}}


@pytest.mark.slow
def test_the_distributed_package_equals_the_local_executions(scenario: Scenario, local_twin: Path) -> None:
    """Where a stage ran changes nothing it computed: the same files with the same bytes (weights, model and
    deployment configs, requirements), the same test report and calibration; the files of RUN_OWN_FIELDS differ
    only in those fields, and SHA256SUMS only in their lines."""
    dist, local = scenario.run_dir / "package", local_twin / "package"

    def files(root: Path) -> list[str]:
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def without_run_own(root: Path, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((root / name).read_text())
        assert RUN_OWN_FIELDS[name] <= set(data), name
        return {k: v for k, v in data.items() if k not in RUN_OWN_FIELDS[name]}

    assert files(dist) == files(local)
    differing = {f for f in files(dist) if (dist / f).read_bytes() != (local / f).read_bytes()}
    assert differing <= {*RUN_OWN_FIELDS, SUMS}, differing
    for name in RUN_OWN_FIELDS:
        assert without_run_own(dist, name) == without_run_own(local, name), name

    def sums(root: Path) -> dict[str, str]:
        lines = (root / SUMS).read_text().splitlines()
        return {name.strip().lstrip("*"): h for h, name in (line.split(maxsplit=1) for line in lines if line)}

    sums_d, sums_l = sums(dist), sums(local)
    assert set(sums_d) == set(sums_l) and set(RUN_OWN_FIELDS) <= set(sums_d)
    assert {k: v for k, v in sums_d.items() if k not in RUN_OWN_FIELDS} == {
        k: v for k, v in sums_l.items() if k not in RUN_OWN_FIELDS
    }
    # What the GPU-pool runs computed equals what the local run computed.
    for entry in (RunLayout.TEST_REPORT, RunLayout.CALIBRATION_SUMMARY, RunLayout.GATES):
        # NaN (an undefined metric) read as text: NaN != NaN would make equal reports differ
        a, b = (
            json.loads((root / entry.at()).read_text(), parse_constant=str) for root in (scenario.run_dir, local_twin)
        )
        assert a == b, entry.at()
