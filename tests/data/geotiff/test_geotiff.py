from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from flows.cli.main import main
from rtscore.config.base import ConfigError
from rtscore.config.binding import InputBinding
from rtscore.config.generation import GenerationConfig
from rtscore.config.pipeline import SplitsConfig
from rtscore.data.geotiff.ingest import ingest_geotiffs
from rtscore.data.geotiff.producer import GeotiffProducer
from rtscore.data.geotiff.root import METADATA_COLUMNS, OPTIONAL_METADATA_COLUMNS, GeotiffError
from rtscore.data.geotiff.selection import select_tiles
from rtscore.data.geotiff.synth import write_synthetic_geotiffs
from rtscore.data.inventory.object_pixels import parse_object_pixels, split_ids
from rtscore.data.store.format import read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.store.writer import staging_path
from rtscore.data.synthetic.producer import generate_synthetic

rasterio = pytest.importorskip("rasterio")
from rasterio.warp import transform as warp_transform  # noqa: E402


@pytest.fixture
def cfg() -> GenerationConfig:
    return GenerationConfig(
        split="train",
        tile_size=64,
        seed=11,
        synthetic={
            "n_positive": 3,
            "n_negative": 2,
            "n_full_nodata": 1,
            "regions": ["alpha tundra", "beta tundra"],
            "extra_channels": ["ndvi", "slope"],
            "partial_nodata_probability": 0.5,
            "generation_batch_size": 2,
        },
        store={"shard_tiles": 4, "write_noisy_labels": False},
    )


@pytest.fixture
def root(cfg: GenerationConfig, tmp_path: Path) -> Path:
    out = tmp_path / "tifs"
    write_synthetic_geotiffs(cfg, out)
    return out


def _rows(root: Path) -> list[dict[str, str]]:
    with open(root / "metadata.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _by_id(path: Path) -> dict[str, object]:
    store = ZarrTileStore(path)
    return {store[i].tile_id: store[i] for i in range(len(store))}


def test_round_trip_matches_synthetic_store(cfg: GenerationConfig, root: Path, tmp_path: Path) -> None:
    synth, ingested = tmp_path / "synth.zarr", tmp_path / "geo.zarr"
    generate_synthetic(cfg, synth)
    attrs = ingest_geotiffs(cfg, root, ingested)
    assert attrs.source == "geotiff" and attrs.channel_names == ["R", "G", "B", "ndvi", "slope"]
    assert attrs.mask_types == ["exact"] and attrs.counts.n_tiles == 6
    assert attrs.counts.n_full_nodata == 1 and attrs.counts.n_positive >= 1
    a, b = _by_id(synth), _by_id(ingested)
    assert set(a) == set(b)
    for tid, s in a.items():
        g = b[tid]
        assert g.region == s.region  # type: ignore[attr-defined]
        for name in ("rgb", "alpha", "label", "extra"):
            x, y = getattr(s, name), getattr(g, name)
            assert x.dtype == y.dtype, (tid, name)  # uint8 pixels/alpha/labels, float32 extra: no conversion
            np.testing.assert_array_equal(x, y, err_msg=f"{tid} {name}")
    ma, mb = ZarrTileStore(synth).metadata, ZarrTileStore(ingested).metadata
    np.testing.assert_array_equal(ma.kind, mb.kind)  # full NoData detected from alpha, others from TrainClass


def test_files_are_georeferenced_and_described(cfg: GenerationConfig, root: Path) -> None:
    rows = _rows(root)
    assert list(rows[0]) == [*METADATA_COLUMNS, *OPTIONAL_METADATA_COLUMNS]
    assert {r["TrainClass"] for r in rows} == {"positive", "negative"} and len(rows) == 6
    assert yaml.safe_load((root / "splits.yaml").read_text()) == {"train": ["alpha tundra", "beta tundra"]}
    origins = set()
    for r in rows:
        with rasterio.open(root / "PLANET-RGB" / f"{r['Tile_id']}.tif") as f:
            assert f.crs.to_epsg() == 3857 and f.count == 4 and f.dtypes == ("uint8",) * 4
            assert f.compression.name.lower() == "lzw"
            t = f.transform
            assert math.isclose(t.a, 4.77) and math.isclose(t.e, -4.77)
            origins.add((t.c, t.f))
            lon, lat = warp_transform(f.crs, "EPSG:4326", [t.c + 32 * 4.77], [t.f - 32 * 4.77])
            assert math.isclose(lat[0], float(r["centroid_lat"]), abs_tol=1e-5)
            assert math.isclose(lon[0], float(r["centroid_lon"]), abs_tol=1e-5)
            assert 65 < lat[0] < 71
            alpha = f.read(4)
            transform = f.transform
        with rasterio.open(root / "EXTRA" / f"{r['Tile_id']}.tif") as f:
            assert f.count == 2 and f.dtypes == ("float32", "float32") and f.transform == transform
            assert f.descriptions == ("ndvi", "slope")
        with rasterio.open(root / "labels" / f"{r['Tile_id']}.tif") as f:
            label = f.read(1)
            assert f.count == 1 and set(np.unique(label)) <= {0, 1, 255}
        pixels = parse_object_pixels(r["ObjectPixels"])  # one pixel of each RTS's label-1 area, an id each
        assert [p.uid for p in pixels] == split_ids(r["UIDs"]) and all(label[p.row, p.col] == 1 for p in pixels)
        assert r["NegativeUIDs"] == ""  # a synthetic scene has no mapped Negative polygons
        if r["TrainClass"] == "negative" and not alpha.any():
            assert r["UIDs"] == ""
    assert len(origins) == 6  # one grid cell per tile


def test_producer_is_picklable_and_reads_lazily(root: Path) -> None:
    import pickle

    entries = select_tiles(root, "train", with_extra=True)
    binding = InputBinding.positional(["ndvi"])
    p = pickle.loads(pickle.dumps(GeotiffProducer(root, entries, binding, batch_size=2)))
    tiles, codes = next(p.batches(1, 3))
    assert [t.tile_id for t in tiles] == [entries[1].tile_id, entries[2].tile_id] and len(codes) == 2
    assert tiles[0].extra is not None and tiles[0].extra.shape == (1, 64, 64)  # ndvi = EXTRA band 0


def _rewrite(path: Path, data: np.ndarray, **overrides: object) -> None:
    with rasterio.open(path) as f:
        profile = f.profile
    profile.update(count=data.shape[0], dtype=str(data.dtype), **overrides)
    with rasterio.open(path, "w", **profile) as f:
        f.write(data)


def _first(root: Path) -> str:
    return _rows(root)[0]["Tile_id"]


def _bad_crs(root: Path, tid: str) -> None:
    p = root / "PLANET-RGB" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()
    _rewrite(p, data, crs="EPSG:4326")


def _bad_size(root: Path, tid: str) -> None:
    p = root / "labels" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()[:, :32, :32]
    _rewrite(p, data, width=32, height=32)


def _bad_bands(root: Path, tid: str) -> None:
    p = root / "PLANET-RGB" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()[:2]
    _rewrite(p, data)


def _bad_dtype(root: Path, tid: str) -> None:
    p = root / "labels" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read().astype(np.uint16)
    _rewrite(p, data)


def _bad_label(root: Path, tid: str) -> None:
    p = root / "labels" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()
    data[0, 3, 3] = 7
    _rewrite(p, data)


def _few_extra(root: Path, tid: str) -> None:
    p = root / "EXTRA" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()[:1]
    _rewrite(p, data)


def _missing(root: Path, tid: str) -> None:
    (root / "EXTRA" / f"{tid}.tif").unlink()


def _missing_label(root: Path, tid: str) -> None:
    (root / "labels" / f"{tid}.tif").unlink()


def _region_twice(root: Path, tid: str) -> None:
    (root / "splits.yaml").write_text(
        yaml.safe_dump({"train": ["alpha tundra", "beta tundra"], "val": ["beta tundra"]})
    )


@pytest.mark.parametrize(
    ("corrupt", "message", "names_file"),
    [
        (_bad_crs, "CRS EPSG:4326, geotiff.crs is EPSG:3857; tiles need a projected CRS", "PLANET-RGB"),
        (_bad_size, "size must be 64x64 (its RGB raster's); got 32x32", "labels"),
        (_bad_bands, "needs at least 3 bands (R, G, B); this file has 2", "PLANET-RGB"),
        (_bad_dtype, "labels need 1 uint8 band; got 1 band(s) ['uint16']", "labels"),
        (_bad_label, "label values [7] outside {0, 1, 255}", "labels"),
        (_few_extra, "1 bands; EXTRA channels slope=band 1 are beyond them", "EXTRA"),
        (_missing, "tile files of metadata.csv are missing", "EXTRA"),
        (_missing_label, "tile files of metadata.csv are missing", "labels"),
        (_region_twice, "region 'beta tundra' is in two splits (train and val)", "splits.yaml"),
    ],
)
def test_bad_inputs_are_clear_errors_and_write_nothing(
    cfg: GenerationConfig, root: Path, tmp_path: Path, corrupt: object, message: str, names_file: str
) -> None:
    tid = _first(root)
    corrupt(root, tid)  # type: ignore[operator]
    out = tmp_path / "geo.zarr"
    with pytest.raises(GeotiffError) as err:
        ingest_geotiffs(cfg, root, out)
    text = str(err.value)
    assert message in text and names_file in text
    if names_file != "splits.yaml":
        assert f"{tid}.tif" in text
    assert not out.exists() and not staging_path(out).exists()


def _write_rows(root: Path, rows: list[dict[str, str]], columns: list[str] | None = None) -> None:
    with open(root / "metadata.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns or list(rows[0]), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def test_ingestion_stores_each_tiles_inventory_ids_and_latitude_from_metadata_csv(
    cfg: GenerationConfig, root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 36 (2, 6): UIDs, NegativeUIDs, ObjectPixels and centroid_lat ride into the store's per-tile metadata."""
    rows = _rows(root)
    negative = next(r for r in rows if r["TrainClass"] == "negative")
    negative["NegativeUIDs"] = "neg-1;neg-2"
    rows[0]["centroid_lat"] = ""  # unknown
    named = next(r for r in rows if r["UIDs"])
    with rasterio.open(root / "labels" / f"{named['Tile_id']}.tif") as f:
        off = np.argwhere(f.read(1) != 1)[0]
    named["ObjectPixels"] = f"{split_ids(named['UIDs'])[0]}@{off[0]},{off[1]}"  # a label redrawn since, say
    _write_rows(root, rows)
    with caplog.at_level("WARNING"):
        ingest_geotiffs(cfg, root, tmp_path / "geo.zarr", num_workers=1)
    assert "1 metadata.csv ObjectPixels entries of 1 tile(s) are not on an RTS (label 1) pixel" in caplog.text
    assert named["Tile_id"] in caplog.text
    meta = ZarrTileStore(tmp_path / "geo.zarr").metadata
    assert meta.uids is not None and meta.negative_uids is not None and meta.object_pixels is not None
    assert meta.latitude is not None
    by_id = {r["Tile_id"]: r for r in rows}
    for i, tid in enumerate(meta.tile_id):
        row = by_id[tid]
        assert (meta.uids[i], meta.negative_uids[i], meta.object_pixels[i]) == (
            row["UIDs"],
            row["NegativeUIDs"],
            row["ObjectPixels"],
        )
        assert meta.latitude[i] == float(row["centroid_lat"]) if row["centroid_lat"] else np.isnan(meta.latitude[i])
    assert any(meta.object_pixels) and meta.mapped_negative.tolist() == [t == negative["Tile_id"] for t in meta.tile_id]
    # a root without the optional columns reads as if they were empty
    _write_rows(root, rows, [c for c in rows[0] if c not in OPTIONAL_METADATA_COLUMNS])
    entries = select_tiles(root, "train", with_extra=True)
    assert {(e.inventory.negative_uids, e.inventory.object_pixels) for e in entries} == {("", "")}
    assert entries[1].inventory.uids == rows[1]["UIDs"]


def test_a_bad_inventory_entry_is_refused_naming_the_tile_and_the_column(root: Path) -> None:
    rows = _rows(root)
    tid = rows[2]["Tile_id"]
    for column, value, message in (
        ("ObjectPixels", "x@1", r"ObjectPixels entry 'x@1' is not <uid>@<row>,<col>"),
        ("ObjectPixels", "stranger@1,1", r"ObjectPixels names \['stranger'\], which are not in its UIDs"),
        ("centroid_lat", "north", r"centroid_lat 'north' is not a number"),
        ("centroid_lat", "95.2", r"centroid_lat '95.2' is not a latitude in \[-90, 90\]"),
    ):
        _write_rows(root, [{**r, column: value} if r["Tile_id"] == tid else r for r in rows])
        where = rf"metadata.csv: 1 tile\(s\) with a bad inventory column:\n  tile {tid}: "
        with pytest.raises(GeotiffError, match=where + message):
            select_tiles(root, "train", with_extra=True)


def test_an_object_pixel_outside_its_tile_is_refused_before_any_store(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    rows = _rows(root)
    row = next(r for r in rows if r["UIDs"])
    row["ObjectPixels"] = f"{split_ids(row['UIDs'])[0]}@3,64"  # column 64 of a 64 px tile
    _write_rows(root, rows)
    with pytest.raises(GeotiffError, match=r"ObjectPixels entry '.*@3,64': pixel \(3, 64\) is outside the 64x64 tile"):
        ingest_geotiffs(cfg, root, tmp_path / "geo.zarr", num_workers=1)
    assert not (tmp_path / "geo.zarr").exists()


def test_ingest_takes_only_the_split_regions(cfg: GenerationConfig, root: Path, tmp_path: Path) -> None:
    (root / "splits.yaml").write_text(yaml.safe_dump({"train": ["alpha tundra"], "val": ["beta tundra"]}))
    val_cfg = cfg.model_copy(update={"split": "val"})
    attrs = ingest_geotiffs(val_cfg, root, tmp_path / "val.zarr")
    assert attrs.split == "val" and attrs.counts.regions == ["beta tundra"]
    assert attrs.counts.n_tiles == sum(r["RegionName"] == "beta tundra" for r in _rows(root))


def test_cli_commands(cfg: GenerationConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gen = tmp_path / "gen.yaml"
    gen.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    tifs, store = tmp_path / "tifs", tmp_path / "train.zarr"
    assert main(["synth-geotiff", "--config", str(gen), "--output", str(tifs)]) == 0
    assert (tifs / "metadata.csv").is_file()
    args = ["generate", "--source", "geotiff", "--data-root", str(tifs), "--config", str(gen), "--output", str(store)]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().out and read_store_attrs(store).source == "geotiff"
    _bad_label(tifs, _first(tifs))
    shutil.rmtree(store)
    assert main(args) == 2
    assert "label values [7]" in capsys.readouterr().err and not store.exists()


def test_worker_processes_give_the_same_store(cfg: GenerationConfig, root: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.zarr", tmp_path / "two.zarr"
    ingest_geotiffs(cfg, root, one, num_workers=1)
    ingest_geotiffs(cfg, root, two, num_workers=2)  # spawn workers: the producer is pickled
    a, b = ZarrTileStore(one), ZarrTileStore(two)
    for i in range(len(a)):
        assert a[i].tile_id == b[i].tile_id
        np.testing.assert_array_equal(a[i].rgb, b[i].rgb)
        np.testing.assert_array_equal(a[i].extra, b[i].extra)


def test_pipeline_config_points_generation_at_a_geotiff_root(tmp_path: Path) -> None:
    """One data root for all splits (synth-geotiff of a pipeline config), ingested by the generate stage."""
    from rtscore import stages
    from rtscore.config import parse_pipeline_config
    from tests.helpers import tiny_pipeline_config

    data = tiny_pipeline_config()
    synthetic = parse_pipeline_config(data)
    root = tmp_path / "tiles"
    assert main(["synth-geotiff", "--config", str(_write_yaml(tmp_path / "p.yaml", data)), "--output", str(root)]) == 0
    assert set(yaml.safe_load((root / "splits.yaml").read_text())) == {"train", "val", "test"}
    geo = dict(data)
    geo["data"] = {
        **data["data"],
        "generation": {
            split: {
                "split": split,
                "tile_size": data["data"]["tile_size"],
                "source": "geotiff",
                "geotiff": {
                    "data_root": "tiles",
                    "extra_channels": [{"name": "ndvi", "band": 0}],
                },  # relative to the config's dir
            }
            for split in ("train", "val", "test")
        },
    }
    cfg = parse_pipeline_config(geo, base_dir=tmp_path)
    assert cfg.data.generation.val.geotiff.data_root == str(root.resolve())
    # issue 38 (5): a root rts tile cut with other split rules (its tiling.json's config; only that part is read) is
    # refused before the first split; the same rules pass
    rules = {"min_val_regions": 2, "min_test_positives": 100, "min_val_positives": 20}
    (root / "tiling.json").write_text(json.dumps({"config": {"split_rules": rules}}))
    with pytest.raises(ConfigError, match=r"split_rules.min_test_positives is 100 in .*tiling.json, splits.min_test_"):
        stages.generate_dataset(str(tmp_path / "geo"), cfg, "train")
    assert not (tmp_path / "geo" / "datasets").exists()
    rules["min_test_positives"] = cfg.splits.min_test_positives
    (root / "tiling.json").write_text(json.dumps({"config": {"split_rules": rules}}))
    for split in ("train", "val", "test"):
        stages.generate_dataset(str(tmp_path / "geo"), cfg, split)
        generate_synthetic(getattr(synthetic.data.generation, split), tmp_path / f"syn_{split}.zarr")
        a, b = _by_id(tmp_path / f"syn_{split}.zarr"), _by_id(tmp_path / "geo" / "datasets" / f"{split}.zarr")
        assert a.keys() == b.keys()
        for tid, sample in a.items():
            other = b[tid]
            for name in ("rgb", "alpha", "label", "extra"):
                assert np.array_equal(getattr(sample, name), getattr(other, name)), (split, tid, name)
    with pytest.raises(ValueError, match="needs the geotiff section"):
        GenerationConfig.model_validate({"split": "val", "tile_size": 64, "source": "geotiff"})


def _write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_rts_polygons_in_geojson_replace_a_missing_label_raster(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    import json

    import rasterio

    tid = _first(root)
    with rasterio.open(root / "PLANET-RGB" / f"{tid}.tif") as f:
        t = f.transform
    x0, y0 = t.c + 10 * t.a, t.f + 10 * t.e  # pixel (10, 10) ...
    x1, y1 = t.c + 20 * t.a, t.f + 30 * t.e  # ... to (30, 20): rows 10-29, cols 10-19
    ring = [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]
    (root / "labels" / f"{tid}.tif").unlink()
    (root / "labels" / f"{tid}.geojson").write_text(
        json.dumps(
            {
                "type": "FeatureCollection",
                "crs": {"type": "name", "properties": {"name": "EPSG:3857"}},
                "features": [
                    {"type": "Feature", "properties": {}, "geometry": {"type": "Polygon", "coordinates": [ring]}}
                ],
            }
        )
    )
    ingest_geotiffs(cfg, root, tmp_path / "store.zarr")
    label = _by_id(tmp_path / "store.zarr")[tid].label  # type: ignore[attr-defined]
    alpha = _by_id(tmp_path / "store.zarr")[tid].alpha  # type: ignore[attr-defined]
    inside = np.zeros_like(label, bool)
    inside[10:30, 10:20] = True
    assert (label[inside & (alpha > 0)] == 1).all() and (label[~inside & (alpha > 0)] == 0).all()


def test_missing_splits_yaml_is_derived_by_region_and_written(tmp_path: Path) -> None:
    cfgs = [
        GenerationConfig(
            split="train",
            tile_size=32,
            seed=3,
            synthetic={"n_positive": 20, "n_negative": 20, "regions": [f"r{i:02d}" for i in range(20)]},
            store={"shard_tiles": 8, "write_noisy_labels": False},
        )
    ]
    root = tmp_path / "tifs"
    write_synthetic_geotiffs(cfgs, root)
    (root / "splits.yaml").unlink()
    geo = GenerationConfig.model_validate(
        {
            "split": "val",
            "tile_size": 32,
            "source": "geotiff",
            "geotiff": {"data_root": str(root)},
        }
    )
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    out = tmp_path / "out"
    ingest_geotiffs(geo, root, out / "val.zarr", split_rules=SplitsConfig(min_test_positives=2))
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # the data root is an input: untouched
    splits = yaml.safe_load((out / "splits.yaml").read_text())  # outside a run: beside the store
    regions = [r for s in ("train", "val", "test") for r in splits[s]]
    assert sorted(regions) == [f"r{i:02d}" for i in range(20)] and len(splits["val"]) >= 2
    summary = json.loads((out / "splits_summary.json").read_text())
    assert summary["splits"] == splits and summary["derived_from"] == str(root)
    stored = {s.region for s in _by_id(out / "val.zarr").values()}  # type: ignore[attr-defined]
    assert stored <= set(splits["val"])


def test_a_gs_data_root_is_staged_then_ingested(
    cfg: GenerationConfig, root: Path, tmp_path: Path, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests.conftest import GCS_TEST_BUCKET

    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RTS_GCS_WORKERS", "4")
    prefix = f"{uuid.uuid4().hex[:8]}/tiles"
    bucket = storage.Client(project="test", credentials=AnonymousCredentials()).bucket(GCS_TEST_BUCKET)
    for f in root.rglob("*"):
        if f.is_file():
            bucket.blob(f"{prefix}/{f.relative_to(root).as_posix()}").upload_from_filename(str(f))
    ingest_geotiffs(cfg, f"gs://{GCS_TEST_BUCKET}/{prefix}", tmp_path / "from_gcs.zarr")
    ingest_geotiffs(cfg, root, tmp_path / "local.zarr")
    a, b = _by_id(tmp_path / "from_gcs.zarr"), _by_id(tmp_path / "local.zarr")
    assert a.keys() == b.keys()
    for tid in a:
        for name in ("rgb", "alpha", "label", "extra"):
            assert np.array_equal(getattr(a[tid], name), getattr(b[tid], name))


def two_band_root(tmp_path: Path) -> tuple[Path, GenerationConfig]:
    """A GeoTIFF root whose EXTRA files hold two bands (synthetic ndvi, slope), and the generation config of a
    GeoTIFF source that binds channel ``nbr`` to EXTRA band 1."""
    synthetic = GenerationConfig(
        split="train",
        tile_size=64,
        seed=5,
        synthetic={
            "n_positive": 3,
            "n_negative": 3,
            "regions": ["alpha tundra", "beta tundra"],
            "extra_channels": ["ndvi", "slope"],
            "partial_nodata_probability": 0.6,
            "generation_batch_size": 3,
        },
        store={"shard_tiles": 4, "write_noisy_labels": False},
    )
    root = tmp_path / "two-band-tifs"
    write_synthetic_geotiffs(synthetic, root)
    geo = GenerationConfig(
        split="train",
        tile_size=64,
        source="geotiff",
        geotiff={"data_root": str(root), "extra_channels": [{"name": "nbr", "band": 1}]},
        store={"shard_tiles": 4},
    )
    return root, geo


def test_extra_band_binding_reaches_store_stats_predict_and_drift(tmp_path: Path) -> None:
    """Issue 11 point 1: ``{name: nbr, band: 1}`` makes the store, the stats, predict and drift all read band 1."""
    from rtscore.config.binding import ExtraChannel
    from rtscore.data.normalization.compute import compute_normalization_stats
    from rtscore.data.normalization.stats import write_normalization_stats
    from rtscore.data.raster.bands import open_checked
    from rtscore.inference.drift import drift_report
    from rtscore.inference.predict import PredictError, load_package
    from rtscore.package import write_sha256sums
    from tests.test_predict import write_package

    root, geo = two_band_root(tmp_path)
    store = tmp_path / "train.zarr"
    attrs = ingest_geotiffs(geo, root, store)
    assert attrs.channel_names == ["R", "G", "B", "nbr"]
    assert read_store_attrs(store).binding().bands_by_name() == {"nbr": 1}
    band0, band1 = [], []
    tiles = ZarrTileStore(store)
    for sample in (tiles[i] for i in range(len(tiles))):
        with rasterio.open(root / "EXTRA" / f"{sample.tile_id}.tif") as f:
            raw = f.read()
        np.testing.assert_array_equal(sample.extra[0], raw[1])  # the store holds band 1 ...
        assert not np.array_equal(sample.extra[0], raw[0])  # ... not band 0
        band0.append(raw[0][sample.alpha > 0])
        band1.append(raw[1][sample.alpha > 0])
    b0, b1 = np.concatenate(band0).astype(np.float64), np.concatenate(band1).astype(np.float64)
    assert abs(b0.mean() - b1.mean()) > 0.1 * b1.std()

    stats = compute_normalization_stats(store, extra_channels=[ExtraChannel(name="nbr", band=1)])
    assert stats.extra_bands == [1] and stats.to_json()["extra"]["bands"] == [1]
    np.testing.assert_allclose([stats.mean[3], stats.std[3]], [b1.mean(), b1.std()], rtol=1e-6)

    pkg_dir = write_package(tmp_path / "pkg", extra=[{"name": "nbr", "band": 1}], stats=stats)
    pkg = load_package(pkg_dir, device="cpu")
    tile = next(iter(sorted((root / "PLANET-RGB").iterdir())))
    with (
        rasterio.open(root / "EXTRA" / tile.name) as f,
        open_checked(pkg.contract, pkg.binding, tile, root / "EXTRA" / tile.name) as raster,
    ):
        _, extra, valid = raster.read()  # predict's reader reads band 1 (0 under NoData)
        np.testing.assert_array_equal(extra[0], np.where(valid, f.read(2), 0))

    report = drift_report(pkg_dir, root, tmp_path / "drift")  # the root's tiles are the training tiles
    nbr = report.channels[3]
    assert nbr.channel == "nbr" and report.valid_pixels == b1.size
    np.testing.assert_allclose([nbr.new_mean, nbr.new_std], [b1.mean(), b1.std()], rtol=1e-6)
    assert report.ok

    # stats of band 0 under the same name are refused at every load that knows the binding
    write_normalization_stats(dataclasses.replace(stats, extra_bands=[0]), pkg_dir / "normalization_stats.json")
    write_sha256sums(pkg_dir)
    with pytest.raises(PredictError, match=r"computed from EXTRA bands \[0\]; model_config.yaml reads bands \[1\]"):
        load_package(pkg_dir, device="cpu")


# --------------------------------------------------------------------------------------------- issue 12: cases 6-10
def _positive(root: Path) -> str:
    return next(r["Tile_id"] for r in _rows(root) if r["TrainClass"] == "positive")


def _rgb_grid(root: Path, tid: str) -> tuple[object, object]:
    with rasterio.open(root / "PLANET-RGB" / f"{tid}.tif") as f:
        return f.transform, f.crs


def _refused(cfg: GenerationConfig, root: Path, tmp_path: Path, *expected: str) -> str:
    """Ingestion refuses with a message holding every ``expected`` part, and leaves no store, no staging and no
    file in the data root behind."""
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    out = tmp_path / "refused.zarr"
    with pytest.raises(GeotiffError) as err:
        ingest_geotiffs(cfg, root, out)
    text = str(err.value)
    for part in expected:
        assert part in text, (part, text)
    assert not out.exists() and not staging_path(out).exists() and not list(tmp_path.glob("splits*"))
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    return text


def test_utm_training_tiles_are_sent_to_geotiff_crs_or_rts_tile_never_rts_warp(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    """Issue 38 (5): a data root's tiles in UTM, the generation config's geotiff.crs EPSG:3857: the refusal names the
    key that accepts them (geotiff.crs) or the command that cuts them on one grid (rts tile), not rts warp, which makes
    scenes to map, never training tiles."""
    tid = _first(root)
    p = root / "PLANET-RGB" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()
    _rewrite(p, data, crs="EPSG:32606")
    text = _refused(
        cfg,
        root,
        tmp_path,
        f"PLANET-RGB/{tid}.tif: CRS EPSG:32606, geotiff.crs is EPSG:3857; set geotiff.crs: EPSG:32606 in the "
        "generation config if every tile of the root is in it, else cut the root again from its scenes with rts tile "
        "--config <tiling config> (one grid.crs for every tile)",
    )
    assert "rts warp" not in text and "trained on" not in text


def _polygon_file(path: Path, rings_lonlat: list[list[list[float]]], driver: str | None = None) -> None:
    """Polygons in lon/lat: GeoJSON without a crs member (RFC 7946), or another OGR format declaring EPSG:4326."""
    if driver is None:
        feats = [
            {"type": "Feature", "properties": {}, "geometry": {"type": "Polygon", "coordinates": [r]}}
            for r in rings_lonlat
        ]
        path.write_text(json.dumps({"type": "FeatureCollection", "features": feats}))
        return
    import pyogrio
    import shapely

    geoms = np.array([shapely.to_wkb(shapely.Polygon(r)) for r in rings_lonlat], dtype=object)
    pyogrio.raw.write(path, geoms, [], fields=[], crs="EPSG:4326", geometry_type="Polygon", driver=driver)


def _lonlat_box(root: Path, tid: str, rows: tuple[int, int], cols: tuple[int, int]) -> list[list[float]]:
    """The lon/lat ring of pixel rows/cols ``[r0, r1) x [c0, c1)`` of a tile (corners through EPSG:3857)."""
    t, crs = _rgb_grid(root, tid)
    xs = [t.c + c * t.a for c in cols]  # type: ignore[attr-defined]
    ys = [t.f + r * t.e for r in rows]  # type: ignore[attr-defined]
    lon, lat = warp_transform(crs, "EPSG:4326", [xs[0], xs[1], xs[1], xs[0]], [ys[0], ys[0], ys[1], ys[1]])
    return [[x, y] for x, y in zip(lon, lat, strict=True)] + [[lon[0], lat[0]]]


@pytest.mark.parametrize(("suffix", "driver"), [(".geojson", None), (".gpkg", "GPKG"), (".fgb", "FlatGeobuf")])
def test_case6_lonlat_polygons_in_any_vector_format_label_the_tile(
    cfg: GenerationConfig, root: Path, tmp_path: Path, suffix: str, driver: str | None
) -> None:
    """GeoJSON without crs is WGS84 and is reprojected; GeoPackage and FlatGeobuf labels are read too."""
    tid = _positive(root)
    (root / "labels" / f"{tid}.tif").unlink()
    _polygon_file(root / "labels" / f"{tid}{suffix}", [_lonlat_box(root, tid, (10, 30), (10, 20))], driver)
    ingest_geotiffs(cfg, root, tmp_path / "store.zarr")
    tile = _by_id(tmp_path / "store.zarr")[tid]
    inside = np.zeros((64, 64), bool)
    inside[10:30, 10:20] = True
    valid = tile.alpha > 0  # type: ignore[attr-defined]
    assert (tile.label[inside & valid] == 1).all() and (tile.label[~inside & valid] == 0).all()  # type: ignore[attr-defined]


def test_case6_a_positive_tile_whose_label_comes_out_empty_is_refused(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    """Polygons elsewhere (here 1 km east of the tile) or an all-background raster on a positive tile: an error
    naming the tile and the file, not a positive tile trained as background."""
    tid = _positive(root)
    (root / "labels" / f"{tid}.tif").unlink()
    ring = [[x + 0.05, y] for x, y in _lonlat_box(root, tid, (10, 30), (10, 20))]
    _polygon_file(root / "labels" / f"{tid}.geojson", [ring])
    _refused(cfg, root, tmp_path, f"tile {tid}", f"labels/{tid}.geojson", "positive", "no RTS pixel (1 or partial 255)")
    (root / "labels" / f"{tid}.geojson").unlink()
    with rasterio.open(root / "PLANET-RGB" / f"{tid}.tif") as f:
        profile = {**f.profile, "count": 1, "dtype": "uint8"}
    with rasterio.open(root / "labels" / f"{tid}.tif", "w", **profile) as f:
        f.write(np.zeros((1, 64, 64), np.uint8))
    _refused(cfg, root, tmp_path, f"tile {tid}", f"labels/{tid}.tif", "no RTS pixel (1 or partial 255)")
    partial = np.zeros((1, 64, 64), np.uint8)
    partial[0, :10, :10] = 255  # a slump cut by the tile edge: a real positive tile, accepted
    with rasterio.open(root / "labels" / f"{tid}.tif", "w", **profile) as f:
        f.write(partial)
    ingest_geotiffs(cfg, root, tmp_path / "partial.zarr")


def _shift(path: Path, dx_px: float) -> None:
    from rasterio.transform import Affine

    with rasterio.open(path) as f:
        data, t = f.read(), f.transform
    _rewrite(path, data, transform=Affine(t.a, t.b, t.c + dx_px * t.a, t.d, t.e, t.f))


def test_case7_label_and_extra_rasters_off_the_rgb_grid_are_refused(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    tid = _first(root)
    _shift(root / "labels" / f"{tid}.tif", 3)
    _refused(cfg, root, tmp_path, f"labels/{tid}.tif", "not on the grid", f"PLANET-RGB/{tid}.tif")
    _shift(root / "labels" / f"{tid}.tif", -3)
    _shift(root / "EXTRA" / f"{tid}.tif", 0.5)
    _refused(cfg, root, tmp_path, f"EXTRA/{tid}.tif", "not on the grid", f"PLANET-RGB/{tid}.tif")


def _valid_at(root: Path, tid: str, lo: int, hi: int) -> bool:
    with rasterio.open(root / "PLANET-RGB" / f"{tid}.tif") as f:
        return bool((f.read(4)[lo:hi, lo:hi] > 0).all())


def test_case7_nan_in_extra_is_refused_at_ingestion_naming_tile_and_file(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    """Undeclared NaN (NDVI over water) fails ingestion, naming the tile and the EXTRA file (not later at stats);
    declared as the raster's nodata, those pixels are NoData."""
    tid = next(t for t in (r["Tile_id"] for r in _rows(root)) if _valid_at(root, t, 40, 50))
    p = root / "EXTRA" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()
    data[0, 40:50, 40:50] = np.nan
    _rewrite(p, data)
    _refused(cfg, root, tmp_path, f"tile {tid}", f"EXTRA/{tid}.tif", "NaN or inf")
    _rewrite(p, data, nodata=float("nan"))
    ingest_geotiffs(cfg, root, tmp_path / "declared.zarr")
    tile = _by_id(tmp_path / "declared.zarr")[tid]
    assert (tile.alpha[40:50, 40:50] == 0).all() and np.isfinite(tile.extra).all()  # type: ignore[attr-defined]


def test_case8_a_3band_tile_with_nodata_0_is_nodata_at_ingestion_as_at_predict(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    from rtscore.config.binding import RasterContract
    from rtscore.data.raster.bands import open_checked

    tid = _first(root)
    p = root / "PLANET-RGB" / f"{tid}.tif"
    with rasterio.open(p) as f:
        rgb = f.read([1, 2, 3])
    rgb[:, :20, :] = 0  # a black NoData border, the file's declared nodata
    from rasterio.enums import ColorInterp

    _rewrite(p, rgb, nodata=0)
    with rasterio.open(p, "r+") as f:
        f.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue]
    ingest_geotiffs(cfg, root, tmp_path / "store.zarr")
    stored = _by_id(tmp_path / "store.zarr")[tid].alpha  # type: ignore[attr-defined]
    with open_checked(RasterContract(crs="EPSG:3857"), InputBinding.positional([]), p) as src:
        _, _, valid = src.read()  # what predict reads
    np.testing.assert_array_equal(stored, np.where(valid, 255, 0))
    assert (stored[:20] == 0).all() and (stored[20:] == 255).any()


def test_point1_band_order_by_colour_interpretation_or_the_configured_map(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    """A 4-band B,G,R,NIR tile (no alpha, no colour interpretation) is refused; geotiff.rgb_bands maps it, and the
    store records the contract (band map, CRS, the data's pixel size)."""
    tid = _first(root)
    p = root / "PLANET-RGB" / f"{tid}.tif"
    with rasterio.open(p) as f:
        rgb = f.read([1, 2, 3])
    from rasterio.enums import ColorInterp

    _rewrite(p, np.concatenate([rgb[::-1], np.full((1, 64, 64), 7, np.uint8)]))
    with rasterio.open(p, "r+") as f:
        f.colorinterp = [ColorInterp.undefined] * 4
    _refused(
        cfg,
        root,
        tmp_path,
        f"PLANET-RGB/{tid}.tif",
        "say which band is which",
        "map them with geotiff.rgb_bands: {rgb: [r, g, b], alpha: a|null} in the generation config",
    )
    geo = GenerationConfig.model_validate(
        {
            "split": "train",
            "tile_size": 64,
            "source": "geotiff",
            "geotiff": {
                "data_root": str(root),
                "extra_channels": [{"name": "ndvi", "band": 0}],
                "rgb_bands": {"rgb": [2, 1, 0], "alpha": None},
            },
        }
    )
    for other in _rows(root):  # every other tile as B,G,R,NIR too
        if other["Tile_id"] != tid:
            q = root / "PLANET-RGB" / f"{other['Tile_id']}.tif"
            with rasterio.open(q) as f:
                px = f.read([1, 2, 3])
            _rewrite(q, np.concatenate([px[::-1], np.full((1, 64, 64), 7, np.uint8)]))
            with rasterio.open(q, "r+") as f:
                f.colorinterp = [ColorInterp.undefined] * 4
    attrs = ingest_geotiffs(geo, root, tmp_path / "mapped.zarr")
    np.testing.assert_array_equal(_by_id(tmp_path / "mapped.zarr")[tid].rgb, rgb)  # type: ignore[attr-defined]
    contract = attrs.raster_contract.model_dump(mode="json")
    assert contract["rgb_bands"] == {"rgb": [2, 1, 0], "alpha": None} and contract["crs"] == "EPSG:3857"
    assert contract["pixel_size"] == pytest.approx(4.77)


def _regrid(root: Path, pixel: float) -> None:
    """Every file of the root at ``pixel`` CRS units per pixel (same upper-left corners)."""
    from rasterio.transform import Affine

    for p in root.glob("*/*.tif"):
        with rasterio.open(p) as f:
            data, t, interp = f.read(), f.transform, f.colorinterp
        _rewrite(p, data, transform=Affine(pixel, 0.0, t.c, 0.0, -pixel, t.f))
        with rasterio.open(p, "r+") as f:
            f.colorinterp = interp


def test_case9_pixel_areas_come_from_each_tiles_transform_and_latitude(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    """110 m EPSG:3857 pixels near 70 N: each tile stores its ground pixel area (110 cos(lat))^2 ~ 1,400 m², so
    a 10 x 10 px RTS is ~0.14 km² (not 2,275 m² as with 4.77 m assumed) and falls in the >= 50,000 m² bin."""
    from rtscore.config import parse_pipeline_config
    from rtscore.evaluation.evaluate import size_bins
    from rtscore.metrics import ObjectCounter, match_objects
    from tests.helpers import tiny_pipeline_config

    _regrid(root, 110.0)
    ingest_geotiffs(cfg, root, tmp_path / "store.zarr")
    store = ZarrTileStore(tmp_path / "store.zarr")
    for i, tid in enumerate(store.metadata.tile_id):
        t, _ = _rgb_grid(root, str(tid))
        _, lat = warp_transform("EPSG:3857", "EPSG:4326", [t.c + 32 * 110.0], [t.f - 32 * 110.0])  # type: ignore[attr-defined]
        expected = (110.0 * math.cos(math.radians(lat[0]))) ** 2
        assert store.metadata.pixel_area_m2[i] == pytest.approx(expected, rel=1e-9)
        assert store[i].pixel_area_m2 == pytest.approx(expected, rel=1e-9) and 1_000 < expected < 2_000
    assert read_store_attrs(tmp_path / "store.zarr").contract().pixel_size == pytest.approx(110.0)

    pipeline = parse_pipeline_config(tiny_pipeline_config())
    label = np.zeros((64, 64), np.uint8)
    label[5:15, 5:15] = 1
    objects = ObjectCounter(pipeline.metrics.object_iou_thresholds)
    objects.add(match_objects(np.where(label == 1, 5.0, -5.0), label), pixel_area_m2=store[0].pixel_area_m2)
    bins = {(b.area_m2_from, b.area_m2_to): b.n_objects for b in size_bins(objects, pipeline.evaluation.size_bins_m2)}
    assert bins[(50_000.0, 1.0e12)] == 1 and bins[(0.0, 2_000.0)] == 0

    from rtscore.calibrate.cache import large_positive_mask, large_side_px

    # the large-RTS rule (bbox > 500 m): 10 px of ~37.6 m ground are 376 m, 14 px are 526 m
    side = large_side_px(pipeline.calibration.large_rts_bbox_m, store[0].pixel_area_m2)
    assert not large_positive_mask(label, side).any()
    label[5:19, 5:19] = 1
    assert large_positive_mask(label, side).sum() == 14 * 14


def test_case9_a_geographic_crs_and_disagreeing_pixel_sizes_are_refused(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    geo = {"split": "train", "tile_size": 64, "source": "geotiff", "geotiff": {"data_root": str(root)}}
    degrees = GenerationConfig.model_validate({**geo, "geotiff": {"data_root": str(root), "crs": "EPSG:4326"}})
    _refused(degrees, root, tmp_path, "geotiff.crs", "EPSG:4326 is geographic (degrees)", "rts tile")
    from rasterio.transform import Affine

    odd = _first(root)
    for p in root.glob(f"*/{odd}.tif"):
        with rasterio.open(p) as f:
            data, t = f.read(), f.transform
        _rewrite(p, data, transform=Affine(9.54, 0.0, t.c, 0.0, -9.54, t.f))
    _refused(
        GenerationConfig.model_validate(geo),
        root,
        tmp_path,
        f"tile {odd}",
        "pixel size 9.54 x 9.54",
        "median is 4.77",
        # the fix names the command and the key (issue 38, point 5): not "set geotiff.pixel_size", which would refuse
        # the same outliers against the set size
        "cut the root again from its scenes with rts tile --config <tiling config> (one grid.pixel_size for every "
        "tile), or, for a difference the model may learn across, widen geotiff.pixel_size_tolerance",
    )


def test_case10_a_region_in_no_split_is_an_error_with_a_case_hint(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    (root / "splits.yaml").write_text(yaml.safe_dump({"train": ["Alpha Tundra", "beta tundra"]}))
    _refused(cfg, root, tmp_path, "'alpha tundra'", "in no split", "splits.yaml has 'Alpha Tundra' in train")


def test_case10_splits_yaml_with_a_duplicate_key_is_refused(cfg: GenerationConfig, root: Path, tmp_path: Path) -> None:
    (root / "splits.yaml").write_text("train: [alpha tundra]\ntrain: [beta tundra]\n")
    _refused(cfg, root, tmp_path, "splits.yaml, line 2: key 'train' is given twice")


def _metadata(root: Path, regions: dict[str, tuple[int, int]]) -> None:
    """metadata.csv of ``region -> (tiles, positive tiles)``."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "metadata.csv", "w", newline="") as fh:
        w = csv.DictWriter(
            fh, fieldnames=["Tile_id", "centroid_lat", "centroid_lon", "TrainClass", "RegionName", "UIDs"]
        )
        w.writeheader()
        for region, (n, pos) in regions.items():
            for i in range(n):
                klass = "positive" if i < pos else "negative"
                w.writerow(
                    {
                        "Tile_id": f"{region}-{i}",
                        "centroid_lat": "70",
                        "centroid_lon": "-150",
                        "UIDs": "",
                        "TrainClass": klass,
                        "RegionName": region,
                    }
                )


def test_case10_derivation_blames_min_test_positives_and_warns_on_the_console(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Six regions of 30 positives, min_test_positives 100: test takes 4 regions, so val cannot have 2. The error
    names splits.min_test_positives (not "val spans 1 region"). A derived split's warning is logged."""
    import logging

    from rtscore.data.geotiff.root_splits import ensure_splits

    _metadata(tmp_path / "six", {f"r{r}": (40, 30) for r in range(6)})
    with pytest.raises(GeotiffError) as err:
        ensure_splits(tmp_path / "six", rules=SplitsConfig(min_test_positives=100))
    assert "splits.min_test_positives=100" in str(err.value) and "val spans" not in str(err.value)
    # 40 positives in 4 small regions, test needs 20 of them: train can never hold 70 % (a warning, not an error)
    _metadata(tmp_path / "skewed", {**{f"p{i}": (10, 10) for i in range(4)}, **{f"n{i}": (100, 0) for i in range(16)}})
    with caplog.at_level(logging.WARNING, logger="rtscore"):
        ensure_splits(tmp_path / "skewed", rules=SplitsConfig(min_test_positives=20))
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all("no splits.yaml" in w for w in logged) and any("< 70%" in w for w in logged)
    # every positive region is in test or train: val holds none, under splits.min_val_positives (issue 23 point 3)
    assert any("val holds 0 positive tile(s), fewer than splits.min_val_positives=20" in w for w in logged)


def test_case10_the_generate_stage_derives_the_split_into_the_run_directory(tmp_path: Path) -> None:
    """generate-dataset on a root without splits.yaml: the derived split and its summary are run artifacts
    (RunLayout.DERIVED_SPLITS*, recorded in the manifest), the same for every split; the data root is untouched."""
    from rtscore import stages
    from rtscore.config import parse_pipeline_config
    from rtscore.storage import RunDir, RunLayout
    from tests.helpers import derived_split_root, geotiff_pipeline_config

    root = derived_split_root(tmp_path / "tifs")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    data = geotiff_pipeline_config(str(root))
    cfg = parse_pipeline_config(data)
    run = RunDir(str(tmp_path / "run"))
    derived: list[str] = []
    for split in ("train", "val"):
        stages.generate_dataset(str(tmp_path / "run"), cfg, split)
        derived.append(run.at(RunLayout.DERIVED_SPLITS).read_text())
        assert run.entry(RunLayout.DERIVED_SPLITS.at()) is not None
        assert run.entry(RunLayout.DERIVED_SPLITS_SUMMARY.at()) is not None
    assert derived[0] == derived[1]  # seeded: every split ingests the same split
    splits = yaml.safe_load(derived[0])
    stored = {s.region for s in _by_id(run.at(RunLayout.DATASET, split="val")).values()}  # type: ignore[attr-defined]
    assert stored <= set(splits["val"])
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


# ------------------------------------------------------------------------------------ issue 23: points 2 and 7
def _labelled_positives(root: Path, n: int) -> list[str]:
    """``n`` positive tiles with label-1 pixels at valid (alpha > 0) pixels."""
    found = []
    for tid in (r["Tile_id"] for r in _rows(root) if r["TrainClass"] == "positive"):
        with rasterio.open(root / "labels" / f"{tid}.tif") as f:
            ones = f.read(1) == 1
        with rasterio.open(root / "PLANET-RGB" / f"{tid}.tif") as f:
            valid = f.read(4) > 0
        if (ones & valid).any():
            found.append(tid)
    assert len(found) >= n, f"the fixture root has {len(found)} such tiles, the test needs {n}"
    return found[:n]


def _nan_extra(root: Path, tid: str, rows: slice, cols: slice) -> None:
    """NaN in EXTRA band 0 over ``rows`` x ``cols``, declared as the raster's nodata (NDVI over water, say)."""
    p = root / "EXTRA" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()
    data[0, rows, cols] = np.nan
    _rewrite(p, data, nodata=float("nan"))


def test_point2_nan_extra_makes_nodata_pixels_0_and_255_and_the_counts_a_partition(
    cfg: GenerationConfig, root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23 point 2: NaN in EXTRA (declared nodata) makes one positive tile full NoData and another partly so.
    Their NoData pixels hold RGB 0, EXTRA 0, label 255; the full-NoData tile is not positive; every per-tile flag
    and count comes from those pixels, and positive + negative + full NoData = tiles."""
    import logging

    import zarr

    full, part = _labelled_positives(root, 2)
    _nan_extra(root, full, slice(None), slice(None))
    with rasterio.open(root / "labels" / f"{part}.tif") as f:
        ones = np.argwhere(f.read(1) == 1)
    r0 = int(ones[:, 0].min())  # NaN from the first RTS row down: some label-1 pixels become NoData
    _nan_extra(root, part, slice(r0, 64), slice(None))
    with caplog.at_level(logging.INFO, logger="rtscore"):
        attrs = ingest_geotiffs(cfg, root, tmp_path / "s.zarr")
    c = attrs.counts
    assert c.n_positive + c.n_negative + c.n_full_nodata == c.n_tiles == 6
    assert c.n_full_nodata == 2  # the fixture's full-NoData tile and ours
    assert any(c.partition() in r.getMessage() for r in caplog.records), "the log line states the partition"
    tiles = _by_id(tmp_path / "s.zarr")
    for tid in (full, part):
        t = tiles[tid]
        nodata = t.alpha == 0  # type: ignore[attr-defined]
        assert nodata.any()
        assert (t.rgb[:, nodata] == 0).all() and (t.extra[:, nodata] == 0).all()  # type: ignore[attr-defined]
        assert (t.label[nodata] == 255).all()  # type: ignore[attr-defined]
    assert not (tiles[full].alpha > 0).any() and not (tiles[part].alpha[r0:] > 0).any()  # type: ignore[attr-defined]
    meta = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["meta"]
    ids = [str(t) for t in meta["tile_id"][:]]
    kind, flag, n_pos = meta["kind"][:], meta["is_positive"][:], meta["n_positive_px"][:]
    for i, tid in enumerate(ids):
        t = tiles[tid]
        ones_now = int((t.label == 1).sum())  # type: ignore[attr-defined]
        assert n_pos[i] == ones_now and bool(flag[i]) == (ones_now > 0), tid
        expected = "full_nodata" if not (t.alpha > 0).any() else "positive" if ones_now else "negative"  # type: ignore[attr-defined]
        assert kind[i] == {"negative": 0, "positive": 1, "full_nodata": 2}[expected], tid
    assert not flag[ids.index(full)] and kind[ids.index(full)] == 2
    assert sum(bool(f) for f in flag) == c.n_positive


def test_point7_a_sliver_emptied_by_augmentation_is_counted_not_failed(
    cfg: GenerationConfig, root: Path, tmp_path: Path
) -> None:
    """Issue 23 point 7 (training side): a tile with 9 valid pixels at its corner (a scene edge) is valid on disk;
    the default augmentation leaves some of its samples without a valid pixel. Validation's batch check does
    not call that "a full-NoData tile reached a batch" (it counts it), a tile full NoData as stored still
    fails it, and the sample's all-255 labels add nothing to any loss."""
    import torch
    from torch.utils.data import default_collate

    from rtscore.config.augmentation import AugmentationConfig
    from rtscore.data.loading.dataset import TileDataset
    from rtscore.data.normalization.stats import NormalizationStats
    from rtscore.data.validation.loader import check_batch
    from rtscore.data.validation.report import CheckLog
    from rtscore.data.validation.store import stored_full_nodata

    tid = _first(root)
    p = root / "PLANET-RGB" / f"{tid}.tif"
    with rasterio.open(p) as f:
        data = f.read()
    data[3] = 0
    data[3, :3, :3] = 255  # 9 valid pixels in the corner
    _rewrite(p, data)
    ingest_geotiffs(cfg, root, tmp_path / "s.zarr")
    store = ZarrTileStore(tmp_path / "s.zarr", extra_channels=["ndvi", "slope"])
    i = [str(t) for t in store.metadata.tile_id].index(tid)
    assert int((store[i].alpha > 0).sum()) == 9 and not store.metadata.full_nodata[i]
    names = ["R", "G", "B", "ndvi", "slope"]
    stats = NormalizationStats(names, np.zeros(5), np.ones(5), n_tiles_used=6, dataset_version="t", computed_date="-")
    ds = TileDataset(store, stats, augmentation=AugmentationConfig(), indices=[i])
    emptied_seed = next((s for s in range(400) if not ds[(0, s)]["valid"].any()), None)
    assert emptied_seed is not None, "the default augmentation never pushed the 9 pixels out in 400 draws"
    sample = ds[(0, emptied_seed)]
    assert (sample["label"] == 255).all()
    out, emptied = CheckLog(), list[str]()
    assert check_batch(default_collate([sample]), "train", 5, 64, out, stored_full_nodata(store), emptied)
    assert emptied == [tid] and not out.failed
    full = int(np.flatnonzero(store.metadata.full_nodata)[0])  # the fixture's full-NoData tile, let through
    plain = TileDataset(store, stats, indices=[full], exclude_full_nodata=False)
    assert not check_batch(default_collate([plain[0]]), "train", 5, 64, out, stored_full_nodata(store), emptied)
    assert out.failed[0].name == "full_nodata_excluded" and out.failed[0].tile_id == str(store.metadata.tile_id[full])

    from rtscore.config.pipeline import LossConfig
    from rtscore.data.tiles import ClassPixelCounts
    from rtscore.losses import build_loss

    other = default_collate([ds[(0, s)] for s in range(400) if ds[(0, s)]["valid"].any()][:1])["label"]
    target = torch.cat([other, sample["label"][None]])  # a sample with valid pixels, then the emptied one
    for name in ("focal", "bce", "dice", "tversky", "compound", "class_balanced_ce"):
        loss_fn = build_loss(LossConfig(name=name), ClassPixelCounts(background=900, rts=100))
        logits = torch.randn(2, 64, 64, requires_grad=True)
        loss = loss_fn(logits, target)
        alone = loss_fn(logits[:1].detach(), target[:1])
        loss.backward()
        assert torch.isfinite(loss) and torch.allclose(loss.detach(), alone, atol=1e-6), name
        assert logits.grad is not None and (logits.grad[1] == 0).all(), f"{name}: the emptied sample got a gradient"
        only = loss_fn(torch.randn(1, 64, 64, requires_grad=True), target[1:])  # a batch of emptied samples only
        assert torch.isfinite(only) and only.item() == 0.0, name
