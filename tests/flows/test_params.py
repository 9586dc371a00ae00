"""Flow parameters and the CLI arguments that feed them: the config's training.seed is the default seed of a
single-seed run (an explicit --seed overrides it); `rts stats --clip` is range-checked like the config key; a
sub-flow's parameters are derived from its caller's (every shared field), never copied field by field."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import Field, ValidationError

from flows.cli.main import main
from flows.form import FormModel
from flows.params import (
    DataParams,
    DistributedParams,
    FanOutSettings,
    LogitCacheParams,
    MultiSeedParams,
    PipelineParams,
    SeedStageParams,
    TrainParams,
    TrainSeedParams,
    derived,
)
from flows.params.mapping import MapChunkParams, MapDistributedParams, MapRegionParams
from flows.params.sweep import SweepParams
from rtscore.config import load_pipeline_config, parse_pipeline_config
from tests.flows.configs import tiny_training_config, write_config


def _config(tmp_path: Path, seed: int) -> Path:
    data = tiny_training_config()
    data["training"]["seed"] = seed
    return write_config(tmp_path / "pipeline.yaml", data)


def test_train_seed_params_default_to_the_config_seed() -> None:
    data = tiny_training_config()
    data["training"]["seed"] = 7
    cfg = parse_pipeline_config(data)
    assert TrainSeedParams(config="c", run_dir="r").seed_of(cfg) == 7
    assert TrainSeedParams(config="c", run_dir="r", seed=3).seed_of(cfg) == 3
    assert TrainSeedParams(config="c", run_dir="r", seed=0).seed_of(cfg) == 0  # 0 is a seed, not "unset"


def test_train_seed_flow_trains_the_config_seed_unless_told(tmp_path: Path) -> None:
    """The train-seed flow's one work item: the config's training.seed, unless the run names a seed."""
    from flows.common import selections
    from rtscore.stages import BY_NAME
    from rtscore.storage import RunDir

    config = str(_config(tmp_path, seed=7))
    cfg = load_pipeline_config(config)
    run = RunDir(str(tmp_path / "run"))
    for params, seed in (
        (TrainSeedParams(config=config, run_dir=run.uri), 7),
        (TrainSeedParams(config=config, run_dir=run.uri, seed=5), 5),
    ):
        assert [s["seed"] for s in selections(BY_NAME["train-seed"], params, cfg, run)] == [seed]


def test_rts_train_without_seed_uses_training_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import flows.train as train_flow

    seen: list[int | None] = []

    def fake_flow(params: TrainSeedParams) -> Any:
        seen.append(params.seed)
        seed = params.seed_of(load_pipeline_config(params.config))
        res = SimpleNamespace(seed=seed, best_metric=0.5, best_epoch=1, epochs_run=1, seed_dir="d")
        return SimpleNamespace(result=res)

    monkeypatch.setattr(train_flow, "train_seed", fake_flow)
    monkeypatch.setattr("flows.common.check_inputs", lambda stage, params: None)  # an empty run: nothing to read
    monkeypatch.setattr("flows.common.start_local_api", lambda: None)  # no flow runs: no server to start
    config = str(_config(tmp_path, seed=7))
    assert main(["train", "--config", config, "--run", str(tmp_path / "run")]) == 0
    assert main(["train", "--config", config, "--run", str(tmp_path / "run"), "--seed", "3"]) == 0
    assert seen == [None, 3], "no --seed: the flow takes training.seed; --seed overrides it"
    out = capsys.readouterr().out
    assert "seed 7 " in out and "seed 3 " in out


def test_train_help_says_the_default_is_the_config_seed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "overrides training.seed of the config" in help_text and "default 42" not in help_text


@pytest.mark.parametrize("clip", [["90", "10"], ["-1", "50"], ["5", "101"], ["20", "20"]])
def test_stats_clip_is_range_checked(clip: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["stats", "--dataset", str(tmp_path / "missing.zarr"), "--clip", *clip])
    err = capsys.readouterr().err
    assert rc == 2 and f"--clip: {clip[0]} {clip[1]}" in err and "0 <= low < high <= 100" in err
    assert "Traceback" not in err and not (tmp_path / "normalization_stats.json").exists()


class _Parent(FormModel):
    shared: int = Field(0, description="In both.")
    own: str = Field("", description="The parent's only.")


class _Child(FormModel):
    shared: int = Field(0, description="In both.")
    given: int = Field(0, description="The child's only.")


def test_derived_takes_every_field_the_child_shares_with_its_source() -> None:
    assert derived(_Child, _Parent(shared=3, own="x"), given=4) == _Child(shared=3, given=4)
    assert derived(_Child, _Parent(shared=3), shared=5).shared == 5  # a given value wins over the source's
    assert derived(_Child, _Parent()).model_fields_set == {"shared"}  # a field the source lacks keeps its default


def _non_default_pipeline() -> PipelineParams:
    """A pipeline whose every field is off its default (so a field a builder drops shows)."""
    values: dict[str, Any] = {
        "config": "/abs/c.yaml",
        "run_dir": "/abs/run",
        "deterministic": False,
        "overrides": {"loss.boundary_handling": "ignore"},
        "refresh": True,
        "skip_generation": True,
        "seeds": [5, 6],
        "execution": "distributed",
        "distributed": DistributedParams(max_attempts=2),
    }
    p = PipelineParams(**values)
    default = PipelineParams(config="c.yaml")
    assert [n for n in PipelineParams.model_fields if getattr(p, n) == getattr(default, n)] == []
    return p


def test_a_pipelines_sub_flows_take_every_field_they_share_with_it() -> None:
    p = _non_default_pipeline()
    assert p.data() == DataParams(**p.model_dump(include=set(DataParams.model_fields)))
    stage = p.stage([5])
    assert stage == SeedStageParams(**p.model_dump(include=set(SeedStageParams.model_fields) - {"seeds"}), seeds=[5])
    multi = p.multi_seed()
    run_fields = set(MultiSeedParams.model_fields) & set(PipelineParams.model_fields)
    assert multi.model_dump(include=run_fields) == p.model_dump(include=run_fields)
    assert multi.fresh is True and multi.parent_run_id is None  # refresh starts the seeds over


def test_the_distributed_children_take_every_field_they_share_with_the_pipeline(tmp_path: Path) -> None:
    from flows.fanout import evaluate_test_child, logit_cache_child, train_child

    p = _non_default_pipeline()
    train = train_child(p, 5, "mlflow-parent").params
    assert isinstance(train, TrainSeedParams)
    assert (train.seed, train.fresh, train.parent_run_id) == (5, True, "mlflow-parent")
    cache = logit_cache_child(p, 6).params
    assert isinstance(cache, LogitCacheParams) and (cache.seed, cache.refresh) == (6, True)
    test = evaluate_test_child(p, [5, 6]).params
    assert isinstance(test, SeedStageParams) and (test.seeds, test.refresh) == ([5, 6], True)
    for child in (train, cache, test):
        shared = set(type(child).model_fields) & set(PipelineParams.model_fields) - {"seeds"}
        assert child.model_dump(include=shared) == p.model_dump(include=shared), type(child).__name__


def test_a_sweep_variant_takes_what_the_sweep_sets_for_every_variant() -> None:
    from flows.sweep import _run_params

    params = SweepParams(sweep="s.yaml", deterministic=False, execution="distributed")
    plan = SimpleNamespace(base_config="/abs/base.yaml")
    variant = SimpleNamespace(overrides={"loss.boundary_handling": "ignore"}, run_dir="/abs/sweep/variants/a")
    p = _run_params(plan, variant, params)  # type: ignore[arg-type]  # the two attributes it reads
    assert (p.config, p.run_dir, p.overrides) == ("/abs/base.yaml", variant.run_dir, variant.overrides)
    assert (p.deterministic, p.execution, p.distributed) == (False, "distributed", params.distributed)


def test_a_campaigns_chunk_runs_take_every_field_they_share_with_it() -> None:
    from flows.mapping import chunk_children
    from rtscore.mapping.scenes import InputIdentity, Scene

    region = MapRegionParams(package="/abs/pkg", input="/abs/in", output="/abs/out", device="cuda:1")
    scenes = [Scene(i, f"gs://b/in/{i}.tif", InputIdentity(generation=n + 1, size=10)) for n, i in enumerate("ab")]
    plan = SimpleNamespace(chunks=[scenes], identity=SimpleNamespace(digest=lambda: "sha"), records=[])
    (child,) = chunk_children(region, plan)  # type: ignore[arg-type]  # the attributes it reads
    handed = [
        {"scene_id": i, "uri": f"gs://b/in/{i}.tif", "identity": {"generation": n + 1, "size": 10}}
        for n, i in enumerate("ab")
    ]
    assert child.params == MapChunkParams(
        package="/abs/pkg",
        input="/abs/in",
        output="/abs/out",
        device="cuda:1",
        chunk=0,
        scene_ids=["a", "b"],
        scenes=handed,  # validated into PlannedScene
        mapping_identity="sha",
    )


def test_both_fan_outs_settings_are_what_fan_out_reads() -> None:
    assert isinstance(DistributedParams(), FanOutSettings) and isinstance(MapDistributedParams(), FanOutSettings)
    pipeline, campaign = DistributedParams(), MapDistributedParams()
    for name in ("max_attempts", "timeout_s", "poll_interval_s", "job_variables"):
        assert getattr(pipeline, name) == getattr(campaign, name), name  # declared once: the same defaults
        assert DistributedParams.model_fields[name].metadata == MapDistributedParams.model_fields[name].metadata


@pytest.mark.parametrize("model", [MultiSeedParams, TrainParams, SeedStageParams, PipelineParams])
@pytest.mark.parametrize("bad", [[], [1, 1], [-1]])
def test_every_seeds_field_has_the_one_check(model: type[FormModel], bad: list[int]) -> None:
    with pytest.raises(ValidationError, match="expected a non-empty list of distinct non-negative seeds"):
        model.model_validate({"config": "c", "run_dir": "r", "seeds": bad})


def test_rts_train_hands_every_option_to_the_flow_it_runs() -> None:
    """--parent-run-id (and any option TrainParams shares with the flow it runs) reaches that flow."""
    given: dict[str, Any] = {"config": "c", "run_dir": "r", "deterministic": False, "overrides": {"a.b": 1}}
    given |= {"fresh": True, "parent_run_id": "mlflow-run"}
    single = TrainParams(**given, seed=3).flow_params()
    assert single == TrainSeedParams(**given, seed=3)
    multi = TrainParams(**given, seeds=[3, 4]).flow_params()
    assert multi == MultiSeedParams(**given, seeds=[3, 4])
