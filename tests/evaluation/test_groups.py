"""The test report per region and per latitude band (issue 36, point 8), on a test split of two regions at two
latitudes built in code (tests/evaluation/conftest.py)."""

from __future__ import annotations

import json
import statistics

import pytest

from rtscore.evaluation import SeedTestResult, TestReport, render_test_markdown
from rtscore.evaluation.groups import NO_LATITUDES, TestTiles, group_tables, seed_groups
from rtscore.metrics import pr_auc
from tests.evaluation.conftest import SEEDS, TILES, Passes, loader, metadata, seed_pass
from tests.helpers import calibrated_deployment


def report_of(passes: Passes, tiles: TestTiles | None = None) -> TestReport:
    """The report the evaluate-test stage makes of the seeds' passes (``tiles``: the facts it groups by)."""
    tiles = tiles or passes.tiles
    per_seed = [
        SeedTestResult(
            seed=s,
            threshold=0.5,
            temperature=1.0,
            metrics=ev.metrics,
            recall_by_size=ev.recall_by_size,
            n_pos_tiles=int(ev.is_positive.sum()),
            n_neg_tiles=int((~ev.is_positive).sum()),
            groups=seed_groups(ev, tiles, passes.cfg),
        )
        for s, ev in passes.evs.items()
    ]
    report = TestReport.from_seeds(per_seed, calibrated_deployment(), passes.cfg.metrics.object_iou_thresholds)
    by_region, by_latitude = group_tables(per_seed, passes.cfg, has_latitudes=tiles.latitude is not None)
    return report.model_copy(update={"by_region": by_region, "by_latitude": by_latitude})


def test_two_regions_at_two_latitudes_are_counted_measured_and_summarised_over_seeds(passes: Passes) -> None:
    report = report_of(passes)
    assert report.by_region is not None and report.by_latitude is not None
    regions = {g.name: g for g in report.by_region.groups}
    assert list(regions) == ["north slope", "yamal"]
    north, yamal = regions["north slope"], regions["yamal"]
    assert (north.n_tiles, north.n_positive_tiles, north.n_objects, north.measured) == (8, 6, 7, True)
    # under the floor of 5 positive tiles: counted, not measured, and saying why
    assert (yamal.n_tiles, yamal.n_positive_tiles, yamal.n_objects, yamal.measured) == (5, 3, 3, False)
    assert yamal.reason == "3 positive tile(s), fewer than evaluation.min_group_positive_tiles (5)"
    assert yamal.pr_auc is None and yamal.object_recall is None
    # object recall at IoU 0.3: seed 1 finds all 7 objects, seed 2 misses a5's; mean ± std over the 2 seeds
    assert report.by_region.iou == 0.3 and report.by_region.ratio == "1_200"
    assert north.object_recall is not None and north.pr_auc is not None
    assert north.object_recall.mean == pytest.approx((1 + 6 / 7) / 2)
    assert north.object_recall.std == pytest.approx(statistics.stdev([1, 6 / 7]))
    # PR-AUC: the group's own tiles, its negatives re-weighted within it, as a pass over those tiles alone gives
    alone = tuple(t for t in TILES if t.region == "north slope")
    own = [pr_auc(seed_pass(passes.cfg, None, loader(alone, s)).hist, 200) for s in SEEDS]
    assert north.pr_auc.mean == pytest.approx(statistics.fmean(own))
    assert north.pr_auc.std == pytest.approx(statistics.stdev(own)) and north.pr_auc.std > 0
    bands = {g.name: g for g in report.by_latitude.groups}
    assert list(bands) == ["60-64 °N", "64-68 °N", "68-72 °N", "72-74 °N", "outside bands"]
    assert [(g.n_tiles, g.n_positive_tiles, g.n_objects) for g in bands.values()] == [
        (8, 6, 7),
        (0, 0, 0),
        (4, 2, 2),
        (0, 0, 0),
        (1, 1, 1),  # b4 at 75 °N
    ]
    assert bands["60-64 °N"].object_recall == north.object_recall and bands["60-64 °N"].pr_auc == north.pr_auc
    assert [g.measured for g in bands.values()] == [True, False, False, False, False]


def test_the_tables_are_in_test_report_md_and_an_old_report_still_reads(passes: Passes) -> None:
    report = report_of(passes)
    md = render_test_markdown(report)
    assert "## Per region (mean ± std over seeds)" in md and "## Per latitude band (mean ± std over seeds)" in md
    assert "| region | tiles | positive tiles | GT objects | PR-AUC 1:200 | object recall @IoU 0.3 | note |" in md
    assert "| north slope | 8 | 6 | 7 |" in md and "| 0.929 ± 0.101 |" in md
    assert "| yamal | 5 | 3 | 3 | not measured | not measured | 3 positive tile(s), fewer than" in md
    assert "| outside bands | 1 | 1 | 1 | not measured | not measured |" in md
    assert "`test_objects.csv` beside this report" in md
    again = TestReport.model_validate_json(report.model_dump_json())
    assert again.model_dump_json() == report.model_dump_json()  # NaN (an empty band's figures) kept as NaN
    # a report written before the tables: no groups, no tables, and the rest unchanged
    old = json.loads(report.model_dump_json())
    for key in ("by_region", "by_latitude"):
        del old[key]
    for seed in old["per_seed"]:
        del seed["groups"]
    before = TestReport.model_validate(old)
    assert before.by_region is None and before.by_latitude is None and before.per_seed[0].groups == []
    old_md = render_test_markdown(before)
    assert "Per region" not in old_md and "test_objects.csv" not in old_md and "| PR-AUC |" in old_md


def test_a_store_without_latitudes_gives_the_region_table_and_one_line_for_the_bands(passes: Passes) -> None:
    report = report_of(passes, TestTiles.of(metadata(TILES, latitudes=False)))
    assert report.by_region is not None and len(report.by_region.groups) == 2
    assert (
        report.by_latitude is not None and report.by_latitude.groups == [] and report.by_latitude.note == NO_LATITUDES
    )
    assert f"Not made: {NO_LATITUDES}." in render_test_markdown(report)
