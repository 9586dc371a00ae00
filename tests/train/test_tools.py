from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtscore.train.noise_floor import NoiseFloorReport, measure_noise_floor, render_noise_floor
from tests.helpers import fake_trained_seed
from tests.train.conftest import tiny_train_config


@pytest.mark.slow
def test_noise_floor_reweighting_is_stable_subsampling_is_not(run_copy: Path) -> None:
    cfg = tiny_train_config(max_epochs=3)
    # Seeded untrained weights as the seed's best: the noise floor validates a checkpoint, whatever trained it.
    fake_trained_seed(run_copy, cfg, 5)
    report = measure_noise_floor(cfg, run_copy, 5, repeats=2, draws_per_run=5)
    g = report.metrics["200"]
    assert g.reweighted_std == 0.0  # deterministic CPU inference: the expected value does not move
    assert g.subsampled_std >= 0.0 and g.bootstrap_std is not None
    text = render_noise_floor(report)
    assert "suggested early_stopping.min_delta" in text and "random subsampling" in text
    assert json.loads((run_copy / "seeds/seed_5/noise_floor.json").read_text())["repeats"] == 2


# A noise floor as the code before NoiseFloorReport wrote it (noise_floor.json) and the text it rendered: the typed
# report keeps both, byte for byte (issue 34).
NOISE_DOC: dict[str, Any] = {
    "seed": 7,
    "checkpoint": "run/seeds/seed_7/best_deployment.pth",
    "repeats": 3,
    "draws_per_run": 2,
    "n_pos_tiles": 3,
    "n_neg_tiles": 9,
    "metrics": {
        "200": {
            "reweighted_mean": 0.305,
            "reweighted_std": 0.0,
            "subsampled_mean": 0.3017765582114443,
            "subsampled_std": 0.0011710958776005424,
            "subsampled_min": 0.30002632652282785,
            "subsampled_max": 0.3031254773330233,
            "bootstrap_std": 0.015,
            "suggested_min_delta_subsampled": 0.002342191755201085,
            "suggested_min_delta_reweighted": 0.0,
        },
        "geomean": {
            "reweighted_mean": 0.3026619036319112,
            "reweighted_std": 0.0,
            "subsampled_mean": 0.3012328270137211,
            "subsampled_std": 0.000503587221374913,
            "subsampled_min": 0.3008212269339756,
            "subsampled_max": 0.301896997640276,
            "bootstrap_std": None,
            "suggested_min_delta_subsampled": 0.001007174442749826,
            "suggested_min_delta_reweighted": 0.0,
        },
    },
    "configured_min_delta": 0.005,
}

NOISE_TXT = (
    "Validation noise floor, seed 7: 3 validations of run/seeds/seed_7/best_deployment.pth\n"
    "(3 positive / 9 negative tiles; 2 random negative subsets per validation)\n"
    "\n"
    " PR-AUC at |     re-weighted (ours) |             random subsampling | tile bootstrap\n"
    "           |      mean          std |      mean       std      range |            std\n"
    "     1:200 |    0.3050     0.00e+00 |    0.3018    0.0012 0.30-0.30 |         0.0150\n"
    "   geomean |    0.3027     0.00e+00 |    0.3012    0.0005 0.30-0.30 |               \n"
    "\n"
    "suggested early_stopping.min_delta (2 x std of the geomean): random subsampling 0.0010,"
    " re-weighting 0.00e+00 (configured: 0.005)\n"
    "With re-weighting the metric does not move between validations of one checkpoint;"
    " min_delta then only needs to exceed numerical noise, while the tile bootstrap std says"
    " how far apart two checkpoints must be to differ on this validation pool."
)


def test_the_typed_noise_floor_keeps_its_json_and_its_text() -> None:
    report = NoiseFloorReport.model_validate(NOISE_DOC)
    assert json.dumps(report.model_dump(), indent=2) == json.dumps(NOISE_DOC, indent=2)  # as atomic_write_json writes
    assert render_noise_floor(report) == NOISE_TXT
