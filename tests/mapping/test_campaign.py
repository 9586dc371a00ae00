"""The in-process mapping campaign: per-scene outputs equal to rts predict, skipped / failed scenes, re-runs, drift
gate, campaign outputs, and the `rts map` command; the log as a resume point keyed by identity (scene raster and
EXTRA raster, package, mapping code, settings), a kill -9 mid-campaign, parameters refused before any work."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rtscore.data.raster.ground import web_mercator_latitude
from rtscore.inference.predict import PredictError, predict_raster
from rtscore.mapping.campaign import (
    INDEX_FILE,
    OBJECTS_FILE,
    SUMMARY_JSON,
    SUMMARY_MD,
    CampaignResult,
    package_sha256,
    run_campaign,
    scene_outputs,
)
from rtscore.mapping.campaign_log import CampaignLog, SceneRecord
from rtscore.mapping.objects_layer import read_objects
from rtscore.mapping.scenes import CampaignError, list_scenes
from tests.helpers import PROJECT_ROOT, CodeEdits
from tests.test_predict import MEAN, STD, TILE, TRANSFORM, random_rgba, write_package, write_raster

VALID = ("a", "b", "c")
SCENE_H, SCENE_W = TILE + 32, TILE * 2
ROOT = PROJECT_ROOT


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package")


@pytest.fixture(scope="module")
def extra_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package reading one EXTRA channel (ndvi = EXTRA band 0; trained moments 0.5 / 0.2)."""
    return write_package(tmp_path_factory.mktemp("pkg") / "package", extra=[{"name": "ndvi", "band": 0}])


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
        write_raster(d / f"{name}.tif", imagery_like_training(k, SCENE_H, SCENE_W))
    nodata = imagery_like_training(9, TILE, TILE)
    nodata[3] = 0
    write_raster(d / "nodata.tif", nodata)
    good = (d / "a.tif").read_bytes()
    (d / "corrupt.tif").write_bytes(good[: len(good) // 3])  # truncated bytes
    return d


def write_extra(path: Path, seed: int, h: int = SCENE_H, w: int = SCENE_W) -> Path:
    """An EXTRA raster (float32, one band) with the extra_package's training moments, on the scenes' grid when
    ``h`` x ``w`` is their size."""
    return write_raster(path, np.random.default_rng(seed).normal(0.5, 0.2, (1, h, w)), dtype="float32")


def write_extra_scenes(d: Path) -> Path:
    """The three valid scenes (VALID), each with its EXTRA raster ``<id>_extra.tif`` beside it."""
    d.mkdir()
    for k, name in enumerate(VALID):
        write_raster(d / f"{name}.tif", imagery_like_training(k, SCENE_H, SCENE_W))
        write_extra(d / f"{name}_extra.tif", 10 + k)
    return d


def all_records(out: Path) -> list[tuple[str, str]]:
    return sorted((r.scene_id, r.status) for r in CampaignLog(out).read())


def new_records(out: Path | str, before: list[SceneRecord]) -> list[tuple[str, str]]:
    """(scene, status) of the records appended since ``before`` was read, by scene."""
    seen = {(r.scene_id, r.time) for r in before}
    return sorted((r.scene_id, r.status) for r in CampaignLog(out).read() if (r.scene_id, r.time) not in seen)


@pytest.fixture
def warnings_seen(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> pytest.LogCaptureFixture:
    """The rtscore loggers' warnings (``rts`` stops their propagation once a command ran in this process)."""
    monkeypatch.setattr(logging.getLogger("rtscore"), "propagate", True)
    caplog.set_level(logging.WARNING)
    return caplog


def test_campaign_maps_each_scene_once_like_rts_predict(package: Path, scenes_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    summary = run_campaign(package, scenes_dir, out, chunk_size=2)
    assert summary.threshold_source == "target_precision"
    assert CampaignResult.model_validate_json((out / SUMMARY_JSON).read_text()) == summary  # returned as written
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
    assert (summary.done, summary.skipped_full_nodata, summary.failed) == (3, 1, 1)
    assert "corrupt.tif" in summary.failures["corrupt"]
    assert json.loads((out / SUMMARY_JSON).read_text())["done"] == 3
    md = (out / SUMMARY_MD).read_text()
    assert "| failed | 1 |" in md and "corrupt" in md
    lat = web_mercator_latitude(8_000_000.0 - 4.77 * (TILE + 32) / 2)  # the scenes' centre row
    px_km2 = 4.77**2 * np.cos(np.radians(lat)) ** 2 / 1e6
    # the three scenes lie on one grid (write_raster's transform): the ground mapped is one scene's, once (issue 23
    # point 5); scene by scene it is three times that
    assert summary.km2_scenes_sum == pytest.approx(sum(by_id[s].valid_pixels for s in VALID) * px_km2, rel=2e-3)
    # on the ellipsoid (the union's area is computed in an equal-area projection of WGS 84): EPSG:3857's scale there
    # is cos φ / W east-west and cos φ W² / (1 - e²) north-south (W² = 1 - e² sin² φ), not the sphere's cos² φ
    e2, sin2 = 0.00669437999014, np.sin(np.radians(lat)) ** 2
    ellipsoid_km2 = px_km2 * (1 - e2) / (1 - e2 * sin2) ** 2
    assert summary.km2_mapped_ground == pytest.approx(SCENE_H * SCENE_W * ellipsoid_km2, rel=1e-4)
    assert "Mapped 0.078 km² of ground" in md and "0.234 km² scene by scene" in md
    index = json.loads((out / INDEX_FILE).read_text())
    assert sorted(f["properties"]["scene_id"] for f in index["features"]) == list(VALID)
    lon, lat = index["features"][0]["geometry"]["coordinates"][0][0]
    assert 8.0 < lon < 9.5 and 57.0 < lat < 60.0  # EPSG:4326
    crs, objects = read_objects(out / OBJECTS_FILE)
    assert crs.to_epsg() == 3857  # the first scene's CRS
    assert len(objects) == summary.objects
    assert sum(summary.objects_by_size_bin_m2.values()) == len(objects)

    # a re-run maps nothing new (the corrupt scene is retried, failing again) and duplicates no done scene
    first = all_records(out)
    before = scene_outputs(out, scenes["a"]).prob.stat().st_mtime_ns
    run_campaign(package, scenes_dir, out, chunk_size=2)
    assert all_records(out) == sorted([*first, ("corrupt", "failed")])
    assert scene_outputs(out, scenes["a"]).prob.stat().st_mtime_ns == before

    # a fixed scene is retried and done; done scenes still are not redone
    (scenes_dir / "corrupt.tif").write_bytes((scenes_dir / "b.tif").read_bytes())
    summary = run_campaign(package, scenes_dir, out, chunk_size=2)
    assert (summary.done, summary.failed) == (4, 0)
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
    assert summary.done == 2 and summary.drift_ok is False


def test_package_identity_changes_with_any_file(package: Path, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "pkg")
    first = package_sha256(pkg)
    assert first == package_sha256(pkg)
    (pkg / "deployment_config.yaml").write_text((pkg / "deployment_config.yaml").read_text() + "\n")
    assert package_sha256(pkg) != first


def test_map_command(package: Path, scenes_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flows.cli.main import main

    args = ["map", "--package", str(package), "--input", str(scenes_dir), "--output", str(tmp_path / "m")]
    assert main([*args, "--chunk-size", "3"]) == 1  # one scene failed: the campaign completed, not all mapped
    text = capsys.readouterr().out
    assert "3 done, 1 skipped (full NoData), 1 failed of 5" in text and "summary.md" in text
    (scenes_dir / "corrupt.tif").unlink()
    assert main(args) == 0
    assert main([*args[:-2], "--output", str(tmp_path / "m2"), "--package", str(tmp_path / "nope")]) == 2


def test_scenes_rts_map_refuses_are_sent_to_rts_warp_and_the_tiling_config_not_to_flags_it_lacks(
    package: Path, tmp_path: Path
) -> None:
    """Issue 38 (5): a scene off the training grid fails naming the rts warp command and flags that put it on the
    grid; an untagged B,G,R,NIR scene names the tiling config's rgb_bands and rts warp (rts map has no --rgb-bands).
    (No scene opens, so the drift check cannot run: allowed here, the failures are the point.)"""
    from rasterio.transform import from_origin

    from tests.helpers import write_raster as write_tagged

    d = tmp_path / "in"
    d.mkdir()
    rgba = imagery_like_training(7, SCENE_H, SCENE_W)
    utm = from_origin(500_000.0, 7_210_000.0, 30.0, 30.0)
    write_tagged(d / "utm.tif", rgba, transform=utm, crs="EPSG:32606", interp=["red", "green", "blue", "alpha"])
    bgrn = np.concatenate([rgba[2::-1], rgba[3:]])
    write_tagged(d / "bgrn.tif", bgrn, transform=TRANSFORM, interp=["gray", "undefined", "undefined", "undefined"])
    summary = run_campaign(package, d, tmp_path / "campaign", allow_drift=True)
    assert (summary.done, summary.failed) == (0, 2)
    warp = "rts warp --config <the tiling config the training data was cut with> --scenes"
    assert (
        f"by more than 5%; put it on the training grid with {warp} {d / 'utm.tif'} --output <dir>"
        in (summary.failures["utm"])
    )
    band_fix = summary.failures["bgrn"]
    assert "map them with rgb_bands: {rgb: [r, g, b], alpha: a|null} in the tiling config" in band_fix
    assert f"rts warp --config <that tiling config> --scenes {d / 'bgrn.tif'} --output <dir>" in band_fix
    assert "--rgb-bands" not in band_fix


# ------------------------------------------------------------------------------ the log, keyed by identity
def test_an_edit_in_the_mapping_code_maps_every_scene_again_and_one_outside_it_none(
    package: Path,
    scenes_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    """After a completed campaign, a (simulated) edit of a module in the mapping's import closure makes every record
    one of another identity: every scene is mapped again, and one line says how many records were set aside. An
    edit outside it (the campaign's drift gate and summary) re-maps nothing."""
    out = tmp_path / "campaign"
    run_campaign(package, scenes_dir, out, chunk_size=2)
    scenes = {s.scene_id: s for s in list_scenes(scenes_dir)}
    probs = {n: scene_outputs(out, scenes[n]).prob for n in VALID}
    first = {n: (p.read_bytes(), p.stat().st_mtime_ns) for n, p in probs.items()}
    edits = CodeEdits(monkeypatch)

    edits.edit("rtscore/mapping/campaign.py")  # drift gate, objects, summary: no scene output
    before = CampaignLog(out).read()
    run_campaign(package, scenes_dir, out, chunk_size=2)
    assert new_records(out, before) == [("corrupt", "failed")]  # the failed scene is retried, nothing else
    assert "of another identity" not in warnings_seen.text

    edits.edit("rtscore/inference/stream.py")  # the window stream, fusion and COG writing
    before = CampaignLog(out).read()
    summary = run_campaign(package, scenes_dir, out, chunk_size=2)
    assert new_records(out, before) == sorted(
        [(n, "done") for n in VALID] + [("nodata", "skipped-full-nodata"), ("corrupt", "failed")]
    )
    assert "5 record(s) of another identity set aside (other mapping code: 5)" in warnings_seen.text
    for n, p in probs.items():  # mapped again (the edit is simulated: the same bytes come out)
        assert p.stat().st_mtime_ns != first[n][1] and p.read_bytes() == first[n][0]
    assert (summary.done, summary.skipped_full_nodata, summary.failed, summary.pending) == (3, 1, 1, 0)
    assert len(CampaignLog(out).read()) == 5 + 1 + 5  # the old records stay in the log, as history

    warnings_seen.clear()
    before = CampaignLog(out).read()
    run_campaign(package, scenes_dir, out, chunk_size=2)  # same (edited) code again: resumes from its records
    assert new_records(out, before) == [("corrupt", "failed")]
    assert "of another identity" not in warnings_seen.text


_KILLED_AFTER = """
import os, signal, sys
from flows.cli.main import main
from rtscore.mapping.campaign_log import LogWriter

append, after, seen = LogWriter.append, int(sys.argv[1]), []

def append_then_die(self, record):
    append(self, record)
    seen.append(record.scene_id)
    if len(seen) == after:  # the worker dies here: later scenes are being read, inferred and written
        os.kill(os.getpid(), signal.SIGKILL)

LogWriter.append = append_then_die
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_a_campaign_killed_with_sigkill_resumes_where_it_stopped_byte_identical(
    package: Path, scenes_dir: Path, tmp_path: Path, warnings_seen: pytest.LogCaptureFixture
) -> None:
    """`rts map` (a subprocess) is killed with SIGKILL right after its second scene is logged, while the rest of its
    first chunk is in flight and the second chunk has not started; the re-run with unchanged code maps exactly the
    scenes without a complete record, and every output is byte-identical to an uninterrupted campaign's."""
    out = tmp_path / "campaign"
    args = ["map", "--package", str(package), "--input", str(scenes_dir), "--output", str(out), "--chunk-size", "3"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RTS_FLOW_RUN_ID", None)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER, "2", *args], cwd=ROOT, env=env, capture_output=True, timeout=600
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert all_records(out) == [("a", "done"), ("b", "done")]
    before = CampaignLog(out).read()

    from flows.cli.main import main

    assert main(args) == 1  # the corrupt scene failed; everything else is mapped
    assert new_records(out, before) == [("c", "done"), ("corrupt", "failed"), ("nodata", "skipped-full-nodata")]
    assert "of another identity" not in warnings_seen.text  # the killed process's records are of this identity
    ref = tmp_path / "uninterrupted"
    want = run_campaign(package, scenes_dir, ref, chunk_size=3)
    scenes = {s.scene_id: s for s in list_scenes(scenes_dir)}
    for n in VALID:
        got, exp = scene_outputs(out, scenes[n]), scene_outputs(ref, scenes[n])
        for a, b in ((got.prob, exp.prob), (got.mask, exp.mask), (got.parts, exp.parts)):
            assert a.read_bytes() == b.read_bytes(), a
    assert not [p for p in (out / "scenes").rglob(".*")], "no partial file is left behind"
    summary = json.loads((out / SUMMARY_JSON).read_text())
    for key in ("done", "skipped_full_nodata", "failed", "pending", "windows", "objects", "km2_mapped_ground"):
        assert summary[key] == getattr(want, key), key
    assert summary["mapping_identity"] == want.mapping_identity.model_dump(mode="json")


def test_a_replaced_extra_raster_maps_its_scene_again_and_one_off_the_grid_fails_naming_it(
    extra_package: Path, tmp_path: Path
) -> None:
    """A scene's identity covers its EXTRA raster: replacing it (on the right grid) maps that scene again, and only
    that one, with new probabilities; replacing it with one on another grid makes the scene `failed`, naming the
    EXTRA raster, never `done` from the old one."""
    d = write_extra_scenes(tmp_path / "in")
    out = tmp_path / "campaign"
    summary = run_campaign(extra_package, d, out, chunk_size=2)
    assert (summary.done, summary.failed) == (3, 0)
    scenes = {s.scene_id: s for s in list_scenes(d)}
    probs = {n: scene_outputs(out, scenes[n]).prob for n in VALID}
    first = {n: (p.read_bytes(), p.stat().st_mtime_ns) for n, p in probs.items()}

    write_extra(d / "b_extra.tif", 99)  # new values, the same grid
    before = CampaignLog(out).read()
    summary = run_campaign(extra_package, d, out, chunk_size=2)
    assert new_records(out, before) == [("b", "done")]
    assert probs["b"].read_bytes() != first["b"][0]
    assert [probs[n].stat().st_mtime_ns for n in ("a", "c")] == [first[n][1] for n in ("a", "c")]
    assert (summary.done, summary.failed, summary.pending) == (3, 0, 0)
    manifest = json.loads(scene_outputs(out, scenes["b"]).manifest.read_text())
    assert manifest["extra_input"] == str(d / "b_extra.tif")

    write_extra(d / "b_extra.tif", 7, SCENE_H, SCENE_W + TILE)  # another grid (size)
    before = CampaignLog(out).read()
    summary = run_campaign(extra_package, d, out, chunk_size=2)
    assert new_records(out, before) == [("b", "failed")]
    assert (summary.done, summary.failed) == (2, 1)
    assert "b_extra.tif: not on the grid of" in summary.failures["b"]


def test_a_scene_that_fails_under_a_new_package_leaves_no_output_of_the_old_one(package: Path, tmp_path: Path) -> None:
    """Issue 38: re-mapped under a new package, a scene that failed kept the old package's COGs under their final
    names (the summary and index were right). Every file left under a final name is the new package's."""
    d, out = tmp_path / "in", tmp_path / "campaign"
    d.mkdir()
    for k, name in enumerate(("a", "b")):
        write_raster(d / f"{name}.tif", imagery_like_training(k, TILE, TILE))
    run_campaign(package, d, out)
    scenes = {s.scene_id: s for s in list_scenes(d)}
    assert all(p.is_file() for p in scene_outputs(out, scenes["b"]).files())
    new = write_package(tmp_path / "new-package", threshold=0.6)
    good = (d / "b.tif").read_bytes()
    (d / "b.tif").write_bytes(good[: len(good) // 3])  # b fails under the new package
    summary = run_campaign(new, d, out)
    assert (summary.done, summary.failed) == (1, 1) and set(summary.failures) == {"b"}
    assert not (out / "scenes" / "b").exists(), sorted((out / "scenes" / "b").rglob("*"))
    manifests = sorted((out / "scenes").rglob("*_predict.json"))
    assert [m.parent.name for m in manifests] == ["a"]
    assert json.loads(manifests[0].read_text())["package"] == str(new)


def test_bad_parameters_are_refused_before_the_package_is_loaded_or_anything_written(
    package: Path, scenes_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import rtscore.mapping.campaign as campaign
    from flows.cli.main import main

    out = tmp_path / "campaign"

    def not_now(*args: object, **kwargs: object) -> None:
        raise AssertionError("the package was loaded")

    with monkeypatch.context() as m:
        m.setattr(campaign, "load_package", not_now)
        for kw, message in (
            ({"chunk_size": 0}, "chunk size must be a whole number of scenes >= 1; got 0"),
            ({"stride": 0}, "stride must be a whole number of pixels >= 1"),
            ({"batch_size": 0}, "batch size must be a whole number >= 1; got 0"),
        ):
            with pytest.raises(CampaignError, match=message):
                run_campaign(package, scenes_dir, out, **kw)  # type: ignore[arg-type]
        argv = ["map", "--package", str(package), "--input", str(scenes_dir), "--output", str(out)]
        assert main([*argv, "--chunk-size", "0"]) == 2  # the parameter model's rule, before the package is loaded
        assert "rts map: error: --chunk-size: Input should be greater than or equal to 1" in capsys.readouterr().err
    with pytest.raises(PredictError, match=r"stride 999 must be in \[1, tile size 64\]"):
        run_campaign(package, scenes_dir, out, stride=999)  # known once the package is: still before any output
    assert not out.exists()


# --------------------------------------------------------------------------- issue 21: load = verify
@pytest.mark.parametrize("how", ["weights-crc", "sums"])
def test_map_refuses_a_package_that_fails_verify(
    scenes_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """No drift report, no map, not even the campaign directory: the package is refused first."""
    from flows.cli.main import main
    from tests.test_predict import tamper

    pkg = write_package(tmp_path / "pkg")
    failed_check = tamper(pkg, how)
    out = tmp_path / "m"
    assert main(["map", "--package", str(pkg), "--input", str(scenes_dir), "--output", str(out)]) == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rts map")]  # one line
    assert line.startswith(f"rts map: error: package {pkg} fails `rts package verify`") and failed_check in line
    assert not out.exists()


def test_a_fallback_threshold_warns_when_mapping_and_is_in_the_summary(tmp_path: Path) -> None:
    from flows.cli.main import main
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


def test_objects_under_the_packages_minimum_area_are_counted_not_written(
    tmp_path: Path, warnings_seen: pytest.LogCaptureFixture
) -> None:
    """Issue 23 (4): `rts map` applies the package's min_object_area_m2 (the run's package.min_object_area_m2) to the
    merged objects' ground areas; those under it are counted in the summary, not written. A
    package built before the value was recorded maps at the default, with one warning."""
    d = tmp_path / "in"
    d.mkdir()
    write_raster(d / "a.tif", imagery_like_training(0, SCENE_H, SCENE_W))
    every = run_campaign(write_package(tmp_path / "p0", min_object_area_m2=0.0), d, tmp_path / "m0")
    areas = sorted(o.ground_area_m2 for o in read_objects(tmp_path / "m0" / OBJECTS_FILE)[1])
    assert every.objects_under_min_area == 0 and every.objects == len(areas) >= 3
    cut = areas[len(areas) // 2]
    summary = run_campaign(write_package(tmp_path / "p1", min_object_area_m2=cut), d, tmp_path / "m1")
    kept = read_objects(tmp_path / "m1" / OBJECTS_FILE)[1]
    assert sorted(o.ground_area_m2 for o in kept) == pytest.approx([a for a in areas if a >= cut], rel=1e-12)
    assert (summary.objects, summary.objects_under_min_area) == (len(kept), len(areas) - len(kept))
    assert summary.min_object_area_m2 == cut and summary.objects_under_min_area > 0
    assert f"; {summary.objects_under_min_area} under " in (tmp_path / "m1" / SUMMARY_MD).read_text()
    assert not [r for r in warnings_seen.records if "min_object_area_m2" in r.getMessage()]

    old = run_campaign(write_package(tmp_path / "p2", min_object_area_m2=None), d, tmp_path / "m2")
    said = [r.getMessage() for r in warnings_seen.records if "records no min_object_area_m2" in r.getMessage()]
    assert len(said) == 1 and "default 350 m²" in said[0] and "p2" in said[0]
    assert old.min_object_area_m2 == 350.0
    assert (old.objects, old.objects_under_min_area) == (sum(a >= 350.0 for a in areas), sum(a < 350.0 for a in areas))


def test_a_drift_block_names_the_scenes_that_drive_it(package: Path, tmp_path: Path) -> None:
    """Issue 23 point 10: the gate decides on the sample's pooled moments (a dataset-level report) and names the
    sampled scenes whose own shift exceeds a limit on a blocked channel: in the error and in the report."""
    d = tmp_path / "scenes"
    d.mkdir()
    for k, name in enumerate(("a", "b", "c")):
        write_raster(d / f"{name}.tif", imagery_like_training(k, SCENE_H, SCENE_W))
    off = imagery_like_training(7, SCENE_H, SCENE_W)
    off[1] = np.clip(off[1].astype(np.float64) + 75.0, 0, 255).astype(np.uint8)  # G: +2.5 σ_train in this scene only
    write_raster(d / "off.tif", off)
    out = tmp_path / "refused"
    with pytest.raises(CampaignError) as err:
        run_campaign(package, d, out)
    text = str(err.value)
    assert "input drift on G over the 4 sampled scene(s) pooled" in text
    assert "training regions not recorded" in text  # the test package's stats predate them
    assert "scene(s) beyond a limit on their own: off (G +2.4" in text and "map anyway with --allow-drift" in text
    assert " a (" not in text and " b (" not in text and " c (" not in text
    report = json.loads((out / "drift" / "drift_report.json").read_text())
    assert report["blocking_files"] == ["off"] and sorted(f["name"] for f in report["per_file"]) == [
        "a",
        "b",
        "c",
        "off",
    ]
    assert "(1 of 4): `off`" in (out / "drift" / "drift_report.md").read_text()


def test_headline_area_counts_overlapping_ground_once(
    package: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 point 5: two scenes overlapping by half: the summary's ground mapped is the union of their valid
    pixels (one and a half scenes' worth), the sum scene by scene stays beside it. Point 11: `rts map`'s log counts
    a scene's skipped NoData windows, their offsets are in its manifest only."""
    d = tmp_path / "scenes"
    d.mkdir()
    first = imagery_like_training(0, SCENE_H, SCENE_W)
    first[3, :, :TILE] = 0  # the western half NoData: no window there runs
    write_raster(d / "p.tif", first)
    write_raster(d / "q.tif", imagery_like_training(1, SCENE_H, SCENE_W), offset=(TILE // 2, 16))
    monkeypatch.setattr(logging.getLogger("rtscore"), "propagate", True)
    caplog.set_level(logging.INFO, logger="rtscore")
    summary = run_campaign(package, d, tmp_path / "out", stride=TILE // 2)
    assert summary.done == 2
    p_valid = np.zeros((SCENE_H + 16, SCENE_W + TILE // 2), bool)
    p_valid[:SCENE_H, TILE:SCENE_W] = True
    q_valid = np.zeros_like(p_valid)
    q_valid[16:, TILE // 2 :] = True
    lat = web_mercator_latitude(8_000_000.0 - 4.77 * (SCENE_H + 16) / 2)
    e2, sin2 = 0.00669437999014, np.sin(np.radians(lat)) ** 2
    px_km2 = 4.77**2 * np.cos(np.radians(lat)) ** 2 * (1 - e2) / (1 - e2 * sin2) ** 2 / 1e6  # ground, on WGS 84
    assert summary.km2_mapped_ground == pytest.approx((p_valid | q_valid).sum() * px_km2, rel=2e-4)
    assert summary.km2_scenes_sum == pytest.approx((p_valid.sum() + q_valid.sum()) * px_km2, rel=4e-3)
    assert summary.km2_scenes_sum > 1.3 * summary.km2_mapped_ground  # the overlap, counted twice there
    manifest = json.loads(scene_outputs(tmp_path / "out", list_scenes(d)[0]).manifest.read_text())
    skipped = [tuple(w) for w in manifest["skipped_full_nodata"]]
    assert len(skipped) >= 2
    line = next(r.getMessage() for r in caplog.records if "entirely NoData" in r.getMessage())
    assert f"skipped {len(skipped)} of {manifest['windows']} windows" in line and "p_predict.json" in line
    assert str(skipped[0]) not in line
