"""How the flows present a stage's results: the text ``rts`` prints and the markdown of the Prefect UI's summaries.

| result | console (``rts``) | markdown (Prefect artifacts) |
| --- | --- | --- |
| the trained seeds (``TrainResult``) | :func:`render_training` | :func:`render_training_markdown` |
| a calibration (``CalibrationResult``) | :func:`render_calibration` | :func:`render_calibration_markdown` |
| a test report (``TestResult.report``) | ``evaluation.render_test`` | ``evaluation.render_test_markdown`` |

Presenting results is the flows' job, so these live here, not among the stages; the test report's renderings are
``rtscore.evaluation``'s because the evaluate-test stage writes ``test_report.md`` itself. Pure: no Prefect, no
file access.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rtscore.evaluation import mean_std
from rtscore.report import md_table

if TYPE_CHECKING:
    from rtscore.stages import CalibrationResult, TrainResult

NOT_AVAILABLE = "n/a"  # a value that is undefined (NaN): e.g. the std of a single seed
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
        *md_table(
            ["seed", "T", "threshold", "val precision", "val recall", "target reached"],
            [
                [
                    p.seed,
                    number(p.temperature, 3),
                    number(p.threshold),
                    number(p.precision, 3),
                    number(p.recall, 3),
                    "yes" if p.target_reached else "**no**: max-F1 fallback threshold",
                ]
                for p in summary.seeds
            ],
        ),
    ]
    return "\n".join(lines) + "\n"
