"""The objects layer: written whole or in batches, read back exactly, formats and bad inputs named."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import shapely
from affine import Affine

from rtscore.mapping import objects_layer
from rtscore.mapping.objects_layer import read_objects, write_objects
from rtscore.mapping.polygons import PolygonsError, merge_parts, size_bin_key
from tests.mapping.test_polygons import COARSE_PX, UTM, parts_of, two_scenes


def test_geopackage_round_trip_keeps_objects_and_crs_and_leaves_no_temp_file(tmp_path: Path) -> None:
    drawn = shapely.Point(500_800.0, 6_999_600.0).buffer(250.0)
    crs, objects = merge_parts(two_scenes(tmp_path, drawn))
    out = write_objects(tmp_path / "out" / "rts_objects.gpkg", objects, crs)
    assert sorted(p.name for p in out.parent.iterdir()) == ["rts_objects.gpkg"]
    crs_back, back = read_objects(out)
    assert crs_back == crs
    assert len(back) == len(objects) == 1
    o, r = objects[0], back[0]
    assert (r.object_id, r.scene_ids, r.n_pixels, r.size_bin, r.partial) == (
        o.object_id,
        o.scene_ids,
        o.n_pixels,
        o.size_bin,
        o.partial,
    )
    assert (r.prob_mean, r.prob_max, r.area_m2, r.ground_area_m2) == pytest.approx(
        (o.prob_mean, o.prob_max, o.area_m2, o.ground_area_m2)
    )
    assert r.bbox == pytest.approx(o.bbox)
    assert r.geometry.area == pytest.approx(o.geometry.area)


def test_a_layer_written_in_batches_is_the_layer_written_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = shapely.Point(500_800.0, 6_999_600.0).buffer(250.0)
    crs, (one,) = merge_parts(two_scenes(tmp_path, drawn))
    objects = [
        dataclasses.replace(one, object_id=k, geometry=shapely.affinity.translate(one.geometry, 1000.0 * k), n_pixels=k)
        for k in range(1, 6)
    ]
    whole = read_objects(write_objects(tmp_path / "whole.gpkg", objects, crs))
    monkeypatch.setattr(objects_layer, "WRITE_BATCH", 2)  # 3 writes: 2 + 2 + 1
    batched = read_objects(write_objects(tmp_path / "batched.gpkg", objects, crs))
    assert batched[0] == whole[0] == crs
    assert [(o.object_id, o.n_pixels, o.geometry.wkb) for o in batched[1]] == [
        (o.object_id, o.n_pixels, o.geometry.wkb) for o in whole[1]
    ]
    assert [o.object_id for o in batched[1]] == [1, 2, 3, 4, 5]


def test_empty_campaign_writes_an_empty_layer_and_bad_inputs_are_named(tmp_path: Path) -> None:
    n = 20
    t = Affine(2.0, 0.0, 500_000.0, 0.0, -2.0, 7_000_000.0)
    sc = parts_of(tmp_path, "S", np.zeros((n, n), bool), np.zeros((n, n)), t, UTM)
    crs, objects = merge_parts([sc])
    assert objects == []
    assert read_objects(write_objects(tmp_path / "empty.gpkg", objects, crs)) == (crs, [])
    with pytest.raises(PolygonsError, match="format"):
        write_objects(tmp_path / "x.shp", objects, crs, fmt="shp")


def test_geoparquet_is_written_where_gdal_has_the_driver_else_refused_by_name(tmp_path: Path) -> None:
    import pyogrio

    n = 40
    t = Affine(2.0, 0.0, 500_000.0, 0.0, -2.0, 7_000_000.0)
    positive = np.zeros((n, n), bool)
    positive[10:20, 10:20] = True
    crs, objects = merge_parts([parts_of(tmp_path, "S", positive, np.full((n, n), 0.8), t, UTM)])
    out = tmp_path / "rts_objects.parquet"
    if "Parquet" in pyogrio.list_drivers(write=True):
        assert read_objects(write_objects(out, objects, crs, fmt="parquet"))[1][0].n_pixels == 100
    else:
        with pytest.raises(PolygonsError, match="no Parquet driver"):
            write_objects(out, objects, crs, fmt="parquet")
        assert list(tmp_path.glob("*.parquet")) == []


def test_an_objects_layer_written_with_the_old_size_bin_label_reads_back_in_the_new_one(tmp_path: Path) -> None:
    """Issue 23 (5): `50000-1e+12` (written before) reads back, sorts and is shown as `50000+`."""
    from dataclasses import replace

    n = 40
    t = Affine(COARSE_PX, 0.0, 500_000.0, 0.0, -COARSE_PX, 7_000_000.0)
    positive = np.zeros((n, n), bool)
    positive[10:12, 10:12] = True
    crs, (obj,) = merge_parts([parts_of(tmp_path, "S", positive, np.full((n, n), 0.8), t, UTM)])
    assert obj.size_bin == "50000+"
    old = replace(obj, size_bin="50000-1e+12")
    (back,) = read_objects(write_objects(tmp_path / "old.gpkg", [old], crs))[1]
    assert back.size_bin == "50000+"
    assert size_bin_key("50000-1e+12") == size_bin_key("50000+") == 50_000.0
    assert size_bin_key("1e-05-2000") == 1e-05 and size_bin_key("other") == math.inf


def test_a_layer_written_from_the_merges_columns_is_the_layer_of_its_objects(tmp_path: Path) -> None:
    """The finish writes the layer from the merge's columns (no shapely geometry per object): the same file content
    as write_objects of the same objects, geometry bytes included; a GeometryCollection is made polygonal as there."""
    import pyogrio

    from rtscore.mapping.merge import merge_table
    from rtscore.mapping.objects_layer import _multi_wkb, _polygonal_geoms, layer_wkb, write_object_table

    drawn = shapely.Point(500_800.0, 6_999_600.0).union(shapely.Point(500_300.0, 6_999_500.0)).buffer(150.0)
    scenes = two_scenes(tmp_path, drawn)
    crs, table, _ = merge_table(scenes, ["a", "b"], None)
    objects = table.objects()
    assert len(objects) == 2 and [o.object_id for o in objects] == [1, 2]
    by_objects = pyogrio.raw.read(write_objects(tmp_path / "objects.gpkg", objects, crs))
    by_table = pyogrio.raw.read(write_object_table(tmp_path / "table.gpkg", table, crs))
    assert list(by_table[2]) == list(by_objects[2])  # geometries' WKB, byte for byte
    for a, b in zip(by_table[3], by_objects[3], strict=True):
        assert list(a) == list(b)
    assert read_objects(tmp_path / "table.gpkg") == read_objects(tmp_path / "objects.gpkg")
    odd = shapely.GeometryCollection([shapely.box(0, 0, 1, 1), shapely.LineString([(2, 2), (3, 3)])])
    assert list(layer_wkb([odd.wkb, shapely.box(0, 0, 2, 2).wkb])) == list(
        _multi_wkb(_polygonal_geoms([odd, shapely.box(0, 0, 2, 2)]))
    )
