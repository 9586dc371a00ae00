"""bench/campaign_scale.py (issue 37): the fitted exponent, the simulated quads' seams, the latency of the emulator
and a smoke run of every step at N = 4 and 8 (in process, 1 ms a request)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pytest
import shapely

from bench.campaign_scale import STEPS, LatentEmulator, exponent, grid, quad_box, quad_parts, run


def test_exponent_is_the_log_log_slope() -> None:
    assert exponent([10, 100, 1000], [1.0, 10.0, 100.0]) == pytest.approx(1.0)
    assert exponent([10, 100], [3.0, 300.0]) == pytest.approx(2.0)
    assert exponent([10], [1.0]) is None and exponent([10, 100], [0.0, 1.0]) is None


def test_border_blobs_are_cut_by_the_seam_and_continue_in_the_neighbour() -> None:
    cells = set(grid(4))  # 2 x 2 quads
    left = [g for g, cut in quad_parts(cells, 0, 0, 8) if cut]
    right = [g for g, cut in quad_parts(cells, 0, 1, 8) if cut]
    assert len([g for g, cut in quad_parts(cells, 0, 0, 8) if not cut]) == 6
    seam = shapely.intersection(quad_box(0, 0).boundary, quad_box(0, 1).boundary)
    touching = [(a, b) for a in left for b in right if a.intersection(b).length > 0]
    assert touching and all(a.intersection(b).within(seam.buffer(1e-6)) for a, b in touching)
    assert all(g.within(quad_box(0, 0).buffer(1e-6)) for g in left)


def test_every_request_waits_the_injected_latency() -> None:
    import urllib.request

    emu = LatentEmulator()
    try:
        url = f"{emu.url}/storage/v1/b"
        urllib.request.urlopen(url, timeout=10).read()
        emu.latency_s = 0.2
        t0 = time.perf_counter()
        urllib.request.urlopen(url, timeout=10).read()
        assert time.perf_counter() - t0 >= 0.2 and emu.requests == 2
    finally:
        emu.stop()


def test_smoke_run_prints_every_step_and_its_exponent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = argparse.Namespace(
        n="4,8",
        repeats=1,
        parts=4,
        latency_ms=1.0,
        local=False,
        prefect_chunks=0,
        prefect_timeout_s=60.0,
        plot=tmp_path / "scale.png",
        json=None,
        in_process=True,
        coordinator_only=False,
        steps="",
    )
    before = os.environ.get("STORAGE_EMULATOR_HOST")  # the session's emulator, which the gs:// tests after this use
    figures = run(a, tmp_path / "work")
    assert os.environ.get("STORAGE_EMULATOR_HOST") == before, "the bench's own (stopped) emulator was left in the env"
    steps = figures["steps"]
    assert set(steps) == set(STEPS)
    for step in STEPS:
        assert all(steps[step]["by_n"][n]["seconds"] > 0 for n in (4, 8)), step
        assert isinstance(steps[step]["time_exponent"], float), step
    assert (tmp_path / "scale.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert "exponent time" in out and all(f"| {s}" in out for s in ("list", "finish-1%", "select"))
    only = run(argparse.Namespace(**{**vars(a), "coordinator_only": True, "plot": None}), tmp_path / "work-coord")
    assert list(only["steps"]) == ["list", "plan", "chunk-ready", "log-append"]  # --coordinator-only


def test_the_emulator_lists_in_pages_as_a_bucket_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing of n objects costs ceil(n / page) requests, each paying the latency; every object once, in order,
    only under the prefix; a write or delete is seen by the next listing."""
    from google.cloud import storage

    import bench.campaign_scale as cs

    monkeypatch.setattr(cs, "PAGE", 10)
    emu = LatentEmulator()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emu.url)
    try:
        bucket = storage.Client(project="bench").bucket(cs.BUCKET)
        for name in [f"a/{k:03d}" for k in range(25)] + ["b/0", "a0"]:
            bucket.blob(name).upload_from_string(b"x")
        before = emu.requests
        names = [b.name for b in bucket.list_blobs(prefix="a/")]
        assert names == [f"a/{k:03d}" for k in range(25)] and emu.requests - before == 3
        bucket.blob("a/000").delete()
        bucket.blob("a/100").upload_from_string(b"y")
        assert [b.name for b in bucket.list_blobs(prefix="a/")] == [f"a/{k:03d}" for k in range(1, 25)] + ["a/100"]
        assert len(list(bucket.list_blobs())) == 27
    finally:
        emu.stop()
