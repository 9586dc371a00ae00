"""The baseline's validation noise floor (guide §10.1) for a sweep: its best checkpoint of one seed validated 5 times
(:func:`rtscore.train.noise_floor.measure_noise_floor`), PR-AUC at the first ratio (1:200), measured once per
checkpoint. The margin takes its random-subsampling std (:func:`rtscore.sweep.run.margin_of`). Apart from
:mod:`rtscore.sweep.run` because it needs torch, which reading a sweep's status does not."""

from __future__ import annotations

import json

from rtscore.config.pipeline import PipelineConfig
from rtscore.storage import RunDir, RunLayout
from rtscore.sweep.plan import SweepPlan
from rtscore.sweep.report import NoiseFloor
from rtscore.sweep.run import NOISE_FLOOR_NAME, record_in_sweep
from rtscore.train.noise_floor import GUIDE_REPEATS, measure_noise_floor

NOISE_REPEATS, NOISE_DRAWS = GUIDE_REPEATS, 4  # validations of the baseline's checkpoint, random subsets per validation
# What a kept noise_floor.json measured: 2 = PR-AUC at metrics.ratios[0] over 5 validations (before: the geomean,
# 3 validations). A kept floor of another definition is measured again.
DEFINITION = 2


def noise_floor(plan: SweepPlan, cfg: PipelineConfig, seed: int) -> NoiseFloor:
    """The baseline's validation noise floor (guide §10.1) on the best checkpoint of ``seed``: measured once per
    checkpoint (``noise_floor.json`` of the sweep directory keeps it with the weights' sha256)."""
    sweep = RunDir(plan.sweep_dir)
    run = RunDir(plan.variant(plan.baseline).run_dir)
    weights = run.require(RunLayout.BEST_WEIGHTS.at(seed=seed))
    saved = sweep.path(NOISE_FLOOR_NAME)
    if sweep.fetch(NOISE_FLOOR_NAME) is not None and saved.exists():
        kept = json.loads(saved.read_text())
        if kept.get("weights_sha256") == weights.sha256 and kept.get("definition") == DEFINITION:
            return NoiseFloor.model_validate(kept["noise_floor"])
    for rel in (RunLayout.NORMALIZATION_STATS.at(), RunLayout.DATASET.at(split="val")):
        run.require(rel)
    report = measure_noise_floor(cfg, run.root, seed, repeats=NOISE_REPEATS, draws_per_run=NOISE_DRAWS)
    at = report.at_ratio
    floor = NoiseFloor(
        seed=seed,
        repeats=NOISE_REPEATS,
        ratio=report.ratio,
        reweighted_std=at.reweighted_std,
        subsampled_std=at.subsampled_std,
        bootstrap_std=at.bootstrap_std,
        metric=f"PR-AUC at 1:{report.ratio} (metrics.ratios[0])",
    )
    kept = {"weights_sha256": weights.sha256, "definition": DEFINITION, "noise_floor": floor.model_dump(mode="json")}
    record_in_sweep(sweep, NOISE_FLOOR_NAME, json.dumps(kept, indent=2) + "\n")
    return floor


__all__ = ["DEFINITION", "NOISE_DRAWS", "NOISE_REPEATS", "noise_floor"]
