"""Calibration memory is flat in the number of tiles: the decisions stream class sums chunk by chunk (issue 13.4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from rtscore.calibrate import cache as cache_module
from rtscore.calibrate.cache import Combo, LogitCache
from rtscore.calibrate.decisions import thresholds_at_ratios
from rtscore.calibrate.run import calibrate_seed, run_gates
from rtscore.calibrate.temperature import fit_temperature
from rtscore.config.deployment import DeploymentConfig
from tests.calibrate.conftest import SEEDS, calib_config


@pytest.fixture(scope="module")
def caches(model_run: Path) -> list[LogitCache]:
    """Each seed's logit cache in the shared run (read-only: the decisions write only under tmp_path)."""
    return [LogitCache(model_run / f"calibration/seed_{s}/logit_cache.zarr") for s in SEEDS]


def _decide(caches: list[LogitCache], tmp_path: Path) -> str:
    """Everything calibration decides from the caches: the gates, then per seed T, thresholds and report (as JSON,
    so that two NaN compare equal and floats compare by their exact repr)."""
    cfg = calib_config()
    gated, gates = run_gates(cfg, caches)
    out: list[Any] = [gated.model_dump(mode="json"), gates]
    for i, c in enumerate(caches):
        frozen, report = calibrate_seed(gated, c, cfg, None, source=tmp_path / f"dep_{i}.yaml")
        out += [frozen.model_dump(mode="json"), report.model_dump(mode="json")]
    return json.dumps(out, sort_keys=True)


def test_decisions_read_the_histograms_one_chunk_at_a_time(
    caches: list[LogitCache], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hist = zarr.open_group(str(caches[0].path), mode="r")["hist"]
    assert isinstance(hist, zarr.Array)
    chunk_tiles = int(hist.chunks[1])
    assert caches[0].n_tiles > 2 * chunk_tiles, "the pool must span several chunks for this test to mean anything"
    reads: list[tuple[int, ...]] = []
    original = zarr.Array.__getitem__

    def recording(self: zarr.Array, selection: Any) -> Any:
        out = original(self, selection)
        if self.basename == "hist":
            reads.append(np.shape(out))
        return out

    monkeypatch.setattr(cache_module, "HIST_READ_BYTES", 1, raising=False)  # the smallest read: one chunk
    monkeypatch.setattr(zarr.Array, "__getitem__", recording)
    _decide(caches, tmp_path)
    assert reads, "the decisions read no histogram"
    largest = max(reads, key=lambda shape: int(np.prod(shape)))
    # Never one configuration's (tiles, 3, n_bins) array: at most one chunk of tiles at a time.
    assert int(np.prod(largest)) <= chunk_tiles * 3 * caches[0].bins.n_bins, largest


def test_streamed_decisions_are_bit_identical_whatever_the_read_size(
    caches: list[LogitCache], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _decide(caches, tmp_path)  # default budget: this small pool is one read per configuration
    monkeypatch.setattr(cache_module, "HIST_READ_BYTES", 1)
    assert _decide(caches, tmp_path) == whole


def test_streamed_sums_equal_the_per_tile_histograms(caches: list[LogitCache], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "HIST_READ_BYTES", 1)
    cfg = calib_config()
    cal = cfg.calibration
    for combo in (Combo("none", (1.0,)), Combo("minimal", (1.0, 0.5), "max")):
        tiles = caches[0].tile_hist(combo)
        sums = caches[0].sums(combo)
        for a, b in zip(tiles.class_sums, sums.hist.class_sums, strict=True):
            assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b)
        assert (sums.hist.n_pos_tiles, sums.hist.n_neg_tiles) == (tiles.n_pos_tiles, tiles.n_neg_tiles)
        # The temperature and the thresholds from the per-tile histograms (today's path) and from the sums.
        t_tiles = fit_temperature(tiles, cal.ratio, bounds=cal.temperature_bounds)
        assert fit_temperature(sums.hist, cal.ratio, bounds=cal.temperature_bounds) == t_tiles
        ratios = [1, *cfg.metrics.ratios]
        assert thresholds_at_ratios(sums.hist, ratios, cal.target_precision, t_tiles.temperature) == (
            thresholds_at_ratios(tiles, ratios, cal.target_precision, t_tiles.temperature)
        )


def test_sums_count_every_tile_of_the_cache(caches: list[LogitCache], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "HIST_READ_BYTES", 1)
    sums = caches[0].sums(Combo.of(DeploymentConfig(precision="fp32"))).hist
    assert sums.n_tiles == caches[0].n_tiles and sums.n_pos_tiles == int(caches[0].is_positive.sum())
