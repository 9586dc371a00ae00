"""One renderer per result model: the console text `rts` prints (unchanged), and the markdown of the Prefect
artifacts, from the same figures (the test report's: tests/evaluation/test_render.py)."""

from __future__ import annotations

import math

from flows.render import (
    render_calibration,
    render_calibration_markdown,
    render_training,
    render_training_markdown,
)
from rtscore.stages import CalibrationResult, CalibrationSummary, SeedCalibration, TrainResult
from rtscore.train.result import SeedResult
from tests.helpers import calibrated_deployment


def _trained(seed: int, metric: float, epoch: int) -> TrainResult:
    return TrainResult(
        result=SeedResult(
            seed=seed,
            seed_dir=f"/runs/q/seeds/seed_{seed}",
            best_epoch=epoch,
            best_metric=metric,
            epochs_run=12,
            stopped_early=False,
        )
    )


def _calibration() -> CalibrationResult:
    seeds = [
        SeedCalibration(
            seed=42, temperature=1.2345, threshold=0.61234, precision=0.8, recall=0.4567, target_reached=True
        ),
        SeedCalibration(seed=43, temperature=0.9, threshold=0.2, precision=0.5, recall=0.9, target_reached=False),
    ]
    summary = CalibrationSummary(
        shipped_seed=42,
        shipped_reason="best smoothed validation metric",
        seeds=seeds,
        tta_reason="no candidate gains 1 %",
        scales_reason="1x only",
    )
    return CalibrationResult(deployment=calibrated_deployment(threshold=0.61234, temperature=1.2345), summary=summary)


def test_the_console_text_is_what_rts_printed_before() -> None:
    """The quickstart's printed lines stay the same (the format of flows/cli/main.py's printing before issue 22)."""
    results = [_trained(42, 0.61234, 7), _trained(43, 0.5, 12)]
    assert render_training(results) == (
        "seed 42     best val_realistic_pr_auc_geomean 0.6123 (epoch 7) /runs/q/seeds/seed_42\n"
        "seed 43     best val_realistic_pr_auc_geomean 0.5000 (epoch 12) /runs/q/seeds/seed_43"
    )
    assert render_calibration(_calibration()) == (
        "calibration: tta none, scales [1.0]; shipped seed 42\n"
        "  TTA gate:   no candidate gains 1 %\n"
        "  scale gate: 1x only\n"
        "  seed 42: T = 1.234, threshold 0.6123 (val precision 0.800, recall 0.457)\n"
        "  seed 43: T = 0.900, threshold 0.2000 (val precision 0.500, recall 0.900)"
        " (WARNING: target precision not reachable: max-F1 fallback threshold)"
    )


def test_the_markdown_shows_the_same_figures() -> None:
    md = render_training_markdown([_trained(42, 0.61234, 7), _trained(43, math.nan, 12)])
    assert "- seed 42: best val_realistic_pr_auc_geomean 0.6123 at epoch 7 of 12" in md
    assert "- seed 43: best val_realistic_pr_auc_geomean n/a at epoch 12 of 12" in md
    assert "**best val_realistic_pr_auc_geomean over 2 seed(s): 0.6123 (1 seed)**" in md
    cal = render_calibration_markdown(_calibration())
    assert "- shipped seed **42** (best smoothed validation metric): threshold 0.6123, temperature 1.2345" in cal
    assert "| 42 | 1.234 | 0.6123 | 0.800 | 0.457 | yes |" in cal
    assert "| 43 | 0.900 | 0.2000 | 0.500 | 0.900 | **no**: max-F1 fallback threshold |" in cal
