"""A stage's result read back from what it recorded in the run directory (how a distributed pipeline gets the
results of the child flow runs on other workers): the one reader per stage, through its spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtscore.storage import RunDir, RunLayout, StorageError, atomic_write_json
from tests.helpers import small_test_report


def test_recorded_selects_the_stages_records_of_its_outputs_for_the_parameters(tmp_path: Path) -> None:
    from rtscore.stages.calibrate import SPEC as CALIBRATE
    from rtscore.stages.spec import recorded
    from rtscore.stages.train import SPEC as TRAIN_SEED

    run = RunDir(tmp_path / "run")
    for seed in (1, 2):
        for entry in (RunLayout.BEST_WEIGHTS, RunLayout.SEED_SUMMARY, RunLayout.RESUME_EPOCH):
            rel = entry.at(seed=seed, epoch=3)
            run.path(rel).parent.mkdir(parents=True, exist_ok=True)
            run.path(rel).write_bytes(f"{rel}".encode())
            run.record(rel, "train-seed", "h")
    other = RunLayout.SEED_CALIBRATION_REPORT.at(seed=1)
    run.path(other).parent.mkdir(parents=True)
    run.path(other).write_text("{}")
    run.record(other, "calibrate", "h")

    refs = recorded(TRAIN_SEED, run, {"seed": 2}, (RunLayout.BEST_WEIGHTS, RunLayout.SEED_SUMMARY))
    assert [r.path for r in refs] == [RunLayout.BEST_WEIGHTS.at(seed=2), RunLayout.SEED_SUMMARY.at(seed=2)]
    assert refs[0].uri == str(run.path(refs[0].path)) and refs[0].sha256 == run.entry(refs[0].path).sha256  # type: ignore[union-attr]
    assert len(recorded(TRAIN_SEED, run, {"seeds": [1, 2]})) == 6, "every output, checkpoints included"
    assert [r.path for r in recorded(CALIBRATE, run, {})] == [other], "only the stage's own records"
    assert recorded(CALIBRATE, run, {"seeds": [2]}) == []


def test_recorded_train_result(tmp_path: Path) -> None:
    from rtscore.config.pipeline import ModelConfig
    from rtscore.stages import recorded_train_result
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
    with pytest.raises(StorageError, match="its artifacts are not in the run"):
        recorded_train_result(run, 7)
    for name in ("best_deployment.pth", "run_summary.json"):
        run.record(f"seeds/seed_7/{name}", "train-seed", "h")
    result = recorded_train_result(run, 7)
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
    with pytest.raises(StorageError, match="does not match the manifest"):
        recorded_train_result(run, 7)
    (base / "best_deployment.pth").write_bytes(b"weights")
    (base / "run_summary.json").write_text('{"seed": 7}')
    run.record("seeds/seed_7/run_summary.json", "train-seed", "h")
    with pytest.raises(StorageError, match="summary cannot be read: invalid seed summary .*epochs_run"):
        recorded_train_result(run, 7)


def test_recorded_logit_caches_and_test_result(tmp_path: Path) -> None:
    """What the logit-cache and evaluate-test runs recorded is what is read back (NaN included)."""
    from rtscore.stages import recorded_logit_caches, recorded_test_result

    run = RunDir(tmp_path / "run")
    with pytest.raises(StorageError, match=r"records no .*seed_1/logit_cache.zarr by stage logit-cache"):
        recorded_logit_caches(run, [1, 2])
    for s in (2, 1):
        cache = run.path(RunLayout.LOGIT_CACHE.at(seed=s))
        cache.mkdir(parents=True)
        (cache / "zarr.json").write_text(f'{{"seed": {s}}}')
        run.record(RunLayout.LOGIT_CACHE.at(seed=s), "logit-cache", "h")
    refs = recorded_logit_caches(run, [1, 2])
    assert [r.path for r in refs] == [RunLayout.LOGIT_CACHE.at(seed=1), RunLayout.LOGIT_CACHE.at(seed=2)]
    assert all(r.stage == "logit-cache" and r.sha256 for r in refs)
    assert [r.path for r in recorded_logit_caches(run, [2])] == [RunLayout.LOGIT_CACHE.at(seed=2)]

    report = small_test_report([1, 2])
    rel = RunLayout.TEST_REPORT.at()
    with pytest.raises(StorageError, match="its artifacts are not in the run"):
        recorded_test_result(run, [1, 2])
    atomic_write_json(run.path(rel), report.model_dump(mode="python"))  # as evaluate-test writes it
    run.record(rel, "evaluate-test", "h")
    result = recorded_test_result(run, [1, 2])
    assert result.report.model_dump_json() == report.model_dump_json()
    assert [a.path for a in result.artifacts] == [rel]
    with pytest.raises(StorageError, match=r"reports seeds \[1, 2\], not \[1\]"):
        recorded_test_result(run, [1])
