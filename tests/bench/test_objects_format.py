"""bench/objects_format.py (issue 37, point 3): a smoke run at N = 300 in process (row groups and GeoPackage batches
of 100, so both files are written in several pieces); both files hold the same objects as the input, whole and as a
review's sample, and the table has both formats and their ratios."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyogrio
import pytest
import shapely

from bench.objects_format import (
    FORMATS,
    KINDS,
    chosen_rows,
    geo_metadata,
    load_table,
    read_parquet_objects,
    read_rows,
    run,
)
from rtscore.mapping import objects_layer
from rtscore.mapping.objects_layer import read_objects
from rtscore.mapping.polygons import RtsObject


def _row(o: RtsObject) -> tuple[object, ...]:
    """An object's attributes and its geometry as normalised MultiPolygon WKB."""
    g = o.geometry if o.geometry.geom_type == "MultiPolygon" else shapely.MultiPolygon([o.geometry])
    attrs = (o.object_id, o.scene_ids, o.n_pixels, o.prob_mean, o.prob_max, o.area_m2, o.ground_area_m2, o.bbox)
    return (*attrs, o.size_bin, o.partial, shapely.to_wkb(shapely.normalize(g)))


def test_both_formats_hold_the_same_objects_and_the_table_has_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(objects_layer, "WRITE_BATCH", 100)  # the GeoPackage appended in batches, as at 10^6
    a = argparse.Namespace(n=300, repeats=1, row_group=100, seed=3, in_process=True)
    figures = run(a, tmp_path)

    _, table = load_table(tmp_path / "input")
    given = table.objects()
    gpkg_crs, from_gpkg = read_objects(tmp_path / "r0" / "objects.gpkg")
    pq_crs, from_parquet = read_parquet_objects(tmp_path / "r0" / "objects.parquet")
    assert gpkg_crs == pq_crs and pq_crs.to_epsg() == 3857
    want = [_row(o) for o in given]
    assert [_row(o) for o in from_gpkg] == want
    assert [_row(o) for o in from_parquet] == want
    assert sum(o.geometry.geom_type == "MultiPolygon" for o in given) > 0  # the input has both kinds
    assert {len(o.scene_ids) for o in given} == {1, 2}
    rows = chosen_rows(300, 20)
    for fmt in FORMATS:  # a review's sample with its geometries: by feature id, or from the row groups holding it
        assert [_row(o) for o in read_rows(tmp_path / "r0" / f"objects.{fmt}", fmt, rows)] == [want[r] for r in rows]

    geo = geo_metadata(tmp_path / "r0" / "objects.parquet")
    column = geo["columns"]["geometry"]
    assert geo["version"] == "1.1.0" and geo["primary_column"] == "geometry" and column["encoding"] == "WKB"
    assert column["geometry_types"] == ["MultiPolygon"] and column["crs"]["id"] == {"authority": "EPSG", "code": 3857}
    check = figures["check"]
    assert check["row_groups"] == 3 and check["objects_compared"] == 200
    assert check["gdal_reads_parquet"] == ("Parquet" in pyogrio.list_drivers())

    for kind in KINDS:
        for fmt in FORMATS:
            s = figures["steps"][f"{kind}-{fmt}"]
            assert s["seconds"] > 0 and s["peak_mib"] > 0, (kind, fmt)
    assert figures["steps"]["write-parquet"]["file_mib"] > 0 and "write_file_mib" in figures["ratios"]
    out = capsys.readouterr().out
    assert "| gpkg |" in out and "| parquet |" in out and "| parquet / gpkg |" in out
    json.dumps(figures)  # --json writes them
