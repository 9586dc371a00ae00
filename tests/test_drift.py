"""Input drift against the package's normalization stats: unchanged imagery passes, shifts are blockers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rtscore.data.normalization.stats import NormalizationStats, RegionStats
from rtscore.data.raster.bands import RasterContractError
from rtscore.inference.drift import DriftReport, drift_report
from tests.test_predict import TILE, random_rgba, write_package, write_raster

MEAN = np.array([60.0, 70.0, 55.0])
STD = np.array([25.0, 30.0, 20.0])


def imagery(rng: np.random.Generator, n: int, *, mean: np.ndarray = MEAN, std: np.ndarray = STD) -> list[np.ndarray]:
    """RGBA rasters whose valid pixels have about the given per-channel moments; a NoData corner each."""
    out = []
    for _ in range(n):
        rgba = random_rgba(rng, 2 * TILE, 2 * TILE)
        rgba[:3] = np.clip(
            np.round(rng.normal(mean[:, None, None], std[:, None, None], (3, 2 * TILE, 2 * TILE))), 0, 255
        )
        rgba[3, :20, :20] = 0
        rgba[:3, :20, :20] = 255  # garbage under NoData must not count
        out.append(rgba)
    return out


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package")


def write_all(d: Path, rasters: list[np.ndarray]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(rasters):
        write_raster(d / f"s{i}.tif", r)
    return d


def test_unchanged_imagery_has_no_blocker(package: Path, tmp_path: Path) -> None:
    d = write_all(tmp_path / "in", imagery(np.random.default_rng(0), 3))
    report = drift_report(package, d, tmp_path / "out")
    assert report.ok and report.blockers == []
    assert report.valid_pixels == 3 * ((2 * TILE) ** 2 - 400)
    for ch, m, s in zip(report.channels, MEAN, STD, strict=True):
        assert abs(ch.new_mean - m) < 1.0 and abs(ch.new_std / s - 1) < 0.05
    doc = json.loads((tmp_path / "out" / "drift_report.json").read_text())
    assert doc["ok"] is True and DriftReport.model_validate(doc) == report  # returned as written
    md = (tmp_path / "out" / "drift_report.md").read_text()
    assert "| R |" in md and "OK: no drift blocker" in md


def test_brightness_shift_blocks_shifted_channel(package: Path, tmp_path: Path) -> None:
    shifted = MEAN + np.array([0.0, 20.0, 0.0])  # G by 0.67 σ
    d = write_all(tmp_path / "in", imagery(np.random.default_rng(1), 2, mean=shifted))
    report = drift_report(package, d, tmp_path / "out")
    assert report.blockers == ["G"]
    assert "mean shift" in report.channels[1].reasons[0]
    assert "BLOCKER" in (tmp_path / "out" / "drift_report.md").read_text()


def test_contrast_change_blocks(package: Path, tmp_path: Path) -> None:
    low_contrast = STD * np.array([1.0, 1.0, 0.6])  # B contrast down 40%
    files = [
        write_raster(tmp_path / f"c{i}.tif", r)
        for i, r in enumerate(imagery(np.random.default_rng(2), 2, std=low_contrast))
    ]
    report = drift_report(package, files, tmp_path / "out")
    assert report.blockers == ["B"]
    assert "std ratio" in report.channels[2].reasons[0]


def test_extra_channels_from_sibling(tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "pkg", extra=[{"name": "ndvi", "band": 0}])  # train mean 0.5, std 0.2
    d = write_all(tmp_path / "in", imagery(np.random.default_rng(3), 1))
    with pytest.raises(RasterContractError, match="s0_extra.tif was not found"):
        drift_report(pkg, d, tmp_path / "out")
    ndvi = np.random.default_rng(4).normal(0.9, 0.2, (1, 2 * TILE, 2 * TILE))  # 2 σ brighter
    write_raster(d / "s0_extra.tif", ndvi, dtype="float32")
    report = drift_report(pkg, d, tmp_path / "out")
    assert report.blockers == ["ndvi"]


def test_wrong_band_count(package: Path, tmp_path: Path) -> None:
    f = write_raster(tmp_path / "two.tif", np.zeros((2, TILE, TILE)))
    with pytest.raises(RasterContractError, match=r"two\.tif: needs at least 3 bands \(R, G, B\); this file has 2"):
        drift_report(package, [f], tmp_path / "out")


def test_drift_command_exit_code(package: Path, tmp_path: Path) -> None:
    from flows.cli.main import main

    ok = write_all(tmp_path / "ok", imagery(np.random.default_rng(5), 1))
    bad = write_all(tmp_path / "bad", imagery(np.random.default_rng(6), 1, mean=MEAN + 30.0))
    assert main(["drift", "--package", str(package), "--input", str(ok), "--output", str(tmp_path / "r1")]) == 0
    assert main(["drift", "--package", str(package), "--input", str(bad), "--output", str(tmp_path / "r2")]) == 1


def test_drift_clips_new_imagery_as_the_model_sees_it(tmp_path: Path) -> None:
    """Issue 11 point 2: with clip_percentiles the training moments are those of clipped values; drift clips the
    new imagery with the same bounds, so the training tiles themselves show no drift at all."""
    from rtscore.data.normalization.compute import compute_normalization_stats
    from rtscore.data.store.reader import ZarrTileStore
    from tests.helpers import write_test_store

    store = tmp_path / "train.zarr"
    write_test_store(store, 8, extra=1)
    stats = compute_normalization_stats(store, clip_percentiles=(5.0, 95.0))
    pkg = write_package(tmp_path / "pkg", extra=[{"name": "e0", "band": 0}], stats=stats)
    tiles = ZarrTileStore(store)
    d = tmp_path / "in"
    d.mkdir()
    for i in range(len(tiles)):
        t = tiles[i]
        write_raster(d / f"{t.tile_id}.tif", np.concatenate([t.rgb, t.alpha[None]]))
        write_raster(d / f"{t.tile_id}_extra.tif", t.extra, dtype="float32")
    report = drift_report(pkg, d, tmp_path / "out")
    assert report.clipped_to_training_percentiles and report.ok
    for ch in report.channels[:3]:  # RGB stats are exact: the clipped moments match to rounding
        assert abs(ch.mean_shift_sigma) < 1e-9 and abs(ch.std_ratio - 1) < 1e-9, ch
    extra = report.channels[3]  # float bands: stats from a 4096-bin histogram
    assert abs(extra.mean_shift_sigma) < 1e-3 and abs(extra.std_ratio - 1) < 1e-3, extra


@pytest.mark.parametrize("how", ["weights-crc", "sums"])
def test_drift_refuses_a_package_that_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """Issue 21: drift reads a package only through the checks of `rts package verify`; nothing is written."""
    from flows.cli.main import main
    from tests.test_predict import tamper

    pkg = write_package(tmp_path / "pkg")
    failed_check = tamper(pkg, how)
    d = write_all(tmp_path / "in", imagery(np.random.default_rng(5), 1))
    out = tmp_path / "report"
    assert main(["drift", "--package", str(pkg), "--input", str(d), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"package {pkg} fails `rts package verify`" in err and failed_check in err
    assert not out.exists()


def regional_stats(regions: dict[str, tuple[list[float], list[float]]]) -> NormalizationStats:
    """The package's pooled moments (MEAN, STD) with the given training regions' own (mean, std per channel)."""
    return NormalizationStats(
        channel_names=["R", "G", "B"],
        mean=MEAN,
        std=STD,
        n_tiles_used=4,
        dataset_version="t",
        computed_date="2026-01-01T00:00:00Z",
        regions=[
            RegionStats(name, 2, 1000, np.array(m, np.float64), np.array(s, np.float64))
            for name, (m, s) in regions.items()
        ],
    )


@pytest.fixture(scope="module")
def regional_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Trained on two regions: R dark in one (30), bright in the other (90), pooled 60; G alike in both (65, 75)."""
    stats = regional_stats({"dark": ([30.0, 65.0, 55.0], [20, 28, 20]), "bright": ([90.0, 75.0, 55.0], [20, 28, 20])})
    return write_package(tmp_path_factory.mktemp("pkg") / "package", stats=stats)


def test_report_says_whether_a_blocked_channel_lies_inside_the_training_regions(
    regional_package: Path, tmp_path: Path
) -> None:
    """Issue 23 point 10: a scene as bright as one training region (R 85: +1 σ off the pooled mean, inside the regions'
    30 … 90) blocks as before, but the report says it only differs from the pooled mean; G 100 lies above every
    region's mean: outside what training covered. Each region's moments are listed beside the scene's."""
    shifted = np.array([85.0, 100.0, 55.0])
    d = write_all(tmp_path / "in", imagery(np.random.default_rng(11), 2, mean=shifted))
    report = drift_report(regional_package, d, tmp_path / "out")
    assert report.blockers == ["R", "G"]  # the guide's thresholds are unchanged
    r, g, b = report.channels
    assert r.regions is not None and r.regions.means == {"dark": 30.0, "bright": 90.0} and r.regions.mean_inside
    assert r.coverage is not None and "inside the training regions' means" in r.coverage
    assert "differs from the pooled training mean only" in r.coverage
    assert g.regions is not None and not g.regions.mean_inside
    assert g.coverage is not None and "above every training region's mean" in g.coverage
    assert "outside what training covered" in g.coverage
    assert b.coverage is None and not b.blocker
    assert report.training_regions is not None and [t.region for t in report.training_regions] == ["dark", "bright"]
    md = (tmp_path / "out" / "drift_report.md").read_text()
    assert "| R | 60.000 | 25.000 | 30.000 – 90.000 |" in md
    assert "inside the training regions' means 30.000 (dark) … 90.000 (bright)" in md
    assert "## Training regions" in md and "| dark | 2 | 1,000 | 30.000 ± 20.000 |" in md
    assert DriftReport.model_validate_json((tmp_path / "out" / "drift_report.json").read_text()) == report


def test_stats_without_regions_say_so(package: Path, tmp_path: Path) -> None:
    """An older package's stats record no regions: the report says the spread is unknown, not a guess."""
    d = write_all(tmp_path / "in", imagery(np.random.default_rng(12), 1, mean=MEAN + 30.0))
    report = drift_report(package, d, tmp_path / "out")
    assert report.training_regions is None and all(ch.regions is None for ch in report.channels)
    assert report.channels[0].coverage is not None and "record no training regions" in report.channels[0].coverage
    assert "recompute them (`rts stats`" in (tmp_path / "out" / "drift_report.md").read_text()


def test_per_raster_shifts_name_the_rasters_that_drive_a_block(
    regional_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The verdict is the pooled one; each raster's own moments are listed, and those exceeding a limit on a blocked
    channel alone are named in the report (the console gets their count)."""
    from flows.cli.main import main

    rng = np.random.default_rng(13)
    d = tmp_path / "in"
    write_all(d, imagery(rng, 2))
    write_raster(d / "s9.tif", imagery(rng, 1, mean=MEAN + np.array([0.0, 60.0, 0.0]))[0])  # G +2 σ
    out = tmp_path / "out"
    assert main(["drift", "--package", str(regional_package), "--input", str(d), "--output", str(out)]) == 1
    report = DriftReport.model_validate_json((out / "drift_report.json").read_text())
    assert report.blockers == ["G"] and report.blocking_files == [str(d / "s9.tif")]
    files = {Path(f.name).name: f for f in report.per_file}
    assert files["s9.tif"].exceeds == ["G"] and files["s0.tif"].exceeds == files["s1.tif"].exceeds == []
    assert abs(files["s9.tif"].mean_shift_sigma[1] - 2.0) < 0.1
    md = (out / "drift_report.md").read_text()
    assert "## Rasters" in md and f"(1 of 3): `{d / 's9.tif'}`" in md
    printed = capsys.readouterr().out
    assert "1 of 3 raster(s) exceed a limit on a blocked channel on their own: named in drift_report.md" in printed
    assert "## Rasters" not in printed and "## Training regions" not in printed and "s9.tif" not in printed
