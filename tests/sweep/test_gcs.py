"""A sweep directory in a bucket (gs://, the local GCS emulator): the plan, the variants' run directories, the
adopted stage runs and the report all live there, and another worker (an empty local mirror) reads them back."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from rtscore.config.base import parse_config
from rtscore.storage import CACHE_ENV, RunDir
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.plan import plan_sweep
from rtscore.sweep.run import adopt_shared, build_report, read_report, write_plan, write_report
from rtscore.sweep.status import sweep_status
from tests.conftest import GCS_TEST_BUCKET
from tests.flows.configs import tiny_training_config, write_config
from tests.sweep.test_run import write_seed

SEEDS = [1, 2, 3]


@pytest.fixture
def sweep_uri(gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "worker-a"))
    monkeypatch.setenv("RTS_GCS_WORKERS", "2")
    return f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/sweep"


def _record_data_stages(run: RunDir) -> None:
    """What the data stages of the baseline record (tiny stand-ins): stores, stats, the validation report."""
    for split in ("train", "val", "test"):
        store = run.path(f"datasets/{split}.zarr")
        store.mkdir(parents=True)
        (store / "zarr.json").write_text(json.dumps({"split": split}))
        run.record(f"datasets/{split}.zarr", "generate-dataset", "")
    run.path("normalization_stats.json").write_text('{"mean": [0.5]}')
    run.record("normalization_stats.json", "normalization-stats", "")
    run.path("validation").mkdir()
    run.path("validation/report.json").write_text("{}")
    run.record("validation", "validate-data", "")


def test_a_sweep_in_a_bucket_is_read_back_by_another_worker(
    sweep_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = write_config(tmp_path / "base.yaml", tiny_training_config(SEEDS))
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": {"gamma": {"loss.focal_gamma": 1.0}}})
    sweep = sweep.model_copy(update={"name": "bucket"})
    plan = plan_sweep(sweep, base, sweep_uri)
    assert [v.run_dir for v in plan.variants] == [f"{sweep_uri}/variants/baseline", f"{sweep_uri}/variants/gamma"]
    write_plan(plan)

    baseline, gamma = (RunDir(v.run_dir) for v in plan.variants)
    _record_data_stages(baseline)
    adopted = adopt_shared(plan, "gamma")
    assert sorted(adopted) == sorted(
        ["datasets/train.zarr", "datasets/val.zarr", "datasets/test.zarr", "normalization_stats.json", "validation"]
    )
    for rel in adopted:
        entry = gamma.entry(rel)
        assert entry is not None and entry.sha256 == baseline.entry(rel).sha256  # type: ignore[union-attr]
        assert entry.adopted_from == f"{baseline.uri}/{rel}"
    for i, s in enumerate(SEEDS):
        write_seed(baseline.uri, s, {"val_realistic_pr_auc_geomean": 0.50 + 0.01 * i})
        write_seed(gamma.uri, s, {"val_realistic_pr_auc_geomean": 0.60 + 0.01 * i + 0.001 * (i % 2)})
    report = build_report(plan, sweep, [200], None, finished=True)
    write_report(report)

    # Another worker: its own empty mirror, the same bucket.
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "worker-b"))
    again = read_report(sweep_uri)
    assert again is not None and again.model_dump() == report.model_dump()
    judgement = again.variant("gamma").judgement
    assert judgement is not None and judgement.verdict == "better"
    assert again.chosen == "gamma"
    status = sweep_status(sweep, base, sweep_uri)
    assert "gamma" in status and "better" in status and "finished" in status
    md = RunDir(sweep_uri)
    for rel in ("plan.json", "report.json", "report.md", "report.png"):
        assert md.has(rel), f"{rel} is in the bucket"
