"""Issue 12, cases 1-5: `rts predict` and `rts drift` check every input against the package's raster contract
before reading pixels; a mismatch exits non-zero naming the file and the mismatch, and leaves no output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin

from flows.cli.main import main
from tests.helpers import write_raster
from tests.test_predict import TILE, TRANSFORM, random_rgba, write_package

COMMANDS = ("predict", "drift")
SIZE = 2 * TILE


@pytest.fixture(autouse=True)
def _cli_logs_to_this_tests_stdout() -> Any:
    """`rts` adds its stdout log handler once per process: drop one bound to an earlier test's captured stdout."""
    import logging

    logger = logging.getLogger("rtscore")
    stale = [h for h in logger.handlers if getattr(h, "_rts_cli", False)]
    for h in stale:
        logger.removeHandler(h)
    yield
    for h in [h for h in logger.handlers if getattr(h, "_rts_cli", False)]:
        logger.removeHandler(h)


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package with one EXTRA channel (ndvi = EXTRA band 0), trained on 4.77 m EPSG:3857 rasters."""
    return write_package(tmp_path_factory.mktemp("pkg") / "package", extra=[{"name": "ndvi", "band": 0}])


def write(path: Path, data: np.ndarray, *, interp: list[str] | None = None, **profile: Any) -> Path:
    return write_raster(path, data, transform=profile.pop("transform", TRANSFORM), interp=interp, **profile)


def scene(d: Path, *, rgb: np.ndarray | None = None, extra: np.ndarray | None = None, **extra_kw: Any) -> Path:
    """``d/s.tif`` (R, G, B, alpha unless ``rgb`` is given) and its EXTRA sibling ``d/s_extra.tif``."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    src = write(d / "s.tif", random_rgba(rng, SIZE, SIZE) if rgb is None else rgb)
    ex = rng.random((1, SIZE, SIZE)).astype(np.float32) if extra is None else extra
    write(d / "s_extra.tif", ex, **extra_kw)
    return src


def run(command: str, package: Path, src: Path, out: Path, *more: str) -> int:
    return main([command, "--package", str(package), "--input", str(src), "--output", str(out), *more])


def refused(
    command: str, package: Path, src: Path, out: Path, capsys: pytest.CaptureFixture[str], *messages: str
) -> str:
    """The command exits 2, its one-line error names every ``messages`` (file and mismatch), nothing is written;
    returns the error."""
    capsys.readouterr()
    assert run(command, package, src, out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rts {command}: error: ") and "Traceback" not in err
    for m in messages:
        assert m in err, (m, err)
    assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())
    return err


def prob_of(out: Path) -> np.ndarray:
    with rasterio.open(out / "s_prob.tif") as f:
        return f.read(1)


def no_nan_json(path: Path) -> dict[str, Any]:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{path} holds a bare {constant}")

    doc: dict[str, Any] = json.loads(path.read_text(), parse_constant=refuse)
    return doc


# --------------------------------------------------------------------------- case 1: NaN in the EXTRA raster
@pytest.mark.parametrize("command", COMMANDS)
def test_undeclared_nan_in_extra_is_refused(
    command: str, package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = np.random.default_rng(1).random((1, SIZE, SIZE)).astype(np.float32)
    ex[0, :10, :] = np.nan  # water / shadow NDVI
    src = scene(tmp_path / "in", extra=ex)
    n = 10 * SIZE
    refused(command, package, src, tmp_path / "out", capsys, "s_extra.tif", f"{n:,} valid pixels hold NaN or inf")


def test_declared_nan_in_extra_is_nodata_for_predict_and_drift(package: Path, tmp_path: Path) -> None:
    ex = np.random.default_rng(1).random((1, SIZE, SIZE)).astype(np.float32)
    ex[0, :10, :] = np.nan
    src = scene(tmp_path / "in", extra=ex, nodata=float("nan"))
    assert run("predict", package, src, tmp_path / "maps") == 0
    prob = prob_of(tmp_path / "maps")
    assert (prob[:10] == -1.0).all() and ((prob[10:] >= 0) & (prob[10:] <= 1)).all()  # NoData, never NaN
    manifest = no_nan_json(tmp_path / "maps" / "s_predict.json")
    assert manifest["valid_pixels"] == SIZE * SIZE - 10 * SIZE
    assert run("drift", package, src, tmp_path / "drift") in (0, 1)
    report = no_nan_json(tmp_path / "drift" / "drift_report.json")
    assert report["valid_pixels"] == SIZE * SIZE - 10 * SIZE
    assert all(np.isfinite(ch["new_mean"]) and np.isfinite(ch["new_std"]) for ch in report["channels"])


def test_drift_without_a_valid_pixel_is_an_error_not_ok(
    package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A channel without valid pixels has no moments: an error naming why, never NaN printed as ok."""
    rgba = random_rgba(np.random.default_rng(2), SIZE, SIZE)
    rgba[3] = 0
    src = scene(tmp_path / "in", rgb=rgba)
    refused("drift", package, src, tmp_path / "out", capsys, "no valid pixel")


# --------------------------------------------------------------------------- case 2: RGB of another dtype
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("dtype", ["uint16", "float32"])
def test_rgb_of_another_dtype_is_refused(
    command: str, dtype: str, package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rgb = (np.random.default_rng(3).random((3, SIZE, SIZE)) * 4000).astype(dtype)  # Planet analytic reflectance
    src = scene(tmp_path / "in", rgb=rgb)
    refused(command, package, src, tmp_path / "out", capsys, "s.tif", f"RGB bands are {dtype}", "trained on uint8")


# --------------------------------------------------------------------------- case 3: which band is which
def planet_bgrn(rgba: np.ndarray) -> np.ndarray:
    nir = np.random.default_rng(4).integers(0, 256, (1, SIZE, SIZE)).astype(np.uint8)
    nir[0, :5] = 0  # NIR 0 must not become NoData
    return np.concatenate([rgba[2::-1], nir])


@pytest.mark.parametrize("command", COMMANDS)
def test_tagged_bgrn_is_reordered_untagged_four_bands_are_refused_unless_mapped(
    command: str, package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rgb = random_rgba(np.random.default_rng(5), SIZE, SIZE)[:3]
    reference = scene(tmp_path / "rgb", rgb=rgb)
    bgrn = planet_bgrn(rgb)
    tagged = scene(tmp_path / "tagged", rgb=bgrn)
    with rasterio.open(tagged, "r+") as f:
        f.colorinterp = [ColorInterp.blue, ColorInterp.green, ColorInterp.red, ColorInterp.undefined]
    untagged = scene(tmp_path / "untagged", rgb=bgrn)
    with rasterio.open(untagged, "r+") as f:
        f.colorinterp = [ColorInterp.gray, ColorInterp.undefined, ColorInterp.undefined, ColorInterp.undefined]
    err = refused(
        command, package, untagged, tmp_path / "refused", capsys, "untagged/s.tif: 4 bands", "which band is which"
    )
    # the fix in the words of the command line: its flag, not a config's key (issue 38, point 5)
    assert (
        "tag the bands, or give their order with --rgb-bands R,G,B[,ALPHA] (0-based band indexes: --rgb-bands "
        "2,1,0 for B,G,R,NIR)" in err
    )
    assert "rgb_bands:" not in err

    results = []
    for name, src, more in (
        ("ref", reference, ()),
        ("tagged", tagged, ()),
        ("mapped", untagged, ("--rgb-bands", "2,1,0")),
    ):
        rc = run(command, package, src, tmp_path / f"out-{name}", *more)
        if command == "predict":
            assert rc == 0
            results.append(prob_of(tmp_path / f"out-{name}"))
        else:
            doc = no_nan_json(tmp_path / f"out-{name}" / "drift_report.json")
            results.append(
                np.array([[c["new_mean"], c["new_std"]] for c in doc["channels"]] + [[doc["valid_pixels"]] * 2])
            )
    # B,G,R read as R,G,B, and NIR == 0 is not NoData: the same maps; the same moments (to the order in which
    # each file's blocks are merged)
    for other in results[1:]:
        if command == "predict":
            np.testing.assert_array_equal(other, results[0])
        else:
            np.testing.assert_allclose(other, results[0], rtol=1e-12)


def test_rgb_bands_option_is_validated(package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = scene(tmp_path / "in")
    with pytest.raises(SystemExit):
        run("predict", package, src, tmp_path / "out", "--rgb-bands", "0,0,1")
    assert "distinct" in capsys.readouterr().err


# --------------------------------------------------------------------------- case 4: georeferencing
GRIDS = {
    "no CRS": ({"crs": None}, "has no CRS"),
    "EPSG:4326": (
        {"crs": "EPSG:4326", "transform": from_origin(-150.0, 70.0, 4.3e-5, 4.3e-5)},
        "CRS EPSG:4326, trained on EPSG:3857",
    ),
    "110 m pixels": ({"transform": from_origin(1_000_000.0, 8_000_000.0, 110.0, 110.0)}, "pixel size 110"),
}
# the command and flags that put a scene on the training grid (issue 38, point 5); rts warp refuses a scene without
# a CRS, so it is not offered one
WARP = "put it on the training grid with rts warp --config <the tiling config the training data was cut with> --scenes"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("grid", list(GRIDS))
def test_rasters_off_the_training_grid_are_refused(
    command: str, grid: str, package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile, message = GRIDS[grid]
    d = tmp_path / "in"
    d.mkdir()
    rng = np.random.default_rng(6)
    src = write(d / "s.tif", random_rgba(rng, SIZE, SIZE), **profile)
    write(d / "s_extra.tif", rng.random((1, SIZE, SIZE)).astype(np.float32), **profile)
    err = refused(command, package, src, tmp_path / "out", capsys, "s.tif", message)
    if grid == "no CRS":
        assert "rts warp" not in err
    else:
        assert f"{WARP} {src} --output <dir>" in err


# --------------------------------------------------------------------------- case 5: EXTRA on another grid
@pytest.mark.parametrize("command", COMMANDS)
def test_extra_on_another_grid_is_refused(
    command: str, package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shifted = from_origin(TRANSFORM.c + 3 * 4.77, TRANSFORM.f, 4.77, 4.77)  # same size, three pixels east
    src = scene(tmp_path / "in", transform=shifted)
    refused(command, package, src, tmp_path / "out", capsys, "s_extra.tif: not on the grid of", "s.tif")


@pytest.mark.parametrize("command", COMMANDS)
def test_one_bad_file_of_a_directory_leaves_no_output_of_the_others(
    command: str, package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "in"
    scene(d)  # s.tif is fine ...
    rgb = (np.random.default_rng(7).random((3, SIZE, SIZE)) * 4000).astype(np.uint16)
    write(d / "t.tif", rgb)  # ... t.tif is not
    write(d / "t_extra.tif", np.zeros((1, SIZE, SIZE), np.float32))
    refused(command, package, d, tmp_path / "out", capsys, "t.tif: RGB bands are uint16")


# --------------------------------------------------------------------------- a raster smaller than a tile
def test_a_raster_smaller_than_a_tile_is_found_before_any_map_and_named(
    package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every input's size is checked up front with its contract: a directory whose last raster is smaller than one
    tile is refused naming that raster, before the maps of the others are written."""
    d = tmp_path / "in"
    scene(d)  # s.tif is fine ...
    small = TILE - 8
    write(d / "t.tif", random_rgba(np.random.default_rng(8), small, SIZE))  # ... t.tif has no room for a window
    write(d / "t_extra.tif", np.zeros((1, small, SIZE), np.float32))
    refused("predict", package, d, tmp_path / "out", capsys, f"t.tif: {small}x{SIZE} px is smaller than the package's")


# --------------------------------------------------------------------------- issue 38: an output inside the package
@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_inside_the_package_is_refused_and_the_package_stays_intact(
    command: str, package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rts predict --output <package>` wrote its maps into the package, which then failed verify everywhere: the
    package directory, a directory inside it and one inside another package are refused before any work, naming
    the output and the package; not a file of either package changes."""
    from rtscore.package import audit_package

    src = scene(tmp_path / "in")
    other = write_package(tmp_path / "other", extra=[{"name": "ndvi", "band": 0}])

    def files(pkg: Path) -> dict[str, bytes]:
        return {p.relative_to(pkg).as_posix(): p.read_bytes() if p.is_file() else b"" for p in sorted(pkg.rglob("*"))}

    before = {pkg: files(pkg) for pkg in (package, other)}
    for out, holder in ((package, package), (package / "maps", package), (other / "sub" / "maps", other)):
        capsys.readouterr()
        assert run(command, package, src, out) == 2, out
        err = capsys.readouterr().err
        assert err.startswith(f"rts {command}: error: --output {out} is inside the deployment package {holder}"), err
        assert "Traceback" not in err
    assert {pkg: files(pkg) for pkg in (package, other)} == before
    assert all(c.ok for c in audit_package(package)), [c for c in audit_package(package) if not c.ok]
