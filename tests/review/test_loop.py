"""Issue 26 acceptance: the loop from a map back to labels, every step as a user runs it, the reviewer a person at the
review page in a real browser.

bench/review_loop.py's world (two training scenes with region stripes, lookalike bars only in the test stripe, a
campaign scene C in a new region): ``rts tile`` -> ``rts run`` (round 1) -> ``rts warp`` + ``rts map`` over C ->
``rts review export`` -> the page in headless Chromium: 20 chips judged with the keyboard by the truth the world was
drawn from, a reload (verdicts kept), the export downloaded -> ``rts review ingest`` of that file -> ``rts run`` on
the new data root (round 2). Test-Realistic PR-AUC of both rounds is printed (bench/review_loop.py measures it with
three seeds; this run trains one seed for two epochs, so its figures are not the comparison).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.review_loop import render, run_loop, truth_verdicts
from rtscore.review.manifest import HEADER_FILE, MANIFEST_FILE, PAGE_FILE, iter_objects, read_header
from rtscore.review.verdict_file import read_verdicts
from tests.review.conftest import launched_chromium, require_chromium

JUDGED = 20


def judge_in_the_browser(review: Path, truth: list[Any], out: Path, pressed: dict[int, str]) -> None:
    """The reviewer at the page: the first 20 objects judged with the keyboard by the truth (``r`` / ``n``), a
    reload (the progress kept), the verdicts exported to ``out``; ``pressed`` gets each verdict keyed in."""
    header = read_header(review / HEADER_FILE)
    ids = [o.object_id for o in iter_objects(review / MANIFEST_FILE)]
    assert len(ids) > JUDGED, "the campaign must find more objects than the reviewer judges"
    want = truth_verdicts(review, truth)
    errors: list[str] = []
    with launched_chromium() as browser:  # open only while the reviewer works: the rounds run Prefect flows
        context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 800})
        try:
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((review / PAGE_FILE).as_uri())
            page.fill("#reviewer", "truth")
            page.keyboard.press("Enter")
            for oid in ids[:JUDGED]:  # a verdict moves on to the next object: the first 20 in review order
                assert (page.text_content("#obj-title") or "").startswith(f"Object {oid} ")
                page.keyboard.press("r" if want[oid] == "rts" else "n")
                pressed[oid] = want[oid]
            page.reload()
            n_rts = sum(v == "rts" for v in pressed.values())
            assert page.text_content("#progress-text") == (
                f"judged {JUDGED} / {len(ids)} · RTS {n_rts} · not RTS {JUDGED - n_rts} · unsure 0"
            )
            with page.expect_download() as download:
                page.keyboard.press("e")
            assert download.value.suggested_filename == f"verdicts-{header.review_id[:12]}.geojson"
            download.value.save_as(out)
        finally:
            context.close()
    assert errors == []


@pytest.mark.slow
def test_map_review_in_the_browser_ingest_retrain(
    prefect_harness: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_chromium()
    pressed: dict[int, str] = {}

    def reviewer(review: Path, truth: list[Any], out: Path) -> None:
        judge_in_the_browser(review, truth, out, pressed)

    figures = run_loop(tmp_path, seeds=[1], epochs=2, reviewer=reviewer)
    print(render(figures))

    assert {v.object_id: v.verdict for v in read_verdicts(tmp_path / "verdicts.geojson").verdicts} == pressed
    assert {"rts", "not_rts"} <= set(pressed.values()), "the reviewer confirmed slumps and rejected lookalikes"
    ingest = json.loads((tmp_path / "tiles-r2" / "review" / "ingest.json").read_text())
    n_rts = sum(v == "rts" for v in pressed.values())
    assert ingest["counts"]["confirmed"] == n_rts and ingest["counts"]["false_positives"] == JUDGED - n_rts
    assert ingest["counts"]["new_train_regions"] == ["south"]
    lineage = json.loads((tmp_path / "tiles-r2" / "tiling.json").read_text())["lineage"]
    assert lineage["version"] == "tiles+r1" and lineage["review"]["review_id"] == ingest["review_id"]
    r1, r2 = figures["tiles"]["round 1"], figures["tiles"]["round 2"]
    assert r2["positive"] > r1["positive"] and r2["negative"] > r1["negative"]  # slumps and hard negatives of C
    # the test split is the same tiles in both rounds: the two PR-AUCs are like for like
    test = [
        json.loads((tmp_path / run / "validation" / "report.json").read_text())["splits"]["test"]
        for run in ("run-1", "run-2")
    ]
    assert [(t["n_tiles"], t["n_positive"]) for t in test] == [(test[0]["n_tiles"], test[0]["n_positive"])] * 2
    for rnd in ("round 1", "round 2"):
        assert 0.0 <= figures["test_pr_auc"][rnd]["1_200"]["mean"] <= 1.0
    assert "Test-Realistic PR-AUC@1:200: round 1" in capsys.readouterr().out
