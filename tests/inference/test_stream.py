"""The window stream: one batch shape (a window's probabilities do not depend on its batch's company), rasters
sharing batches with outputs identical to each raster alone, a failing raster isolated, a failing model or
consumer stopping the stream cleanly."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtscore.data.raster.bands import CheckedRaster
from rtscore.inference.predict import (
    DEFAULT_BATCH,
    load_package,
    predict_many,
    predict_raster,
    raster_job,
    window_model,
    window_probabilities,
)
from rtscore.inference.stream import JobOutcome, RasterJob, run_stream
from tests.test_predict import TILE, CountingModel, random_rgba, write_package, write_raster


@pytest.fixture(scope="module")
def pkg(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_package(write_package(tmp_path_factory.mktemp("pkg") / "package"), device="cpu")


def test_a_window_at_one_batch_shape_does_not_depend_on_its_company(pkg: Any) -> None:
    """What shared batches rest on: at one batch shape, a window's probabilities are the same bits whatever the
    other windows of the batch are (zero padding, other scenes' windows)."""
    rng = np.random.default_rng(0)
    windows = rng.normal(size=(2 * DEFAULT_BATCH, 3, TILE, TILE)).astype(np.float32)
    alone = np.zeros_like(windows[:DEFAULT_BATCH])
    alone[0] = windows[3]
    a = window_probabilities(pkg, windows[:DEFAULT_BATCH])[3]
    b = window_probabilities(pkg, alone)[0]
    c = window_probabilities(pkg, np.concatenate([windows[3:4], windows[DEFAULT_BATCH + 1 :]]))[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def rasters(d: Path, n: int) -> list[Path]:
    """``n`` rasters of 3 windows each at stride TILE (so windows of consecutive rasters share batches)."""
    rng = np.random.default_rng(5)
    d.mkdir()
    return [write_raster(d / f"r{k}.tif", random_rgba(rng, TILE, 3 * TILE)) for k in range(n)]


def test_rasters_share_batches_and_map_as_each_alone(pkg: Any, tmp_path: Path) -> None:
    files = rasters(tmp_path / "in", 5)  # 15 windows: 2 model calls shared, 5 when each raster runs alone
    counter = CountingModel(pkg.model)
    pkg.model = counter
    try:
        together = predict_many(pkg, files, tmp_path / "together", stride=TILE)
        windows_together = counter.windows
        alone = [predict_raster(pkg, f, tmp_path / "alone", stride=TILE) for f in files]
    finally:
        pkg.model = counter.model
    assert windows_together == 15 * 2  # each window once (two TTA passes), the padding not counted
    assert counter.batch_sizes == {DEFAULT_BATCH}
    for t, a in zip(together, alone, strict=True):
        assert t.prob.read_bytes() == a.prob.read_bytes()
        assert t.mask.read_bytes() == a.mask.read_bytes()


def test_model_calls_shared_across_rasters(pkg: Any, tmp_path: Path) -> None:
    files = rasters(tmp_path / "in", 5)
    model = window_model(pkg, stride=TILE)
    calls: list[int] = []

    def probabilities(batch: np.ndarray, context: np.ndarray | None) -> np.ndarray:
        calls.append(batch.shape[0])
        return model.probabilities(batch, context)

    shared = replace(model, probabilities=probabilities)
    outcomes: list[JobOutcome] = []
    run_stream(shared, [raster_job(pkg, f, tmp_path / "out") for f in files], outcomes.append)
    assert [o.status for o in outcomes] == ["done"] * 5 and [o.job.key for o in outcomes] == files
    assert calls == [DEFAULT_BATCH, DEFAULT_BATCH]  # ceil(15 / 8), not one call (or more) per raster


def failing_read(path_name: str, after: int) -> Any:
    """A CheckedRaster.read that raises on the ``after``-th read of the raster named ``path_name``."""
    original = CheckedRaster.read
    seen = {"n": 0}

    def read(self: CheckedRaster, window: Any = None) -> Any:
        if Path(self.src.name).name == path_name:
            seen["n"] += 1
            if seen["n"] > after:
                raise OSError(f"{path_name}: block unreadable (injected)")
        return original(self, window)

    return read


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.rglob("*") if p.name.startswith("."))


def test_a_raster_failing_mid_read_is_its_outcome_and_the_stream_goes_on(
    pkg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = rasters(tmp_path / "in", 3)
    monkeypatch.setattr(CheckedRaster, "read", failing_read("r1.tif", after=2))
    outcomes: list[JobOutcome] = []
    out = tmp_path / "out"
    run_stream(window_model(pkg, stride=TILE), [raster_job(pkg, f, out) for f in files], outcomes.append)
    assert [o.status for o in outcomes] == ["done", "failed", "done"]
    assert "r1.tif: block unreadable" in str(outcomes[1].error)
    assert sorted(p.name for p in out.iterdir()) == ["r0_mask.tif", "r0_prob.tif", "r2_mask.tif", "r2_prob.tif"]
    assert leftovers(out) == []
    monkeypatch.undo()
    ref = predict_raster(pkg, files[2], tmp_path / "ref", stride=TILE)  # the raster after the failure: unharmed
    assert (out / "r2_prob.tif").read_bytes() == ref.prob.read_bytes()


def test_a_failing_model_stops_the_stream_cleanly(pkg: Any, tmp_path: Path) -> None:
    files = rasters(tmp_path / "in", 4)
    model = window_model(pkg, stride=TILE)
    calls = {"n": 0}

    def probabilities(batch: np.ndarray, context: np.ndarray | None) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("CUDA out of memory (injected)")
        return model.probabilities(batch, context)

    before = threading.active_count()
    outcomes: list[JobOutcome] = []
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="out of memory"):
        run_stream(
            replace(model, probabilities=probabilities), [raster_job(pkg, f, out) for f in files], outcomes.append
        )
    assert threading.active_count() == before  # the read and write threads ended
    assert leftovers(out) == []
    # what was handed out before the stop is whole; nothing else is left under a final name
    assert all(o.status == "done" for o in outcomes)
    done = sorted(n for o in outcomes for n in (o.job.prob.name, o.job.mask.name))
    assert sorted(p.name for p in out.iterdir()) == done


def test_a_failing_consumer_stops_the_stream(pkg: Any, tmp_path: Path) -> None:
    files = rasters(tmp_path / "in", 4)

    class LogDown(Exception):
        pass

    seen: list[RasterJob] = []

    def on_outcome(outcome: JobOutcome) -> None:
        seen.append(outcome.job)
        raise LogDown("manifest-log cannot be written")

    before = threading.active_count()
    with pytest.raises(LogDown):
        run_stream(window_model(pkg, stride=TILE), [raster_job(pkg, f, tmp_path / "out") for f in files], on_outcome)
    assert len(seen) == 1 and threading.active_count() == before
    assert leftovers(tmp_path / "out") == []


def test_a_job_with_nothing_to_predict_writes_nothing(pkg: Any, tmp_path: Path) -> None:
    files = rasters(tmp_path / "in", 2)
    out = tmp_path / "out"

    def nothing(stack: ExitStack) -> CheckedRaster | None:
        return None

    jobs = [raster_job(pkg, files[0], out), RasterJob("empty", nothing, out / "e_prob.tif", out / "e_mask.tif")]
    outcomes: list[JobOutcome] = []
    run_stream(window_model(pkg, stride=TILE), jobs, outcomes.append)
    assert [o.status for o in outcomes] == ["done", "nothing"]
    assert not (out / "e_prob.tif").exists()


def test_the_stages_run_in_the_callers_context(pkg: Any, tmp_path: Path) -> None:
    """A Prefect flow run's context (a ContextVar) holds in the read and write threads, so the scenes' log lines,
    logged there, reach the flow run's logs in the UI."""
    import contextvars

    run_id: contextvars.ContextVar[str] = contextvars.ContextVar("run_id", default="none")
    token = run_id.set("flow-run-1")
    seen: list[str] = []
    opened: list[str] = []
    job = raster_job(pkg, rasters(tmp_path / "in", 1)[0], tmp_path / "out")
    original_open = job.open

    def open_in_context(stack: ExitStack) -> CheckedRaster | None:
        opened.append(run_id.get())
        return original_open(stack)

    job.open = open_in_context
    try:
        run_stream(window_model(pkg, stride=TILE), [job], lambda o: seen.append(run_id.get()))
    finally:
        run_id.reset(token)
    assert opened == ["flow-run-1"] and seen == ["flow-run-1"]
