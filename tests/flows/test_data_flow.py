from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import tiny_pipeline_config


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    p = tmp_path / "pipeline.yaml"
    p.write_text(yaml.safe_dump(tiny_pipeline_config()))
    return p


def _created(run: Path) -> dict[str, str]:
    doc = json.loads((run / "manifest.json").read_text())
    return {k: v["created"] + v["sha256"] for k, v in doc["artifacts"].items()}


@pytest.mark.slow
def test_data_pipeline_runs_caches_and_refreshes(prefect_harness: None, config_file: Path, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    from flows.data import data_pipeline
    from flows.params import DataParams

    run = tmp_path / "run"
    refs = data_pipeline(DataParams(config=str(config_file), run_dir=str(run)))
    assert list(refs.named()) == [
        "config",
        "dataset_train",
        "dataset_val",
        "dataset_test",
        "normalization_stats",
        "validation",
    ]
    assert refs.datasets["val"].path == "datasets/val.zarr" and refs.validation.stage == "validate-data"
    manifest = json.loads((run / "manifest.json").read_text())["artifacts"]
    assert {
        "datasets/train.zarr",
        "datasets/val.zarr",
        "datasets/test.zarr",
        "normalization_stats.json",
        "validation",
        "config.resolved.yaml",
    } <= set(manifest)
    assert manifest["datasets/train.zarr"]["stage"] == "generate-dataset"
    report = json.loads((run / "validation" / "report.json").read_text())
    assert report["status"] == "passed"
    assert (run / "validation" / "samples.png").stat().st_size > 1000

    import time

    before = _created(run)
    time.sleep(1.1)
    data_pipeline(DataParams(config=str(config_file), run_dir=str(run)))
    assert _created(run) == {**before, "config.resolved.yaml": _created(run)["config.resolved.yaml"]}, (
        "a second run reuses every cached stage"
    )

    # A lost artifact is recomputed even though its task result is cached.
    import shutil

    shutil.rmtree(run / "validation")
    data_pipeline(DataParams(config=str(config_file), run_dir=str(run)))
    after = _created(run)
    assert after["validation"] != before["validation"] and after["datasets/train.zarr"] == before["datasets/train.zarr"]

    time.sleep(1.1)
    data_pipeline(DataParams(config=str(config_file), run_dir=str(run), refresh=True))
    refreshed = _created(run)
    assert refreshed["datasets/train.zarr"] != after["datasets/train.zarr"]
    # Same seed: the regenerated store has the same content fingerprint.
    assert refreshed["datasets/train.zarr"][-64:] == after["datasets/train.zarr"][-64:]

    async def artifacts() -> list[str]:
        async with get_client() as client:
            return [a.key for a in await client.read_artifacts()]

    import asyncio

    assert "data-pipeline" in asyncio.run(artifacts())


@pytest.mark.slow
def test_tile_scenes_flow_writes_the_layout_and_its_ui_artifact(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tile-scenes deployment's flow: the library's tiling, then a markdown artifact the UI shows. Paths
    relative to the worker's directory name the same inputs: a re-run given them resumes (issue 21)."""
    from prefect.client.orchestration import get_client

    from flows.data import tile_scenes
    from flows.params import TileParams
    from tests.data.tiling.test_run import base_config, mosaic_scenes

    mosaic_scenes(tmp_path)
    splits = {"train": ["west"], "val": ["east"]}  # a thin val: a warning the artifact shows
    (tmp_path / "tile.yaml").write_text(
        yaml.safe_dump(base_config(tmp_path, splits=splits, split_rules={"min_val_regions": 1}))
    )
    manifest = tile_scenes(TileParams(config=str(tmp_path / "tile.yaml"), output=str(tmp_path / "root")))
    assert manifest.counts.tiles > 0 and (tmp_path / "root" / "metadata.csv").is_file()
    monkeypatch.chdir(tmp_path)
    again = tile_scenes(TileParams(config="tile.yaml", output="root"))
    assert again.resumed_tiles == manifest.counts.tiles

    async def artifacts() -> list[str]:
        async with get_client() as client:
            return [a.data or "" for a in await client.read_artifacts() if (a.key or "").startswith("tile-scenes")]

    import asyncio

    shown = asyncio.run(artifacts())
    assert shown and f"{manifest.counts.tiles} tiles ({manifest.counts.positive} positive" in shown[0]
    assert "## Warnings" in shown[0] and "- splits.val: about " in shown[0]
