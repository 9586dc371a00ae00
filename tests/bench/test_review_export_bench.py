"""bench/review_export_bench.py (issue 26): a smoke run of both parts on a tiny campaign."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.review_export_bench import run


@pytest.mark.slow  # a bench smoke run: a campaign mapped, chips timed, two exports in fresh processes for their RSS
def test_bench_times_chips_and_measures_the_exports_peak_rss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = argparse.Namespace(objects=12, scenes=2, side=256, repeats=1, rss_objects=[4], no_rss=False)
    figures = run(a, tmp_path)
    t = figures["time"]
    assert t["objects"] == 12 and 0 < t["ms_per_chip_range"][0] <= t["ms_per_chip_median"] <= t["ms_per_chip_range"][1]
    assert [r["objects"] for r in figures["rss"]] == [4, 12]
    assert all(r["peak_mib"] >= r["base_mib"] * 0.5 > 0 for r in figures["rss"])
    out = capsys.readouterr().out
    assert "ms per chip" in out and "peak RSS 12 / 4 objects" in out
