"""The orchestration pieces without a server: parameter models, the fan-out's keys, waiting and result
reading, the UI's URLs, the config overrides, the flow-run tag and the CLI's mapping onto the models."""

from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
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
from tests.helpers import small_test_report


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
        {"run_dir": "r"},  # no config (the run directory defaults to artifacts/<config name>)
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


def test_report_tables_read_the_typed_report_and_show_an_undefined_std_as_such() -> None:
    from flows.ui import report_tables, results_table

    aggregate, per_seed = report_tables(small_test_report([42, 43]))
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

    one, _ = report_tables(small_test_report([42]))
    assert one[0] == {"ratio": "1:200", "metric": "pr_auc", "mean": 0.8, "std": "n/a", "text": "0.800 (1 seed)"}
    assert results_table(small_test_report([42])) == [
        {"metric": "pr_auc", "1:200": "0.800 (1 seed)"},
        {"metric": "x", "1:200": "n/a"},
    ]
    assert "± 0.000" not in json.dumps(one)


def test_mean_std_text_of_one_seed_has_no_std() -> None:
    from flows.render import mean_std_text
    from flows.ui import cell

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
def test_idempotency_keys_are_per_parent_stage_item_and_attempt() -> None:
    from flows.fanout import idempotency_key

    a, b = str(uuid4()), str(uuid4())
    keys = {
        idempotency_key(p, st, s, n)
        for p in (a, b)
        for st in ("train-seed", "logit-cache")
        for s in (42, 43)
        for n in (0, 1)
    }
    assert len(keys) == 16
    assert idempotency_key(a, "train-seed", 42) == idempotency_key(a, "train-seed", 42, 0)
    assert idempotency_key(a, "train-seed", 42) == f"rts-pipeline/{a}/train-seed/42"
    assert idempotency_key(a, "logit-cache", 42, 2) == f"rts-pipeline/{a}/logit-cache/42/attempt-2"


def _state(kind: str) -> Any:
    from prefect import states

    return {
        "completed": states.Completed,
        "failed": states.Failed,
        "crashed": states.Crashed,
        "cancelled": states.Cancelled,
        "scheduled": states.Scheduled,
        "running": states.Running,
    }[kind]()


class FakePrefect:
    """run_deployment and a client over an in-memory server: a run's states follow ``plan[key]`` (one per read;
    default scheduled -> completed); ``runs`` may hold the runs an earlier attempt of the parent left."""

    def __init__(self, plan: dict[str, list[str]] | None = None) -> None:
        self.plan = plan or {}
        self.runs: dict[str, list[str]] = {}
        self.names: dict[str, str] = {}
        self.calls: list[dict[str, Any]] = []
        self.created: list[str] = []
        self.tables: list[dict[str, Any]] = []
        self.keys: dict[uuid.UUID, str] = {}  # run id -> idempotency key
        self.single_reads = 0  # read_flow_run calls
        self.page_sizes: list[int] = []  # runs per read_flow_runs call

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import prefect.client.orchestration as orchestration

        import flows.fanout as fanout

        monkeypatch.setattr(fanout, "run_deployment", self.run_deployment)
        monkeypatch.setattr(orchestration, "get_client", lambda **_: self.client())
        monkeypatch.setattr(fanout, "create_table_artifact", lambda **kw: self.tables.append(kw))
        monkeypatch.setattr(fanout, "in_a_run", lambda: True)  # the parent flow's body, called as in its run

    def _run(self, key: str) -> Any:
        run_id = uuid.uuid5(uuid.NAMESPACE_URL, key)  # a server's run ids are UUIDs (the read filter checks)
        self.keys[run_id] = key
        return SimpleNamespace(id=run_id, name=self.names.get(key, key), state=_state(self.runs[key][0]))

    def run_deployment(self, name: str, **kw: Any) -> Any:
        self.calls.append({"name": name, **kw})
        key = kw["idempotency_key"]
        if key not in self.runs:  # the server creates a run only for a new key
            self.created.append(key)
            self.runs[key] = list(self.plan.get(key, ["scheduled", "completed"]))
            self.names[key] = kw["flow_run_name"]
        return self._run(key)

    def read_flow_run(self, run_id: uuid.UUID) -> Any:
        self.single_reads += 1
        return self._advance(run_id)

    def _advance(self, run_id: uuid.UUID) -> Any:
        key = self.keys[run_id]
        seq = self.runs[key]
        if len(seq) > 1:
            seq.pop(0)
        return self._run(key)

    def read_flow_runs(self, *, flow_run_filter: Any, limit: int) -> list[Any]:
        ids = list(flow_run_filter.id.any_)
        assert len(ids) <= limit
        self.page_sizes.append(len(ids))
        return [self._advance(i) for i in ids]

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        yield SimpleNamespace(read_flow_run=self.read_flow_run, read_flow_runs=self.read_flow_runs)


def _children(*seeds: int) -> list[Any]:
    from flows.fanout import Child

    return [
        Child(str(s), f"seed {s}", f"train-seed-{s}", TrainSeedParams(config="/c.yaml", run_dir="/r", seed=s))
        for s in seeds
    ]


FAST = {"poll_interval_s": 0.001, "timeout_s": 5.0}


def test_fan_out_starts_one_run_per_item_with_its_key_and_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.fanout import fan_out

    fake = FakePrefect()
    fake.install(monkeypatch)
    dist = DistributedParams(job_variables={"env": {"CUDA_VISIBLE_DEVICES": "1"}}, **FAST)
    children = _children(7, 8)
    done = fan_out("train-seed", "train-seed/gpu-test", "p", children, dist, tags=["rts-seed"])
    assert set(done) == {"7", "8"} and all(r.state.is_completed() for r in done.values())
    assert fake.created == ["rts-pipeline/p/train-seed/7", "rts-pipeline/p/train-seed/8"]
    call = fake.calls[0]
    assert call["name"] == "train-seed/gpu-test" and call["timeout"] == 0 and call["tags"] == ["rts-seed"]
    assert call["parameters"] == {"params": children[0].params.model_dump(mode="json")}
    assert call["job_variables"] == {"env": {"CUDA_VISIBLE_DEVICES": "1"}}
    assert call["flow_run_name"] == "train-seed-7"
    (table,) = fake.tables
    assert table["key"] == "train-seed-attempts"
    assert [(r["item"], r["attempt"], r["final state"]) for r in table["table"]] == [
        ("seed 7", 1, "COMPLETED"),
        ("seed 8", 1, "COMPLETED"),
    ]


def test_fan_out_resubmits_a_crashed_child_up_to_max_attempts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A crashed run (the worker vanished) gets a new run under the next attempt key; the other item is not
    touched; a child crashing max_attempts times fails the parent naming it."""
    from flows.fanout import FanOutError, fan_out

    key = "rts-pipeline/p/train-seed/7"
    fake = FakePrefect({key: ["running", "crashed"], f"{key}/attempt-1": ["running", "running", "completed"]})
    fake.install(monkeypatch)
    done = fan_out("train-seed", "train-seed/train-seed", "p", _children(7, 8), DistributedParams(**FAST))
    assert fake.keys[done["7"].id] == f"{key}/attempt-1" and done["7"].state.is_completed()
    assert fake.created == [key, "rts-pipeline/p/train-seed/8", f"{key}/attempt-1"]
    assert fake.names[f"{key}/attempt-1"] == "train-seed-7-retry-1"
    assert any("crashed" in r.message and "re-submitting as attempt 2" in r.message for r in caplog.records)
    rows = [(r["item"], r["attempt"], r["final state"]) for r in fake.tables[-1]["table"]]
    assert rows == [("seed 7", 1, "CRASHED"), ("seed 7", 2, "COMPLETED"), ("seed 8", 1, "COMPLETED")]

    crash = ["scheduled", "crashed"]
    fake = FakePrefect({key: crash, f"{key}/attempt-1": crash, f"{key}/attempt-2": crash})
    fake.install(monkeypatch)
    with pytest.raises(FanOutError) as err:
        fan_out("train-seed", "train-seed/train-seed", "p", _children(7, 8), DistributedParams(max_attempts=2, **FAST))
    assert fake.created == [key, "rts-pipeline/p/train-seed/8", f"{key}/attempt-1"], "at most max_attempts runs"
    assert "train-seed seed 7" in str(err.value) and "crashed 2 times" in str(err.value)
    assert "seed 8" not in str(err.value)
    assert [r["attempt"] for r in fake.tables[-1]["table"] if r["item"] == "seed 7"] == [1, 2]


def test_fan_out_does_not_resubmit_a_failed_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed run (its code raised) would fail again: the parent fails naming it, after the others finished."""
    from flows.fanout import FanOutError, fan_out

    key = "rts-pipeline/p/logit-cache/43"
    fake = FakePrefect({key: ["running", "failed"], "rts-pipeline/p/logit-cache/42": ["running"] * 5 + ["completed"]})
    fake.install(monkeypatch)
    with pytest.raises(FanOutError) as err:
        fan_out("logit-cache", "logit-cache/logit-cache", "p", _children(42, 43), DistributedParams(**FAST))
    assert fake.created == ["rts-pipeline/p/logit-cache/42", key], "no new run for the failed seed"
    assert "logit-cache seed 43" in str(err.value) and "FAILED" in str(err.value) and "seed 42" not in str(err.value)
    assert fake.runs["rts-pipeline/p/logit-cache/42"] == ["completed"], "the other seed's run was waited for"

    fake = FakePrefect({key: ["scheduled", "cancelled"]})
    fake.install(monkeypatch)
    with pytest.raises(FanOutError, match="seed 43: .* ended CANCELLED"):
        fan_out("logit-cache", "logit-cache/logit-cache", "p", _children(43), DistributedParams(**FAST))
    assert fake.created == [key]


def test_a_retried_parent_reuses_completed_children_and_replaces_unsuccessful_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.fanout import fan_out

    key = "rts-pipeline/p/train-seed/7"
    fake = FakePrefect()
    fake.install(monkeypatch)
    # What the parent's first attempt left: seed 7 failed once then completed; seed 8 crashed; seed 9 still runs.
    fake.runs.update(
        {
            key: ["failed"],
            f"{key}/attempt-1": ["completed"],
            "rts-pipeline/p/train-seed/8": ["crashed"],
            "rts-pipeline/p/train-seed/9": ["running", "completed"],
        }
    )
    done = fan_out("train-seed", "train-seed/train-seed", "p", _children(7, 8, 9), DistributedParams(**FAST))
    assert fake.keys[done["7"].id] == f"{key}/attempt-1", "the completed run is reused"
    assert fake.keys[done["8"].id] == "rts-pipeline/p/train-seed/8/attempt-1", "the crashed seed gets a new run"
    assert fake.keys[done["9"].id] == "rts-pipeline/p/train-seed/9", "the running one is waited for"
    assert fake.created == ["rts-pipeline/p/train-seed/8/attempt-1"]
    notes = {(r["item"], r["attempt"]): r["note"] for r in fake.tables[-1]["table"]}
    assert notes[("seed 7", 1)] == notes[("seed 8", 1)] == "earlier pipeline attempt"


def test_fan_out_fails_naming_the_run_still_going_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.fanout import FanOutError, fan_out

    fake = FakePrefect({"rts-pipeline/p/evaluate-test/all": ["running"]})
    fake.install(monkeypatch)
    with pytest.raises(FanOutError, match=r"evaluate-test seed 0: .* still not finished after"):
        children = _children(0)
        children = [c.__class__("all", c.label, "evaluate-test", c.params) for c in children]
        fan_out(
            "evaluate-test",
            "evaluate-test/evaluate-test",
            "p",
            children,
            DistributedParams(poll_interval_s=0.01, timeout_s=0.05),
        )


def test_a_childs_result_that_is_not_recorded_fails_the_fan_out_naming_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent reads each completed child's result through its stage's reader of the run directory; a result
    that is not there fails the fan-out naming the child."""
    import flows.fanout as fanout

    monkeypatch.setattr(fanout, "fan_out", lambda *args, **kwargs: {})  # every child "completed", nothing recorded
    params = PipelineParams(config="c.yaml", run_dir=str(tmp_path / "run"))
    with pytest.raises(fanout.FanOutError, match=r"^seed 7 completed but its artifacts are not in the run: .*seed_7"):
        fanout.distributed_train(params, "p", [7], None)
    with pytest.raises(fanout.FanOutError, match=r"^logit-cache of seeds \[1, 2\] completed but .* records no"):
        fanout.distributed_logit_caches(params, "p", [1, 2])
    with pytest.raises(fanout.FanOutError, match="^evaluate-test completed but its artifacts are not in the run"):
        fanout.distributed_evaluate_test(params, "p", [1, 2])


# ----------------------------------------------------------------------------------------------- CLI
class _Called(Exception):
    def __init__(self, params: Any) -> None:
        self.params = params


def test_cli_maps_its_flags_onto_the_parameter_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import flows.calibrate
    import flows.pipeline
    import flows.train
    from flows.cli.main import main

    def capture(params: Any) -> Any:
        raise _Called(params)

    for module, name in ((flows.pipeline, "pipeline"), (flows.calibrate, "calibrate"), (flows.train, "train_seed")):
        monkeypatch.setattr(module, name, capture)
    monkeypatch.setattr("flows.common.start_local_api", lambda: None)  # no flow runs: no server to start
    monkeypatch.setattr("flows.common.check_inputs", lambda stage, params: None)  # an empty run: nothing to read
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")  # a distributed run needs a server's URL
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


def test_waiting_reads_the_pending_runs_200_to_an_api_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A campaign's fan-out waits on thousands of chunk runs: each poll reads them in pages of 200 (one request
    each), never one request per run (issue 37: the coordinator's polling was O(K) requests a round)."""
    from flows.fanout import READ_PAGE, fan_out

    fake = FakePrefect()
    fake.install(monkeypatch)
    done = fan_out("train-seed", "train-seed/train-seed", "p", _children(*range(450)), DistributedParams(**FAST))
    assert len(done) == 450 and fake.single_reads == 0
    assert READ_PAGE == 200 and fake.page_sizes == [200, 200, 50]  # one poll: every run has completed


def test_a_transient_server_error_is_tried_again_and_starts_no_run_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """An overloaded server (SQLite under 1,000 chunk runs: "database is locked", a 503 past the client's own
    retries) neither fails the fan-out nor starts a run twice: the start is tried again under the same idempotency
    key, which returns the run the first try created; a state read is tried again too. A 4xx is not retried."""
    import httpx
    from prefect.exceptions import PrefectHTTPStatusError

    import flows.fanout as fanout

    def status(code: int) -> PrefectHTTPStatusError:
        request = httpx.Request("POST", "http://127.0.0.1/api/deployments/x/create_flow_run")
        return PrefectHTTPStatusError(f"{code}", request=request, response=httpx.Response(code, request=request))

    fake = FakePrefect()
    fake.install(monkeypatch)
    waits: list[float] = []
    monkeypatch.setattr(fanout.time, "sleep", waits.append)
    start, read = fake.run_deployment, fake.read_flow_runs
    failures = {"start": 2, "read": 1}

    def flaky_start(name: str, **kw: Any) -> Any:
        run = start(name, **kw)  # created on the server, then the response is lost
        if kw["idempotency_key"].endswith("/1") and failures["start"]:
            failures["start"] -= 1
            raise status(503)
        return run

    def flaky_read(**kw: Any) -> Any:
        if failures["read"]:
            failures["read"] -= 1
            raise httpx.ConnectError("connection reset")
        return read(**kw)

    monkeypatch.setattr(fanout, "run_deployment", flaky_start)
    monkeypatch.setattr(fake, "read_flow_runs", flaky_read)
    done = fanout.fan_out("train-seed", "train-seed/train-seed", "p", _children(0, 1, 2), DistributedParams(**FAST))
    assert sorted(done) == ["0", "1", "2"] and waits == [2.0, 4.0, 2.0]
    assert len({r.id for r in done.values()}) == 3 and len(fake.created) == 3  # one run per item, none twice

    def forbidden(name: str, **kw: Any) -> Any:
        raise status(404)

    monkeypatch.setattr(fanout, "run_deployment", forbidden)
    with pytest.raises(PrefectHTTPStatusError):
        fanout.fan_out("train-seed", "train-seed/train-seed", "q", _children(0), DistributedParams(**FAST))
    assert waits == [2.0, 4.0, 2.0]
