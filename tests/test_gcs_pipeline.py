"""Every pipeline stage on a gs:// run directory (GCS emulator), each group of stages on a fresh "worker"."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rtscore import stages
from rtscore.storage import CACHE_ENV, RunDir, fingerprint
from tests.calibrate.conftest import calib_config
from tests.conftest import GCS_TEST_BUCKET


@pytest.mark.slow
def test_pipeline_runs_on_a_gs_root(gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTS_GCS_WORKERS", "4")  # the emulator serves one request at a time
    monkeypatch.setenv("RTS_GCS_RETRY_INITIAL_S", "0.01")
    uri = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/run"
    # One training step, calibration over one candidate: what is asserted is where each artifact lands and that it
    # matches its record, not what the model learnt (tests.helpers.quick_training's settings).
    cfg = calib_config(tta_candidates=["none"], scale_candidates=[1.0])
    training = cfg.training.model_copy(update={"max_epochs": 1, "steps_per_epoch": 1})
    lr_schedule = cfg.lr_schedule.model_copy(update={"freeze_backbone_epochs": 0, "warmup_epochs": 0})
    cfg = cfg.model_copy(update={"training": training, "lr_schedule": lr_schedule})

    def on_worker(name: str) -> Path:
        """Later stages run as if on another machine: an empty local mirror that stages from the bucket."""
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / name))
        return RunDir(uri).root

    on_worker("data")
    stages.save_resolved_config(uri, cfg)
    for split in ("train", "val", "test"):
        ref = stages.generate_dataset(uri, cfg, split)
        assert ref.uri == f"{uri}/datasets/{split}.zarr"
    stages.normalization_stats(uri, cfg)
    stages.validate_data(uri, cfg)

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
