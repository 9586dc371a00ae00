"""Every per-stage flow is built from its stage spec (flows/stage_flow.py); flow runs are named after their work."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from flows.params import GenerateParams, LogitCacheParams, SeedStageParams, StageParams, TrainSeedParams
from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import make_data_run, quick_training


def test_every_stage_flow_is_built_from_its_spec() -> None:
    """Name, params model, entrypoint: what prefect.yaml and the UI see, for a flow nobody wrote by hand."""
    import flows.calibrate
    import flows.data
    import flows.train
    from rtscore.stages import BY_NAME

    built = {
        flows.data.generate_dataset: GenerateParams,
        flows.data.normalization_stats: StageParams,
        flows.data.validate_data: StageParams,
        flows.train.train_seed: TrainSeedParams,
        flows.calibrate.logit_cache: LogitCacheParams,
        flows.calibrate.evaluate_test: SeedStageParams,
        flows.calibrate.package: SeedStageParams,
    }
    for flow, model in built.items():
        spec = BY_NAME[flow.name]
        assert flow.fn.__module__ + ":" + flow.fn.__name__ == flow._entrypoint  # the prefect.yaml attribute
        assert flow.fn.__name__ == spec.name.replace("-", "_")
        assert typing.get_type_hints(flow.fn)["params"] is model
        assert flow.description and callable(flow.flow_run_name)
        assert list(flow.parameters.properties) == ["params"], "one typed argument: the UI form"


def test_flow_runs_are_named_after_the_work_they_select() -> None:
    from flows.common import run_name, stage_run_name
    from flows.params import PipelineParams
    from flows.params.mapping import MapChunkParams
    from rtscore.stages import BY_NAME

    base = {"config": "c.yaml", "run_dir": "runs/quick/"}
    assert stage_run_name(BY_NAME["train-seed"], TrainSeedParams(**base, seed=42)) == "train-seed-42"
    assert stage_run_name(BY_NAME["train-seed"], TrainSeedParams(**base)) == "train-seed", "the config's seed"
    assert stage_run_name(BY_NAME["logit-cache"], LogitCacheParams(**base, seed=7)) == "logit-cache-7"
    assert stage_run_name(BY_NAME["calibrate"], SeedStageParams(**base, seeds=[42, 43])) == "calibrate-seeds-42-43"
    assert stage_run_name(BY_NAME["package"], SeedStageParams(**base)) == "package"
    assert stage_run_name(BY_NAME["generate-dataset"], GenerateParams(**base)) == "generate-dataset"
    assert stage_run_name(BY_NAME["generate-dataset"], GenerateParams(**base, splits=["val"])) == (
        "generate-dataset-splits-val"
    )
    assert run_name("rts-pipeline", PipelineParams(**base), ("run_dir",)) == "rts-pipeline-quick"
    chunk = MapChunkParams(package="p", input="i", output="o", chunk=3, scene_ids=["a"])
    assert run_name("map-chunk", chunk, ("chunk",)) == "map-chunk-3"


@pytest.mark.slow
def test_train_seed_recomputes_a_seed_whose_recorded_weights_were_lost(prefect_harness: None, tmp_path: Path) -> None:
    """train-seed goes through run_stage like every stage: a cached result whose artifacts are gone is not reused."""
    from prefect.client.orchestration import get_client

    from flows.train import train_seed
    from rtscore.config import parse_pipeline_config
    from rtscore.storage import RunLayout

    data = quick_training(tiny_training_config([3]))
    config = write_config(tmp_path / "pipeline.yaml", data)
    run = make_data_run(tmp_path / "run", parse_pipeline_config(data))
    params = TrainSeedParams(config=str(config), run_dir=str(run), seed=3)
    first = train_seed(params)
    weights = run / RunLayout.BEST_WEIGHTS.at(seed=3)
    assert first.result.seed == 3 and weights.is_file()
    weights.unlink()
    again = train_seed(params)
    assert weights.is_file(), "the lost weights were trained again, not taken from the cache"
    assert {a.path: a.sha256 for a in again.artifacts}[RunLayout.BEST_WEIGHTS.at(seed=3)]

    async def names() -> list[str]:
        async with get_client() as client:
            return [r.name for r in await client.read_flow_runs()]

    import asyncio

    assert asyncio.run(names()).count("train-seed-3") == 2, "each run is named after its seed"
