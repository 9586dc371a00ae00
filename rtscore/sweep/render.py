"""What a person reads of a sweep, rendered from its :class:`~rtscore.sweep.report.SweepReport`.

| output | function |
| --- | --- |
| rows of the Prefect table artifact and of ``rts sweep --status`` | :func:`table_rows` |
| the fixed-width terminal table of those rows | :func:`render_text_table` (:func:`render_status`: with a header) |
| ``report.md`` | :func:`render_markdown` |
| the PNG: the deciding metric per variant, per-seed points, the baseline's noise band | :func:`plot_report` |
| that PNG's figure, every text inside it | :func:`report_figure` |

Pure but for :func:`plot_report`, which writes its PNG atomically. No Prefect: a flow inlines the PNG in a
markdown artifact with ``flows.ui.inline_images`` (``![..](report.png)`` relative to the sweep directory becomes a
``data:image/png`` URI) or ``flows.ui.image_src``.
"""

from __future__ import annotations

import json
import math
import textwrap
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtscore.evaluation import results_table
from rtscore.report import md_table
from rtscore.storage import os_errors
from rtscore.sweep.report import NoiseFloor, Spread, SweepReport, TestFigure, VariantReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

NONE = "—"  # no value: a pending variant, the baseline's difference to itself
NOT_AVAILABLE = "n/a"  # an undefined value (NaN, infinite)
PENDING = "pending"

# Column names of :func:`table_rows` (one column per prevalence ratio besides: :func:`ratio_column`).
COL_VARIANT = "variant"
COL_OVERRIDES = "overrides"
COL_SEEDS = "seeds done"
COL_METRIC = "deciding metric"
COL_DIFF = "Δ vs baseline"
COL_INTERVAL = "paired interval"
COL_VERDICT = "verdict"
COL_SHARED = "shared stages"

MAX_TEST_FIGURES = 60  # lines of test figures per variant in report.md; the rest is in its test_report.json
MAX_TICK_LABEL = 32  # characters of a variant's name under the plot (the table has it whole)
TITLE_SIZE = 10  # points: the PNG's title, wrapped to the figure's width

_NOISE_MEANINGS = (
    (
        "re-weighted std",
        "reweighted_std",
        "the guide's §10.1 std: repeated validations of one checkpoint, exact prevalence re-weighting, numerical "
        "non-determinism only (~0 by construction, so it cannot set the margin)",
    ),
    (
        "subsampled std",
        "subsampled_std",
        "a random negative subset per validation (the guide's method): the spread early stopping saw there; the "
        "margin is 2 x this std",
    ),
    (
        "bootstrap std",
        "bootstrap_std",
        "tile bootstrap of the validation pool: the sampling uncertainty of the validation set itself",
    ),
)
# How a seed's value is read (rtscore.sweep.run.seed_row), said in report.md and docs/experiments.md.
SEED_VALUE = (
    "the raw value its validation recorded at the epoch of its best checkpoint (best_deployment.pth); early stopping "
    "picks that epoch at the peak of the moving average over training.early_stopping.smoothing_window validations "
    "(guide §9.1: 3), but the sweep compares the unsmoothed value of the checkpoint it would calibrate, test and "
    "deploy"
)


# ------------------------------------------------------------------------------------------ figures
def _num(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}f}" if math.isfinite(v) else NOT_AVAILABLE


def _signed(v: float, digits: int = 3) -> str:
    if not math.isfinite(v):
        return NOT_AVAILABLE
    if abs(v) < 0.5 * 10**-digits:
        v = 0.0  # never "-0.000"
    return f"{v:+.{digits}f}"


def _small(v: float | None) -> str:
    """A std of the noise floor: often far below 0.001, so not cut to 3 decimals."""
    if v is None:
        return NOT_AVAILABLE
    if not math.isfinite(v):
        return NOT_AVAILABLE
    if v == 0:
        return "0"
    return f"{v:.4f}" if abs(v) >= 1e-3 else f"{v:.1e}"


def spread_text(s: Spread | None) -> str:
    """``0.712 ± 0.010``; ``0.712 (1 seed)`` where the std is undefined; ``—`` with no value yet."""
    if s is None:
        return NONE
    if s.std is None or not math.isfinite(s.std):
        return f"{_num(s.mean)} (1 seed)"
    return f"{_num(s.mean)} ± {_num(s.std)}"


def ratio_column(ratio: str) -> str:
    """The table column of a prevalence ratio (``'200'`` -> ``PR-AUC 1:200``)."""
    return f"PR-AUC 1:{ratio}"


def _ratio_order(key: str) -> tuple[int, float, str]:
    try:
        return (0, float(key), key)
    except ValueError:
        return (1, 0.0, key)


def ratios(report: SweepReport) -> list[str]:
    """Every prevalence ratio any variant has, smallest first."""
    return sorted({r for v in report.variants for r in v.ratios}, key=_ratio_order)


def _value(v: Any) -> str:
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"))


def overrides_text(overrides: Mapping[str, Any]) -> str:
    """``loss.boundary_handling=ignore, data.channels=["ndvi"]``; ``—`` for none (the base config)."""
    return ", ".join(f"{k}={_value(v)}" for k, v in overrides.items()) or NONE


def shared_text(shared: Mapping[str, str]) -> str:
    """The stages a variant took from others, by the variant that computed them: ``datasets, stats from
    baseline``; ``—`` for none."""
    by_source: dict[str, list[str]] = {}
    for key, source in shared.items():
        stages = by_source.setdefault(source, [])
        stage = key.split()[0] if key.split() else key
        if stage not in stages:
            stages.append(stage)
    return "; ".join(f"{', '.join(stages)} from {source}" for source, stages in by_source.items()) or NONE


def verdict_text(v: VariantReport) -> str:
    """``better``, ``worse``, ``within noise``, ``undecided: add N seeds``; ``baseline`` for the baseline and
    ``pending`` for a variant not judged yet."""
    if v.baseline:
        return "baseline"
    j = v.judgement
    if j is None:
        return PENDING
    if j.verdict != "undecided":
        return j.verdict
    if j.seeds_to_decide is None:
        return "undecided"
    more = j.seeds_to_decide - len(j.seeds)
    if more <= 0:
        return "undecided"
    return f"undecided: add {more} seed{'s' if more > 1 else ''}"


def diff_text(v: VariantReport) -> str:
    """The paired difference to the baseline: ``+0.012 ± 0.008``, ``+0.012 (1 seed)``; ``—`` if not judged."""
    j = v.judgement
    if j is None:
        return NONE
    if j.std_diff is None or not math.isfinite(j.std_diff):
        return f"{_signed(j.mean_diff)} (1 seed)"
    return f"{_signed(j.mean_diff)} ± {_num(j.std_diff)}"


def interval_text(v: VariantReport) -> str:
    """The paired interval ``[-0.004, +0.020]``; ``—`` where there is none (not judged, one seed)."""
    j = v.judgement
    if j is None or j.ci_low is None or j.ci_high is None:
        return NONE
    return f"[{_signed(j.ci_low)}, {_signed(j.ci_high)}]"


def variant_label(v: VariantReport) -> str:
    return f"{v.name} (baseline)" if v.baseline else v.name


# ------------------------------------------------------------------------------------------ table
def table_rows(report: SweepReport) -> list[dict[str, str]]:
    """One row per variant (baseline first): what decides first (name, verdict, the deciding metric as mean ± std,
    the paired difference to the baseline and its interval, seeds done; a wide table in the UI scrolls), then each
    ratio's PR-AUC, the overrides and the shared stages. The same columns for every variant (``—`` where a variant
    has no value yet)."""
    cols = ratios(report)
    rows = []
    for v in report.variants:
        row = {
            COL_VARIANT: variant_label(v),
            COL_VERDICT: verdict_text(v),
            COL_METRIC: spread_text(v.metric),
            COL_DIFF: NONE if v.baseline else diff_text(v),
            COL_INTERVAL: NONE if v.baseline else interval_text(v),
            COL_SEEDS: str(len(v.seeds)),
        }
        for r in cols:
            row[ratio_column(r)] = spread_text(v.ratios.get(r))
        row[COL_OVERRIDES] = overrides_text(v.overrides)
        row[COL_SHARED] = shared_text(v.shared)
        rows.append(row)
    return rows


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def render_text_table(rows: Sequence[Mapping[str, str]], *, max_width: int = 40) -> str:
    """A fixed-width plain-text table (a header, a rule, a line per row); cells longer than ``max_width`` are cut
    with ``…``."""
    if not rows:
        return "(no variants)\n"
    cols: list[str] = []
    for row in rows:
        cols += [c for c in row if c not in cols]
    cells = [[_clip(str(row.get(c, "")), max_width) for c in cols] for row in rows]
    header = [_clip(c, max_width) for c in cols]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]

    def line(parts: Sequence[str]) -> str:
        return "  ".join(p.ljust(w) for p, w in zip(parts, widths, strict=True)).rstrip()

    out = [line(header), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    return "\n".join(out) + "\n"


def render_status(report: SweepReport, state: str | None = None) -> str:
    """``rts sweep --status``: the sweep's name, status (``state`` when given: e.g. interrupted, for a report built
    while no run of the sweep goes on) and rule, then :func:`render_text_table`."""
    chosen = f"; chosen: {report.chosen}" if report.chosen else ""
    head = (
        f"sweep {report.name} ({state or report.status}{chosen})\n"
        f"deciding metric: {report.metric} (validation); paired interval at {report.confidence:.0%}, "
        f"margin {_num(report.margin)}\n\n"
    )
    return head + render_text_table(table_rows(report))


# ------------------------------------------------------------------------------------------ report.md
def _noise_floor_md(nf: NoiseFloor | None, margin: float, basis: str) -> list[str]:
    lines = ["## Baseline noise floor (guide §10.1)", ""]
    said = f"Margin {_num(margin)}" + (f": {basis}." if basis else ".")
    if nf is None:
        return [*lines, "Not measured for this sweep.", "", said, ""]
    lines += [
        f"The baseline's best checkpoint of seed {nf.seed}, validated {nf.repeats} times; std of {nf.metric}:",
        "",
        *md_table(
            ["spread", "std", "what it measures"],
            [[label, _small(getattr(nf, field)), meaning] for label, field, meaning in _NOISE_MEANINGS],
        ),
    ]
    lines += [
        "",
        f"{said} A difference smaller than the margin does not count, whatever its interval.",
        "",
    ]
    return lines


def _test_figures(tested: Mapping[str, Mapping[str, TestFigure]]) -> list[tuple[str, str]]:
    """A tested variant's Test-Realistic results table (:func:`rtscore.evaluation.results_table`, the test report's
    own cells) as a list, ratio by ratio: (``<ratio tag> / <metric>``, ``mean ± std``)."""
    _, rows = results_table(tested)
    return [(f"{tag} / {label}", cells[i]) for i, tag in enumerate(tested) for label, *cells in rows]


def _test_md(report: SweepReport) -> list[str]:
    lines = [
        "## Test split",
        "",
        f"**The choice used validation metrics only** ({report.metric}); the test split played no part in it.",
        "",
    ]
    if not report.tested:
        return [*lines, "Test-Realistic: not run (no variant was evaluated on the test split).", ""]
    names = ", ".join(f"`{t}`" for t in report.tested)
    lines += [f"Test-Realistic was run only for {names}, after the choice was recorded.", ""]
    for name in report.tested:
        lines += [f"### Test-Realistic: `{name}`", ""]
        figures = _test_figures(report.test.get(name, {}))
        if not figures:
            lines += ["_No test figures recorded yet._", ""]
            continue
        rows = figures[:MAX_TEST_FIGURES]
        if len(figures) > MAX_TEST_FIGURES:
            rows.append(("…", f"{len(figures) - MAX_TEST_FIGURES} more in the variant's evaluation/test_report.json"))
        lines += [*md_table(["figure", "value"], rows, escape=True), ""]
    return lines


def _variant_md(report: SweepReport, v: VariantReport, baseline: VariantReport | None) -> list[str]:
    lines = [f"### `{v.name}`{' (baseline)' if v.baseline else ''}", ""]
    lines.append(f"- Run directory: `{v.run_dir}`")
    lines.append(f"- Overrides: {', '.join(f'`{k}={_value(x)}`' for k, x in v.overrides.items()) or 'none'}")
    lines.append(f"- Seeds: {', '.join(str(s) for s in v.seeds) or 'none yet'}")
    lines.append(f"- {report.metric}: {spread_text(v.metric)}")
    if not v.baseline:
        verdict = f"- Verdict: **{verdict_text(v)}**"
        if v.judgement is not None:
            verdict += (
                f" (Δ {diff_text(v)}, {v.judgement.confidence:.0%} interval {interval_text(v)}, "
                f"paired seeds {', '.join(str(s) for s in v.judgement.seeds)}): {v.judgement.reason}"
            )
        lines.append(verdict)
    if v.shared:
        lines.append("- Shared: " + ", ".join(f"{k} from `{src}`" for k, src in v.shared.items()))
    lines.append("")
    if not v.seeds:
        return lines
    cols = ratios(report)
    pair = not v.baseline and baseline is not None and baseline.metric is not None
    head = ["seed", report.metric, *(ratio_column(r) for r in cols), *(["Δ vs baseline"] if pair else [])]
    rows = []
    values = v.metric.values if v.metric else {}
    for seed in v.seeds:
        cells = [str(seed), _num(values[seed]) if seed in values else NONE]
        for r in cols:
            s = v.ratios.get(r)
            cells.append(_num(s.values[seed]) if s is not None and seed in s.values else NONE)
        if pair:
            assert baseline is not None and baseline.metric is not None
            base = baseline.metric.values
            cells.append(_signed(values[seed] - base[seed]) if seed in values and seed in base else NONE)
        rows.append(cells)
    lines += [*md_table(head, rows), ""]
    return lines


def _choice_md(report: SweepReport) -> list[str]:
    """The sweep's outcome, first thing under the title: the chosen variant and why, or why there is none yet."""
    if report.chosen:
        said = f"**Chosen: `{report.chosen}`**." + (f" {report.choice}" if report.choice else "")
    elif report.status == "running":
        said = "**No variant chosen yet**: the sweep is running; figures are partial, a pending variant has no value."
    else:
        said = "**No variant chosen**." + (f" {report.choice}" if report.choice else "")
    return [said, ""]


def _variants_md(report: SweepReport) -> list[str]:
    """The variants as tables narrow enough for the Prefect UI's artifact page beside its side panel: the decision
    (verdict, deciding metric, paired difference and interval, seeds), then PR-AUC per prevalence ratio; each
    variant's overrides and shared stages as a list (they wrap; a table of them overran the page)."""
    head = [COL_VARIANT, COL_VERDICT, COL_METRIC, COL_DIFF, COL_INTERVAL, "seeds"]
    cols = ratios(report)
    decision, by_ratio, changes = [], [], []
    for v in report.variants:
        judged = not v.baseline
        diff, interval = (diff_text(v), interval_text(v)) if judged else (NONE, NONE)
        decision.append([variant_label(v), verdict_text(v), spread_text(v.metric), diff, interval, str(len(v.seeds))])
        by_ratio.append([variant_label(v), *(spread_text(v.ratios.get(r)) for r in cols)])
        shared = f" (shared: {shared_text(v.shared)})" if v.shared else ""
        said = ", ".join(f"`{k}={_value(x)}`" for k, x in v.overrides.items()) or "the base config"
        changes.append(f"- `{v.name}`: {said}{shared}")
    lines = [*md_table(head, decision, escape=True), ""]
    lines += [
        f"Deciding metric (Val-Realistic): mean ± std over seeds. {COL_DIFF}: variant − baseline over the seeds both "
        f"trained (paired), mean ± std, and its {report.confidence:.0%} {COL_INTERVAL}.",
        "",
    ]
    if cols:
        lines += ["PR-AUC per prevalence ratio (Val-Realistic), mean ± std over seeds:", ""]
        lines += [*md_table([COL_VARIANT, *(f"1:{r}" for r in cols)], by_ratio, escape=True), ""]
    return [*lines, "What each variant changes:", "", *changes, ""]


def render_markdown(report: SweepReport, *, plot: str | None = None) -> str:
    """``report.md``: title and status, then the choice; the rule (base config, deciding metric, confidence,
    margin); the variants' tables with the baseline's noise floor after them; the test split statement and test
    figures; the notes; each variant's details. ``plot``: the PNG's path relative to the report, shown under the
    tables."""
    baseline = next((v for v in report.variants if v.baseline), None)
    lines = [f"# Sweep `{report.name}`: {report.status}", "", *_choice_md(report)]
    lines += [
        f"- Base config: `{report.base_config}`",
        f"- Sweep directory: `{report.sweep_dir}`",
        f"- Deciding metric: `{report.metric}` (validation)",
        f"- Paired interval confidence: {report.confidence:.0%}",
        f"- Margin: {_num(report.margin)} (the smallest difference that counts; {report.margin_basis or 'see below'})",
        f"- A seed's value: {SEED_VALUE}",
        f"- Baseline: `{baseline.name}`" if baseline else "- Baseline: none",
        "",
        "## Variants",
        "",
        *_variants_md(report),
    ]
    if plot:
        lines += [f"![{report.metric} per variant, baseline ± noise floor margin]({plot})", ""]
    lines += _noise_floor_md(report.noise_floor, report.margin, report.margin_basis)
    lines += _test_md(report)
    if report.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in report.notes), ""]
    lines += ["## Variant details", ""]
    for v in report.variants:
        lines += _variant_md(report, v, baseline)
    return "\n".join(lines).rstrip() + "\n"


# ------------------------------------------------------------------------------------------ PNG
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _finite(values: Mapping[int, float]) -> dict[int, float]:
    return {s: x for s, x in values.items() if math.isfinite(x)}


def report_figure(report: SweepReport) -> Figure:
    """The deciding metric per variant (baseline first): each seed a point (one colour and marker per seed in
    every variant, a thin line joining a seed's points), the mean ± std as an error bar, the baseline's mean as a
    line in a band ± the margin, and the verdict above each variant; a variant without values is marked
    ``pending``. Laid out so that every text lies inside the figure (the title wrapped to its width); the caller
    closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = report.variants
    values = [_finite(v.metric.values) if v.metric else {} for v in variants]
    width = max(6.0, 1.3 * len(variants) + 2.5)
    fig, ax = plt.subplots(figsize=(width, 5.0), layout="constrained")
    _draw_baseline_band(ax, report)
    _draw_seeds(ax, values)
    _draw_means(ax, report, values)
    _draw_verdicts(ax, report, values)
    _label_axes(ax, report)
    title = f"sweep {report.name} ({report.status}): {report.metric} per variant"
    fig.suptitle(_wrapped(title, width * 72 / (TITLE_SIZE * 0.6)), fontsize=TITLE_SIZE)
    return fig


def _wrapped(text: str, chars: float) -> str:
    """``text`` in lines of at most ``chars`` characters, broken after ``: `` first, then at spaces."""
    width = max(int(chars), 20)
    head, sep, tail = text.partition(": ")
    parts = [head + sep.rstrip(), tail] if sep and len(text) > width else [text]
    return "\n".join(line for part in parts for line in textwrap.wrap(part, width, break_on_hyphens=False))


def plot_report(report: SweepReport, path: Path) -> None:
    """:func:`report_figure` written atomically to ``path`` (a PNG)."""
    import matplotlib.pyplot as plt

    fig = report_figure(report)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp.png")
    try:
        with os_errors("write", path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(tmp, dpi=100, format="png")
            tmp.replace(path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)


def _draw_baseline_band(ax: Axes, report: SweepReport) -> None:
    """The reference every variant is judged against: the baseline's mean as a dashed line in a band ± the noise
    floor margin (a difference inside the band is noise). Nothing while the baseline has no finite mean."""
    baseline = next((v for v in report.variants if v.baseline and v.metric is not None), None)
    if baseline is not None and baseline.metric is not None and math.isfinite(baseline.metric.mean):
        mean = baseline.metric.mean
        ax.axhspan(
            mean - report.margin,
            mean + report.margin,
            color="tab:grey",
            alpha=0.2,
            label="baseline ± noise floor margin",
        )
        ax.axhline(mean, color="tab:grey", lw=1.2, ls="--", label="baseline mean")


def _draw_seeds(ax: Axes, values: list[dict[int, float]]) -> None:
    """Each seed's values, a point per variant at a small offset of its own, one colour and marker per seed in
    every variant and a thin line joining a seed's points of neighbouring variants: a reader follows one seed
    across the variants (the paired comparison the verdicts rest on), which the mean hides."""
    import matplotlib.pyplot as plt

    seeds = sorted({s for vals in values for s in vals})
    style = {s: (plt.get_cmap("tab10")(i % 10), _MARKERS[(i // 10 + i) % len(_MARKERS)]) for i, s in enumerate(seeds)}
    offset = {s: (i - (len(seeds) - 1) / 2) * min(0.06, 0.4 / max(len(seeds), 1)) for i, s in enumerate(seeds)}
    for s in seeds:
        at = [i for i, vals in enumerate(values) if s in vals]
        colour, marker = style[s]
        for i in range(len(values) - 1):  # join a seed's points of neighbouring variants (never across a pending one)
            if s in values[i] and s in values[i + 1]:
                xs, ys = (i + offset[s], i + 1 + offset[s]), (values[i][s], values[i + 1][s])
                ax.plot(xs, ys, color=colour, lw=0.6, alpha=0.35, zorder=1)
        ax.scatter(
            [i + offset[s] for i in at],
            [values[i][s] for i in at],
            color=colour,
            marker=marker,
            s=36,
            zorder=3,
            label=f"seed {s}",
        )


def _draw_means(ax: Axes, report: SweepReport, values: list[dict[int, float]]) -> None:
    """Each variant's mean ± std as a black error bar beside its seeds' points (the legend names it once, at the
    first variant with values); a variant without values has none."""
    for i, (v, vals) in enumerate(zip(report.variants, values, strict=True)):
        if not vals or v.metric is None:
            continue
        std = v.metric.std if v.metric.std is not None and math.isfinite(v.metric.std) else None
        ax.errorbar(
            [i + 0.28],
            [v.metric.mean],
            yerr=None if std is None else [std],
            fmt="_",
            color="black",
            markersize=14,
            capsize=4,
            lw=1.4,
            zorder=4,
            label="mean ± std" if i == next(k for k, x in enumerate(values) if x) else None,
        )


def _draw_verdicts(ax: Axes, report: SweepReport, values: list[dict[int, float]]) -> None:
    """What the sweep concluded, above each variant (its verdict, or ``pending``), and ``pending`` across the plot
    where a variant has no values yet: the plot then says why its column is empty."""
    top = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for i, (v, vals) in enumerate(zip(report.variants, values, strict=True)):
        text = verdict_text(v) if vals else PENDING
        ax.text(i, 1.01, text.replace(": ", ":\n"), transform=top, ha="center", va="bottom", fontsize=8)
        if not vals:
            ax.text(i, 0.5, PENDING, transform=top, ha="center", va="center", fontsize=9, color="tab:grey")


def _label_axes(ax: Axes, report: SweepReport) -> None:
    """The variants' names under their columns (clipped to MAX_TICK_LABEL, turned when many or long), the
    metric's name and the legend beside the plot (where it hides no point)."""
    n = len(report.variants)
    labels = [_clip(variant_label(v), MAX_TICK_LABEL) for v in report.variants]
    rotate = n > 4 or max((len(x) for x in labels), default=0) > 12
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=30 if rotate else 0, ha="right" if rotate else "center", fontsize=8)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel(report.metric)
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
