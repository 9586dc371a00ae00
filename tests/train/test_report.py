from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rtscore.storage import StorageError
from rtscore.train.report import overfitting_indicators, write_seed_outputs
from rtscore.train.result import MultiSeedSummary, SeedResult, read_seed_summary
from tests.train.conftest import tiny_train_config


def _rows(
    train_loss: list[float],
    val_loss: list[float],
    bal: list[float],
    real: list[float],
    train_iou: float = 0.5,
    val_iou: float = 0.5,
) -> list[dict]:
    return [
        {
            "epoch": i + 1,
            "train_loss": t,
            "val_loss": v,
            "val_balanced_pr_auc": b,
            "val_realistic_pr_auc_geomean": r,
            "train_iou": train_iou,
            "val_balanced_iou_rts": val_iou,
        }
        for i, (t, v, b, r) in enumerate(zip(train_loss, val_loss, bal, real, strict=True))
    ]


def test_healthy_run_has_no_flags() -> None:
    rows = _rows([0.3, 0.2, 0.1], [0.3, 0.25, 0.2], [0.5, 0.7, 0.9], [0.01, 0.05, 0.1])
    assert overfitting_indicators(rows)["flags"] == []  # a large but closing gap is the imbalance, not overfitting


def test_each_indicator_fires() -> None:
    rows = _rows([0.3, 0.2, 0.1], [0.2, 0.25, 0.3], [0.6, 0.7, 0.9], [0.2, 0.1, 0.05], train_iou=0.95, val_iou=0.3)
    flags = overfitting_indicators(rows)["flags"]
    assert [f.split(":")[0] for f in flags] == ["train_val_divergence", "iou_gap", "balanced_vs_realistic"]


SUMMARY_KEYS = [
    "seed",
    "epochs_run",
    "stopped_early",
    "best_epoch",
    "best_val_realistic_pr_auc_geomean_smoothed",
    "last_validation",
    "overfitting",
    "model",
    "mlflow_run_id",
]


def _write_metrics(seed_dir: Path) -> list[dict]:
    rows = _rows([0.3, 0.2, 0.1], [0.3, 0.25, 0.2], [0.5, 0.7, 0.9], [0.01, 0.05, 0.1])
    rows.append({"epoch": 4, "train_loss": 0.05, "train_iou": 0.6})  # an epoch without validation
    seed_dir.mkdir(parents=True, exist_ok=True)
    (seed_dir / "metrics.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return rows


def test_seed_summary_is_the_run_summary_json_and_round_trips(tmp_path: Path) -> None:
    cfg = tiny_train_config()
    seed_dir = tmp_path / "seeds" / "seed_3"
    rows = _write_metrics(seed_dir)
    summary = write_seed_outputs(
        seed_dir, cfg, 3, best_epoch=2, best_metric=0.05, mlflow_run_id="run-1", stopped_early=True
    )
    doc = json.loads((seed_dir / "run_summary.json").read_text())
    assert list(doc) == SUMMARY_KEYS
    assert doc == {  # what write_seed_outputs wrote before it had a model
        "seed": 3,
        "epochs_run": 4,
        "stopped_early": True,
        "best_epoch": 2,
        "best_val_realistic_pr_auc_geomean_smoothed": 0.05,
        "last_validation": rows[2],
        "overfitting": json.loads(json.dumps(overfitting_indicators(rows))),
        "model": cfg.model.model_dump(),
        "mlflow_run_id": "run-1",
    }
    assert (seed_dir / "curves.png").is_file() and "at epoch 2" in (seed_dir / "run_summary.md").read_text()
    back = read_seed_summary(seed_dir / "run_summary.json")
    assert back == summary
    assert back.to_result(str(seed_dir)) == SeedResult(
        seed=3, seed_dir=str(seed_dir), best_epoch=2, best_metric=0.05, epochs_run=4, stopped_early=True,
        mlflow_run_id="run-1",
    )  # fmt: skip


def test_a_seed_without_validation_has_a_null_best_metric_and_a_nan_result(tmp_path: Path) -> None:
    cfg = tiny_train_config()
    summary = write_seed_outputs(
        tmp_path, cfg, 1, best_epoch=0, best_metric=None, mlflow_run_id=None, stopped_early=False
    )
    doc = json.loads((tmp_path / "run_summary.json").read_text())
    assert doc["best_val_realistic_pr_auc_geomean_smoothed"] is None and doc["epochs_run"] == 0
    assert "best smoothed val_realistic_pr_auc_geomean: nan at epoch 0" in (tmp_path / "run_summary.md").read_text()
    result = summary.to_result(str(tmp_path))
    assert math.isnan(result.best_metric) and result.best_epoch == 0


def test_read_seed_summary_names_a_missing_or_invalid_file(tmp_path: Path) -> None:
    path = tmp_path / "run_summary.json"
    with pytest.raises(StorageError, match=f"seed summary not found: {path}"):
        read_seed_summary(path)
    path.write_text("{not json")
    with pytest.raises(StorageError, match=f"invalid seed summary {path}"):
        read_seed_summary(path)
    path.write_text(json.dumps({"seed": 1}))
    with pytest.raises(StorageError, match=f"invalid seed summary {path}.*epochs_run"):
        read_seed_summary(path)


def test_multi_seed_summary_leaves_the_std_of_one_seed_undefined() -> None:
    result = SeedResult(seed=1, seed_dir="s", best_epoch=2, best_metric=0.3, epochs_run=4, stopped_early=False)
    one = MultiSeedSummary(
        seeds=[result],
        best_val_realistic_pr_auc_geomean_mean=0.3,
        best_val_realistic_pr_auc_geomean_std=None,
        parent_mlflow_run_id=None,
    )
    doc = one.model_dump(mode="json")
    assert list(doc) == [
        "seeds",
        "best_val_realistic_pr_auc_geomean_mean",
        "best_val_realistic_pr_auc_geomean_std",
        "parent_mlflow_run_id",
    ]
    assert doc["best_val_realistic_pr_auc_geomean_std"] is None
    assert MultiSeedSummary.model_validate_json(one.model_dump_json()) == one
