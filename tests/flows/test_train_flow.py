from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import quick_training


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_config(tmp_path / "pipeline.yaml", quick_training(tiny_training_config([1, 2])))


@pytest.mark.slow
def test_full_pipeline_trains_seeds_under_one_parent_run_and_caches(
    prefect_harness: None, config_file: Path, tmp_path: Path
) -> None:
    from flows.params import PipelineParams
    from flows.pipeline import pipeline
    from rtscore.config import load_pipeline_config
    from rtscore.tracking import Tracker

    run = tmp_path / "run"
    refs = pipeline(PipelineParams(config=str(config_file), run_dir=str(run)))
    results = refs.training
    assert isinstance(results, list) and [r.result.seed for r in results] == [1, 2]
    assert "RTS_FLOW_RUN_ID" not in os.environ, "each flow sets it for its own body only"
    assert _latest_progress() == 100.0, "the pipeline advanced its progress artifact through every step"
    assert {
        "rts-pipeline-run",
        "data-pipeline",
        "multi-seed-train",
        "calibrate-seeds-1-2",
        "evaluate-test-seeds-1-2",
        "package-seeds-1-2",
    } <= set(_flow_run_names()), "the pipeline's subflow runs are named after their work"
    manifest = json.loads((run / "manifest.json").read_text())["artifacts"]
    for seed in (1, 2):
        assert f"seeds/seed_{seed}/best_deployment.pth" in manifest
        assert manifest[f"seeds/seed_{seed}/metrics.jsonl"]["stage"] == "train-seed"
    summary = json.loads((run / "seeds" / "summary.json").read_text())
    assert summary["best_val_realistic_pr_auc_geomean_std"] >= 0.0
    tracker = Tracker(load_pipeline_config(config_file).mlflow, run)
    parent = summary["parent_mlflow_run_id"]
    children = tracker.client.search_runs([tracker.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")
    assert sorted(c.info.run_name for c in children) == ["seed_1", "seed_2"]
    assert all(c.info.status == "FINISHED" for c in children)

    # After training: calibration, test report, package (guide §10.4), all in the manifest.
    dep = yaml.safe_load((run / "calibration/deployment_config.yaml").read_text())
    assert dep["threshold"] is not None and dep["temperature"] is not None
    assert refs.calibration.deployment.threshold == dep["threshold"]
    assert refs.test.report.seeds == [1, 2] and refs.package.path == "package" and refs.data.datasets["test"]
    report = json.loads((run / "evaluation/test_report.json").read_text())
    assert report["seeds"] == [1, 2] and "±" in report["aggregate"]["1_200"]["pr_auc"]["text"]
    assert "IoU_RTS" in (run / "evaluation/test_report.md").read_text()
    for rel in (
        "calibration/gates.json",
        "evaluation/test_report.json",
        "package",
        "calibration/seed_2/logit_cache.zarr",
    ):
        assert rel in manifest or rel in json.loads((run / "manifest.json").read_text())["artifacts"]
    from rtscore.package import verify_package

    verdict = verify_package(run / "package", allow_fallback_threshold=True)
    assert verdict.ok, verdict.failures()

    watched = [
        run / "seeds/seed_1/best_deployment.pth",
        run / "calibration/seed_1/logit_cache.zarr/zarr.json",
        run / "calibration/deployment_config.yaml",
        run / "evaluation/test_report.json",
        run / "package/SHA256SUMS",
    ]
    before = [p.stat().st_mtime_ns for p in watched]
    again = pipeline(PipelineParams(config=str(config_file), run_dir=str(run)))
    assert [p.stat().st_mtime_ns for p in watched] == before, "every finished stage is cached"
    assert [r.result.best_metric for r in again.training] == [r.result.best_metric for r in results]

    # A decision setting changes: calibration and what follows re-run; training and the logit caches do not.
    data = yaml.safe_load(config_file.read_text())
    data.setdefault("calibration", {})["target_precision"] = 0.6
    config_file.write_text(yaml.safe_dump(data))
    pipeline(PipelineParams(config=str(config_file), run_dir=str(run)))
    after = [p.stat().st_mtime_ns for p in watched]
    assert after[:2] == before[:2] and all(a != b for a, b in zip(after[2:], before[2:], strict=True))


def _flow_run_names() -> list[str]:
    import asyncio

    from prefect.client.orchestration import get_client

    async def read() -> list[str]:
        async with get_client() as client:
            return [r.name for r in await client.read_flow_runs()]

    return asyncio.run(read())


def _latest_progress() -> float:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async def read() -> float:
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["rts-pipeline-progress"])),
                sort=ArtifactSort.UPDATED_DESC,
                limit=1,
            )
            return float(found[0].data)

    return asyncio.run(read())
