"""The orchestration pieces without a server: parameter models, the fan-out's keys, waiting and result
reading, the UI's URLs, the config overrides, the flow-run tag and the CLI's mapping onto the models."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import pytest
import yaml
from pydantic import ValidationError

from flows.params import DistributedParams, MultiSeedParams, PipelineParams, SeedStageParams, TrainSeedParams
from tests.flows.configs import tiny_training_config, write_config


def test_parameter_models_check_their_fields() -> None:
    p = PipelineParams(config="c.yaml", run_dir="runs/a", seeds=[3, 4], deterministic=True, refresh=True)
    assert p.execution == "local" and p.distributed == DistributedParams()
    assert p.multi_seed() == MultiSeedParams(
        config="c.yaml", run_dir="runs/a", seeds=[3, 4], fresh=True, deterministic=True
    )
    assert p.stage([3]) == SeedStageParams(
        config="c.yaml", run_dir="runs/a", seeds=[3], refresh=True, deterministic=True
    )
    assert p.data().skip_generation is False and p.data().deterministic is True
    # Prefect hands the model a dict from the API/UI: the same validation applies.
    assert PipelineParams.model_validate({"config": "c", "run_dir": "r", "execution": "distributed"}).execution
    for bad in (
        {"config": "c", "run_dir": "r", "seeds": [1, 1]},
        {"config": "c", "run_dir": "r", "seeds": []},
        {"config": "c", "run_dir": "r", "execution": "cloud"},
        {"config": "c", "run_dir": "r", "seed": 1},  # a typo of seeds: extra keys are refused
        {"config": "c"},
    ):
        with pytest.raises(ValidationError):
            PipelineParams.model_validate(bad)
    with pytest.raises(ValidationError):
        TrainSeedParams(config="c", run_dir="r", seed=-1)


def test_load_config_applies_the_flow_overrides(tmp_path: Path) -> None:
    from flows.common import load_config

    cfg_file = write_config(tmp_path / "p.yaml", tiny_training_config())
    base = load_config(SeedStageParams(config=str(cfg_file), run_dir="r"))
    assert base.training.deterministic is True  # the config's default
    off = load_config(SeedStageParams(config=str(cfg_file), run_dir="r", deterministic=False))
    assert off.training.deterministic is False and off.training.seeds == base.training.seeds
    assert load_config(SeedStageParams(config=str(cfg_file), run_dir="r"), skip_generation=True).data.skip_generation


def test_flow_run_scope_sets_and_restores_the_flow_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.common import FLOW_RUN_ENV, flow_run_scope

    monkeypatch.delenv(FLOW_RUN_ENV, raising=False)
    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", "parent-run")  # what prefect.runtime reads outside a context
    with flow_run_scope() as parent:
        assert parent == os.environ[FLOW_RUN_ENV] == "parent-run"
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", "child-run")
        with flow_run_scope():
            assert os.environ[FLOW_RUN_ENV] == "child-run"
        assert os.environ[FLOW_RUN_ENV] == "parent-run", "a subflow gives the parent's id back"
    assert FLOW_RUN_ENV not in os.environ


def test_artifact_urls() -> None:
    from flows.ui import artifact_key, browser_url, image_url, mlflow_run_url

    assert browser_url("gs://bkt/runs/a/calibration/gates.json") == (
        "https://console.cloud.google.com/storage/browser/_details/bkt/runs/a/calibration/gates.json"
    )
    assert browser_url("gs://bkt/runs/a/package", is_dir=True) == (
        "https://console.cloud.google.com/storage/browser/bkt/runs/a/package"
    )
    assert browser_url("gs://bkt") == "https://console.cloud.google.com/storage/browser/bkt"
    assert browser_url("/tmp/run/x y.json") == "file:///tmp/run/x%20y.json"
    assert (
        image_url("gs://bkt/r/seeds/seed_1/curves.png")
        == "https://storage.cloud.google.com/bkt/r/seeds/seed_1/curves.png"
    )
    assert image_url("/tmp/run/curves.png") is None
    assert mlflow_run_url("https://mlflow.example.org/", "abc") == "https://mlflow.example.org/#/runs/abc"
    assert mlflow_run_url("sqlite:///tmp/mlflow.db", "abc") is None and mlflow_run_url(None, "abc") is None
    assert artifact_key("Train-Seed", "seeds/seed_1/curves.png") == "train-seed-seeds-seed-1-curves-png"


def _report(seeds: list[int]) -> Any:
    from rtscore.config.deployment import DeploymentConfig
    from rtscore.evaluation import SeedTestResult, TestReport

    per_seed = [
        SeedTestResult(
            seed=s,
            threshold=0.5,
            temperature=1.2,
            metrics={"1_200": {"pr_auc": 0.8 + 0.02 * i, "x": math.nan}},
            recall_by_size=[],
            n_pos_tiles=3,
            n_neg_tiles=5,
        )
        for i, s in enumerate(seeds)
    ]
    return TestReport.from_seeds(per_seed, DeploymentConfig(threshold=0.5, temperature=1.2), [0.3])


def test_report_tables_read_the_typed_report_and_show_an_undefined_std_as_such() -> None:
    from flows.ui import report_tables, results_table

    aggregate, per_seed = report_tables(_report([42, 43]))
    assert aggregate[0] == {"ratio": "1:200", "metric": "pr_auc", "mean": 0.81, "std": 0.0141, "text": "0.810 ± 0.014"}
    assert aggregate[1] == {"ratio": "1:200", "metric": "x", "mean": "n/a", "std": "n/a", "text": "n/a"}
    assert per_seed[0] == {
        "seed": 42,
        "ratio": "1:200",
        "threshold": 0.5,
        "temperature": 1.2,
        "pr_auc": 0.8,
        "x": "n/a",
    }

    one, _ = report_tables(_report([42]))
    assert one[0] == {"ratio": "1:200", "metric": "pr_auc", "mean": 0.8, "std": "n/a", "text": "0.800 (1 seed)"}
    assert results_table(_report([42])) == [
        {"metric": "pr_auc", "1:200": "0.800 (1 seed)"},
        {"metric": "x", "1:200": "n/a"},
    ]
    assert "± 0.000" not in json.dumps(one)


def test_mean_std_text_of_one_seed_has_no_std() -> None:
    from flows.ui import cell, mean_std_text

    assert mean_std_text([0.61234]) == "0.6123 (1 seed)"
    assert mean_std_text([0.61234, math.nan]) == "0.6123 (1 seed)", "one defined value: no std"
    assert mean_std_text([0.6, 0.7]) == "0.6500 ± 0.0707" and mean_std_text([0.6, 0.7], digits=3) == "0.650 ± 0.071"
    assert mean_std_text([math.nan]) == "n/a"
    assert cell(math.nan) == "n/a" and cell(0.123456) == 0.1235 and cell(3) == 3


def test_images_of_a_local_run_are_inlined(tmp_path: Path) -> None:
    import base64

    from flows.ui import MAX_INLINE_IMAGE_BYTES, image_src, inline_images
    from rtscore.storage import RunDir, RunLayout

    run = RunDir(tmp_path / "run")
    samples = RunLayout.VALIDATION_SAMPLES.at()
    run.path(samples).parent.mkdir(parents=True)
    run.path(samples).write_bytes(b"\x89PNG fake")
    src = image_src(run, samples)
    assert src == "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    report = RunLayout.VALIDATION_REPORT_MD.at()
    md = "# Report\n\n![samples](samples.png)\n\n![web](https://example.org/a.png)\n![gone](nothing.png)\n"
    out = inline_images(md, str(run.root), report.rpartition("/")[0])
    assert f"![samples]({src})" in out and "![web](https://example.org/a.png)" in out
    assert "![gone]" not in out and "nothing.png: image not shown" in out
    run.path(samples).write_bytes(b"x" * (MAX_INLINE_IMAGE_BYTES + 1))
    assert image_src(run, samples) is None, "too large to inline: linked instead"
    assert image_src(RunDir("gs://bkt/r"), samples) == f"https://storage.cloud.google.com/bkt/r/{samples}"


def test_flows_route_library_logs_into_the_run_logs() -> None:
    import logging

    from prefect.logging.handlers import APILogHandler

    from flows.common import LIBRARY_LOGGERS, route_library_logs

    assert LIBRARY_LOGGERS == ("rtscore",)
    logger = logging.getLogger("rtscore")
    saved = logger.handlers[:], logger.level
    try:
        logger.handlers = [h for h in logger.handlers if not isinstance(h, APILogHandler)]
        logger.setLevel(logging.NOTSET)
        route_library_logs()
        route_library_logs()
        assert sum(isinstance(h, APILogHandler) for h in logger.handlers) == 1, "attached once"
        assert logging.getLogger("rtscore.train.loop").isEnabledFor(logging.INFO), "INFO lines are not dropped"
        (handler,) = [h for h in logger.handlers if isinstance(h, APILogHandler)]
        record = logger.makeRecord("rtscore.train.loop", logging.INFO, __file__, 1, "epoch line", (), None)
        assert not handler.filter(record), "outside a run a record stays local (no Prefect warning)"
        logger.setLevel(logging.WARNING)
        route_library_logs()
        assert logger.level == logging.WARNING, "a level someone chose (the rts CLI) is kept"
    finally:
        logger.handlers, _ = saved
        logger.setLevel(saved[1])


def test_summaries_never_fail_a_stage(tmp_path: Path) -> None:
    from flows.ui import run_text

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.md").write_text("# A\n")
    assert run_text(str(tmp_path / "run"), "a.md") == "# A\n"
    assert run_text(str(tmp_path / "run"), "calibration/report.md").startswith("_calibration/report.md not shown:")


# ----------------------------------------------------------------------------------------------- fan-out
def test_idempotency_keys_are_per_parent_seed_and_attempt() -> None:
    from flows.fanout import idempotency_key

    a, b = str(uuid4()), str(uuid4())
    keys = {idempotency_key(p, s, n) for p in (a, b) for s in (42, 43) for n in (0, 1)}
    assert len(keys) == 8
    assert idempotency_key(a, 42) == idempotency_key(a, 42, 0) == f"rts-pipeline/{a}/train-seed/42"


def _state(kind: str) -> Any:
    from prefect import states

    return {"completed": states.Completed, "failed": states.Failed, "scheduled": states.Scheduled}[kind]()


def test_submit_seed_reuses_a_completed_run_and_replaces_a_failed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.fanout as fanout

    key = "rts-pipeline/p/train-seed/7"
    server: dict[str, str] = {}  # idempotency key -> state of the run the server already holds
    calls: list[dict[str, Any]] = []

    def fake_run_deployment(name: str, **kw: Any) -> Any:
        calls.append({"name": name, **kw})
        k = kw["idempotency_key"]
        return SimpleNamespace(id=k, name=k, state=_state(server.setdefault(k, "scheduled")))

    monkeypatch.setattr(fanout, "run_deployment", fake_run_deployment)
    child = TrainSeedParams(config="/c.yaml", run_dir="/r", seed=7)
    dist = DistributedParams(deployment="train-seed/gpu-test", job_variables={"env": {"CUDA_VISIBLE_DEVICES": "1"}})

    assert fanout.submit_seed(dist, "p", child).state.is_scheduled()  # a new parent: one new run
    assert [c["idempotency_key"] for c in calls] == [key]
    assert calls[0]["name"] == "train-seed/gpu-test" and calls[0]["timeout"] == 0
    assert calls[0]["parameters"] == {"params": child.model_dump(mode="json")}
    assert calls[0]["job_variables"] == {"env": {"CUDA_VISIBLE_DEVICES": "1"}}

    calls.clear()
    server.update({key: "failed", f"{key}/attempt-1": "completed"})  # a retried parent, twice
    run = fanout.submit_seed(dist, "p", child)
    assert run.id == f"{key}/attempt-1" and run.state.is_completed(), "the completed run is reused"
    assert [c["idempotency_key"] for c in calls] == [key, f"{key}/attempt-1"]

    calls.clear()
    server.update({key: "failed", f"{key}/attempt-1": "failed"})
    run = fanout.submit_seed(dist, "p", child)
    assert run.id == f"{key}/attempt-2" and run.state.is_scheduled(), "a failed seed gets a new run"


@contextlib.contextmanager
def _fake_client(states: dict[str, list[str]]) -> Iterator[Any]:
    """A client whose runs go through the given states, one per read."""

    def read_flow_run(run_id: str) -> Any:
        seq = states[run_id]
        kind = seq.pop(0) if len(seq) > 1 else seq[0]
        return SimpleNamespace(id=run_id, name=f"run-{run_id}", state=_state(kind))

    yield SimpleNamespace(read_flow_run=read_flow_run)


def test_wait_for_runs_fails_naming_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefect.client.orchestration as orchestration

    from flows.fanout import FanOutError, wait_for_runs

    runs = {s: SimpleNamespace(id=str(s), name=f"run-{s}", state=_state("scheduled")) for s in (42, 43)}
    monkeypatch.setattr(
        orchestration, "get_client", lambda **_: _fake_client({"42": ["scheduled", "completed"], "43": ["failed"]})
    )
    with pytest.raises(FanOutError) as err:
        wait_for_runs(runs, timeout_s=5, poll_interval_s=0.01)
    assert "seed 43" in str(err.value) and "FAILED" in str(err.value) and "seed 42" not in str(err.value)

    monkeypatch.setattr(
        orchestration, "get_client", lambda **_: _fake_client({"42": ["completed"], "43": ["scheduled"]})
    )
    with pytest.raises(FanOutError, match=r"seed 43: .* still not finished"):
        wait_for_runs(runs, timeout_s=0.05, poll_interval_s=0.01)

    monkeypatch.setattr(
        orchestration, "get_client", lambda **_: _fake_client({"42": ["completed"], "43": ["completed"]})
    )
    assert set(wait_for_runs(runs, timeout_s=5, poll_interval_s=0.01)) == {42, 43}


def test_read_train_result_from_the_run_directory(tmp_path: Path) -> None:
    from flows.fanout import FanOutError, read_train_result
    from rtscore.config.pipeline import ModelConfig
    from rtscore.storage import RunDir
    from rtscore.train.result import SeedSummary

    run = RunDir(tmp_path / "run")
    base = run.path("seeds/seed_7")
    base.mkdir(parents=True)
    (base / "best_deployment.pth").write_bytes(b"weights")
    summary = SeedSummary(
        seed=7,
        epochs_run=12,
        stopped_early=True,
        best_epoch=9,
        best_val_realistic_pr_auc_geomean_smoothed=0.61,
        last_validation={},
        overfitting={},
        model=ModelConfig(),
        mlflow_run_id="mlf-7",
    )
    (base / "run_summary.json").write_text(summary.model_dump_json())
    with pytest.raises(FanOutError, match="seed 7 completed but its artifacts are not in the run"):
        read_train_result(str(run.root), 7)
    for name in ("best_deployment.pth", "run_summary.json"):
        run.record(f"seeds/seed_7/{name}", "train-seed", "h")
    result = read_train_result(str(run.root), 7)
    r = result.result
    assert (r.seed, r.best_epoch, r.best_metric, r.epochs_run, r.stopped_early, r.mlflow_run_id) == (
        7,
        9,
        0.61,
        12,
        True,
        "mlf-7",
    )
    assert r.seed_dir == str(base)
    assert sorted(a.path for a in result.artifacts) == [
        "seeds/seed_7/best_deployment.pth",
        "seeds/seed_7/run_summary.json",
    ]
    (base / "best_deployment.pth").write_bytes(b"other weights")
    with pytest.raises(FanOutError, match="does not match the manifest"):
        read_train_result(str(run.root), 7)
    (base / "best_deployment.pth").write_bytes(b"weights")
    (base / "run_summary.json").write_text('{"seed": 7}')
    run.record("seeds/seed_7/run_summary.json", "train-seed", "h")
    with pytest.raises(FanOutError, match="summary cannot be read: invalid seed summary .*epochs_run"):
        read_train_result(str(run.root), 7)


# ----------------------------------------------------------------------------------------------- CLI
class _Called(Exception):
    def __init__(self, params: Any) -> None:
        self.params = params


def test_cli_maps_its_flags_onto_the_parameter_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import flows.calibrate
    import flows.pipeline
    import flows.train
    from flows.cli import main

    def capture(params: Any) -> Any:
        raise _Called(params)

    for module, name in ((flows.pipeline, "pipeline"), (flows.calibrate, "calibrate"), (flows.train, "train_seed")):
        monkeypatch.setattr(module, name, capture)
    monkeypatch.setattr("flows.common.start_local_api", lambda: None)  # no flow runs: no server to start
    cfg = write_config(tmp_path / "p.yaml", yaml.safe_load(yaml.safe_dump(tiny_training_config())))
    run = tmp_path / "run"
    argv = ["run", "--config", str(cfg), "--run", str(run), "--seeds", "1", "2", "--refresh", "--skip-generation"]
    with pytest.raises(_Called) as got:
        main([*argv, "--execution", "distributed", "--train-deployment", "train-seed/gpu-b", "--no-deterministic"])
    assert got.value.params == PipelineParams(
        config=str(cfg.resolve()),
        run_dir=str(run.resolve()),
        seeds=[1, 2],
        refresh=True,
        skip_generation=True,
        deterministic=False,
        execution="distributed",
        distributed=DistributedParams(deployment="train-seed/gpu-b"),
    )
    with pytest.raises(_Called) as got:
        main(argv)
    assert got.value.params.execution == "local" and got.value.params.deterministic is None
    with pytest.raises(_Called) as got:
        main(["calibrate", "--config", str(cfg), "--run", str(run), "--seeds", "2"])
    assert got.value.params == SeedStageParams(config=str(cfg.resolve()), run_dir=str(run.resolve()), seeds=[2])
    with pytest.raises(_Called) as got:
        main(["train", "--config", str(cfg), "--run", str(run), "--seed", "5", "--fresh"])
    assert got.value.params == TrainSeedParams(
        config=str(cfg.resolve()), run_dir=str(run.resolve()), seed=5, fresh=True
    )
