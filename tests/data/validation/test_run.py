from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rtscore import stages
from rtscore.config import parse_pipeline_config
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.errors import DataValidationError
from rtscore.data.normalization.stats import NormalizationStatsError
from tests.helpers import copy_run, geotiff_pipeline_config, make_data_run, tiny_pipeline_config

SPLITS = ("train", "val", "test")


def _cfg(**overrides: object) -> PipelineConfig:
    data = tiny_pipeline_config()
    for dotted, value in overrides.items():
        node = data
        *path, last = dotted.split("__")
        for key in path:
            node = node[key]
        node[last] = value
    return parse_pipeline_config(data)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data_run(tmp_path_factory.mktemp("val") / "run", _cfg())


def test_good_data_passes_and_writes_report(good_run: Path, tmp_path: Path) -> None:
    run = copy_run(good_run, tmp_path / "run")
    ref = stages.validate_data(str(run), _cfg())
    report = json.loads((run / "validation" / "report.json").read_text())
    assert report["status"] == "passed" and ref.path == "validation"
    assert report["splits"]["train"]["n_full_nodata_excluded"] == 1
    assert report["splits"]["train"]["n_mapped_negative"] is None  # a synthetic store records no inventory
    assert report["splits"]["val"]["tiles_checked"] == report["splits"]["val"]["n_usable"] == 12
    norm = report["normalized_train"]
    assert np.allclose(norm["mean"], 0, atol=0.05) and np.allclose(norm["std"], 1, atol=0.05)
    names = {c["name"] for c in report["checks"]}
    assert {"spatial_blocking", "normalized_train", "batches", "training_batches", "channel_count"} <= names
    assert (run / "validation" / "report.md").read_text().startswith("# Data validation: PASSED")
    from PIL import Image

    with Image.open(run / "validation" / "samples.png") as samples:
        assert samples.size[0] > 100


def test_label_value_outside_set_names_tile(good_run: Path, tmp_path: Path) -> None:
    import zarr

    run = copy_run(good_run, tmp_path / "run")
    pixels = zarr.open_group(str(run / "datasets" / "val.zarr"), mode="r+")["pixels"]
    tile = pixels[3]
    tile[4, 5, 5] = 7  # plane 4: labels_exact
    pixels[3] = tile
    with pytest.raises(DataValidationError, match=r"'label_values' failed in split val at tile val_000003: .*\[7\]"):
        stages.validate_data(str(run), _cfg())
    report = json.loads((run / "validation" / "report.json").read_text())
    assert report["status"] == "failed"
    assert "validation" not in json.loads((run / "manifest.json").read_text())["artifacts"]


def test_region_in_two_splits_fails(tmp_path: Path) -> None:
    cfg = _cfg(data__generation__val__synthetic__regions=["ta", "vb"])
    run = make_data_run(tmp_path / "run", cfg)
    with pytest.raises(DataValidationError, match=r"spatial_blocking.*region\(s\) \['ta'\] in both train and val"):
        stages.validate_data(str(run), cfg)


def test_empty_split_fails_clearly(tmp_path: Path) -> None:
    cfg = _cfg(data__generation__test__synthetic__n_positive=0, data__generation__test__synthetic__n_negative=0)
    run = make_data_run(tmp_path / "run", cfg)
    with pytest.raises(DataValidationError, match="split test has no usable tiles"):
        stages.validate_data(str(run), cfg)


def test_stats_of_other_channels_are_refused(good_run: Path, tmp_path: Path) -> None:
    run = copy_run(good_run, tmp_path / "run")
    cfg = _cfg(channels={"extra": []}, data__generation__train__synthetic__extra_channels=["ndvi"])
    with pytest.raises(NormalizationStatsError, match=r"extra.channel_names \['ndvi'\] do not match .*\[\]"):
        stages.validate_data(str(run), cfg)


def test_validation_needs_its_inputs(tmp_path: Path) -> None:
    from rtscore.storage import StorageError

    with pytest.raises(StorageError, match="normalization_stats.json is missing"):
        stages.validate_data(str(tmp_path / "empty"), _cfg())


def _curriculum_cfg(**data_overrides: object) -> PipelineConfig:
    data = tiny_pipeline_config()
    data["sampling"] = {
        "curriculum_schedule": [
            {"start_epoch": 1, "end_epoch": 2, "neg_per_pos": 1},
            {"start_epoch": 3, "end_epoch": None, "neg_per_pos": 2},
        ]
    }
    data["data"].update(data_overrides)
    return parse_pipeline_config(data)


def test_training_batches_come_from_the_training_loader(good_run: Path, tmp_path: Path) -> None:
    """Validation iterates what training will iterate: the balanced curriculum sampler of the training loader
    (built by the same function), the first epoch of each curriculum stage, not a plain shuffled loader."""
    from rtscore.data.loading.dataset import build_train_dataset
    from rtscore.data.loading.loader import positive_flags, train_loader
    from rtscore.data.normalization.stats import load_normalization_stats

    run = copy_run(good_run, tmp_path / "run")
    cfg = _curriculum_cfg()
    stages.validate_data(str(run), cfg)
    report = json.loads((run / "validation" / "report.json").read_text())
    rows = report["training_batches"]
    assert [(r["epoch"], r["neg_per_pos"]) for r in rows] == [(1, 1.0), (3, 2.0)]
    # The same numbers as the loader training builds for seed training.seed.
    stats = load_normalization_stats(run / "normalization_stats.json", ["ndvi"])
    ds = build_train_dataset(cfg, run, stats, seed=cfg.training.seed)
    _, sampler = train_loader(cfg, ds, cfg.training.seed)
    flags = positive_flags(ds)
    for row in rows:
        plan = sampler.batches(row["epoch"])
        n_pos = [int(sum(flags[p] for p, _ in b)) for b in plan]
        assert row["batches"] == len(plan) and row["positive_tiles_per_batch"] == [min(n_pos), max(n_pos)]
        assert min(n_pos) >= 1  # guide §7.2: every balanced batch sees a positive
    assert rows[0]["positive_tiles_per_batch"] != rows[1]["positive_tiles_per_batch"]  # the curriculum shows
    assert "Training loader" in (run / "validation" / "report.md").read_text()


def test_a_train_store_training_cannot_join_fails_validation_not_training(good_run: Path, tmp_path: Path) -> None:
    """data.additional_roots are part of what training sees: a missing one fails here, before any GPU time."""
    run = copy_run(good_run, tmp_path / "run")
    cfg = _curriculum_cfg(additional_roots=["datasets/train_half.zarr"])
    with pytest.raises(DataValidationError, match=r"training_batches.*data.additional_roots\[0\].*does not exist"):
        stages.validate_data(str(run), cfg)


def test_val_spanning_fewer_regions_than_min_val_regions_fails(good_run: Path, tmp_path: Path) -> None:
    """splits.min_val_regions is checked on the stores whatever their source (given splits.yaml, synthetic)."""
    run = copy_run(good_run, tmp_path / "run")
    with pytest.raises(DataValidationError, match=r"'val_regions' failed in split val: val spans 2 region.*is 3"):
        stages.validate_data(str(run), _cfg(splits__min_val_regions=3))


def test_max_batches_does_not_gate_the_normalized_moments_on_a_few_tiles(good_run: Path, tmp_path: Path) -> None:
    """Issue 11.19: `rts validate --max-batches 1` on a correct store passed every check but the whole-split
    mean/std one, which a handful of tiles cannot meet; it is reported, not gated, on a partial pass."""
    from rtscore.data.validation.run import validate_data

    stores = {s: good_run / "datasets" / f"{s}.zarr" for s in ("train", "val", "test")}
    report = validate_data(
        _cfg(), stores, good_run / "normalization_stats.json", tmp_path / "report", batch_size=2, max_batches=1
    )
    assert report.status == "passed"
    check = next(c for c in report.checks if c.name == "normalized_train")
    train = report.splits["train"]
    assert train.tiles_checked == 2 < train.n_usable
    assert check.passed and f"over 2 of {train.n_usable} train tiles (--max-batches): not gated" in check.detail
    full = validate_data(_cfg(), stores, good_run / "normalization_stats.json", tmp_path / "full", batch_size=2)
    gated = next(c for c in full.checks if c.name == "normalized_train")
    assert gated.passed and "expected mean ~0 and std ~1" in gated.detail, "a whole pass is still gated"


def test_validate_data_returns_the_typed_report_it_writes(good_run: Path, tmp_path: Path) -> None:
    """The report is a typed model (read by attribute, not by string key), and report.json is that model."""
    from rtscore.data.validation.report import ValidationReport
    from rtscore.data.validation.run import validate_data

    stores = {s: good_run / "datasets" / f"{s}.zarr" for s in ("train", "val", "test")}
    report = validate_data(_cfg(), stores, good_run / "normalization_stats.json", tmp_path / "out", batch_size=4)
    assert isinstance(report, ValidationReport) and report.status == "passed"
    written = ValidationReport.model_validate_json((tmp_path / "out" / "report.json").read_text())
    assert written == report
    assert set(report.splits) == {"train", "val", "test"} and report.splits["train"].n_positive > 0
    stages = report.training_batches
    assert stages and stages[0].positive_tiles_per_batch[0] >= 1, "balanced batches: a positive in every one"
    for st in stages:  # issue 25: each stage's ratio over the epoch, within the one tile the epoch's length leaves
        tiles = st.batches * st.batch_size
        n_pos = round(tiles / (1 + st.realised_neg_per_pos))
        assert n_pos == int(tiles / (1 + st.neg_per_pos)), st
    assert report.normalized_train is not None and report.normalized_train.channels == report.channels
    assert (tmp_path / "out" / "report.md").read_text() == report.render_markdown()


def test_derived_split_warnings_reach_the_validation_report(good_run: Path, tmp_path: Path) -> None:
    """Issue 12 case 10: a split derived for a root without splits.yaml warns in the report, not only in a file."""
    from rtscore.data.splits.regions import SplitResult
    from rtscore.storage import RunLayout

    run = copy_run(good_run, tmp_path / "run")
    warning = "train holds 69 of 100 positive tiles (69% < 70%)"
    derived = SplitResult(
        splits={"train": ["ta", "tb"], "val": ["va", "vb"], "test": ["sa"]},
        tiles={"train": 17, "val": 13, "test": 13},
        positives={"train": 69, "val": 10, "test": 21},
        shares={"train": 0.4, "val": 0.3, "test": 0.3},
        warnings=[warning],
        derived_from="/data/tiles",
    )
    (run / RunLayout.DERIVED_SPLITS_SUMMARY.at()).write_text(derived.model_dump_json())
    stages.validate_data(str(run), _cfg())
    report = json.loads((run / "validation" / "report.json").read_text())
    assert f"split derived for /data/tiles (no splits.yaml): {warning}" in report["warnings"]
    assert report["derived_split"]["splits"] == derived.splits
    md = (run / "validation" / "report.md").read_text()
    assert warning in md and "Split derived from /data/tiles" in md and "| train | 2 | 17 |" in md


# ------------------------------------------------------------------------------------------ issue 23: points 2, 3
def _nodata_pixel_keeping_its_rgb(run: Path) -> str:
    """Val tile 2 gets a NoData pixel (alpha 0, label 255) that keeps its RGB, with records to match: only its
    pixels tell."""
    import zarr

    group = zarr.open_group(str(run / "datasets" / "val.zarr"), mode="r+")
    pixels, meta = group["pixels"], group["meta"]
    tile = pixels[2]
    assert tile[3, 0, 0] == 255 and tile[4, 0, 0] == 0 and tile[:3, 0, 0].any()  # valid background, RGB kept
    tile[3, 0, 0], tile[4, 0, 0] = 0, 255
    pixels[2] = tile
    for name in ("n_nodata_px", "n_ignore_px"):
        values = meta[name][:]
        values[2] += 1
        meta[name][:] = values
    return str(meta["tile_id"][2])


def _full_nodata_tile_marked_positive(run: Path) -> str:
    """The train store's full-NoData tile says is_positive (the flag issue 23 found on ingested stores)."""
    import zarr

    meta = zarr.open_group(str(run / "datasets" / "train.zarr"), mode="r+")["meta"]
    i = int(np.flatnonzero(meta["kind"][:] == 2)[0])
    flags = meta["is_positive"][:]
    flags[i] = True
    meta["is_positive"][:] = flags
    return str(meta["tile_id"][i])


def _counts_off(run: Path) -> str:
    """The test store's counts attribute claims one more positive tile than its tiles hold."""
    import zarr

    group = zarr.open_group(str(run / "datasets" / "test.zarr"), mode="r+")
    attrs = dict(group.attrs["rtscore"])
    attrs["counts"] = {**attrs["counts"], "n_positive": attrs["counts"]["n_positive"] + 1}
    group.attrs["rtscore"] = attrs
    return "n_positive"


@pytest.mark.parametrize(
    ("edit", "check", "split"),
    [
        (_nodata_pixel_keeping_its_rgb, "stored_pixels", "val"),
        (_full_nodata_tile_marked_positive, "tile_records", "train"),
        (_counts_off, "store_counts", "test"),
    ],
)
def test_a_store_whose_flags_or_nodata_pixels_disagree_fails_naming_the_tile(
    good_run: Path, tmp_path: Path, edit: object, check: str, split: str
) -> None:
    """Issue 23 point 2: validation holds each store's per-tile records, NoData pixels and counts against its
    pixels (NoData pixels hold 0 and label 255; kind, is_positive and counts agree): a hand-edited store fails,
    naming the tile."""
    run = copy_run(good_run, tmp_path / "run")
    named = edit(run)  # type: ignore[operator]
    where = f"in split {split}" + ("" if check == "store_counts" else f" at tile {named}")
    with pytest.raises(DataValidationError, match=rf"'{check}' failed {where}: .*{named}"):
        stages.validate_data(str(run), _cfg())


def test_good_stores_pass_the_record_and_pixel_checks(good_run: Path, tmp_path: Path) -> None:
    run = copy_run(good_run, tmp_path / "run")
    report = stages.validate_data(str(run), _cfg()) and json.loads((run / "validation" / "report.json").read_text())
    passed = {(c["name"], c["split"]) for c in report["checks"] if c["passed"]}
    for split in ("train", "val", "test"):
        assert {("tile_records", split), ("store_counts", split), ("stored_pixels", split)} <= passed
    for s in report["splits"].values():  # the summary's kinds are a partition of the tiles
        assert s["n_positive"] + s["n_negative"] + s["n_full_nodata_excluded"] == s["n_tiles"]


def test_a_val_store_under_min_val_positives_warns_in_the_report_and_the_log(
    good_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23 point 3: a val split (here from a given split, not derived) with fewer positive tiles than
    splits.min_val_positives passes with a warning in report.json, report.md and the log."""
    import logging

    run = copy_run(good_run, tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="rtscore"):
        stages.validate_data(str(run), _cfg(splits__min_val_positives=1000))
    report = json.loads((run / "validation" / "report.json").read_text())
    n = report["splits"]["val"]["n_positive"]
    wanted = f"val holds {n} positive tile(s), fewer than splits.min_val_positives=1000"
    assert report["status"] == "passed" and any(wanted in w for w in report["warnings"])
    assert wanted in (run / "validation" / "report.md").read_text()
    assert any(wanted in r.getMessage() for r in caplog.records)
    stages.validate_data(str(run), _cfg(splits__min_val_positives=n))
    assert not any(
        "min_val_positives" in w for w in json.loads((run / "validation" / "report.json").read_text())["warnings"]
    )


def test_a_val_split_without_negative_tiles_fails_validation_not_training(tmp_path: Path) -> None:
    """Issue 23: a val split of RTS tiles only passed validate-data and failed an epoch into training with a
    traceback ("ratio 1:1 needs negative tiles"); validate-data now names the split and what it lacks."""
    cfg = _cfg(data__generation__val__synthetic__n_negative=0)
    run = make_data_run(tmp_path / "run", cfg)
    with pytest.raises(DataValidationError, match=r"'both_classes' failed in split val: the val split holds no neg"):
        stages.validate_data(str(run), cfg)
    report = json.loads((run / "validation" / "report.json").read_text())
    assert [c["split"] for c in report["checks"] if c["name"] == "both_classes" and not c["passed"]] == ["val"]


# --------------------------------------------------------------------------- spatial blocking by geometry
SPAN = 32 * 4.77  # one 32 px synthetic tile, projected metres (EPSG:3857)


def _geotiff_run(tmp: Path, edit: Callable[[Path], None] | None = None) -> tuple[Path, PipelineConfig]:
    """The tiny config's three splits as a synthetic GeoTIFF root (``edit``-ed), ingested into a run."""
    from rtscore.config.generation import GenerationConfig
    from rtscore.data.geotiff.synth import write_synthetic_geotiffs

    generation = tiny_pipeline_config(tile=32)["data"]["generation"]
    root = tmp / "root"
    write_synthetic_geotiffs([GenerationConfig.model_validate(generation[s]) for s in SPLITS], root)
    if edit is not None:
        edit(root)
    cfg = parse_pipeline_config(geotiff_pipeline_config(str(root)))
    return make_data_run(tmp / "run", cfg), cfg


def _ground(rows_between: int, y_top_of_lower: float) -> float:
    """Ground metres of ``rows_between`` grid rows of ground above northing ``y_top_of_lower`` (cos of the latitude
    in the middle of the gap)."""
    y = y_top_of_lower + rows_between * SPAN / 2
    return rows_between * SPAN * math.cos(2 * math.atan(math.exp(y / 6378137.0)) - math.pi / 2)


def _mapped_negatives(root: Path) -> None:
    """Mapped Negative polygons (metadata.csv's NegativeUIDs) on two positive test tiles and one train tile."""
    import csv

    with open(root / "metadata.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    test = [r for r in rows if r["Tile_id"].startswith("test_") and r["TrainClass"] == "positive"][:2]
    train = [r for r in rows if r["Tile_id"].startswith("train_") and r["TrainClass"] == "positive"][:1]
    for r in test + train:
        r["NegativeUIDs"] = f"neg-{r['Tile_id']}"
    with open(root / "metadata.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture(scope="module")
def geotiff_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PipelineConfig]:
    return _geotiff_run(tmp_path_factory.mktemp("geo"), _mapped_negatives)


def test_geotiff_stores_report_the_least_ground_distance_between_splits(
    geotiff_run: tuple[Path, PipelineConfig], tmp_path: Path
) -> None:
    from rtscore.data.store.reader import ZarrTileStore

    run, cfg = copy_run(geotiff_run[0], tmp_path / "run"), geotiff_run[1]
    stages.validate_data(str(run), cfg)
    report = json.loads((run / "validation" / "report.json").read_text())
    blocking = report["blocking"]
    assert report["status"] == "passed" and blocking["measured"] and blocking["crs"] == "EPSG:3857"
    # issue 36 (2): tiles with a mapped Negative polygon of the inventory, counted per split
    assert [report["splits"][s]["n_mapped_negative"] for s in SPLITS] == [1, 0, 2]
    # The synthetic grid: train on row 0, val from row 200, test from row 400 (one row each here).
    val_top = ZarrTileStore(run / "datasets" / "val.zarr").metadata.bounds[0][3]  # type: ignore[index]
    test_top = ZarrTileStore(run / "datasets" / "test.zarr").metadata.bounds[0][3]  # type: ignore[index]
    val, test, val_test = blocking["distances"]
    assert (val["source_a"], val["source_b"]) == ("train", "val")
    assert val["min_distance_m"] == pytest.approx(_ground(199, val_top), rel=1e-9)
    assert (test["source_a"], test["source_b"]) == ("train", "test")
    assert test["min_distance_m"] == pytest.approx(_ground(399, test_top), rel=1e-9)
    assert (val_test["source_a"], val_test["source_b"], val_test["n_too_close"]) == ("val", "test", 0)
    assert val_test["min_distance_m"] > 0 and blocking["n_too_close"] == 0
    assert val["closest"]["tile_a"].startswith("train_") and val["closest"]["tile_b"].startswith("val_")
    passed = [c for c in report["checks"] if c["name"] == "geographic_blocking"]
    assert passed[0]["passed"] and "train<->val 1" in passed[0]["detail"] and "val<->test " in passed[0]["detail"]
    md = (run / "validation" / "report.md").read_text()
    assert "| full NoData excluded | with mapped negatives |" in md
    assert f"| train <-> val | {val['min_distance_m']:.1f} m | {val['closest']['tile_a']} |" in md
    assert f"| val <-> test | {val_test['min_distance_m']:.1f} m | {val_test['closest']['tile_a']} |" in md
    # splits.min_distance_m beyond the val distance (~10 km of ground) fails, naming the closest pair.
    far = cfg.model_copy(update={"splits": cfg.splits.model_copy(update={"min_distance_m": 20_000.0})})
    with pytest.raises(
        DataValidationError, match=r"'geographic_blocking' failed in split val at tile val_.*within 20000 m"
    ):
        stages.validate_data(str(copy_run(geotiff_run[0], tmp_path / "far")), far)


def _move_tile(root: Path, tile: str, onto: str) -> None:
    """Move ``tile`` (every file of it) 8 px east of tile ``onto``: it overlaps that tile (24 px) and the one east
    of it (8 px)."""
    import rasterio
    from rasterio.transform import Affine

    with rasterio.open(root / "PLANET-RGB" / f"{onto}.tif") as f:
        t = f.transform
    for path in root.glob(f"*/{tile}.tif"):
        with rasterio.open(path, "r+") as f:
            f.transform = Affine(t.a, 0.0, t.c + 8 * t.a, 0.0, t.e, t.f)


def _test_tile_onto_train(root: Path) -> None:
    _move_tile(root, "test_000000", "train_000001")


def test_a_test_tile_overlapping_a_train_tile_fails_validation_naming_both(tmp_path: Path) -> None:
    run, cfg = _geotiff_run(tmp_path, _test_tile_onto_train)
    with pytest.raises(
        DataValidationError,
        match=r"'geographic_blocking' failed in split test at tile test_000000: 2 pair\(s\) of tiles of different "
        r"splits overlap \(train<->test 2\): train tile train_000001 overlaps test tile test_000000; train tile "
        r"train_000002",
    ):
        stages.validate_data(str(run), cfg)
    report = json.loads((run / "validation" / "report.json").read_text())
    test = report["blocking"]["distances"][1]
    assert report["status"] == "failed" and test["min_distance_m"] == 0.0 and test["n_too_close"] == 2
    assert test["closest"] == {
        "source_a": "train",
        "tile_a": "train_000001",
        "source_b": "test",
        "tile_b": "test_000000",
        "distance_m": 0.0,
        "overlap": True,
    }
    md = (run / "validation" / "report.md").read_text()
    assert "| train <-> test | overlap | train_000001 | test_000000 | 2 |" in md
    assert "- train tile train_000001 overlaps test tile test_000000" in md
    # The region and tile-id checks still pass: the regions differ, only the ground is shared.
    checks = {c["name"]: c["passed"] for c in report["checks"]}
    assert checks["spatial_blocking"] and not checks["geographic_blocking"]


def test_a_test_tile_overlapping_a_val_tile_fails_validation_naming_both(tmp_path: Path) -> None:
    """val<->test is measured too (issue 35: an overlapping pair passed, 0 pairs flagged): neither tile is train."""
    run, cfg = _geotiff_run(tmp_path, lambda root: _move_tile(root, "test_000000", "val_000001"))
    with pytest.raises(
        DataValidationError,
        match=r"'geographic_blocking' failed in split test at tile test_000000: 2 pair\(s\) of tiles of different "
        r"splits overlap \(val<->test 2\): val tile val_000001 overlaps test tile test_000000; val tile val_000002 "
        r"overlaps test tile test_000000",
    ):
        stages.validate_data(str(run), cfg)
    report = json.loads((run / "validation" / "report.json").read_text())
    flagged = {f"{d['source_a']}<->{d['source_b']}": d["n_too_close"] for d in report["blocking"]["distances"]}
    assert flagged == {"train<->val": 0, "train<->test": 0, "val<->test": 2} and report["blocking"]["n_too_close"] == 2
    md = (run / "validation" / "report.md").read_text()
    assert "| val <-> test | overlap | val_000001 | test_000000 | 2 |" in md


def _extra_root_onto(run: Path, split: str, tile: int = 0) -> Path:
    """A copy of the run's train store as ``datasets/extra.zarr`` (an additional root of its own tile ids,
    ``extra_*``) whose tile extra_000000 lies 8 px east of ``split``'s tile ``tile``: it overlaps that tile (24 px)
    and the one east of it (8 px)."""
    import shutil

    import zarr

    from rtscore.data.store.reader import ZarrTileStore

    dst = run / "datasets" / "extra.zarr"
    shutil.copytree(run / "datasets" / "train.zarr", dst)
    meta = zarr.open_group(str(dst / "meta"), mode="r+")
    ids = np.asarray(meta["tile_id"][:])
    meta["tile_id"][:] = np.array([str(t).replace("train_", "extra_") for t in ids], dtype=ids.dtype)
    target = ZarrTileStore(run / "datasets" / f"{split}.zarr").metadata.bounds[tile]  # type: ignore[index]
    bounds = np.asarray(meta["bounds"][:])
    bounds[0] = target + np.array([8, 0, 8, 0]) * 4.77
    meta["bounds"][:] = bounds
    return dst


def _with_roots(cfg: PipelineConfig, roots: list[str]) -> PipelineConfig:
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"additional_roots": roots})})


@pytest.mark.parametrize("split", ["val", "test"])
def test_an_additional_root_on_val_or_test_ground_fails_validation_and_training(
    geotiff_run: tuple[Path, PipelineConfig], tmp_path: Path, split: str
) -> None:
    """data.additional_roots are train data: a root tile overlapping a val or test tile fails validation naming the
    root and both tiles, and training refuses the root before any step (issue 35: they were never measured)."""
    from rtscore.data.loading.dataset import build_train_dataset
    from rtscore.data.normalization.stats import load_normalization_stats
    from rtscore.data.splits.blocking import BlockingError

    run = copy_run(geotiff_run[0], tmp_path / "run")
    extra = _extra_root_onto(run, split)
    cfg = _with_roots(geotiff_run[1], ["datasets/extra.zarr"])
    with pytest.raises(
        DataValidationError,
        match=rf"'geographic_blocking' failed in split {split} at tile {split}_000000: .*"
        rf"\(data\.additional_roots\[0\]<->{split} 2\): data\.additional_roots\[0\] tile extra_000000 overlaps "
        rf"{split} tile {split}_000000; data\.additional_roots\[0\] tile extra_000000 overlaps {split} tile "
        rf"{split}_000001",
    ):
        stages.validate_data(str(run), cfg)
    report = json.loads((run / "validation" / "report.json").read_text())
    flagged = {f"{d['source_a']}<->{d['source_b']}": d["n_too_close"] for d in report["blocking"]["distances"]}
    assert flagged == {
        "train<->val": 0,
        "train<->test": 0,
        "data.additional_roots[0]<->val": 2 * (split == "val"),
        "data.additional_roots[0]<->test": 2 * (split == "test"),
        "val<->test": 0,
    }
    assert report["blocking"]["sources"]["data.additional_roots[0]"] == "train"
    stats = load_normalization_stats(run / "normalization_stats.json", ["ndvi"])
    with pytest.raises(BlockingError) as info:
        build_train_dataset(cfg, run, stats)
    msg = str(info.value)
    assert f"data.additional_roots[0] ({extra}) tile extra_000000 overlaps {split} tile {split}_000000" in msg


def test_stores_without_footprints_validate_and_say_so(
    good_run: Path, geotiff_run: tuple[Path, PipelineConfig], tmp_path: Path
) -> None:
    import shutil

    # Synthetic stores carry no footprints: not measured, said in both reports; a buffer is warned about.
    run = copy_run(good_run, tmp_path / "synthetic")
    stages.validate_data(str(run), _cfg(splits__min_distance_m=100.0))
    report = json.loads((run / "validation" / "report.json").read_text())
    assert report["status"] == "passed" and report["blocking"]["measured"] is False
    assert "carry no tile footprints" in report["blocking"]["note"]
    assert any("splits.min_distance_m is 100 m" in w for w in report["warnings"])
    assert (
        "Spatial blocking by geometry: not measured: the stores carry no tile footprints"
        in (run / "validation" / "report.md").read_text()
    )
    # GeoTIFF stores written before footprints were recorded (no meta/bounds) still read and validate.
    old, cfg = copy_run(geotiff_run[0], tmp_path / "old"), geotiff_run[1]
    for split in SPLITS:
        shutil.rmtree(old / "datasets" / f"{split}.zarr" / "meta" / "bounds")
    stages.validate_data(str(old), cfg)
    report = json.loads((old / "validation" / "report.json").read_text())
    assert report["status"] == "passed" and report["blocking"]["measured"] is False
