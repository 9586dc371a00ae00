"""A sweep's report from what its variants' seeds recorded: per-seed values at each seed's best epoch, verdicts against
the baseline over the seeds both trained (a lower-is-better metric judged the other way round), the choice (the best
mean among the variants judged better, else the baseline), the margin and where it comes from, and no late-fusion
recommendation (the project has no late-fusion model)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from rtscore.config.base import parse_config
from rtscore.errors import PipelineError
from rtscore.storage import RunDir, RunLayout, StorageError
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.plan import SweepPlan, plan_sweep
from rtscore.sweep.render import render_markdown
from rtscore.sweep.report import NoiseFloor
from rtscore.sweep.run import build_report, choose, margin_basis, margin_of, seed_row
from tests.flows.configs import tiny_training_config, write_config

GEOMEAN = "val_realistic_pr_auc_geomean"
BASE = {1: 0.50, 2: 0.52, 3: 0.48}
SEEDS = [1, 2, 3]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The tiny training config, its stores generating ndvi and slope, the model taking both (RGB+EXTRA)."""
    data = tiny_training_config(seeds=SEEDS)
    for gen in data["data"]["generation"].values():
        gen["synthetic"]["extra_channels"] = ["ndvi", "slope"]
    data["channels"]["extra"] = [{"name": "ndvi", "band": 0}, {"name": "slope", "band": 1}]
    return write_config(tmp_path / "configs" / "pipeline.yaml", data)


def _sweep(base: Path, variants: dict[str, dict[str, Any]], **more: Any) -> SweepConfig:
    return parse_config(SweepConfig, {"base": str(base), "variants": variants, "margin": 0.0, **more})


def _plan(base: Path, tmp_path: Path, sweep: SweepConfig) -> SweepPlan:
    return plan_sweep(sweep, base, str(tmp_path / "sweep"))


def write_seed(run_dir: str, seed: int, values: dict[str, float], best_epoch: int = 2) -> None:
    """A trained seed as train-seed leaves it: metrics.jsonl (a train row and a validation row per epoch; the best
    epoch's validation row holds ``values``) and run_summary.json naming the best epoch, both recorded."""
    run = RunDir(run_dir)
    metrics_rel, summary_rel = RunLayout.SEED_METRICS.at(seed=seed), RunLayout.SEED_SUMMARY.at(seed=seed)
    rows: list[dict[str, Any]] = []
    for epoch in range(1, best_epoch + 2):
        rows.append({"epoch": epoch, "train_loss": 1.0 / epoch})
        at = values if epoch == best_epoch else {k: v - 0.2 for k, v in values.items()}  # other epochs: worse
        rows.append({"epoch": epoch, "val_loss": 0.9, **at, "note": "text is not a metric"})
    path = run.path(metrics_rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run.path(summary_rel).write_text(json.dumps({"seed": seed, "best_epoch": best_epoch, "best_metric": 0.0}))
    run.record(metrics_rel, "train-seed", "")
    run.record(summary_rel, "train-seed", "")


def write_variant(plan: SweepPlan, name: str, per_seed: dict[int, float], metric: str = GEOMEAN) -> None:
    for seed, value in per_seed.items():
        write_seed(plan.variant(name).run_dir, seed, {metric: value, "val_realistic_pr_auc_1_200": value / 2})


def _shift(by: float, jitter: float = 0.001) -> dict[int, float]:
    return {s: v + by + (i - 1) * jitter for i, (s, v) in enumerate(BASE.items())}


# ----------------------------------------------------------------------------------------------- per-seed values
def test_a_seed_row_is_the_validation_row_of_its_best_epoch(tmp_path: Path) -> None:
    run = RunDir(str(tmp_path / "run"))
    write_seed(run.uri, 4, {GEOMEAN: 0.61, "val_loss": 0.3}, best_epoch=3)
    row = seed_row(run, 4)
    assert row is not None and row[GEOMEAN] == 0.61 and row["val_loss"] == 0.3 and row["epoch"] == 3
    assert "note" not in row and "train_loss" not in row
    assert seed_row(run, 5) is None, "a seed without a recorded summary has not finished"


def test_a_finished_seed_without_its_metrics_is_an_error(tmp_path: Path) -> None:
    run = RunDir(str(tmp_path / "run"))
    write_seed(run.uri, 1, {GEOMEAN: 0.5})
    run.path(RunLayout.SEED_METRICS.at(seed=1)).write_text(json.dumps({"epoch": 1, "val_loss": 0.9}) + "\n")
    with pytest.raises(StorageError, match="no validation row at the best epoch 2 of seed 1"):
        seed_row(run, 1)


# ----------------------------------------------------------------------------------------------- verdicts and choice
def test_variants_are_judged_and_the_best_of_the_better_is_chosen(base: Path, tmp_path: Path) -> None:
    sweep = _sweep(
        base,
        {
            "up": {"loss.focal_gamma": 1.0},
            "up_more": {"loss.focal_gamma": 3.0},
            "down": {"loss.boundary_handling": "ignore"},
            "same": {"loss.name": "compound"},
        },
    )
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    write_variant(plan, "up", _shift(0.05))
    write_variant(plan, "up_more", _shift(0.08))
    write_variant(plan, "down", _shift(-0.05))
    write_variant(plan, "same", BASE)
    report = build_report(plan, sweep, [200], None, finished=True)
    verdicts = {v.name: v.judgement.verdict if v.judgement else None for v in report.variants}
    assert verdicts == {"baseline": None, "up": "better", "up_more": "better", "down": "worse", "same": "within noise"}
    assert report.status == "finished" and report.chosen == "up_more"
    assert "best mean" in report.choice and "also better: up" in report.choice
    up = report.variant("up")
    assert up.seeds == SEEDS and up.metric is not None and up.metric.values == _shift(0.05)
    assert up.metric.mean == pytest.approx(0.55) and up.judgement is not None
    assert up.judgement.mean_diff == pytest.approx(0.05) and up.judgement.seeds == SEEDS
    assert up.ratios["200"].mean == pytest.approx(0.275), "each ratio's PR-AUC, mean over the seeds"
    assert up.shared == dict.fromkeys(
        (
            "generate-dataset split=train",
            "generate-dataset split=val",
            "generate-dataset split=test",
            "normalization-stats",
            "validate-data",
        ),
        "baseline",
    )


def test_the_baseline_stays_when_no_variant_is_better(base: Path, tmp_path: Path) -> None:
    sweep = _sweep(base, {"down": {"loss.focal_gamma": 1.0}, "same": {"loss.focal_gamma": 3.0}})
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    write_variant(plan, "down", _shift(-0.05))
    write_variant(plan, "same", BASE)
    report = build_report(plan, sweep, [200], None, finished=True)
    assert report.chosen == "baseline" and "the baseline stays" in report.choice
    assert choose(report) == (report.chosen, report.choice)


def test_a_lower_is_better_metric_flips_the_verdict(base: Path, tmp_path: Path) -> None:
    sweep = _sweep(base, {"lower": {"loss.focal_gamma": 1.0}, "higher": {"loss.focal_gamma": 3.0}}, metric="val_loss")
    plan = _plan(base, tmp_path, sweep)
    loss = {1: 0.40, 2: 0.42, 3: 0.38}
    write_variant(plan, "baseline", loss, "val_loss")
    write_variant(plan, "lower", {s: v - 0.05 + 0.001 * s for s, v in loss.items()}, "val_loss")
    write_variant(plan, "higher", {s: v + 0.05 + 0.001 * s for s, v in loss.items()}, "val_loss")
    report = build_report(plan, sweep, [200], None, finished=True)
    lower, higher = report.variant("lower"), report.variant("higher")
    assert lower.judgement is not None and lower.judgement.verdict == "better", "a lower loss is better"
    assert higher.judgement is not None and higher.judgement.verdict == "worse"
    assert report.chosen == "lower"


def test_a_lower_is_better_difference_is_still_variant_minus_baseline(base: Path, tmp_path: Path) -> None:
    """The judgement's figures are the variant's minus the baseline's, as the report's columns read, whichever way
    the metric is better; the reason says the metric is lower-is-better."""
    sweep = _sweep(base, {"lower": {"loss.focal_gamma": 1.0}}, metric="val_loss")
    plan = _plan(base, tmp_path, sweep)
    loss = {1: 0.40, 2: 0.42, 3: 0.38}
    write_variant(plan, "baseline", loss, "val_loss")
    write_variant(plan, "lower", {s: v - 0.05 + 0.001 * s for s, v in loss.items()}, "val_loss")
    j = build_report(plan, sweep, [200], None, finished=True).variant("lower").judgement
    assert j is not None and j.verdict == "better"
    assert j.mean_diff == pytest.approx(-0.048) and j.ci_low is not None and j.ci_high is not None
    assert j.ci_low < j.ci_high < 0, "the interval of variant - baseline: below 0 for a lower loss"
    assert "lower is better" in j.reason


def test_choose_takes_the_lowest_mean_of_a_lower_is_better_metric(base: Path, tmp_path: Path) -> None:
    sweep = _sweep(base, {"a": {"loss.focal_gamma": 1.0}, "b": {"loss.focal_gamma": 3.0}}, metric="val_loss")
    plan = _plan(base, tmp_path, sweep)
    loss = {1: 0.40, 2: 0.42, 3: 0.38}
    write_variant(plan, "baseline", loss, "val_loss")
    write_variant(plan, "a", {s: v - 0.05 + 0.001 * s for s, v in loss.items()}, "val_loss")
    write_variant(plan, "b", {s: v - 0.10 + 0.001 * s for s, v in loss.items()}, "val_loss")
    assert build_report(plan, sweep, [200], None, finished=True).chosen == "b"


def test_a_metric_the_seeds_did_not_record_is_an_error_naming_it(base: Path, tmp_path: Path) -> None:
    sweep = _sweep(base, {"up": {"loss.focal_gamma": 1.0}}, metric="val_realistic_pr_auc_1_500")
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    with pytest.raises(PipelineError, match=r"metric: val_realistic_pr_auc_1_500 is not among .* seed 1 of variant"):
        build_report(plan, sweep, [200], None, finished=True)


def test_a_running_sweep_judges_what_has_trained_and_leaves_the_rest_pending(base: Path, tmp_path: Path) -> None:
    sweep = _sweep(base, {"up": {"loss.focal_gamma": 1.0}, "later": {"loss.focal_gamma": 3.0}})
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    write_variant(plan, "up", {s: v for s, v in _shift(0.05).items() if s != 3})  # seed 3 still training
    report = build_report(plan, sweep, [200], None, finished=False)
    assert report.status == "running" and report.chosen is None and report.choice == ""
    up, later = report.variant("up"), report.variant("later")
    assert up.seeds == [1, 2] and up.judgement is not None and up.judgement.seeds == [1, 2]
    assert later.seeds == [] and later.metric is None and later.judgement is None, "pending: no value, no verdict"
    assert later.ratios == {}


def test_a_variant_is_judged_on_the_seeds_both_trained(base: Path, tmp_path: Path) -> None:
    sweep = _sweep(base, {"up": {"loss.focal_gamma": 1.0}})
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", {s: v for s, v in BASE.items() if s != 1})
    write_variant(plan, "up", {s: v for s, v in _shift(0.05).items() if s != 2})
    up = build_report(plan, sweep, [200], None, finished=False).variant("up")
    assert up.seeds == [1, 3] and up.judgement is not None and up.judgement.seeds == [3]


# ----------------------------------------------------------------------------------------------- the margin
def _floor(subsampled: float) -> NoiseFloor:
    """A floor as measured under exact re-weighting: the guide's std (re-weighted) 0, the subsampled one not."""
    return NoiseFloor(
        seed=1,
        repeats=5,
        ratio=200,
        reweighted_std=0.0,
        subsampled_std=subsampled,
        bootstrap_std=0.02,
        metric="PR-AUC at 1:200 (metrics.ratios[0])",
    )


def test_the_margin_is_the_sweeps_else_twice_the_noise_floor_else_zero(base: Path) -> None:
    unset = parse_config(SweepConfig, {"base": str(base), "variants": {"a": {"loss.focal_gamma": 1.0}}})
    assert margin_of(unset, _floor(0.004)) == pytest.approx(0.008)
    assert margin_of(unset, None) == 0.0
    assert margin_of(unset, _floor(math.nan)) == 0.0
    assert margin_of(_sweep(base, {"a": {"loss.focal_gamma": 1.0}}), _floor(0.004)) == 0.0, "margin: 0 is a margin"
    given = parse_config(SweepConfig, {"base": str(base), "variants": {"a": {}}, "margin": 0.03})
    assert margin_of(given, _floor(0.004)) == 0.03


def test_a_difference_within_the_margin_is_within_noise(base: Path, tmp_path: Path) -> None:
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": {"up": {"loss.focal_gamma": 1.0}}})
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    write_variant(plan, "up", _shift(0.05))
    wide = build_report(plan, sweep, [200], _floor(0.03), finished=True)  # margin 0.06 > 0.05
    assert wide.margin == pytest.approx(0.06) and wide.noise_floor == _floor(0.03)
    j = wide.variant("up").judgement
    assert j is not None and j.verdict == "within noise"
    assert wide.chosen == "baseline"
    narrow = build_report(plan, sweep, [200], _floor(0.01), finished=True)
    j = narrow.variant("up").judgement
    assert j is not None and j.verdict == "better"


def test_the_margin_is_not_zero_where_the_guides_reweighted_std_is_and_the_report_says_whence(
    base: Path, tmp_path: Path
) -> None:
    """Re-weighted std 0 (the guide's §10.1 std under exact re-weighting): the margin is 2 x the subsampled std at
    1:200, and report.json / report.md name that quantity."""
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": {"up": {"loss.focal_gamma": 1.0}}})
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    write_variant(plan, "up", _shift(0.05))
    report = build_report(plan, sweep, [200], _floor(0.004), finished=True)
    assert report.noise_floor is not None and report.noise_floor.reweighted_std == 0.0
    assert report.margin > 0.0 and report.margin == pytest.approx(0.008)
    assert report.margin_basis.startswith("2 x the std of PR-AUC at 1:200 over 5 validations of the best checkpoint")
    assert "random negative subset" in report.margin_basis and "~0 by construction" in report.margin_basis
    md = render_markdown(report)
    assert f"Margin 0.008: {report.margin_basis}." in md and "A seed's value: the raw value" in md
    assert report.notes == []
    given = parse_config(SweepConfig, {"base": str(base), "variants": {"a": {}}, "margin": 0.03})
    assert margin_basis(given, _floor(0.004)) == "margin: of the sweep file"
    assert margin_basis(sweep, None).startswith("0: ")


def test_a_floor_of_zero_under_subsampling_is_said(base: Path, tmp_path: Path) -> None:
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": {"up": {"loss.focal_gamma": 1.0}}})
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    write_variant(plan, "up", _shift(0.05))
    report = build_report(plan, sweep, [200], _floor(0.0), finished=True)
    assert report.margin == 0.0 and len(report.notes) == 1 and "margin is 0" in report.notes[0]


# ----------------------------------------------------------------------------------------------- late fusion (§3.3)
def test_the_report_does_not_recommend_late_fusion(base: Path, tmp_path: Path) -> None:
    """Guide §3.3 tries late fusion only if early fusion underperforms, but the project has no late-fusion model: an
    RGB baseline with an early-fused channel judged worse gets no late-fusion next step in the report."""
    sweep = _sweep(
        base,
        {
            "baseline": {"channels.extra": []},
            "ndvi": {"channels.extra": [{"name": "ndvi", "band": 0}]},
            "slope": {"channels.extra": [{"name": "slope", "band": 1}]},
        },
    )
    plan = _plan(base, tmp_path, sweep)
    write_variant(plan, "baseline", BASE)
    write_variant(plan, "ndvi", _shift(-0.05))
    write_variant(plan, "slope", _shift(0.05))
    report = build_report(plan, sweep, [200], None, finished=True)
    j = report.variant("ndvi").judgement
    assert j is not None and j.verdict == "worse", "the case §3.3 names"
    said = " ".join([*report.notes, report.choice, render_markdown(report)]).lower()
    assert "late fusion" not in said and "late-fusion" not in said
