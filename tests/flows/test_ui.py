"""What the Prefect UI shows of the data stages (the markdown, without a Prefect server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.ui import derived_split_md
from rtscore.data.splits.regions import SplitResult
from rtscore.storage import RunLayout


def test_a_derived_split_and_its_warnings_are_shown_with_the_datasets(tmp_path: Path) -> None:
    assert derived_split_md(str(tmp_path)) == ""  # splits.yaml given: nothing to show
    result = SplitResult(
        splits={"train": ["a", "b"], "val": ["c", "d"], "test": ["e"]},
        tiles={"train": 80, "val": 10, "test": 10},
        positives={"train": 69, "val": 10, "test": 21},
        shares={"train": 0.8, "val": 0.1, "test": 0.1},
        warnings=["train holds 69 of 100 positive tiles (69% < 70%)"],
        derived_from="/data/tiles",
    )
    path = tmp_path / RunLayout.DERIVED_SPLITS_SUMMARY.at()
    path.parent.mkdir(parents=True)
    path.write_text(result.model_dump_json())
    md = derived_split_md(str(tmp_path))
    assert "Split derived from /data/tiles" in md and "| train | 2 | 80 | 80.0% | 69 |" in md
    assert "**warning**: train holds 69 of 100 positive tiles (69% < 70%)" in md


def test_a_local_run_publishes_no_file_link_and_a_gs_run_https_console_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: 17 of the pipeline run's artifact cards were untitled file:// links a browser does not open."""
    import flows.ui as ui
    from rtscore.stages import ArtifactRef

    links: list[dict[str, str]] = []
    monkeypatch.setattr(ui, "create_link_artifact", lambda **kw: links.append(kw))
    monkeypatch.setattr(ui, "create_markdown_artifact", lambda **kw: None)
    monkeypatch.setattr(ui, "create_image_artifact", lambda **kw: None)
    ref = ArtifactRef(stage="package", path="package", uri=str(tmp_path / "package"), sha256="0" * 64, bytes=1)
    (tmp_path / "package").mkdir()
    ui.publish_links(str(tmp_path), [ref])
    assert links == []
    remote = ref.model_copy(update={"uri": "gs://bucket/runs/q/package"})
    monkeypatch.setattr(ui.RunDir, "remote", property(lambda self: True))
    ui.publish_links("gs://bucket/runs/q", [remote])
    assert [link["link"] for link in links] == [
        "https://console.cloud.google.com/storage/browser/bucket/runs/q/package"
    ]
    assert all(link["link_text"] for link in links)


def test_every_card_of_a_gs_run_is_titled_with_its_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 22: a gs:// run's link and image cards had no key, i.e. no title in the UI, and no group."""
    import flows.ui as ui
    from rtscore.stages import ArtifactRef

    cards: list[dict[str, str]] = []
    monkeypatch.setattr(ui, "create_link_artifact", lambda **kw: cards.append(kw))
    monkeypatch.setattr(ui, "create_image_artifact", lambda **kw: cards.append(kw))
    monkeypatch.setattr(ui.RunDir, "remote", property(lambda self: True))
    refs = [
        ArtifactRef(stage=stage, path=rel, uri=f"gs://bucket/r/{rel}", sha256="0" * 64, bytes=1)
        for stage, rel in [("calibrate", "calibration/seed_1/pr_curves.png"), ("package", "package")]
    ]
    ui.publish_links("gs://bucket/r", refs)
    ui.publish_mlflow_link("https://mlflow.example.org", "abc", "seed 1")
    assert [c["key"] for c in cards] == ["calibrate-calibration-seed-1-pr-curves", "package-package", "mlflow-seed-1"]


def test_publishers_called_outside_a_run_make_no_artifact_and_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flow's body called from plain Python (as the mapping tests do) published into no run, and Prefect warned
    that artifacts outside a run are deprecated: the publishers now skip, silently."""
    import warnings
    from typing import Any, cast

    import flows.fanout as fanout
    import flows.mapping as mapping
    import flows.ui as ui

    made: list[dict[str, Any]] = []
    monkeypatch.setattr(mapping, "create_markdown_artifact", lambda **kw: made.append(kw))
    monkeypatch.setattr(ui, "create_table_artifact", lambda **kw: made.append(kw))
    monkeypatch.setattr(fanout, "create_table_artifact", lambda **kw: made.append(kw))
    assert not ui.in_a_run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mapping.publish_campaign(cast(Any, None))  # returns before it reads the summary
        fanout._publish_attempts("map-chunk", [])
    assert made == []


def test_the_test_report_artifact_holds_the_region_and_band_tables_of_test_report_md(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 36 (8): the per-region and per-band tables in the Prefect UI, the rows test_report.md shows."""
    from typing import Any

    import flows.ui as ui
    from rtscore.evaluation import group_table
    from rtscore.stages import TestResult
    from tests.evaluation.conftest import two_region_passes
    from tests.evaluation.test_groups import report_of

    report = report_of(two_region_passes())
    tables: dict[str, list[dict[str, Any]]] = {}
    monkeypatch.setattr(ui, "publish_table", lambda key, rows, description: tables.setdefault(key, rows))
    monkeypatch.setattr(ui, "publish_summary", lambda *a, **kw: None)
    ui.publish_test_report("run", TestResult(report=report))
    assert report.by_region is not None and report.by_latitude is not None
    for key, table in (("test-report-by-region", report.by_region), ("test-report-by-latitude", report.by_latitude)):
        heads, rows = group_table(table)
        assert tables[key] == [dict(zip(heads, r, strict=True)) for r in rows]
    assert tables["test-report-by-region"][0]["object recall @IoU 0.3"] == "0.929 ± 0.101"
