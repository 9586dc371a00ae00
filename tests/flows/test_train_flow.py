"""The pipeline flow end to end on CPU (`rts run`'s path): seeds trained under one parent MLflow run, calibration, the
test report and the package; then its caching, against that real run directory: a finished pipeline re-runs nothing,
a decision setting re-runs calibration and what follows, and a code edit re-runs the stage whose import closure it
touches and every stage after it, nothing before it (docs/architecture.md's table); an edit outside every closure
re-runs nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from rtscore.stages import STAGES, cache_key, code_fingerprint
from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import CodeEdits, executed_stages, quick_training

if TYPE_CHECKING:
    from flows.params import PipelineParams

NAMES = [s.name for s in STAGES]
AFTER_TRAINING = ["train-seed", "logit-cache", "calibrate", "evaluate-test", "package"]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_config(tmp_path / "pipeline.yaml", quick_training(tiny_training_config([1, 2])))


@pytest.fixture
def edits(monkeypatch: pytest.MonkeyPatch) -> Iterator[CodeEdits]:
    yield CodeEdits(monkeypatch)
    code_fingerprint.cache_clear()


@pytest.mark.slow
def test_full_pipeline_trains_seeds_under_one_parent_run_and_caches(
    prefect_harness: None, config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: CodeEdits
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
    seen = executed_stages(monkeypatch)
    again = pipeline(PipelineParams(config=str(config_file), run_dir=str(run)))
    assert [p.stat().st_mtime_ns for p in watched] == before, "every finished stage is cached"
    assert [s for s in seen if s in NAMES] == [], "a completed pipeline re-runs nothing"
    assert [r.result.best_metric for r in again.training] == [r.result.best_metric for r in results]

    # A decision setting changes: calibration and what follows re-run; training and the logit caches do not.
    data = yaml.safe_load(config_file.read_text())
    data.setdefault("calibration", {})["target_precision"] = 0.6
    config_file.write_text(yaml.safe_dump(data))
    pipeline(PipelineParams(config=str(config_file), run_dir=str(run)))
    after = [p.stat().st_mtime_ns for p in watched]
    assert after[:2] == before[:2] and all(a != b for a, b in zip(after[2:], before[2:], strict=True))

    _code_edits_rerun_their_stage_and_everything_after_it(
        PipelineParams(config=str(config_file), run_dir=str(run)), edits, seen
    )


def _code_edits_rerun_their_stage_and_everything_after_it(
    params: PipelineParams, edits: CodeEdits, seen: list[str]
) -> None:
    """On the finished pipeline run of ``params``: the cache keys of its stage runs after each (simulated) edit, and
    three of the edits run for real (``seen``: the stages recorded from then on)."""
    from flows.pipeline import pipeline
    from rtscore.config import load_pipeline_config

    cfg = load_pipeline_config(params.config)
    runs = [("generate-dataset", {"split": s}) for s in ("train", "val", "test")]
    runs += [("normalization-stats", {}), ("validate-data", {})]
    runs += [(n, {"seed": s}) for n in ("train-seed", "logit-cache") for s in (1, 2)]
    runs += [(n, {"seeds": [1, 2]}) for n in NAMES[-3:]]

    def keys() -> dict[tuple[str, str], str]:
        return {(n, str(p)): cache_key(n, params.run_dir, cfg, p) for n, p in runs}

    cases = {  # edited file -> the stages whose cache keys change, in pipeline order
        "rtscore/data/normalization/stats.py": ["normalization-stats", "validate-data", *AFTER_TRAINING],
        "rtscore/metrics/histograms.py": AFTER_TRAINING,
        "README.md": [],
        "tests/flows/test_train_flow.py": [],
        "rtscore/package/verify.py": ["package"],
        "rtscore/calibrate/temperature.py": AFTER_TRAINING[1:],
        "rtscore/losses/focal.py": AFTER_TRAINING,
    }
    clean = keys()
    for rel, expected in cases.items():
        edits.edit(rel)
        changed = {name for (name, p), k in keys().items() if clean[(name, p)] != k}
        assert sorted(changed, key=NAMES.index) == expected, rel
        edits.undo(rel)
        assert keys() == clean

    # ... and those keys are what the pipeline runs on: three of the edits, run for real (a logit-cache edit re-runs
    # from there, the training before it kept; that an edit of the train closure retrains from scratch is
    # tests/stages/test_resume_identity.py's, on the train-seed stage itself).
    for rel in ("README.md", "rtscore/package/verify.py", "rtscore/calibrate/temperature.py"):
        edits.edit(rel)
        seen.clear()
        pipeline(params)
        assert sorted({s for s in seen if s in NAMES}, key=NAMES.index) == cases[rel], rel
        seen.clear()
        pipeline(params)
        assert [s for s in seen if s in NAMES] == [], f"{rel}: the second run is served from the cache"


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
