"""The in-process mapping campaign: per-scene outputs equal to rts predict, skipped / failed scenes, re-runs, drift
gate, campaign outputs, and the `rts map` command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rtscore.data.ground import web_mercator_latitude
from rtscore.inference.predict import predict_raster
from rtscore.mapping.campaign import (
    INDEX_FILE,
    OBJECTS_FILE,
    SUMMARY_JSON,
    SUMMARY_MD,
    package_sha256,
    run_campaign,
    scene_outputs,
)
from rtscore.mapping.campaign_log import CampaignError, CampaignLog, list_scenes
from rtscore.mapping.polygons import read_objects
from tests.test_predict import MEAN, STD, TILE, random_rgba, write_package, write_raster

VALID = ("a", "b", "c")


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package")


def imagery_like_training(seed: int, h: int, w: int) -> np.ndarray:
    """RGBA drawn from the package's training moments: no drift blocker."""
    rng = np.random.default_rng(seed)
    rgba = np.empty((4, h, w), np.uint8)
    rgba[:3] = np.clip(rng.normal(MEAN[:, None, None], STD[:, None, None], (3, h, w)), 0, 255)
    rgba[3] = 255
    return rgba


@pytest.fixture
def scenes_dir(tmp_path: Path) -> Path:
    return write_scenes(tmp_path / "scenes_in")


def write_scenes(d: Path) -> Path:
    """Three valid scenes (VALID), one without a valid pixel (`nodata`), one truncated file (`corrupt`)."""
    d.mkdir()
    for k, name in enumerate(VALID):
        write_raster(d / f"{name}.tif", imagery_like_training(k, TILE + 32, TILE * 2))
    nodata = imagery_like_training(9, TILE, TILE)
    nodata[3] = 0
    write_raster(d / "nodata.tif", nodata)
    good = (d / "a.tif").read_bytes()
    (d / "corrupt.tif").write_bytes(good[: len(good) // 3])  # truncated bytes
    return d


def all_records(out: Path) -> list[tuple[str, str]]:
    return sorted((r.scene_id, r.status) for r in CampaignLog(out).read())


def test_campaign_maps_each_scene_once_like_rts_predict(package: Path, scenes_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    summary = run_campaign(package, scenes_dir, out, chunk_size=2)
    assert summary["threshold_source"] == "target_precision"
    records = CampaignLog(out).read()
    by_id = {r.scene_id: r for r in records}
    assert all_records(out) == sorted(
        [(s, "done") for s in VALID] + [("nodata", "skipped-full-nodata"), ("corrupt", "failed")]
    )
    assert "corrupt.tif" in (by_id["corrupt"].reason or "")
    assert by_id["nodata"].windows == 0 and by_id["nodata"].valid_pixels == 0
    pid = package_sha256(package)
    assert {r.package_sha256 for r in records} == {pid}
    # per-scene outputs byte-identical to rts predict on the same scene
    ref = tmp_path / "ref"
    scenes = {s.scene_id: s for s in list_scenes(scenes_dir)}
    for name in VALID:
        got = predict_raster(package, scenes_dir / f"{name}.tif", ref)
        o = scene_outputs(out, scenes[name])
        assert o.prob.read_bytes() == got.prob.read_bytes()
        assert o.mask.read_bytes() == got.mask.read_bytes()
        assert by_id[name].windows == got.windows - got.skipped_windows
        assert (by_id[name].valid_pixels, by_id[name].positive_pixels) == (got.valid_pixels, got.positive_pixels)
    assert not [p for p in (out / "scenes").rglob("*") if p.is_file() and p.parent.name in ("nodata", "corrupt")]
    # campaign outputs
    assert (summary["done"], summary["skipped_full_nodata"], summary["failed"]) == (3, 1, 1)
    assert "corrupt.tif" in summary["failures"]["corrupt"]
    assert json.loads((out / SUMMARY_JSON).read_text())["done"] == 3
    md = (out / SUMMARY_MD).read_text()
    assert "| failed | 1 |" in md and "corrupt" in md
    lat = web_mercator_latitude(8_000_000.0 - 4.77 * (TILE + 32) / 2)  # the scenes' centre row
    px_km2 = 4.77**2 * np.cos(np.radians(lat)) ** 2 / 1e6
    assert summary["km2_mapped_ground"] == pytest.approx(sum(by_id[s].valid_pixels for s in VALID) * px_km2, rel=2e-3)
    index = json.loads((out / INDEX_FILE).read_text())
    assert sorted(f["properties"]["scene_id"] for f in index["features"]) == list(VALID)
    lon, lat = index["features"][0]["geometry"]["coordinates"][0][0]
    assert 8.0 < lon < 9.5 and 57.0 < lat < 60.0  # EPSG:4326
    crs, objects = read_objects(out / OBJECTS_FILE)
    assert crs.to_epsg() == 3857  # the first scene's CRS
    assert len(objects) == summary["objects"]
    assert sum(summary["objects_by_size_bin_m2"].values()) == len(objects)

    # a re-run maps nothing new (the corrupt scene is retried, failing again) and duplicates no done scene
    first = all_records(out)
    before = scene_outputs(out, scenes["a"]).prob.stat().st_mtime_ns
    run_campaign(package, scenes_dir, out, chunk_size=2)
    assert all_records(out) == sorted([*first, ("corrupt", "failed")])
    assert scene_outputs(out, scenes["a"]).prob.stat().st_mtime_ns == before

    # a fixed scene is retried and done; done scenes still are not redone
    (scenes_dir / "corrupt.tif").write_bytes((scenes_dir / "b.tif").read_bytes())
    summary = run_campaign(package, scenes_dir, out, chunk_size=2)
    assert (summary["done"], summary["failed"]) == (4, 0)
    final = all_records(out)
    assert sum(1 for r in final if r == ("a", "done")) == 1
    assert final.count(("corrupt", "done")) == 1


def test_a_drift_blocker_refuses_the_campaign_unless_allowed(package: Path, tmp_path: Path) -> None:
    d = tmp_path / "bright"
    d.mkdir()
    for k in range(2):
        write_raster(d / f"s{k}.tif", random_rgba(np.random.default_rng(k), TILE, TILE))  # mean ~127, trained ~60
    with pytest.raises(CampaignError, match="drift on R"):
        run_campaign(package, d, tmp_path / "refused")
    assert not (tmp_path / "refused" / "log").exists()
    summary = run_campaign(package, d, tmp_path / "allowed", allow_drift=True)
    assert summary["done"] == 2 and summary["drift_ok"] is False


def test_package_identity_changes_with_any_file(package: Path, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "pkg")
    first = package_sha256(pkg)
    assert first == package_sha256(pkg)
    (pkg / "deployment_config.yaml").write_text((pkg / "deployment_config.yaml").read_text() + "\n")
    assert package_sha256(pkg) != first


def test_map_command(package: Path, scenes_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flows.cli import main

    args = ["map", "--package", str(package), "--input", str(scenes_dir), "--output", str(tmp_path / "m")]
    assert main([*args, "--chunk-size", "3"]) == 1  # one scene failed: the campaign completed, not all mapped
    text = capsys.readouterr().out
    assert "3 done, 1 skipped (full NoData), 1 failed of 5" in text and "summary.md" in text
    (scenes_dir / "corrupt.tif").unlink()
    assert main(args) == 0
    assert main([*args[:-2], "--output", str(tmp_path / "m2"), "--package", str(tmp_path / "nope")]) == 2


# --------------------------------------------------------------------------- issue 21: load = verify
@pytest.mark.parametrize("how", ["weights-crc", "sums"])
def test_map_refuses_a_package_that_fails_verify(
    scenes_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """No drift report, no map, not even the campaign directory: the package is refused first."""
    from flows.cli import main
    from tests.test_predict import tamper

    pkg = write_package(tmp_path / "pkg")
    failed_check = tamper(pkg, how)
    out = tmp_path / "m"
    assert main(["map", "--package", str(pkg), "--input", str(scenes_dir), "--output", str(out)]) == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rts map")]  # one line
    assert line.startswith(f"rts map: error: package {pkg} fails `rts package verify`") and failed_check in line
    assert not out.exists()


def test_a_fallback_threshold_warns_when_mapping_and_is_in_the_summary(tmp_path: Path) -> None:
    from flows.cli import main
    from tests.helpers import logged

    pkg = write_package(tmp_path / "pkg", threshold_source="max_f1_fallback")
    d = tmp_path / "in"
    d.mkdir()
    write_raster(d / "a.tif", imagery_like_training(0, TILE, TILE))
    out = tmp_path / "m"
    with logged("rtscore") as warnings:
        assert main(["map", "--package", str(pkg), "--input", str(d), "--output", str(out)]) == 0
    assert any("max-F1 fallback" in w and str(pkg) in w for w in warnings)
    summary = json.loads((out / SUMMARY_JSON).read_text())
    assert summary["threshold_source"] == "max_f1_fallback" and summary["done"] == 1
    assert "max-F1 fallback" in (out / SUMMARY_MD).read_text()
    assert json.loads((out / "scenes" / "a" / "a_predict.json").read_text())["threshold_source"] == "max_f1_fallback"
