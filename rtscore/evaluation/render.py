"""The Test-Realistic report as text: its results table, the console's table and ``test_report.md``.

The results table (a column per prevalence ratio, a row per metric, each cell the metric's mean ± std over seeds
as the report wrote it) is made by :func:`results_table` alone, whoever shows it: the console (:func:`render_test`),
``test_report.md`` (:func:`render_test_markdown`), the Prefect UI's table artifact (``flows.ui``) and a sweep's
``report.md`` (``rtscore.sweep.render``). A column's heading or a cell's text is thus decided once; each caller
only picks the rows it shows and lays the table out.

Pure: no Prefect, no file access.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Protocol

from rtscore.evaluation.evaluate import GroupTable, TestReport, fmt, mean_std
from rtscore.metrics.objects import iou_tag
from rtscore.report import md_table
from rtscore.storage import RunLayout

# Rows of the test report, in the guide's order (§13.2), with their display names.
PIXEL_ROWS = (("iou_rts", "IoU_RTS"), ("f1_rts", "F1_RTS"), ("pr_auc", "PR-AUC"))
# The console's rows: the compact aggregate (object metrics at IoU 0.3 when the report has them).
CONSOLE_ROWS = (
    ("pr_auc", "PR-AUC"),
    ("iou_rts", "IoU_RTS"),
    ("f1_rts", "F1_RTS"),
    ("no_skill_pr_auc", "no-skill PR-AUC"),
)
CONSOLE_OBJECT_ROWS = (
    ("object_precision_iou30", "Object P @0.3"),
    ("object_recall_iou30", "Object R @0.3"),
    ("object_f1_iou30", "Object F1 @0.3"),
)
CONSOLE_WIDTH = 17  # characters of a console column
OBJECT_TABLE = PurePosixPath(RunLayout.TEST_OBJECTS.at()).name  # test_objects.csv, beside test_report.md


class Summary(Protocol):
    """A metric over seeds as a report holds it (``MetricSummary``, a sweep's ``TestFigure``)."""

    @property
    def text(self) -> str: ...


def ratio_label(tag: str) -> str:
    """A prevalence ratio's tag as a table heads its column: ``1_200`` -> ``1:200``."""
    return tag.replace("_", ":")


def results_table(
    aggregate: Mapping[str, Mapping[str, Summary]], rows: Sequence[tuple[str, str]] | None = None
) -> tuple[list[str], list[list[str]]]:
    """The Test-Realistic results table of ``aggregate`` (ratio tag -> metric -> summary): (the ratio columns'
    headings, one row per metric: its label, then its ``mean ± std`` text per ratio). ``rows`` are the (metric,
    label) pairs shown, in order; None shows every metric of the report, labelled by its name."""
    tags = list(aggregate)
    if rows is None:
        rows = [(m, m) for m in (aggregate[tags[0]] if tags else {})]
    return [ratio_label(t) for t in tags], [[label, *(aggregate[t][key].text for t in tags)] for key, label in rows]


# ------------------------------------------------------------------------------------------ console
def render_test(report: TestReport) -> str:
    """A compact terminal table of the aggregate (PR-AUC, IoU, F1, object F1 @0.3): the canonical 1x table,
    and the multi-scale deployment's beside it (below) when the deployment is not 1x."""
    out = _test_table(report, "Test-Realistic")
    if report.multiscale is not None:
        out += (
            f"\n\nMulti-scale deployment ({report.multiscale.configuration}), beside the canonical 1x table above, "
            "not instead of it:\n"
        )
        out += _test_table(report.multiscale, "Test-Realistic")
    return out


def _test_table(report: TestReport, title: str) -> str:
    rows = list(CONSOLE_ROWS) + (list(CONSOLE_OBJECT_ROWS) if 0.3 in report.object_iou_thresholds else [])
    heads, table = results_table(report.aggregate, rows)
    w = CONSOLE_WIDTH
    out = [f"{title:<{w}}" + "".join(f"{h:>{w}}" for h in heads)]
    out += [f"{label:<{w}}" + "".join(f"{c:>{w}}" for c in cells) for label, *cells in table]
    if (warning := report.fallback_warning()) is not None:
        out.append(warning)
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ test_report.md
def render_test_markdown(report: TestReport) -> str:
    """``test_report.md``: the canonical 1x table (mean ± std over seeds), per-seed rows, recall by size; the
    multi-scale deployment's tables beside it when the deployment is not 1x."""
    seeds = f"{len(report.seeds)} seed{'s' if len(report.seeds) != 1 else ''}: {', '.join(map(str, report.seeds))}"
    canonical = (
        f"Canonical 1x result (guide §4.6), frozen deployment config per seed ({report.configuration}); mean ± std "
        "over seeds."
    )
    if report.multiscale is not None:
        canonical += " The multi-scale deployment's tables at the end are beside this result, not instead of it."
    lines = [f"# Test-Realistic report ({seeds})", "", canonical, "", *_test_body(report, "##")]
    lines += _groups_body(report, "##")
    if report.multiscale is not None:
        ms = report.multiscale
        lines += [
            "",
            f"# Multi-scale deployment ({ms.configuration})",
            "",
            "The shipped deployment config's scales differ from [1.0]: its result on the same test tiles (0.5x "
            "input: each tile's 2x field of view from the test context store). It is beside the canonical 1x "
            "table above, not instead of it: the 1x table stays the Test-Realistic result. The guide runs "
            "multi-scale evaluation later, in the inference pipeline, not in evaluate_test (§4.6); it is run "
            "here so that the configuration that ships has a test result of its own.",
            "",
            *_test_body(ms, "##"),
        ]
    return "\n".join(lines) + "\n"


def markdown_rows(report: TestReport) -> list[tuple[str, str]]:
    """The markdown table's (metric, label) rows: pixel metrics, object metrics per IoU threshold, no skill."""
    names = list(PIXEL_ROWS)
    for thr in report.object_iou_thresholds:
        tg = iou_tag(thr)
        names += [
            (f"object_precision_{tg}", f"Object precision @IoU {thr:g}"),
            (f"object_recall_{tg}", f"Object recall @IoU {thr:g}"),
            (f"object_f1_{tg}", f"Object F1 @IoU {thr:g}"),
        ]
    names.append(("no_skill_pr_auc", "PR-AUC of no skill"))
    return names


def _test_body(report: TestReport, h: str) -> list[str]:
    """The results table, per-seed rows and recall by size; ``h`` is the markdown level of the sub-sections."""
    heads, table = results_table(report.aggregate, markdown_rows(report))
    tags = list(report.aggregate)
    lines = [
        *([f"**{w}**", ""] if (w := report.fallback_warning()) else []),
        *md_table(["Metric", *heads], table),
        "",
        f"{h} Per seed",
        "",
    ]
    lines += md_table(
        ["seed", "threshold", "threshold source", "T", *(f"PR-AUC {t}" for t in tags)],
        [
            [s.seed, f"{s.threshold:.4f}", s.threshold_source, f"{s.temperature:.3f}"]
            + [f"{s.metrics[t]['pr_auc']:.3f}" for t in tags]
            for s in report.per_seed
        ],
    )
    size_rows = []
    for i, b in enumerate(report.per_seed[0].recall_by_size):
        mu, sd = mean_std([s.recall_by_size[i].recall for s in report.per_seed])
        n = sum(s.recall_by_size[i].n_objects for s in report.per_seed) // len(report.per_seed)
        size_rows.append([b.label, n, fmt(mu, sd)])
    lines += [
        "",
        f"{h} Object recall by RTS area (mean over seeds)",
        "",
        *md_table(["area (m²)", "GT objects", "recall"], size_rows),
    ]
    return lines


# ------------------------------------------------------------------------------------------ regions, bands
GROUP_HEADINGS = {"region": "region", "latitude": "latitude band"}


def group_table(table: GroupTable) -> tuple[list[str], list[list[str]]]:
    """A region or latitude-band table (headings, one row per group: its name, tiles, positive tiles, GT objects,
    then PR-AUC and object recall as ``mean ± std`` over seeds or ``not measured``, and a last column saying why a
    group is not measured): the rows ``test_report.md`` shows and the Prefect UI's table artifacts hold (the figures
    first, the reason last, so the UI's table shows every figure without scrolling)."""
    heads = [
        GROUP_HEADINGS[table.by],
        "tiles",
        "positive tiles",
        "GT objects",
        f"PR-AUC {ratio_label(table.ratio)}",
        f"object recall @IoU {table.iou:g}",
        "note",
    ]
    rows = []
    for g in table.groups:
        counts = [g.name, str(g.n_tiles), str(g.n_positive_tiles), str(g.n_objects)]
        if g.measured and g.pr_auc is not None and g.object_recall is not None:
            rows.append([*counts, g.pr_auc.text, g.object_recall.text, ""])
        else:
            rows.append([*counts, "not measured", "not measured", str(g.reason)])
    return heads, rows


def _groups_body(report: TestReport, h: str) -> list[str]:
    """``test_report.md``'s tables per region and per latitude band (guide §8.3, Phase 3) and where the
    per-object table is; nothing for a report written before them."""
    lines: list[str] = []
    for table, title in ((report.by_region, "Per region"), (report.by_latitude, "Per latitude band")):
        if table is None:
            continue
        lines += ["", f"{h} {title} (mean ± std over seeds)", ""]
        if table.note is not None:
            lines.append(f"Not made: {table.note}.")
            continue
        ratio = ratio_label(table.ratio)
        lines += [
            f"Each group's PR-AUC at {ratio} re-weights its own negative tiles to {ratio}, as the overall figure "
            f"does over every tile; object recall at IoU {table.iou:g}. A group with fewer than "
            f"{table.min_positive_tiles} positive tiles (evaluation.min_group_positive_tiles) or without a "
            "negative tile is listed with its counts, not measured.",
            "",
            *md_table(*group_table(table)),
        ]
    if report.by_region is not None:
        lines += [
            "",
            f"Every ground-truth object of the test tiles, the inventory ids it holds and the seeds that found it: "
            f"`{OBJECT_TABLE}` beside this report.",
        ]
    return lines
