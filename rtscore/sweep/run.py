"""Running a sweep, the library side (no Prefect): adopt the stage runs a variant shares, read each variant's
per-seed values of the deciding metric from what its seeds recorded, measure the baseline's validation noise floor
once, judge each variant against the baseline, choose, and write ``report.json`` / ``report.md`` / ``report.png``.

The sweep directory is a run directory of its own (a manifest, gs:// or local): ``plan.json``, ``noise_floor.json``
and the reports are recorded there under stage ``sweep``; the variants' run directories lie under ``variants/``.
"""

from __future__ import annotations

import json
import logging
import math
import statistics

from rtscore.errors import PipelineError
from rtscore.stages.registry import spec
from rtscore.stages.spec import recorded
from rtscore.storage import RunDir, RunLayout, StorageError, SweepLayout, atomic_write_text
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.plan import LOWER_IS_BETTER, PLAN_NAME, SweepPlan, plan_json
from rtscore.sweep.render import plot_report, render_markdown
from rtscore.sweep.report import NoiseFloor, Spread, SweepReport, VariantReport
from rtscore.sweep.verdict import Judgement, judge

_log = logging.getLogger(__name__)

SWEEP_STAGE = SweepLayout.STAGE  # the manifest's stage of the sweep directory's own records
NOISE_FLOOR_NAME = SweepLayout.NOISE_FLOOR.at()
REPORT_JSON, REPORT_MD, REPORT_PNG = (
    e.at() for e in (SweepLayout.REPORT_JSON, SweepLayout.REPORT_MD, SweepLayout.REPORT_PNG)
)


def record_in_sweep(sweep: RunDir, rel: str, text: str | None = None) -> None:
    """Write ``text`` to ``rel`` of the sweep directory (when given) and record it there."""
    if text is not None:
        atomic_write_text(sweep.path(rel), text)
    sweep.record(rel, SWEEP_STAGE, "")


def write_plan(plan: SweepPlan) -> None:
    """``plan.json`` in the sweep directory (recorded)."""
    record_in_sweep(RunDir(plan.sweep_dir), PLAN_NAME, plan_json(plan))


def adopt_shared(plan: SweepPlan, variant: str) -> list[str]:
    """Adopt into ``variant``'s run directory the outputs of every stage run it shares with an earlier variant (whose
    stage run must have completed); returns the adopted paths."""
    v = plan.variant(variant)
    run = RunDir(v.run_dir)
    adopted: list[str] = []
    for stage in v.stages:
        if stage.owner == variant:
            continue
        source = RunDir(plan.variant(stage.owner).run_dir)
        refs = recorded(spec(stage.stage), source, stage.params)
        if not refs:
            raise StorageError(
                f"variant {variant} shares {stage.label} with variant {stage.owner}, which has not recorded it yet"
            )
        for ref in refs:
            run.adopt(ref.path, source)
            adopted.append(ref.path)
    return adopted


# ----------------------------------------------------------------------------------------------- reading results
def seed_row(run: RunDir, seed: int) -> dict[str, float] | None:
    """The validation metrics of a trained seed at its best epoch (the epoch of best_deployment.pth); None while the
    seed has not finished (its summary is not recorded)."""
    summary_rel = RunLayout.SEED_SUMMARY.at(seed=seed)
    if run.entry(summary_rel) is None:
        return None
    run.require(summary_rel)
    metrics_rel = RunLayout.SEED_METRICS.at(seed=seed)
    if run.fetch(metrics_rel) is None and not run.path(metrics_rel).exists():
        raise StorageError(f"{run.uri}: seed {seed} finished but {metrics_rel} is not recorded")
    best = int(json.loads(run.path(summary_rel).read_text())["best_epoch"])
    rows = [json.loads(line) for line in run.path(metrics_rel).read_text().splitlines() if line.strip()]
    at_best = [r for r in rows if int(r.get("epoch", -1)) == best and "val_loss" in r]
    if not at_best:
        raise StorageError(f"{run.path(metrics_rel)}: no validation row at the best epoch {best} of seed {seed}")
    return {k: float(v) for k, v in at_best[-1].items() if isinstance(v, int | float)}


def _spread(values: dict[int, float]) -> Spread | None:
    if not values:
        return None
    vals = list(values.values())
    return Spread(mean=statistics.fmean(vals), std=statistics.stdev(vals) if len(vals) > 1 else None, values=values)


def collect_variant(plan: SweepPlan, name: str, ratios: list[int], seeds: list[int]) -> VariantReport:
    """A variant's per-seed values (of the seeds that finished), mean ± std, PR-AUC per ratio."""
    v = plan.variant(name)
    run = RunDir(v.run_dir)
    metric: dict[int, float] = {}
    per_ratio: dict[str, dict[int, float]] = {str(r): {} for r in ratios}
    for seed in seeds:
        row = seed_row(run, seed)
        if row is None:
            continue
        if plan.metric not in row:
            raise PipelineError(
                f"metric: {plan.metric} is not among the validation metrics seed {seed} of variant {name} recorded "
                f"({RunLayout.SEED_METRICS.at(seed=seed)}); e.g. val_realistic_pr_auc_geomean"
            )
        metric[seed] = row[plan.metric]
        for r in ratios:
            key = f"val_realistic_pr_auc_1_{r}"
            if key in row:
                per_ratio[str(r)][seed] = row[key]
    return VariantReport(
        name=name,
        overrides=v.overrides,
        baseline=name == plan.baseline,
        run_dir=v.run_dir,
        seeds=[s for s in seeds if s in metric],
        metric=_spread(metric),
        ratios={r: s for r, vals in per_ratio.items() if (s := _spread(vals)) is not None},
        shared=v.shared(),
    )


# ----------------------------------------------------------------------------------------------- the margin
def margin_of(sweep_cfg: SweepConfig, floor: NoiseFloor | None) -> float:
    """The smallest difference that counts: the sweep's ``margin``, else twice the baseline's noise floor under the
    guide's random negative subsampling (guide §10.1's ``min_delta = 2 x std``, the std of PR-AUC at the first ratio,
    1:200, over validations of one checkpoint), else 0. Not the std of the exact re-weighted metric: that one is ~0 by
    construction (the same checkpoint gives the same expected value), so it could not make any difference not count."""
    if sweep_cfg.margin is not None:
        return sweep_cfg.margin
    if floor is None or not math.isfinite(floor.subsampled_std):
        return 0.0
    return 2.0 * floor.subsampled_std


def margin_basis(sweep_cfg: SweepConfig, floor: NoiseFloor | None) -> str:
    """Where :func:`margin_of` took the margin from, in one phrase (the report states it)."""
    if sweep_cfg.margin is not None:
        return "margin: of the sweep file"
    if floor is None:
        return "0: the baseline's noise floor is not measured yet"
    if not math.isfinite(floor.subsampled_std):
        return "0: the baseline's noise floor under random subsampling is not finite"
    at = floor.metric if floor.ratio is None else f"PR-AUC at 1:{floor.ratio}"
    return (
        f"2 x the std of {at} over {floor.repeats} validations of the best checkpoint of baseline seed {floor.seed}, "
        "each with a random negative subset (guide §10.1's min_delta = 2 x std, on the guide's subsampled "
        "validation; the exact re-weighted metric's std is ~0 by construction)"
    )


def floor_notes(sweep_cfg: SweepConfig, floor: NoiseFloor | None) -> list[str]:
    """A measured floor that leaves the margin at 0: the validation pool too small for random subsets to differ."""
    if sweep_cfg.margin is not None or floor is None or floor.subsampled_std != 0.0:
        return []
    return [
        "the baseline's noise floor under random subsampling is 0 (every random negative subset of the validation "
        "pool is the same: too few negative tiles, or no positive tile), so the margin is 0: every difference the "
        "paired interval separates from 0 counts; set margin: in the sweep file to require more"
    ]


# ----------------------------------------------------------------------------------------------- the report
def build_report(
    plan: SweepPlan, sweep_cfg: SweepConfig, ratios: list[int], floor: NoiseFloor | None, *, finished: bool
) -> SweepReport:
    """Every variant read and judged against the baseline over the seeds both trained; the choice once finished."""
    margin = margin_of(sweep_cfg, floor)
    sign = -1.0 if plan.metric in LOWER_IS_BETTER else 1.0
    variants = [collect_variant(plan, v.name, ratios, plan.seeds) for v in plan.variants]
    base = next(v for v in variants if v.baseline)
    for v in variants:
        if v.baseline or v.metric is None or base.metric is None:
            continue
        paired = [s for s in v.seeds if s in base.seeds]
        if not paired:
            continue
        assert v.metric is not None and base.metric is not None
        judged = judge(
            [sign * base.metric.values[s] for s in paired],
            [sign * v.metric.values[s] for s in paired],
            paired,
            confidence=sweep_cfg.confidence,
            margin=margin,
            max_seeds=sweep_cfg.until_decided.max_seeds,
        )
        v.judgement = judged if sign > 0 else _lower_is_better(judged, plan.metric)
    report = SweepReport(
        name=plan.name,
        sweep_dir=plan.sweep_dir,
        base_config=plan.base_config,
        metric=plan.metric,
        confidence=sweep_cfg.confidence,
        margin=margin,
        margin_basis=margin_basis(sweep_cfg, floor),
        status="finished" if finished else "running",
        variants=variants,
        noise_floor=floor,
    )
    if finished:
        report.chosen, report.choice = choose(report)
    report.notes = floor_notes(sweep_cfg, floor)
    return report


def _lower_is_better(j: Judgement, metric: str) -> Judgement:
    """A judgement made on the negated values of a lower-is-better metric, its figures turned back into variant -
    baseline (as the report's columns read them); the reason says which way it was judged."""
    return j.model_copy(
        update={
            "mean_diff": -j.mean_diff,
            "ci_low": None if j.ci_high is None else -j.ci_high,
            "ci_high": None if j.ci_low is None else -j.ci_low,
            "reason": f"{metric}: lower is better, so judged on baseline - variant: {j.reason}",
        }
    )


def choose(report: SweepReport) -> tuple[str, str]:
    """The chosen variant: the best mean of the deciding metric among the baseline and the variants judged better
    than it (validation only); the baseline when none is."""
    sign = -1.0 if report.metric in LOWER_IS_BETTER else 1.0
    base = next(v for v in report.variants if v.baseline)
    better = [v for v in report.variants if v.judgement is not None and v.judgement.verdict == "better"]
    if not better:
        return base.name, (
            f"no variant is better than the baseline ({base.name}) on {report.metric} beyond seed noise: the "
            "baseline stays (validation metrics only)"
        )
    best = max(better, key=lambda v: sign * (v.metric.mean if v.metric else -math.inf))
    others = [v.name for v in better if v is not best]
    tail = f"; also better: {', '.join(others)}" if others else ""
    return best.name, (
        f"{best.name} has the best mean {report.metric} among the variants judged better than the baseline "
        f"({base.name}) (validation metrics only){tail}"
    )


def write_report(report: SweepReport) -> None:
    """``report.json``, ``report.png`` and ``report.md`` in the sweep directory (recorded; the JSON last)."""
    sweep = RunDir(report.sweep_dir)
    plot_report(report, sweep.path(REPORT_PNG))
    record_in_sweep(sweep, REPORT_PNG)
    record_in_sweep(sweep, REPORT_MD, render_markdown(report, plot=REPORT_PNG))
    record_in_sweep(sweep, REPORT_JSON, json.dumps(report.model_dump(mode="json"), indent=2) + "\n")


def read_report(sweep_dir: str) -> SweepReport | None:
    """The sweep's last ``report.json``, or None when it has none yet."""
    sweep = RunDir(sweep_dir)
    if sweep.fetch(REPORT_JSON) is None:
        return None
    return SweepReport.model_validate_json(sweep.path(REPORT_JSON).read_text())


__all__ = [
    "NOISE_FLOOR_NAME",
    "REPORT_JSON",
    "REPORT_MD",
    "REPORT_PNG",
    "SWEEP_STAGE",
    "adopt_shared",
    "build_report",
    "choose",
    "collect_variant",
    "floor_notes",
    "margin_basis",
    "margin_of",
    "read_report",
    "record_in_sweep",
    "seed_row",
    "write_plan",
    "write_report",
]
