"""The sweep's noise floor (guide §10.1): the baseline's best checkpoint validated 5 times, PR-AUC at the first ratio
(1:200) rather than the geomean, kept per checkpoint and per definition; the margin is twice its subsampled std."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtscore.config.base import parse_config
from rtscore.config.pipeline import PipelineConfig, load_pipeline_config
from rtscore.storage import RunDir, RunLayout
from rtscore.sweep import noise
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.plan import SweepPlan, plan_sweep
from rtscore.sweep.run import NOISE_FLOOR_NAME, margin_of
from rtscore.train.noise_floor import NoiseFloorReport, NoiseFloorRow
from tests.flows.configs import tiny_training_config, write_config


def _row(subsampled_std: float, bootstrap_std: float | None) -> NoiseFloorRow:
    """Exact re-weighting: the same value at every validation (std 0); random subsets spread."""
    return NoiseFloorRow(
        reweighted_mean=0.4,
        reweighted_std=0.0,
        subsampled_mean=0.39,
        subsampled_std=subsampled_std,
        subsampled_min=0.38,
        subsampled_max=0.40,
        bootstrap_std=bootstrap_std,
        suggested_min_delta_subsampled=2 * subsampled_std,
        suggested_min_delta_reweighted=0.0,
    )


@pytest.fixture
def setup(tmp_path: Path) -> tuple[SweepConfig, SweepPlan, PipelineConfig]:
    """A sweep whose baseline seed 1 has the artifacts the noise floor requires (their bytes do not matter: the
    measurement is replaced in each test)."""
    base = write_config(tmp_path / "configs" / "pipeline.yaml", tiny_training_config(seeds=[1, 2, 3]))
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": {"up": {"loss.focal_gamma": 1.0}}})
    plan = plan_sweep(sweep, base, str(tmp_path / "sweep"))
    run = RunDir(plan.variant(plan.baseline).run_dir)
    for rel in (RunLayout.BEST_WEIGHTS.at(seed=1), RunLayout.NORMALIZATION_STATS.at()):
        run.path(rel).parent.mkdir(parents=True, exist_ok=True)
        run.path(rel).write_text("{}")
    val = run.path(RunLayout.DATASET.at(split="val"))
    val.mkdir(parents=True)
    (val / "zarr.json").write_text("{}")
    for rel in (
        RunLayout.BEST_WEIGHTS.at(seed=1),
        RunLayout.NORMALIZATION_STATS.at(),
        RunLayout.DATASET.at(split="val"),
    ):
        run.record(rel, "test", "")
    return sweep, plan, load_pipeline_config(base)


def _measure(calls: list[dict[str, Any]]) -> Any:
    def measure(cfg: PipelineConfig, run_dir: str, seed: int, **kw: Any) -> NoiseFloorReport:
        calls.append({"seed": seed, **kw})
        first, *rest = cfg.metrics.ratios
        return NoiseFloorReport(
            seed=seed,
            checkpoint="best_deployment.pth",
            repeats=kw["repeats"],
            draws_per_run=kw["draws_per_run"],
            n_pos_tiles=5,
            n_neg_tiles=500,
            metrics={
                str(first): _row(0.004, 0.03),
                **{str(r): _row(0.009, 0.04) for r in rest},
                "geomean": _row(0.001, None),
            },
            configured_min_delta=0.005,
        )  # its ratio: the first of metrics

    return measure


def test_the_sweeps_floor_is_the_guides_at_the_first_ratio_over_five_validations(
    setup: tuple[SweepConfig, SweepPlan, PipelineConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep, plan, cfg = setup
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(noise, "measure_noise_floor", _measure(calls))
    floor = noise.noise_floor(plan, cfg, 1)
    # the guide's std is 0 under re-weighting; the margin is not: 2 x the subsampled std at the first ratio (not the
    # geomean's 0.001)
    assert floor.reweighted_std == 0.0 and margin_of(sweep, floor) == pytest.approx(0.008)
    assert calls == [{"seed": 1, "repeats": 5, "draws_per_run": noise.NOISE_DRAWS}], "the guide's 5 validations"
    first = cfg.metrics.ratios[0]
    assert floor.repeats == 5 and floor.ratio == first and floor.metric.startswith(f"PR-AUC at 1:{first}")
    assert (floor.subsampled_std, floor.bootstrap_std) == (0.004, 0.03)
    assert noise.noise_floor(plan, cfg, 1) == floor and len(calls) == 1, "kept for the same checkpoint"


def test_a_floor_kept_under_the_old_definition_is_measured_again(
    setup: tuple[SweepConfig, SweepPlan, PipelineConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, plan, cfg = setup
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(noise, "measure_noise_floor", _measure(calls))
    noise.noise_floor(plan, cfg, 1)
    saved = RunDir(plan.sweep_dir).path(NOISE_FLOOR_NAME)
    kept = json.loads(saved.read_text())
    del kept["definition"]  # as written before issue 35: the geomean over 3 validations
    saved.write_text(json.dumps(kept))
    RunDir(plan.sweep_dir).record(NOISE_FLOOR_NAME, "sweep", "")
    noise.noise_floor(plan, cfg, 1)
    assert len(calls) == 2
