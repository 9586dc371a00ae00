"""A seed survives losing its worker (issue 13): a real Prefect server, the storage emulator, two GPU workers.

A gs:// run (the GCS emulator) whose data stages are done. The seed fan-out of a distributed pipeline starts
the seed's train-seed run on the `gpu` pool, where worker A (its own RTS_CACHE_DIR) picks it up. Once the run
recorded a checkpoint in the bucket, worker A and its flow run are killed with SIGKILL, as a pre-empted VM
vanishes: nobody reports the run's end. The flow run's heartbeats stop, the server's zombie automation
(deployments/zombie_automation.py) marks it Crashed, the fan-out re-submits the seed, and worker B, whose
RTS_CACHE_DIR is empty, resumes from the recorded checkpoint. The final best_deployment.pth is bit-identical
to an uninterrupted run of the same seed (deterministic CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rtscore import stages
from rtscore.config import parse_pipeline_config
from rtscore.models import load_checkpoint
from rtscore.storage import CACHE_ENV, RunDir, RunLayout
from rtscore.train.records import read_attempts
from tests.conftest import GCS_TEST_BUCKET
from tests.flows.configs import tiny_training_config, write_config
from tests.flows.prefect_server import ROOT, Server, borrow, kill_machine

SEED = 5
EPOCHS = 8


def _config() -> dict[str, Any]:
    data = tiny_training_config([SEED])
    data["training"].update(
        {"max_epochs": EPOCHS, "deterministic": True, "checkpoint": {"save_every_n_epochs": 1, "keep_last_n": 2}}
    )
    return data


@pytest.fixture(scope="module")
def server(prefect_server: Server, tmp_path_factory: pytest.TempPathFactory, gcs_emulator: str) -> Iterator[Server]:
    """The session's server, with the zombie automation; workers are started by the test (they reach the
    emulator)."""
    with borrow(
        prefect_server,
        tmp_path_factory.mktemp("preemption-server") / "logs",
        STORAGE_EMULATOR_HOST=gcs_emulator,
        RTS_GCS_WORKERS="4",  # the emulator serves one request at a time
        RTS_GCS_RETRY_INITIAL_S="0.01",
    ) as srv:
        yield srv


@pytest.mark.slow
def test_a_seed_whose_worker_is_killed_resumes_on_a_fresh_worker_bit_identically(
    server: Server, gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.fanout import distributed_train
    from flows.params import DistributedParams, PipelineParams

    data = _config()
    config = write_config(tmp_path / "pipeline.yaml", data)
    cfg = parse_pipeline_config(data)
    uri = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/run"
    cache_a, cache_b = tmp_path / "gpu-a-cache", tmp_path / "gpu-b-cache"
    worker = ["worker", "start", "--pool", "gpu", "--limit", "1"]
    server.env[CACHE_ENV] = str(cache_a)
    worker_a = server.start("worker-gpu-a", *worker)  # starts up while the data stages run (no run for it yet)

    monkeypatch.setenv("RTS_GCS_WORKERS", "4")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cpu-worker"))
    stages.save_resolved_config(uri, cfg)
    for split in ("train", "val", "test"):
        stages.generate_dataset(uri, cfg, split)
    stages.normalization_stats(uri, cfg)

    params = PipelineParams(
        config=str(config),
        run_dir=uri,
        execution="distributed",
        distributed=DistributedParams(poll_interval_s=1.0, timeout_s=900.0, max_attempts=3),
    )
    parent = f"preemption-test-{uuid.uuid4().hex[:8]}"
    outcome: dict[str, Any] = {}

    def fan_out() -> None:
        try:
            with temporary_settings(updates={PREFECT_API_URL: server.url}):
                outcome["results"] = distributed_train(params, parent, [SEED], None)
        except BaseException as err:  # handed to the test thread
            outcome["error"] = err

    thread = threading.Thread(target=fan_out, daemon=True)
    thread.start()

    run = RunDir(uri)
    deadline = time.monotonic() + 600
    recorded: list[str] = []
    while not recorded:
        assert time.monotonic() < deadline, f"no checkpoint recorded after 600 s:\n{server.log_tail()}"
        assert "error" not in outcome, outcome
        entry = RunLayout.RESUME_EPOCH.bind(seed=SEED)
        recorded = [rel for rel in run.read_manifest().artifacts if entry.match(rel)]
        time.sleep(0.2)
    kill_machine(worker_a)  # mid-training, after at least one recorded checkpoint: the VM vanishes

    assert not cache_b.exists()
    server.env[CACHE_ENV] = str(cache_b)  # the retry lands on a worker with an empty local mirror
    server.start("worker-gpu-b", *worker)
    reference = tmp_path / "reference"  # the same data, trained without interruption
    trained = _train_uninterrupted(config, reference, tmp_path / "reference.log")
    thread.join(timeout=900)
    assert not thread.is_alive(), f"the fan-out did not finish:\n{server.log_tail()}"
    assert "error" not in outcome, f"{outcome.get('error')}\n{server.log_tail()}"
    assert trained.wait(timeout=900) == 0, (tmp_path / "reference.log").read_text()

    # Two runs of the seed: the first Crashed by the zombie automation, the second resumed and Completed.
    with server.client() as client:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterIdempotencyKey

        keys = [f"rts-pipeline/{parent}/train-seed/{SEED}", f"rts-pipeline/{parent}/train-seed/{SEED}/attempt-1"]
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(idempotency_key=FlowRunFilterIdempotencyKey(any_=keys))
        )
    by_key = {r.idempotency_key: r for r in runs}
    first, second = by_key[keys[0]], by_key[keys[1]]
    assert first.state.is_crashed() and "heartbeat" in (first.state.message or ""), first.state
    assert second.state.is_completed(), second.state
    assert first.work_pool_name == second.work_pool_name == "gpu"

    attempts = read_attempts(RunDir(uri), SEED).attempts
    assert [(a.attempt, a.flow_run_id, a.status) for a in attempts] == [
        (1, str(first.id), "interrupted"),
        (2, str(second.id), "completed"),
    ]
    killed_at = attempts[0].last_epoch
    assert 1 <= killed_at < EPOCHS, "killed mid-training, after at least one recorded checkpoint"
    assert attempts[1].resumed_from_epoch == killed_at, "resumed from the recorded checkpoint, not from epoch 1"
    assert attempts[1].last_epoch == EPOCHS
    assert (cache_b / "gcs").is_dir(), "worker B staged the run into its own, empty, cache"

    results = outcome["results"]
    assert results[0].attempts is not None and len(results[0].attempts.attempts) == 2
    rows = [json.loads(r)["epoch"] for r in _bucket_text(uri, RunLayout.SEED_METRICS.at(seed=SEED), tmp_path)]
    assert rows == list(range(1, EPOCHS + 1))
    best = _bucket_file(uri, RunLayout.BEST_WEIGHTS.at(seed=SEED), tmp_path)
    ref = reference / RunLayout.BEST_WEIGHTS.at(seed=SEED)
    a, b = load_checkpoint(best), load_checkpoint(ref)
    assert a.keys() == b.keys()
    assert all(a[k].numpy().tobytes() == b[k].numpy().tobytes() for k in a), "not bit-identical"


UNINTERRUPTED = """
import sys
from pathlib import Path

import yaml

from rtscore import stages
from rtscore.config import parse_pipeline_config
from tests.helpers import make_data_run

config, run, seed = sys.argv[1:]
cfg = parse_pipeline_config(yaml.safe_load(Path(config).read_text()))
stages.train_seed(str(make_data_run(Path(run), cfg)), cfg, int(seed))
"""


def _train_uninterrupted(config: Path, run: Path, log: Path) -> subprocess.Popen[bytes]:
    """The data stages and the seed's training into the local ``run``, in a process of its own, started now: it
    trains while the zombie automation waits out the killed run. Its torch threads wait passively, as the flow
    runs' do (prefect_server.server_env): it shares two cores with the server, a worker and the test."""
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", UNINTERRUPTED, str(config), str(run), str(SEED)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _bucket_file(uri: str, rel: str, tmp_path: Path) -> Path:
    """The recorded artifact as a new worker would stage it (downloaded and verified against the manifest)."""
    os.environ[CACHE_ENV] = str(tmp_path / f"audit-{uuid.uuid4().hex[:6]}")
    run = RunDir(uri)
    run.require(rel)
    return run.path(rel)


def _bucket_text(uri: str, rel: str, tmp_path: Path) -> list[str]:
    return _bucket_file(uri, rel, tmp_path).read_text().splitlines()
