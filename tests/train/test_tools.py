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
    assert report.ratio == 200 and report.at_ratio == g  # the guide's 1:200: metrics.ratios[0]
    assert g.reweighted_std == 0.0  # deterministic CPU inference: the expected value does not move
    assert g.subsampled_std >= 0.0 and g.bootstrap_std is not None
    text = render_noise_floor(report)
    assert "suggested early_stopping.min_delta = 2 x std" in text and "random negative subsampling" in text
    assert json.loads((run_copy / "seeds/seed_5/noise_floor.json").read_text())["repeats"] == 2


# A noise floor as the code before NoiseFloorReport wrote it (noise_floor.json; no "ratio" yet) and the text it renders
# now: the guide's definition at 1:200 first (issue 35), then the table as before.
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
    "Guide §10.1: std of PR-AUC at 1:200 (metrics.ratios[0]) over 3 validations (the guide runs 5) of this"
    " checkpoint, augmentation off: 0.00e+00; suggested early_stopping.min_delta = 2 x std = 0.00e+00"
    " (configured: 0.005)\n"
    "Here PR-AUC at 1:200 is the exact expected value at that prevalence (re-weighted, no random negative"
    " subsampling): one checkpoint gives the same value every time up to numerical noise, so this std is ~0 by"
    " construction and cannot calibrate min_delta.\n"
    "Not zero by construction: the std of PR-AUC at 1:200 under the guide's random negative subsampling, 0.0012"
    " (2 x std = 0.0023: the min_delta the guide's rule gives for the noise its validation had, and the margin a"
    " sweep uses); the tile-bootstrap std of the validation pool at 1:200, 0.0150 (how far apart two checkpoints"
    " must be to differ on this pool).\n"
    "\n"
    " PR-AUC at |     re-weighted (ours) |             random subsampling | tile bootstrap\n"
    "           |      mean          std |      mean       std      range |            std\n"
    "     1:200 |    0.3050     0.00e+00 |    0.3018    0.0012 0.30-0.30 |         0.0150\n"
    "   geomean |    0.3027     0.00e+00 |    0.3012    0.0005 0.30-0.30 |               "
)


def test_a_noise_floor_written_before_its_ratio_reads_with_its_first_ratio() -> None:
    report = NoiseFloorReport.model_validate(NOISE_DOC)
    assert report.ratio == 200 and report.at_ratio == report.metrics["200"]
    assert json.dumps(report.model_dump(), indent=2) == json.dumps({**NOISE_DOC, "ratio": 200}, indent=2)
    assert render_noise_floor(report) == NOISE_TXT


def test_the_headline_is_the_guides_std_of_pr_auc_at_the_first_ratio_over_five_validations() -> None:
    """Guide §10.1 as such: std of PR-AUC at 1:200 over 5 validations, min_delta = 2 x std (not the geomean's std,
    not 3 validations), said to be ~0 by construction under re-weighting, the subsampling std at 1:200 beside it."""
    at_200 = {**NOISE_DOC["metrics"]["200"], "reweighted_std": 3e-7, "suggested_min_delta_reweighted": 6e-7}
    doc = {**NOISE_DOC, "repeats": 5, "metrics": {**NOISE_DOC["metrics"], "200": at_200}}  # ratio: the first
    lines = render_noise_floor(NoiseFloorReport.model_validate(doc)).splitlines()
    head = lines[3]
    assert head.startswith("Guide §10.1: std of PR-AUC at 1:200 (metrics.ratios[0]) over 5 validations of this")
    assert ": 3.00e-07; suggested early_stopping.min_delta = 2 x std = 6.00e-07 (configured: 0.005)" in head
    assert "~0 by construction and cannot calibrate min_delta" in lines[4]
    assert "subsampling, 0.0012 (2 x std = 0.0023" in lines[5], "the 1:200 row's subsampling std, not the geomean's"
    assert "bootstrap std of the validation pool at 1:200, 0.0150" in lines[5]
