from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtscore.train.loop import train_seed
from rtscore.train.noise_floor import measure_noise_floor, render_noise_floor
from tests.train.conftest import tiny_train_config


@pytest.mark.slow
def test_noise_floor_reweighting_is_stable_subsampling_is_not(run_copy: Path) -> None:
    cfg = tiny_train_config(max_epochs=3)
    train_seed(cfg, run_copy, 5)
    report = measure_noise_floor(cfg, run_copy, 5, repeats=2, draws_per_run=5)
    g = report.metrics["200"]
    assert g.reweighted_std == 0.0  # deterministic CPU inference: the expected value does not move
    assert g.subsampled_std >= 0.0 and g.bootstrap_std is not None
    text = render_noise_floor(report)
    assert "suggested early_stopping.min_delta" in text and "random subsampling" in text
    assert json.loads((run_copy / "seeds/seed_5/noise_floor.json").read_text())["repeats"] == 2
