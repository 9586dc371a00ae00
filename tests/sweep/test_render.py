"""The sweep report's renderings: table rows, terminal table, report.md and the PNG, from hand-built reports."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest
from PIL import Image

from rtscore.sweep.render import (
    COL_DIFF,
    COL_INTERVAL,
    COL_METRIC,
    COL_OVERRIDES,
    COL_SEEDS,
    COL_SHARED,
    COL_VARIANT,
    COL_VERDICT,
    plot_report,
    render_markdown,
    render_status,
    render_text_table,
    table_rows,
)
from rtscore.sweep.report import NoiseFloor, Spread, SweepReport, TestFigure, VariantReport
from rtscore.sweep.verdict import Judgement

METRIC = "val_realistic_pr_auc_geomean"


def spread(values: dict[int, float]) -> Spread:
    v = list(values.values())
    return Spread(mean=statistics.fmean(v), std=statistics.stdev(v) if len(v) > 1 else None, values=values)


def judgement(base: dict[int, float], var: dict[int, float], verdict: str, **kw: object) -> Judgement:
    seeds = [s for s in var if s in base]
    diffs = [var[s] - base[s] for s in seeds]
    fields: dict[str, object] = {
        "seeds": seeds,
        "mean_diff": statistics.fmean(diffs),
        "std_diff": statistics.stdev(diffs) if len(diffs) > 1 else None,
        "ci_low": kw.pop("ci_low", None),
        "ci_high": kw.pop("ci_high", None),
        "confidence": 0.95,
        "margin": 0.005,
        "verdict": verdict,
        "reason": f"{verdict}: because of the numbers",
    }
    fields.update(kw)
    return Judgement.model_validate(fields)


BASE = {1: 0.700, 2: 0.710, 3: 0.690}
IGNORE = {1: 0.720, 2: 0.728, 3: 0.714}  # +0.0207 ± 0.003: better
SOFT = {1: 0.702, 2: 0.709, 3: 0.692}  # +0.001: within noise
WIDER = {1: 0.690, 2: 0.730}  # -0.010, +0.020: undecided


def variant(name: str, values: dict[int, float], **kw: object) -> VariantReport:
    fields: dict[str, object] = {
        "name": name,
        "overrides": {},
        "baseline": False,
        "run_dir": f"/sweeps/s/{name}",
        "seeds": list(values),
        "metric": spread(values) if values else None,
        "ratios": {"200": spread({s: x - 0.1 for s, x in values.items()}), "50": spread(values)} if values else {},
    }
    fields.update(kw)
    return VariantReport.model_validate(fields)


def make_report(*, tested: bool = True) -> SweepReport:
    variants = [
        variant("none", BASE, baseline=True),
        variant(
            "ignore",
            IGNORE,
            overrides={"loss.boundary_handling": "ignore", "model.channels": ["rgb", "ndvi"]},
            judgement=judgement(BASE, IGNORE, "better", ci_low=0.0123, ci_high=0.0291),
            shared={"tile": "none", "datasets": "none", "validate seed 1": "none"},
        ),
        variant(
            "soft_labels",
            SOFT,
            overrides={"loss.boundary_handling": "soft_labels"},
            judgement=judgement(BASE, SOFT, "within noise", ci_low=-0.002, ci_high=0.004),
        ),
        variant(
            "wider",
            WIDER,
            overrides={"model.width": 2},
            judgement=judgement(BASE, WIDER, "undecided", ci_low=-0.18, ci_high=0.2, seeds_to_decide=6),
        ),
    ]
    return SweepReport(
        name="boundary_handling",
        sweep_dir="/sweeps/s",
        base_config="configs/baseline.yaml",
        metric=METRIC,
        confidence=0.95,
        margin=0.005,
        status="finished",
        variants=variants,
        margin_basis="2 x the std of PR-AUC at 1:200 over 5 validations, each with a random negative subset",
        noise_floor=NoiseFloor(
            seed=1,
            repeats=5,
            ratio=200,
            reweighted_std=2e-7,
            subsampled_std=0.0042,
            bootstrap_std=None,
            metric="PR-AUC at 1:200 (metrics.ratios[0])",
        ),
        chosen="ignore",
        choice="The best mean of the variants called better than the baseline.",
        tested=["ignore"] if tested else [],
        test={
            "ignore": {
                "1:200": {
                    "pr_auc": TestFigure(mean=0.6512, std=0.0123, text="0.651 ± 0.012"),
                    "iou_rts": TestFigure(mean=0.4321, std=0.01, text="0.432 ± 0.010"),
                },
            }
        }
        if tested
        else {},
        notes=["the baseline's noise floor under random subsampling is 0, so the margin is 0"],
    )


def running_report() -> SweepReport:
    rep = make_report(tested=False)
    rep.status = "running"
    rep.chosen = None
    rep.choice = ""
    ignore = rep.variant("ignore")
    ignore.seeds, ignore.metric, ignore.ratios, ignore.judgement = [], None, {}, None
    return rep


def test_rows_one_per_variant_with_formatted_figures() -> None:
    rows = table_rows(make_report())
    assert [r[COL_VARIANT] for r in rows] == ["none (baseline)", "ignore", "soft_labels", "wider"]
    base, ignore, soft, wider = rows
    assert list(base) == [
        COL_VARIANT,
        COL_VERDICT,
        COL_METRIC,
        COL_DIFF,
        COL_INTERVAL,
        COL_SEEDS,
        "PR-AUC 1:50",
        "PR-AUC 1:200",
        COL_OVERRIDES,
        COL_SHARED,
    ]
    assert all(list(r) == list(base) for r in rows)
    assert base[COL_METRIC] == "0.700 ± 0.010"
    assert base["PR-AUC 1:200"] == "0.600 ± 0.010"
    assert base[COL_OVERRIDES] == base[COL_DIFF] == base[COL_INTERVAL] == "—"
    assert base[COL_VERDICT] == "baseline"
    assert ignore[COL_OVERRIDES] == 'loss.boundary_handling=ignore, model.channels=["rgb","ndvi"]'
    assert ignore[COL_SEEDS] == "3"
    assert ignore[COL_METRIC] == "0.721 ± 0.007"
    assert ignore[COL_DIFF] == "+0.021 ± 0.003"
    assert ignore[COL_INTERVAL] == "[+0.012, +0.029]"
    assert ignore[COL_VERDICT] == "better"
    assert ignore[COL_SHARED] == "tile, datasets, validate from none"
    assert soft[COL_VERDICT] == "within noise"
    assert soft[COL_DIFF] == "+0.001 ± 0.002"
    assert soft[COL_INTERVAL] == "[-0.002, +0.004]"
    assert soft[COL_SHARED] == "—"
    assert wider[COL_SEEDS] == "2"
    assert wider[COL_VERDICT] == "undecided: add 4 seeds"  # 6 needed, 2 paired
    assert wider[COL_DIFF] == "+0.005 ± 0.021"


def test_verdict_counts_seeds_to_add_and_one_seed_has_no_std() -> None:
    rep = make_report()
    rep.variant("wider").judgement = judgement(BASE, WIDER, "undecided", seeds_to_decide=3)
    one = {1: 0.75}
    rep.variants.append(variant("one_seed", one, judgement=judgement(BASE, one, "undecided", seeds_to_decide=None)))
    rows = {r[COL_VARIANT]: r for r in table_rows(rep)}
    assert rows["wider"][COL_VERDICT] == "undecided: add 1 seed"
    assert rows["one_seed"][COL_VERDICT] == "undecided"
    assert rows["one_seed"][COL_METRIC] == "0.750 (1 seed)"
    assert rows["one_seed"][COL_DIFF] == "+0.050 (1 seed)"
    assert rows["one_seed"][COL_INTERVAL] == "—"


def test_text_table_is_fixed_width() -> None:
    text = render_text_table(table_rows(make_report()))
    lines = text.splitlines()
    assert len(lines) == 2 + 4
    assert lines[0].startswith("variant") and set(lines[1]) <= {"-", " "}
    # every column starts at the same offset on every line
    start = lines[0].index("verdict")
    assert lines[1][start - 2 : start] == "  " and lines[1][start] == "-"
    assert [ln[start:].split("  ")[0] for ln in lines[2:]] == [
        "baseline",
        "better",
        "within noise",
        "undecided: add 4 seeds",
    ]
    assert render_text_table([]) == "(no variants)\n"
    clipped = render_text_table([{"overrides": "x" * 100}], max_width=20).splitlines()[2]
    assert clipped == "x" * 19 + "…"
    status = render_status(make_report())
    assert status.startswith("sweep boundary_handling (finished; chosen: ignore)")
    assert "undecided: add 4 seeds" in status


def test_markdown_sections_numbers_and_test_statement() -> None:
    md = render_markdown(make_report(), plot="report.png")
    assert md.startswith("# Sweep `boundary_handling`: finished\n")
    for part in (
        "- Base config: `configs/baseline.yaml`",
        f"- Deciding metric: `{METRIC}` (validation)",
        "- Paired interval confidence: 95%",
        "- Margin: 0.005 (the smallest difference that counts; 2 x the std of PR-AUC at 1:200 over 5 validations,",
        "- A seed's value: the raw value its validation recorded at the epoch of its best checkpoint",
        "## Variants",
        "| variant | verdict | deciding metric | Δ vs baseline | paired interval | seeds |",
        "| ignore | better | 0.721 ± 0.007 | +0.021 ± 0.003 | [+0.012, +0.029] | 3 |",
        "| variant | 1:50 | 1:200 |",
        "| ignore | 0.721 ± 0.007 | 0.621 ± 0.007 |",
        '- `ignore`: `loss.boundary_handling=ignore`, `model.channels=["rgb","ndvi"]` (shared: tile, datasets, '
        "validate from none)",
        "- `none`: the base config",
        "undecided: add 4 seeds",
        "![val_realistic_pr_auc_geomean per variant, baseline ± noise floor margin](report.png)",
        "## Baseline noise floor (guide §10.1)",
        "| re-weighted std | 2.0e-07 |",
        "| subsampled std | 0.0042 |",
        "| bootstrap std | n/a |",
        "Margin 0.005: 2 x the std of PR-AUC at 1:200 over 5 validations, each with a random negative subset. A",
        "**Chosen: `ignore`**. The best mean of the variants called better than the baseline.",
        "**The choice used validation metrics only**",
        "Test-Realistic was run only for `ignore`, after the choice was recorded.",
        "| 1:200 / pr_auc | 0.651 ± 0.012 |",
        "| 1:200 / iou_rts | 0.432 ± 0.010 |",
        "## Notes",
        "- the baseline's noise floor under random subsampling is 0",
        "## Variant details",
        "### `none` (baseline)",
        "- Run directory: `/sweeps/s/wider`",
        "- Overrides: `model.width=2`",
        "- Verdict: **better** (Δ +0.021 ± 0.003, 95% interval [+0.012, +0.029], paired seeds 1, 2, 3): better:",
        "- Shared: tile from `none`, datasets from `none`, validate seed 1 from `none`",
        f"| seed | {METRIC} | PR-AUC 1:50 | PR-AUC 1:200 | Δ vs baseline |",
        "| 1 | 0.720 | 0.720 | 0.620 | +0.020 |",
        "| 3 | 0.714 | 0.714 | 0.614 | +0.024 |",
    ):
        assert part in md, part
    # the choice first (issue 38: it was two and a half screens down), the noise floor right after the tables
    assert md.index("**Chosen:") < md.index("## Variants") < md.index("## Baseline noise floor") < md.index("## Test")
    assert "not run" not in md


def test_markdown_not_tested_and_running_with_pending_variant() -> None:
    md = render_markdown(running_report())
    assert md.startswith("# Sweep `boundary_handling`: running\n")
    assert "**The choice used validation metrics only**" in md
    assert "Test-Realistic: not run" in md
    assert "was run only for" not in md
    assert "**No variant chosen yet**: the sweep is running; figures are partial" in md
    assert "| ignore | pending | — | — | — | 0 |" in md
    assert '- `ignore`: `loss.boundary_handling=ignore`, `model.channels=["rgb","ndvi"]`' in md
    assert "| pending |" in md
    assert "- Seeds: none yet" in md
    assert "![" not in md  # no plot given


def test_markdown_without_noise_floor_or_notes() -> None:
    rep = make_report()
    rep.noise_floor, rep.notes = None, []
    md = render_markdown(rep)
    assert "## Baseline noise floor (guide §10.1)\n\nNot measured for this sweep." in md
    assert "## Notes" not in md


def _png(path: Path) -> tuple[int, int]:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG"
        return im.size


def test_plot_writes_a_png_atomically(tmp_path: Path) -> None:
    path = tmp_path / "sweep" / "report.png"
    plot_report(make_report(), path)
    w, h = _png(path)
    assert 500 <= w <= 3000 and 300 <= h <= 2000
    assert [p.name for p in path.parent.iterdir()] == ["report.png"]  # no temporary file left


def test_plot_running_sweep_one_seed_and_long_names(tmp_path: Path) -> None:
    rep = running_report()
    rep.variants.append(variant("x" * 60 + ".with=a_long_override", {1: 0.70}))
    rep.variants.append(variant("not_started", {}))
    path = tmp_path / "running.png"
    plot_report(rep, path)
    _png(path)
    # nothing trained at all yet
    empty = running_report()
    for v in empty.variants:
        v.seeds, v.metric, v.ratios, v.judgement = [], None, {}, None
    plot_report(empty, tmp_path / "empty.png")
    _png(tmp_path / "empty.png")
    assert table_rows(empty)[0][COL_METRIC] == "—"


@pytest.mark.parametrize("seeds", [1, 2])
def test_plot_one_or_two_seeds(tmp_path: Path, seeds: int) -> None:
    rep = make_report()
    for v in rep.variants:
        vals = {s: x for s, x in (v.metric.values if v.metric else {}).items() if s <= seeds}
        v.seeds, v.metric = list(vals), spread(vals)
    plot_report(rep, tmp_path / "p.png")
    _png(tmp_path / "p.png")


def test_the_choice_opens_the_report() -> None:
    """Issue 38: "Chosen:" was two and a half screens down the report (after the rule, the table and the noise
    floor): it is the first thing under the title, chosen, running or not."""
    for rep, said in (
        (make_report(), "**Chosen: `ignore`**. The best mean"),
        (running_report(), "**No variant chosen yet**"),
    ):
        lines = render_markdown(rep, plot="report.png").splitlines()
        assert lines[0].startswith("# Sweep ") and lines[2].startswith(said), lines[:3]


def _tables(md: str) -> list[list[list[str]]]:
    """Every markdown table of ``md``: its rows (the header's included, the separator not), each a list of cells."""
    tables: list[list[list[str]]] = []
    previous = ""
    for line in md.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= set("-: ") for c in cells):
                tables[-1].append(cells)
        previous = line
    return tables


# The Prefect UI's artifact page beside its side panel, in a 1280-pixel-wide window: ~600 px of text, ~80 characters
# (a cell's padding counted as 2). A table narrower than that wraps inside the page; a wider one overran the panel.
PAGE_CHARS = 80


def _narrowest(table: list[list[str]]) -> int:
    """The table's least width in characters: each column as wide as its longest word, plus its padding."""
    words = [[max((len(w) for w in cell.split()), default=0) for cell in row] for row in table]
    return sum(max(col) + 2 for col in zip(*words, strict=True))


def test_every_table_of_the_report_fits_beside_the_uis_side_panel() -> None:
    """Issue 38: the variants table (ten columns: the ratios, the overrides, the shared stages) overran the Prefect
    UI's side panel. The decision, the PR-AUC per ratio and what each variant changes are apart now, each narrow."""
    rep = make_report()
    rep.variants[1].shared = {"tile": "none", "datasets": "none", "stats": "none", "validate seed 1": "none"}
    md = render_markdown(rep, plot="report.png")
    tables = _tables(md)
    assert len(tables) >= 4  # variants, ratios, noise floor, test figures, each variant's seeds
    for table in tables:
        assert _narrowest(table) <= PAGE_CHARS, table[0]


@pytest.mark.parametrize("n_variants", [2, 4])
def test_every_text_of_the_png_lies_inside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_variants: int) -> None:
    """Issue 38: the PNG's title was clipped (centred over a narrow plot, wider than the figure). The figure as
    written is kept (plt.close deferred) and every text of it measured against its edges."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    close, kept = plt.close, []
    monkeypatch.setattr(plt, "close", kept.append)
    rep = make_report()
    rep.variants = rep.variants[:n_variants]
    plot_report(rep, tmp_path / "p.png")
    (fig,) = kept
    try:
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        width, height = fig.bbox.width, fig.bbox.height
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        assert any("per variant" in t.get_text() for t in texts)  # the title is among them
        for t in texts:
            box = t.get_window_extent(renderer)
            inside = box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1
            assert inside, f"{t.get_text()!r} at {box} outside the {width:.0f} x {height:.0f} figure"
    finally:
        close(fig)
