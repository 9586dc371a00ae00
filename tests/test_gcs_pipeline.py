"""Every pipeline stage on a gs:// run directory (GCS emulator), each group of stages on a fresh "worker"; the data
stages as the data flow runs them, once more on a fresh worker that reuses them all, and the UI's Cloud Console links
and inline images."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import yaml

from rtscore import stages
from rtscore.config import load_pipeline_config
from rtscore.storage import CACHE_ENV, RunDir, fingerprint
from tests.calibrate.conftest import calib_config
from tests.conftest import GCS_TEST_BUCKET


@pytest.mark.slow
def test_pipeline_runs_on_a_gs_root(
    prefect_harness: None, gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.data import data_pipeline
    from flows.params import DataParams

    monkeypatch.setenv("RTS_GCS_WORKERS", "4")  # the emulator serves one request at a time
    monkeypatch.setenv("RTS_GCS_RETRY_INITIAL_S", "0.01")
    uri = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/run"
    # One training step, calibration over one candidate: what is asserted is where each artifact lands and that it
    # matches its record, not what the model learnt (tests.helpers.quick_training's settings).
    cfg = calib_config(tta_candidates=["none"], scale_candidates=[1.0])
    training = cfg.training.model_copy(update={"max_epochs": 1, "steps_per_epoch": 1})
    lr_schedule = cfg.lr_schedule.model_copy(update={"freeze_backbone_epochs": 0, "warmup_epochs": 0})
    cfg = cfg.model_copy(update={"training": training, "lr_schedule": lr_schedule})
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    cfg = load_pipeline_config(config)  # the config as the data flow reads it, for the stages run directly
    params = DataParams(config=str(config), run_dir=uri)

    def on_worker(name: str) -> Path:
        """Later stages run as if on another machine: an empty local mirror that stages from the bucket."""
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / name))
        return RunDir(uri).root

    # The data stages as the data flow runs them; then the flow again on another machine (an empty local mirror):
    # every stage served from the cache, nothing staged from the bucket but what the summary shows.
    on_worker("data")
    refs = data_pipeline(params)
    for split in ("train", "val", "test"):
        assert refs.datasets[split].uri == f"{uri}/datasets/{split}.zarr"
    before = {k: e.created for k, e in RunDir(uri).read_manifest().artifacts.items()}

    time.sleep(1.1)  # `created` has a resolution of one second
    on_worker("data-again")
    again = data_pipeline(params)
    after = {k: e.created for k, e in RunDir(uri).read_manifest().artifacts.items()}
    assert {k: v for k, v in after.items() if k != "config.resolved.yaml"} == {
        k: v for k, v in before.items() if k != "config.resolved.yaml"
    }, "every stage was served from the cache: its artifacts are in the bucket"
    assert again.validation == refs.validation
    assert (
        not (tmp_path / "data-again" / "gcs" / GCS_TEST_BUCKET)
        .joinpath(uri[len("gs://rts-test/") :], "datasets")
        .exists()
    )
    summary, images = asyncio.run(_latest_data_pipeline_artifacts())
    assert "not shown" not in summary, "the summary staged the validation report from the bucket"
    assert "console.cloud.google.com/storage/browser" not in summary  # links are artifacts of their own
    bucket_path = uri.removeprefix("gs://")
    assert f"https://storage.cloud.google.com/{bucket_path}/validation/samples.png" in images

    mirror = on_worker("gpu")
    parent = stages.start_multiseed(uri, cfg, [1])
    trained = stages.train_seed(uri, cfg, 1, parent_run_id=parent)
    assert {a.path for a in trained.artifacts} >= {"seeds/seed_1/best_deployment.pth", "seeds/seed_1/metrics.jsonl"}
    stages.finish_multiseed(uri, cfg, parent, [trained])
    assert (mirror / "datasets/train.zarr").is_dir()  # staged from the bucket before training

    mirror = on_worker("calibration")
    stages.logit_cache(uri, cfg, 1)
    cal = stages.calibrate(uri, cfg)
    assert cal.shipped_seed == 1 and cal.deployment.threshold is not None
    report = stages.evaluate_test(uri, cfg)
    assert report.report.aggregate and (mirror / "evaluation/test_report.json").is_file()

    mirror = on_worker("package")
    pkg = stages.package(uri, cfg)
    assert pkg.uri == f"{uri}/package" and (mirror / "package/weights.pth").is_file()

    # Every recorded artifact is in the bucket and matches its record when downloaded afresh.
    on_worker("audit")
    run = RunDir(uri)
    manifest = run.read_manifest().artifacts
    expected = {
        "config.resolved.yaml",
        "datasets/test.zarr",
        "normalization_stats.json",
        "validation",
        "seeds/seed_1/best_deployment.pth",
        "seeds/summary.json",
        "calibration/seed_1/logit_cache.zarr",
        "calibration/seed_1/deployment_config.yaml",
        "calibration/deployment_config.yaml",
        "evaluation/test_report.json",
        "package",
    }
    assert expected <= set(manifest)
    for rel, entry in manifest.items():
        assert entry.uri == f"{uri}/{rel}" and run.has(rel), rel
        assert not run.path(rel).exists()
        run.require(rel)
        assert fingerprint(run.path(rel)) == (entry.sha256, entry.bytes), rel


async def _latest_data_pipeline_artifacts() -> tuple[str, list[str]]:
    """The latest data-pipeline summary artifact's text and every image artifact's."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, ArtifactFilterType
    from prefect.client.schemas.sorting import ArtifactSort

    async with get_client() as client:
        (summary,) = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["data-pipeline"])),
            sort=ArtifactSort.CREATED_DESC,
            limit=1,
        )
        images = await client.read_artifacts(
            artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["image"])), sort=ArtifactSort.CREATED_DESC
        )
        return str(summary.data), [str(a.data) for a in images]
