"""Campaign objects from constructed masks: merged across scene borders, partial flags, areas, the objects file."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import rasterio
import shapely
import shapely.affinity
from rasterio.crs import CRS
from rasterio.features import rasterize
from rasterio.transform import Affine

from rtscore.data.raster.ground import WEB_MERCATOR_RADIUS_M
from rtscore.errors import PipelineError
from rtscore.inference.stream import MASK_NODATA, PROB_NODATA
from rtscore.mapping.objects_layer import read_objects, write_objects
from rtscore.mapping.polygons import (
    PolygonsError,
    keep_min_area,
    merge_parts,
    scene_parts,
    size_bin,
    size_bin_key,
)

UTM = "EPSG:32633"


def write_scene(
    root: Path, name: str, positive: np.ndarray, prob: np.ndarray, transform: Affine, crs: str, nodata=None
) -> tuple[Path, Path]:
    """Mask and probability rasters as ``rts predict`` writes them (uint8 0/1/255, float32 with -1 as nodata)."""
    mask = positive.astype(np.uint8)
    p = np.where(positive, prob, 0.1).astype(np.float32)
    if nodata is not None:
        mask[nodata] = MASK_NODATA
        p[nodata] = PROB_NODATA
    paths = (root / f"{name}_mask.tif", root / f"{name}_prob.tif")
    h, w = mask.shape
    for path, arr, nd in ((paths[0], mask, MASK_NODATA), (paths[1], p, PROB_NODATA)):
        profile = dict(driver="GTiff", height=h, width=w, count=1, dtype=arr.dtype, crs=crs, transform=transform)
        with rasterio.open(path, "w", nodata=nd, **profile) as dst:
            dst.write(arr, 1)
    return paths


def draw(geom: shapely.Geometry, transform: Affine, shape: tuple[int, int]) -> np.ndarray:
    return rasterize([geom], out_shape=shape, transform=transform, fill=0, default_value=1).astype(bool)


def parts_of(root: Path, name: str, *args, **kw):
    mask_path, prob_path = write_scene(root, name, *args, **kw)
    return scene_parts(mask_path, prob_path, name)


def two_scenes(tmp_path: Path, geom: shapely.Geometry, px: float = 2.0, n: int = 400, probs=(0.6, 0.9)):
    """Two adjacent n x n scenes of one UTM grid, A west of B, their shared border at x = n * px."""
    scenes = []
    for k, (name, prob) in enumerate(zip(("A", "B"), probs, strict=True)):
        t = Affine(px, 0.0, 500_000.0 + k * n * px, 0.0, -px, 7_000_000.0)
        scenes.append(parts_of(tmp_path, name, draw(geom, t, (n, n)), np.full((n, n), prob), t, UTM))
    return scenes


def test_object_across_a_scene_border_is_one_polygon_with_the_drawn_area(tmp_path: Path) -> None:
    drawn = shapely.Point(500_800.0, 6_999_600.0).buffer(250.0, quad_segs=64)  # centred on the border
    a, b = two_scenes(tmp_path, drawn)
    assert len(a.parts) == len(b.parts) == 1  # each scene holds half of it
    _, objects = merge_parts([a, b])
    assert len(objects) == 1
    obj = objects[0]
    assert obj.geometry.geom_type == "Polygon"
    assert obj.scene_ids == ("A", "B")
    assert obj.area_m2 == pytest.approx(drawn.area, rel=0.01)
    assert obj.ground_area_m2 == pytest.approx(obj.area_m2)  # UTM: the projected m² are ground m²
    assert obj.n_pixels * 4.0 == pytest.approx(obj.area_m2)  # 2 m pixels
    assert obj.size_bin == "50000+"  # ~196,000 m²: the evaluation's largest (open) bin


def test_mean_probability_is_pixel_weighted_across_parts_and_max_the_max(tmp_path: Path) -> None:
    drawn = shapely.box(500_700.0, 6_999_500.0, 500_860.0, 6_999_700.0)  # 50 px in A, 30 px in B
    a, b = two_scenes(tmp_path, drawn, probs=(0.6, 0.9))
    (obj,) = merge_parts([a, b])[1]
    n_a, n_b = 50 * 100, 30 * 100
    assert (a.parts[0].n_pixels, b.parts[0].n_pixels) == (n_a, n_b)
    assert obj.prob_mean == pytest.approx((0.6 * n_a + 0.9 * n_b) / (n_a + n_b), rel=1e-6)
    assert obj.prob_mean != pytest.approx((0.6 + 0.9) / 2)  # not the mean of the parts' means
    assert obj.prob_max == pytest.approx(0.9)


def test_object_cut_by_a_scene_border_is_partial_alone_and_whole_once_merged(tmp_path: Path) -> None:
    drawn = shapely.box(500_700.0, 6_999_500.0, 500_900.0, 6_999_700.0)
    a, b = two_scenes(tmp_path, drawn)
    assert a.parts[0].partial and b.parts[0].partial  # each scene alone: cut at its edge
    assert merge_parts([a])[1][0].partial  # A alone: the object may continue east, where nothing was mapped
    assert not merge_parts([a, b])[1][0].partial


def test_object_at_the_border_of_a_neighbour_that_mapped_nothing_there_is_not_partial(tmp_path: Path) -> None:
    drawn = shapely.box(500_700.0, 6_999_500.0, 500_800.0, 6_999_700.0)  # ends exactly at A's east edge
    a, b = two_scenes(tmp_path, drawn)
    assert a.parts[0].partial and b.parts == []
    (obj,) = merge_parts([a, b])[1]
    assert obj.scene_ids == ("A",) and not obj.partial  # B mapped on and found no RTS: the object ends there


def test_objects_touching_nodata_or_the_outer_edge_are_partial_inside_ones_not(tmp_path: Path) -> None:
    n, px = 200, 2.0
    t = Affine(px, 0.0, 500_000.0, 0.0, -px, 7_000_000.0)
    positive = np.zeros((n, n), bool)
    positive[50:70, 40:60] = True  # touches the NoData block in columns < 40
    positive[0:10, 100:120] = True  # touches the raster's top edge
    positive[100:130, 100:130] = True  # inside
    nodata = np.zeros((n, n), bool)
    nodata[40:80, :40] = True
    sc = parts_of(tmp_path, "S", positive, np.full((n, n), 0.8), t, UTM, nodata=nodata)
    _, objects = merge_parts([sc])
    by_size = {o.n_pixels: o.partial for o in objects}
    assert by_size == {20 * 20: True, 10 * 20: True, 30 * 30: False}


def test_nodata_touch_is_one_pixel_wide(tmp_path: Path) -> None:
    """Two pixels away from NoData is not partial; one (a diagonal neighbour) is."""
    n = 60
    t = Affine(2.0, 0.0, 500_000.0, 0.0, -2.0, 7_000_000.0)
    nodata = np.zeros((n, n), bool)
    nodata[20:30, 20:30] = True
    positive = np.zeros((n, n), bool)
    positive[30:35, 30:35] = True  # diagonal neighbour of the block's corner pixel (29, 29)
    positive[40:45, 32:37] = True  # 11 rows below the block
    sc = parts_of(tmp_path, "S", positive, np.full((n, n), 0.8), t, UTM, nodata=nodata)
    flags = sorted((o.bbox[3], o.partial) for o in merge_parts([sc])[1])  # by north edge: the lower one first
    assert [f for _, f in flags] == [False, True]


def web_mercator_y(lat_deg: float) -> float:
    return WEB_MERCATOR_RADIUS_M * math.log(math.tan(math.pi / 4 + math.radians(lat_deg) / 2))


@pytest.mark.parametrize("lat", [60.0, 74.0])
def test_web_mercator_ground_area_is_projected_times_cos2_latitude(tmp_path: Path, lat: float) -> None:
    n, px = 200, 10.0
    y = web_mercator_y(lat)
    t = Affine(px, 0.0, 1_500_000.0, 0.0, -px, y + n * px / 2)  # the scene's centre at `lat`
    positive = np.zeros((n, n), bool)
    positive[80:120, 80:120] = True  # 400 m x 400 m projected, centred on the scene
    sc = parts_of(tmp_path, "S", positive, np.full((n, n), 0.8), t, "EPSG:3857")
    (obj,) = merge_parts([sc])[1]
    assert obj.area_m2 == pytest.approx(1600 * 100.0)
    assert obj.ground_area_m2 == pytest.approx(obj.area_m2 * math.cos(math.radians(lat)) ** 2, rel=0.005)
    assert obj.ground_area_m2 < 0.27 * obj.area_m2  # cos² 60° = 0.25: far from the projected area


def test_equal_area_crs_ground_area_is_the_projected_area_and_agrees_with_web_mercator(tmp_path: Path) -> None:
    """EPSG:6931 (EASE-Grid 2.0 North, equal-area): ground = projected; the same object in a Web Mercator campaign
    gets about the same ground area. cos²φ is the spherical scale: on the ellipsoid it is ~0.5 % off at 70° N."""
    n, px = 200, 5.0
    t = Affine(px, 0.0, 1_000_000.0, 0.0, -px, -1_500_000.0)  # ~70° N
    positive = np.zeros((n, n), bool)
    positive[60:140, 50:150] = True
    sc = parts_of(tmp_path, "E", positive, np.full((n, n), 0.8), t, "EPSG:6931")
    crs, (obj,) = merge_parts([sc])
    assert crs == CRS.from_epsg(6931)
    assert obj.ground_area_m2 == pytest.approx(obj.area_m2) == pytest.approx(80 * 100 * 25.0)
    crs_wm, (wm,) = merge_parts([sc], crs="EPSG:3857")
    assert crs_wm == CRS.from_epsg(3857)
    assert wm.area_m2 > 5 * obj.area_m2  # projected Web Mercator m² at ~70° N: ~ 1 / cos² larger
    assert wm.ground_area_m2 == pytest.approx(obj.ground_area_m2, rel=0.01)


def test_overlapping_scenes_in_different_crs_give_one_object_in_the_first_scenes_crs(tmp_path: Path) -> None:
    drawn_utm = shapely.Point(500_400.0, 6_999_600.0).buffer(150.0, quad_segs=32)
    t_utm = Affine(2.0, 0.0, 500_000.0, 0.0, -2.0, 7_000_000.0)
    a = parts_of(tmp_path, "A", draw(drawn_utm, t_utm, (400, 400)), np.full((400, 400), 0.7), t_utm, UTM)
    # The same ground object seen in a Web Mercator scene covering the UTM one.
    from rasterio.warp import transform_geom

    drawn_wm = shapely.geometry.shape(transform_geom(UTM, "EPSG:3857", shapely.geometry.mapping(drawn_utm)))
    minx, miny, maxx, maxy = drawn_wm.buffer(800.0).bounds
    t_wm = Affine(4.0, 0.0, minx, 0.0, -4.0, maxy)
    shape = (math.ceil((maxy - miny) / 4.0), math.ceil((maxx - minx) / 4.0))
    b = parts_of(tmp_path, "B", draw(drawn_wm, t_wm, shape), np.full(shape, 0.95), t_wm, "EPSG:3857")
    crs, objects = merge_parts([a, b])
    assert crs == CRS.from_user_input(UTM)
    assert len(objects) == 1 and objects[0].scene_ids == ("A", "B")
    assert objects[0].prob_max == pytest.approx(0.95)
    assert objects[0].ground_area_m2 == pytest.approx(drawn_utm.area, rel=0.03)  # B's pixels overhang A's


def test_bad_inputs_to_the_merge_are_named(tmp_path: Path) -> None:
    n = 20
    t = Affine(2.0, 0.0, 500_000.0, 0.0, -2.0, 7_000_000.0)
    sc = parts_of(tmp_path, "S", np.zeros((n, n), bool), np.zeros((n, n)), t, UTM)
    with pytest.raises(PolygonsError, match="missing.tif"):
        scene_parts(tmp_path / "missing.tif", tmp_path / "S_prob.tif", "S")
    with pytest.raises(PolygonsError, match="no scenes"):
        merge_parts([])
    with pytest.raises(PipelineError, match="geographic"):
        merge_parts([sc], crs="EPSG:4326")


def test_parts_file_round_trip_is_exact(tmp_path: Path) -> None:
    from rtscore.mapping.polygons import read_parts, write_parts

    drawn = shapely.Point(500_800.0, 6_999_600.0).buffer(250.0, quad_segs=64)
    ring = (
        shapely.Point(500_300.0, 6_999_700.0).buffer(60.0).difference(shapely.Point(500_300.0, 6_999_700.0).buffer(20))
    )
    nodata = np.zeros((400, 400), bool)
    nodata[:, :30] = True  # the ring's part touches NoData: partial
    scenes = []
    for k, name in enumerate(("A", "B")):
        t = Affine(2.0, 0.0, 500_000.0 + k * 800.0, 0.0, -2.0, 7_000_000.0)
        positive = draw(drawn, t, (400, 400)) | draw(ring, t, (400, 400))
        prob_arr = np.random.default_rng(k).uniform(0.5, 1.0, (400, 400))
        scenes.append(parts_of(tmp_path, name, positive, prob_arr, t, UTM, nodata=nodata if k == 0 else None))
    back = []
    for sp in scenes:
        path = write_parts(tmp_path / f"{sp.scene_id}_parts.json", sp, 3.5)
        got, ground = read_parts(path)
        assert ground == 3.5
        assert (got.scene_id, got.crs, got.pixel_size) == (sp.scene_id, CRS.from_user_input(sp.crs), sp.pixel_size)
        assert shapely.to_wkb(got.footprint) == shapely.to_wkb(sp.footprint)
        assert len(got.parts) == len(sp.parts) > 0
        for a, b in zip(got.parts, sp.parts, strict=True):
            assert shapely.to_wkb(a.geometry) == shapely.to_wkb(b.geometry)  # bit for bit
            assert (a.scene_id, a.n_pixels, a.prob_sum, a.prob_max, a.partial) == (
                b.scene_id,
                b.n_pixels,
                b.prob_sum,
                b.prob_max,
                b.partial,
            )
        back.append(got)
    assert any(p.partial for p in back[0].parts)
    _, want = merge_parts(scenes)
    _, got_objects = merge_parts(back)
    assert [(o.n_pixels, o.prob_mean, o.area_m2, o.partial, shapely.to_wkb(o.geometry)) for o in got_objects] == [
        (o.n_pixels, o.prob_mean, o.area_m2, o.partial, shapely.to_wkb(o.geometry)) for o in want
    ]


def test_a_broken_parts_file_is_named(tmp_path: Path) -> None:
    from rtscore.mapping.polygons import read_parts

    path = tmp_path / "x_parts.json"
    path.write_text('{"schema_version": 1, "scene_id": "x"}')
    with pytest.raises(PolygonsError, match="x_parts.json: not a readable parts file"):
        read_parts(path)


def test_size_bins_sort_by_their_lower_edge_not_as_text() -> None:
    """The summary lists objects by size bin from small to large ("2000-10000" before "10000-50000")."""
    edges = [0.0, 2000.0, 10000.0, 50000.0, 1e12]
    labels = [size_bin(a, edges) or "other" for a in (20000.0, 500.0, 5000.0, 2e5, 2e12)]
    assert sorted(labels, key=size_bin_key) == ["0-2000", "2000-10000", "10000-50000", "50000+", "other"]


# Five RTS at a coarse 300 m pixel (90,000 m² of ground each pixel): 1, 2, 4, 9 and 16 px.
COARSE_PX = 300.0
COARSE_OBJECTS = ((slice(2, 3), slice(2, 3)), (slice(8, 9), slice(8, 10)), (slice(20, 22), slice(4, 6)))
COARSE_OBJECTS += ((slice(30, 33), slice(30, 33)), (slice(40, 44), slice(10, 14)))


def coarse_label(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A 64 x 64 label GeoTIFF at 300 m in UTM with the five RTS, and its array."""
    label = np.zeros((64, 64), np.uint8)
    for rows, cols in COARSE_OBJECTS:
        label[rows, cols] = 1
    path = tmp_path / "label.tif"
    t = Affine(COARSE_PX, 0.0, 500_000.0, 0.0, -COARSE_PX, 7_000_000.0)
    with rasterio.open(
        path, "w", driver="GTiff", height=64, width=64, count=1, dtype="uint8", crs=UTM, transform=t
    ) as dst:
        dst.write(label, 1)
    return path, label


def evaluated_objects(label_path: Path, min_area_m2: float) -> tuple[list[int], list[float]]:
    """The GT objects evaluation keeps on this tile (perfect predictions): their pixels and ground areas, the
    tile's pixel area from its transform as ingestion computes it."""
    from rtscore.data.raster.ground import ground_pixel_area_m2
    from rtscore.metrics import ObjectCounter

    with rasterio.open(label_path) as src:
        label, area = src.read(1), ground_pixel_area_m2(src.crs, src.transform, src.height, src.width)
    counter = ObjectCounter(min_object_area_m2=min_area_m2)
    tile = counter.add_tile(np.where(label == 1, 5.0, -5.0), label, area)
    assert counter.tp.tolist() == [len(tile.gt_area)] * 3  # every kept GT object found: nothing else differs
    return sorted(tile.gt_area.tolist()), sorted(counter.gt_objects_m2()[0].tolist())


def test_objects_at_a_coarse_pixel_are_kept_when_over_the_ground_area(tmp_path: Path) -> None:
    """Issue 23 (4): at 300 m, 16 px (the old rule) is 1.44 km², so recall by area saw 1 of 5 RTS; 350 m² (the
    map's default minimum, and evaluation's before issue 35) is one pixel there: all five are evaluated, and fall in
    their ground-area bins, and all five are mapped."""
    from rtscore.config.post_training import EvaluationConfig, PackageConfig
    from rtscore.evaluation.evaluate import size_bins
    from rtscore.metrics import ObjectCounter

    path, label = coarse_label(tmp_path)
    px, m2 = evaluated_objects(path, 350.0)
    assert px == [1, 2, 4, 9, 16] and m2 == [90_000.0, 180_000.0, 360_000.0, 810_000.0, 1_440_000.0]
    assert evaluated_objects(path, 0.0) == (px, m2)  # the guide's rule (the default): every component
    counter = ObjectCounter(min_object_area_m2=350.0)
    counter.add_tile(np.where(label == 1, 5.0, -5.0), label, COARSE_PX**2)
    bins = {b.label: (b.n_objects, b.recall) for b in size_bins(counter, EvaluationConfig().size_bins_m2)}
    assert bins["50000+"] == (5, 1.0) and bins["0-2000"][0] == 0
    # mapped at the same pixel: five objects, none left out
    mask, prob = write_scene(tmp_path, "S", label == 1, np.full(label.shape, 0.9), *_coarse_grid())
    _, objects = merge_parts([scene_parts(mask, prob, "S")])
    kept, dropped = keep_min_area(objects, PackageConfig().min_object_area_m2)
    assert (len(kept), dropped) == (5, 0)
    assert sorted(o.ground_area_m2 for o in kept) == pytest.approx(m2, rel=1e-9)


def _coarse_grid() -> tuple[Affine, str]:
    return Affine(COARSE_PX, 0.0, 500_000.0, 0.0, -COARSE_PX, 7_000_000.0), UTM


@pytest.mark.parametrize("min_area_m2", [180_000.0, 200_000.0, 810_000.0, 2_000_000.0])
def test_mapping_drops_the_objects_evaluation_drops(tmp_path: Path, min_area_m2: float) -> None:
    """Issue 23 (4): one size test: at one value (package.min_object_area_m2 for the map, the opt-in
    metrics.min_object_area_m2 for evaluation) the mask of the same RTS at the same 300 m pixel keeps in the objects
    layer exactly the objects evaluation keeps (by ground area; an area equal to the minimum is kept on both sides),
    the others are counted, and the kept ones are numbered 1.. by area."""
    path, label = coarse_label(tmp_path)
    px, m2 = evaluated_objects(path, min_area_m2)
    mask, prob = write_scene(tmp_path, "S", label == 1, np.full(label.shape, 0.9), *_coarse_grid())
    crs, objects = merge_parts([scene_parts(mask, prob, "S")])
    kept, dropped = keep_min_area(objects, min_area_m2)
    assert sorted(o.n_pixels for o in kept) == px and dropped == 5 - len(px)
    assert sorted(o.ground_area_m2 for o in kept) == pytest.approx(m2, rel=1e-9)
    assert [o.object_id for o in kept] == list(range(1, len(kept) + 1))
    back = read_objects(write_objects(tmp_path / "objects.gpkg", kept, crs))[1]
    assert sorted(o.n_pixels for o in back) == px
