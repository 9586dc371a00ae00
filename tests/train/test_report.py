from __future__ import annotations

from rtscore.train.report import overfitting_indicators


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
