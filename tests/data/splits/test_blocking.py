"""Spatial blocking by geometry (rtscore.data.splits.blocking): ground distances, overlap vs touching, the buffer, the
footprints a GeoTIFF store records and a data root's footprints."""

from __future__ import annotations

import itertools
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from rtscore.config.generation import GenerationConfig
from rtscore.data.geotiff.ingest import ingest_geotiffs
from rtscore.data.geotiff.root import read_splits
from rtscore.data.geotiff.synth import write_synthetic_geotiffs
from rtscore.data.raster.ground import GroundSizeError
from rtscore.data.splits.blocking import (
    BlockingError,
    Bounds,
    check_blocking,
    data_root_footprints,
    ground_distance_m,
    measure_blocking,
)
from rtscore.data.store.reader import ZarrTileStore

R = 6378137.0  # the Web Mercator sphere
Y70 = R * math.log(math.tan(math.pi / 4 + math.radians(70.0) / 2))  # northing of 70° N


def _lat(y: float) -> float:
    """Latitude (radians) of a Web Mercator northing: the projection's inverse, written out here."""
    return 2 * math.atan(math.exp(y / R)) - math.pi / 2


def _box(x: float, y: float, side: float = 1000.0) -> Bounds:
    """A square footprint centred on (x, y)."""
    return (x - side / 2, y - side / 2, x + side / 2, y + side / 2)


def test_web_mercator_distance_is_projected_distance_times_cos_latitude() -> None:
    # Two 1 km (projected) tiles on the row of 70° N, 2 km (projected) apart along x.
    a, b = _box(0, Y70), _box(3000, Y70)
    assert ground_distance_m(a, b, "EPSG:3857") == pytest.approx(2000 * math.cos(math.radians(70.0)), rel=1e-12)
    assert ground_distance_m(a, b, "EPSG:3857") == pytest.approx(684.0403, abs=1e-4)
    # Diagonal: gaps of 2000 (x) and 1000 (y); the scale is taken in the middle of the y gap (70° N + 1 km).
    c = _box(3000, Y70 + 2000)
    want = math.hypot(2000, 1000) * math.cos(_lat(Y70 + 1000))
    assert ground_distance_m(a, c, "EPSG:3857") == pytest.approx(want, rel=1e-12)
    assert ground_distance_m(c, a, "EPSG:3857") == pytest.approx(want, rel=1e-12)  # symmetric


def test_utm_and_feet_distances_are_the_projected_ones_in_metres() -> None:
    # UTM 6N (Alaska): true to scale; 100 m between a tile's east edge and the next tile's west edge.
    a: Bounds = (500000.0, 7700000.0, 500320.0, 7700320.0)
    b: Bounds = (500420.0, 7700000.0, 500740.0, 7700320.0)
    assert ground_distance_m(a, b, "EPSG:32606") == pytest.approx(100.0, abs=1e-9)
    # 30 m east and 40 m north of the corner: 50 m.
    assert ground_distance_m(a, (500350.0, 7700360.0, 500400.0, 7700400.0), "EPSG:32606") == pytest.approx(50.0)
    # New York State Plane (US survey feet): 1000 ft are 304.8006 m.
    feet = ground_distance_m((0.0, 0.0, 1.0, 1.0), (1001.0, 0.0, 1002.0, 1.0), "EPSG:2263")
    assert feet == pytest.approx(1000 * 1200 / 3937, rel=1e-9)
    with pytest.raises(GroundSizeError, match="geographic"):
        ground_distance_m(a, b, "EPSG:4326")


def test_touching_tiles_pass_at_buffer_0_and_overlapping_ones_fail_naming_both() -> None:
    px = 4.77
    train = {"t0": (0.0, Y70, 512 * px, Y70 + 512 * px)}
    touching = {"v0": (512 * px, Y70, 1024 * px, Y70 + 512 * px)}  # the next tile of the grid: shares an edge
    report = check_blocking({"train": train, "val": touching}, "EPSG:3857")
    assert report.distances[0].min_distance_m == 0.0 and not report.distances[0].closest.overlap  # type: ignore[union-attr]
    assert report.n_too_close == 0
    # One pixel column of overlap fails, naming both tiles, their splits and that they overlap.
    overlapping = {"s7": (511 * px, Y70, 1023 * px, Y70 + 512 * px)}
    with pytest.raises(BlockingError, match=r"train tile t0 overlaps test tile s7"):
        check_blocking({"train": train, "val": touching, "test": overlapping}, "EPSG:3857")
    # A corner touching diagonally is distance 0, no overlap.
    corner = {"s1": (512 * px, Y70 + 512 * px, 1024 * px, Y70 + 1024 * px)}
    assert check_blocking({"train": train, "test": corner}, "EPSG:3857").n_too_close == 0


def test_the_buffer_is_ground_metres_not_projected_units() -> None:
    # 2000 projected m at 70° N are 684 ground m.
    fp = {"train": {"t": _box(0, Y70)}, "val": {"v": _box(3000, Y70)}, "test": {"s": _box(0, Y70 - 5000)}}
    assert check_blocking(fp, "EPSG:3857", buffer_m=680.0).n_too_close == 0
    with pytest.raises(BlockingError, match=r"within 690 m .*train tile t is 684\.0 m \(ground\) from val tile v"):
        check_blocking(fp, "EPSG:3857", buffer_m=690.0)
    # Adjacent tiles (distance 0) fail any positive buffer.
    adjacent = {"train": {"t": (0.0, 0.0, 10.0, 10.0)}, "val": {"v": (10.0, 0.0, 20.0, 10.0)}}
    with pytest.raises(BlockingError, match=r"train tile t is 0\.0 m \(ground\) from val tile v"):
        check_blocking(adjacent, "EPSG:32606", buffer_m=1.0)


def test_minimum_distances_and_pairs_within_the_buffer_match_all_pairs() -> None:
    """The STRtree search finds what comparing every pair finds: the least distance per split and every pair
    within the buffer, on scattered tiles of a few sizes."""
    rng = np.random.default_rng(4)

    def tiles(prefix: str, n: int, y: float) -> dict[str, Bounds]:
        xs, ys, sides = rng.uniform(0, 60_000, n), rng.uniform(y, y + 20_000, n), rng.uniform(300, 2500, n)
        return {
            f"{prefix}{i}": _box(float(x), float(yy), float(s))
            for i, (x, yy, s) in enumerate(zip(xs, ys, sides, strict=True))
        }

    fp = {"train": tiles("t", 300, Y70), "val": tiles("v", 40, Y70 + 18_000), "test": tiles("s", 40, Y70 - 15_000)}
    buffer = 1500.0
    fp["test"]["s_on_val"] = next(iter(fp["val"].values()))  # one test tile on a val tile's ground
    report = measure_blocking(fp, "EPSG:3857", buffer)
    kinds = [("train", "val", buffer), ("train", "test", buffer), ("val", "test", 0.0)]  # no buffer between val, test
    assert [d.kind for d in report.distances] == ["train<->val", "train<->test", "val<->test"]
    for (a, b, buf), d in zip(kinds, report.distances, strict=True):
        pairs = {(t, o): ground_distance_m(fp[a][t], fp[b][o], "EPSG:3857") for t, o in itertools.product(fp[a], fp[b])}
        assert (d.source_a, d.source_b, d.buffer_m) == (a, b, buf)
        assert d.min_distance_m == pytest.approx(min(pairs.values()), rel=1e-3)
        assert d.n_too_close == sum(v < buf or (t, o) == ("v0", "s_on_val") for (t, o), v in pairs.items()) > 0
    assert report.n_too_close == sum(d.n_too_close for d in report.distances)
    assert len(report.too_close) == 20 and report.too_close[0].distance_m == 0.0  # capped, closest first


def test_overlapping_val_and_test_tiles_are_refused_naming_both() -> None:
    """val<->test is a pair of splits too: an overlap between them is refused and counted, though neither touches
    train; the buffer (splits.min_distance_m) is train data's, so adjacent val and test tiles pass any buffer."""
    train = {"t0": _box(0, 0)}
    val = {"v0": _box(10_000, 0), "v1": _box(20_000, 0)}
    adjacent = {"s0": _box(11_000, 0)}  # shares v0's east edge
    report = check_blocking({"train": train, "val": val, "test": adjacent}, "EPSG:32606", buffer_m=500.0)
    vt = report.distances[2]
    assert (vt.kind, vt.buffer_m, vt.min_distance_m, vt.n_too_close) == ("val<->test", 0.0, 0.0, 0)
    overlapping = {"s0": _box(11_000, 0), "s1": _box(20_400, 300)}
    with pytest.raises(BlockingError) as info:
        check_blocking({"train": train, "val": val, "test": overlapping}, "EPSG:32606", buffer_m=500.0)
    msg = str(info.value)
    assert "1 pair(s) of tiles of different splits overlap" in msg and "(val<->test 1)" in msg
    assert "val tile v1 overlaps test tile s1" in msg
    report = measure_blocking({"train": train, "val": val, "test": overlapping}, "EPSG:32606")
    assert [(d.kind, d.n_too_close) for d in report.distances] == [
        ("train<->val", 0),
        ("train<->test", 0),
        ("val<->test", 1),
    ]
    assert report.n_too_close == 1 and "val<->test overlap (val v1, test s1)" in report.summary()


def test_an_additional_root_is_train_data_against_val_and_test() -> None:
    """A source that ``split_of`` makes train (an additional root) is paired with val and test (with the buffer),
    never with train; ``fresh`` limits the pairs to those with a fresh source."""
    root = "data.additional_roots[0]"
    fp = {
        "train": {"t0": _box(0, 0)},
        "val": {"v0": _box(10_000, 0)},
        "test": {"s0": _box(-10_000, 0)},
        root: {"x0": _box(0, 500), "x1": _box(10_300, 0)},  # x0 overlaps train (allowed), x1 overlaps val
    }
    split_of = {root: "train"}
    report = measure_blocking(fp, "EPSG:32606", 100.0, split_of=split_of)
    assert report.sources == {"train": "train", "val": "val", "test": "test", root: "train"}
    kinds = {d.kind: d.n_too_close for d in report.distances}
    assert kinds == {
        "train<->val": 0,
        "train<->test": 0,
        f"{root}<->val": 1,
        f"{root}<->test": 0,
        "val<->test": 0,
    }
    with pytest.raises(BlockingError, match=r"data\.additional_roots\[0\] tile x1 overlaps val tile v0"):
        check_blocking(fp, "EPSG:32606", split_of=split_of)
    # Within the buffer but apart: 1000 m between x2 and the test tile s0, a buffer of 1500 m flags it.
    fp[root] = {"x2": _box(-12_000, 0)}
    with pytest.raises(
        BlockingError, match=r"within 1500 m .*additional_roots\[0\] tile x2 is 1000\.0 m \(ground\) from test tile s0"
    ):
        check_blocking(fp, "EPSG:32606", 1500.0, split_of=split_of)
    only_root = measure_blocking(fp, "EPSG:32606", 1500.0, split_of=split_of, fresh=[root])
    assert [d.kind for d in only_root.distances] == [f"{root}<->val", f"{root}<->test"]


def test_empty_splits_and_bad_inputs() -> None:
    report = measure_blocking({"train": {}, "val": {"v": _box(0, 0)}}, "EPSG:32606")
    assert report.distances[0].min_distance_m is None and report.n_too_close == 0
    with pytest.raises(BlockingError, match=r"tiles \['v'\] are not"):
        measure_blocking({"train": {"t": _box(0, 0)}, "val": {"v": (5.0, 0.0, 1.0, 1.0)}}, "EPSG:32606")
    with pytest.raises(BlockingError, match="buffer"):
        measure_blocking({"train": {}}, "EPSG:32606", buffer_m=-1.0)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic GeoTIFF root of three splits (32 px tiles, each split on its own grid rows)."""

    def gen(split: str, pos: int, regions: list[str]) -> GenerationConfig:
        synthetic = {"n_positive": pos, "n_negative": 2, "regions": regions}
        return GenerationConfig(split=split, tile_size=32, seed=5, synthetic=synthetic, store={"shard_tiles": 4})

    out = tmp_path_factory.mktemp("blocking") / "root"
    write_synthetic_geotiffs([gen("train", 3, ["ta"]), gen("val", 2, ["va", "vb"]), gen("test", 2, ["sa"])], out)
    return out


def _region_splits(root: Path) -> dict[str, str]:
    return {r: s for s, regions in read_splits(root).items() for r in regions}


def test_data_root_footprints_come_from_the_raster_headers(root: Path) -> None:
    import rasterio

    fp, crs = data_root_footprints(root, _region_splits(root))
    assert crs == "EPSG:3857" and {s: len(t) for s, t in fp.items()} == {"train": 5, "val": 4, "test": 4}
    with rasterio.open(root / "PLANET-RGB" / "val_000001.tif") as src:
        assert fp["val"]["val_000001"] == tuple(src.bounds)
    # The synthetic grid puts val 200 rows of 32 x 4.77 m below train's one row: 199 rows of ground between.
    span = 32 * 4.77
    report = check_blocking(fp, crs)
    top_of_val = fp["val"]["val_000000"][3]
    want = 199 * span * math.cos(_lat(top_of_val + 199 * span / 2))
    assert report.distances[0].min_distance_m == pytest.approx(want, rel=1e-9)
    # Regions not in the mapping are left out; a tile in another CRS is refused naming it.
    assert set(data_root_footprints(root, {"ta": "train"})[0]) == {"train"}
    other = root.parent / "other_crs"
    shutil.copytree(root, other)
    with rasterio.open(other / "PLANET-RGB" / "test_000002.tif", "r+") as f:
        f.crs = "EPSG:32606"
    with pytest.raises(BlockingError, match=r"tile test_000002 .*EPSG:32606, but tile train_000000 is in EPSG:3857"):
        data_root_footprints(other, _region_splits(other))


def test_an_ingested_store_records_each_tiles_footprint(root: Path, tmp_path: Path) -> None:
    import rasterio
    import zarr

    cfg = GenerationConfig(split="val", tile_size=32, source="geotiff", geotiff={"data_root": str(root)})
    ingest_geotiffs(cfg, root, tmp_path / "val.zarr")
    store = ZarrTileStore(tmp_path / "val.zarr")
    meta = store.metadata
    assert store.crs == "EPSG:3857" and meta.bounds is not None and meta.bounds.shape == (4, 4)
    for tid, b in zip(meta.tile_id, meta.bounds, strict=True):
        with rasterio.open(root / "PLANET-RGB" / f"{tid}.tif") as src:
            assert tuple(b) == tuple(src.bounds)
    # A store written before footprints were recorded (no meta/bounds) still reads: no footprints.
    shutil.rmtree(tmp_path / "val.zarr" / "meta" / "bounds")
    group = zarr.open_group(str(tmp_path / "val.zarr" / "meta"), mode="r")
    assert "bounds" not in group
    old = ZarrTileStore(tmp_path / "val.zarr")
    assert old.metadata.bounds is None and len(old.metadata) == 4 and old[0].tile_id == "val_000000"


def test_a_store_that_keeps_footprints_refuses_a_tile_without_them(tmp_path: Path) -> None:
    import dataclasses

    from rtscore.data.store.format import TileStoreError
    from rtscore.data.store.writer import write_store
    from tests.helpers import ListProducer, _attrs, _layout

    layout = dataclasses.replace(_layout(4), write_bounds=True)
    with pytest.raises(TileStoreError, match=r"tile \S+: bounds must be \(minx, miny, maxx, maxy\).*got None"):
        write_store(ListProducer(4), layout, tmp_path / "s.zarr", _attrs())
    assert not (tmp_path / "s.zarr").exists()
