"""One renderer per result model: the text the console prints and the markdown the reports and the Prefect UI show.

| result | console (``rts``) | markdown (report files, Prefect artifacts) |
| --- | --- | --- |
| the trained seeds (``TrainResult``) | :func:`render_training` | :func:`render_training_markdown` |
| a calibration (``CalibrationResult``) | :func:`render_calibration` | :func:`render_calibration_markdown` |
| a test report (``TestResult.report``) | :func:`render_test` | :func:`render_test_markdown` (test_report.md) |

Pure: no Prefect, no file access. The stage modules import only this module's functions (the result models are
type hints here), so a stage can render its own report without an import cycle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rtscore.evaluation import TestReport, fmt, mean_std
from rtscore.metrics.objects import iou_tag

if TYPE_CHECKING:
    from rtscore.stages.calibrate import CalibrationResult
    from rtscore.stages.train import TrainResult

NOT_AVAILABLE = "n/a"  # a value that is undefined (NaN): e.g. the std of a single seed
# Rows of the test report, in the guide's order (§13.2), with their display names.
PIXEL_ROWS = (("iou_rts", "IoU_RTS"), ("f1_rts", "F1_RTS"), ("pr_auc", "PR-AUC"))
TARGET_NOT_REACHED = " (WARNING: target precision not reachable: max-F1 fallback threshold)"


def number(v: float, digits: int = 4) -> str:
    """A figure to ``digits`` decimals; ``n/a`` where it is undefined (NaN, infinite)."""
    return f"{v:.{digits}f}" if math.isfinite(v) else NOT_AVAILABLE


def mean_std_text(values: Sequence[float], digits: int = 4) -> str:
    """Mean ± std over seeds (``0.7231 ± 0.0120``), ``0.7231 (1 seed)`` where the std is undefined (one seed, or
    one defined value), ``n/a`` when no value is defined; never ``± 0``."""
    mean, std = mean_std(values)
    if math.isnan(mean):
        return NOT_AVAILABLE
    if math.isnan(std):
        return f"{mean:.{digits}f} (1 seed)"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


# ------------------------------------------------------------------------------------------ training
def render_training(results: Sequence[TrainResult]) -> str:
    """The console's lines: one per seed, its best smoothed validation metric, epoch and directory."""
    return "\n".join(
        f"seed {r.result.seed:<6d} best val_realistic_pr_auc_geomean {r.result.best_metric:.4f} "
        f"(epoch {r.result.best_epoch}) {r.result.seed_dir}"
        for r in results
    )


def render_training_markdown(results: Sequence[TrainResult]) -> str:
    """A bullet per seed (best metric, epochs, early stop, each attempt when a worker was lost), then mean ± std."""
    lines = []
    for r in results:
        s = r.result
        lines.append(
            f"- seed {s.seed}: best val_realistic_pr_auc_geomean {number(s.best_metric)} at epoch "
            f"{s.best_epoch} of {s.epochs_run}{' (stopped early)' if s.stopped_early else ''}"
        )
        lines += [f"  - {line}" for line in attempt_lines(r)]
    overall = mean_std_text([r.result.best_metric for r in results])
    return "\n".join(lines) + f"\n\n**best val_realistic_pr_auc_geomean over {len(results)} seed(s): {overall}**\n"


def attempt_lines(result: TrainResult) -> list[str]:
    """What each attempt of a seed did, when there was more than one (a pre-empted worker)."""
    if result.attempts is None or len(result.attempts.attempts) < 2:
        return []
    return result.attempts.describe().splitlines()


# ------------------------------------------------------------------------------------------ calibration
def render_calibration(cal: CalibrationResult) -> str:
    """The console's lines: the gates' choices and reasons, the shipped seed, each seed's temperature and
    threshold (flagged where the target precision was not reachable)."""
    d = cal.deployment
    lines = [
        f"calibration: tta {d.tta}, scales {d.scales}; shipped seed {cal.shipped_seed}",
        f"  TTA gate:   {cal.summary.tta_reason}",
        f"  scale gate: {cal.summary.scales_reason}",
    ]
    for p in cal.summary.seeds:
        note = "" if p.target_reached else TARGET_NOT_REACHED
        lines.append(
            f"  seed {p.seed}: T = {p.temperature:.3f}, threshold {p.threshold:.4f} "
            f"(val precision {p.precision:.3f}, recall {p.recall:.3f}){note}"
        )
    return "\n".join(lines)


def render_calibration_markdown(cal: CalibrationResult) -> str:
    """The same facts as :func:`render_calibration`, as markdown: the shipped operating point, the gates, a
    table of the seeds."""
    d, summary = cal.deployment, cal.summary
    lines = [
        f"- shipped seed **{cal.shipped_seed}** ({summary.shipped_reason}): threshold "
        f"{number(d.threshold) if d.threshold is not None else NOT_AVAILABLE}, temperature "
        f"{number(d.temperature) if d.temperature is not None else NOT_AVAILABLE}, TTA {d.tta}, scales {d.scales}",
        f"- TTA gate: {summary.tta_reason}",
        f"- scale gate: {summary.scales_reason}",
        "",
        "| seed | T | threshold | val precision | val recall | target reached |",
        "|---|---|---|---|---|---|",
    ]
    for p in summary.seeds:
        lines.append(
            f"| {p.seed} | {number(p.temperature, 3)} | {number(p.threshold)} | {number(p.precision, 3)} | "
            f"{number(p.recall, 3)} | {'yes' if p.target_reached else '**no**: max-F1 fallback threshold'} |"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ test
def render_test(report: TestReport) -> str:
    """A compact terminal table of the aggregate (PR-AUC, IoU, F1, object F1 @0.3): the canonical 1x table,
    and the multi-scale deployment's beside it (below) when the deployment is not 1x."""
    out = _test_table(report, "Test-Realistic")
    if report.multiscale is not None:
        out += f"\n\nMulti-scale deployment ({report.multiscale.configuration}), beside the canonical 1x table:\n"
        out += _test_table(report.multiscale, "Test-Realistic")
    return out


def _test_table(report: TestReport, title: str) -> str:
    agg = report.aggregate
    tags = list(agg)
    rows = [("PR-AUC", "pr_auc"), ("IoU_RTS", "iou_rts"), ("F1_RTS", "f1_rts")]
    rows.append(("no-skill PR-AUC", "no_skill_pr_auc"))
    if 0.3 in report.object_iou_thresholds:
        rows += [("Object P @0.3", "object_precision_iou30"), ("Object R @0.3", "object_recall_iou30")]
        rows += [("Object F1 @0.3", "object_f1_iou30")]
    width = 17
    out = [f"{title:<{width}}" + "".join(f"{t.replace('1_', '1:'):>17}" for t in tags)]
    for label, key in rows:
        out.append(f"{label:<{width}}" + "".join(f"{agg[t][key].text:>17}" for t in tags))
    if (w := report.fallback_warning()) is not None:
        out.append(w)
    return "\n".join(out)


def render_test_markdown(report: TestReport) -> str:
    """``test_report.md``: the canonical 1x table (mean ± std over seeds), per-seed rows, recall by size; the
    multi-scale deployment's tables beside it when the deployment is not 1x."""
    seeds = f"{len(report.seeds)} seed{'s' if len(report.seeds) != 1 else ''}: {', '.join(map(str, report.seeds))}"
    lines = [
        f"# Test-Realistic report ({seeds})",
        "",
        f"Canonical 1x result (guide §4.6), frozen deployment config per seed ({report.configuration}); mean ± std "
        "over seeds.",
        "",
        *_test_body(report, "##"),
    ]
    if report.multiscale is not None:
        ms = report.multiscale
        lines += [
            "",
            f"# Multi-scale deployment ({ms.configuration})",
            "",
            "The shipped deployment config's scales differ from [1.0]: its result on the same test tiles (0.5x "
            "input: each tile's 2x field of view from the test context store), beside the canonical 1x table "
            "above, which stays the Test-Realistic result.",
            "",
            *_test_body(ms, "##"),
        ]
    return "\n".join(lines) + "\n"


def _test_body(report: TestReport, h: str) -> list[str]:
    """The results table, per-seed rows and recall by size; ``h`` is the markdown level of the sub-sections."""
    agg = report.aggregate
    tags = list(agg)
    head = "| Metric | " + " | ".join(t.replace("1_", "1:") for t in tags) + " |"
    sep = "|---|" + "---|" * len(tags)
    names = list(PIXEL_ROWS)
    for thr in report.object_iou_thresholds:
        tg = iou_tag(thr)
        names += [
            (f"object_precision_{tg}", f"Object precision @IoU {thr:g}"),
            (f"object_recall_{tg}", f"Object recall @IoU {thr:g}"),
            (f"object_f1_{tg}", f"Object F1 @IoU {thr:g}"),
        ]
    names.append(("no_skill_pr_auc", "PR-AUC of no skill"))
    lines = [
        *([f"**{w}**", ""] if (w := report.fallback_warning()) else []),
        head,
        sep,
    ]
    for key, label in names:
        lines.append(f"| {label} | " + " | ".join(agg[t][key].text for t in tags) + " |")
    lines += ["", f"{h} Per seed", ""]
    lines.append("| seed | threshold | threshold source | T | " + " | ".join(f"PR-AUC {t}" for t in tags) + " |")
    lines.append("|---|---|---|---|" + "---|" * len(tags))
    for s in report.per_seed:
        row = [f"{s.metrics[t]['pr_auc']:.3f}" for t in tags]
        lines.append(
            f"| {s.seed} | {s.threshold:.4f} | {s.threshold_source} | {s.temperature:.3f} | " + " | ".join(row) + " |"
        )
    lines += [
        "",
        f"{h} Object recall by RTS area (mean over seeds)",
        "",
        "| area (m²) | GT objects | recall |",
        "|---|---|---|",
    ]
    for i, b in enumerate(report.per_seed[0].recall_by_size):
        mu, sd = mean_std([s.recall_by_size[i].recall for s in report.per_seed])
        n = sum(s.recall_by_size[i].n_objects for s in report.per_seed) // len(report.per_seed)
        lines.append(f"| {b.label} | {n} | {fmt(mu, sd)} |")
    return lines
