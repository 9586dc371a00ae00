"""The one inventory reader (rtscore.data.inventory.reader): ARTS (full and abbreviated names, EPSG:3413 by default,
any declared CRS), mapped columns and plain files, typed features, every bad value refused in one error."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pytest
import shapely

from rtscore.config.base import ConfigError, parse_config
from rtscore.config.tiling import PolygonsConfig
from rtscore.data.inventory.arts import DateError, DateRange
from rtscore.data.inventory.reader import InventoryError, date_range, read_inventory_file
from rtscore.data.raster.vector_labels import LabelPolygonError
from tests.data.inventory.world import GRID, LABELS, Label, arts_fields, write_arts_geojson, write_vector

ARTS = PolygonsConfig(path="unused")
READER = "rtscore.data.inventory.reader"


def polygons(**doc: object) -> PolygonsConfig:
    return parse_config(PolygonsConfig, {"path": "unused", **doc})


def test_an_arts_geojson_without_crs_is_epsg_3413_typed_and_said_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_arts_geojson(tmp_path / "arts.geojson", LABELS)
    with caplog.at_level(logging.INFO, logger=READER):
        read = read_inventory_file(path, GRID, ARTS, "RegionName")
    assert read.schema.kind == "arts" and not read.schema.abbreviated
    by = {f.uid: f for f in read.features}
    assert [f.uid for f in read.features] == [lab.uid for lab in LABELS] and [f.row for f in read.features] == [
        0, 1, 2, 3, 4, 5
    ]  # fmt: skip
    assert (by["N1-negative"].train_class, by["B1-box"].label_type) == ("negative", "bbox")
    assert by["R1-range"].dates == DateRange(dt.date(2019, 6, 1), dt.date(2022, 8, 1))
    assert by["V1-bowtie"].dates == DateRange(dt.date(2022, 7, 5), dt.date(2022, 7, 5)), "an unpadded date is read"
    assert {f.region for f in read.features} == {"Peel Plateau"}
    for lab in LABELS[:4]:  # 3413 -> 3857: the outline comes back where it was drawn (centimetres)
        assert by[lab.uid].geometry.symmetric_difference(lab.geom).area < 1.0
    assert len(by["P1-hole"].geometry.interiors) == 1, "a hole is kept"
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert lines == [f"{path}: ARTS: 6 features: Positive 5 (Polygon 4, BoundingBox 1), Negative 1 (Polygon 1)"]


@pytest.mark.parametrize(
    ("name", "crs", "abbreviated"),
    [("arts.shp", "EPSG:3413", True), ("arts-4326.gpkg", "EPSG:4326", False), ("arts-utm.gpkg", "EPSG:32608", True)],
)
def test_abbreviated_names_and_any_declared_crs_read_the_same_labels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, crs: str, abbreviated: bool
) -> None:
    labels = LABELS[:5]  # valid outlines (a shapefile writer may rewrite an invalid ring)
    rows = [arts_fields(lab, CentroidLat=68.1, BaseMapResolution=3.0) for lab in labels]
    path = write_vector(tmp_path / name, labels, rows, crs, abbreviated=abbreviated)
    with caplog.at_level(logging.INFO, logger=READER):
        read = read_inventory_file(path, GRID, ARTS, "RegionName")  # RegionName finds ReginNm
    assert read.schema.kind == "arts" and read.schema.abbreviated == abbreviated
    assert read.schema.region_column == ("ReginNm" if abbreviated else "RegionName")
    assert [(f.uid, f.train_class, f.label_type, f.dates and f.dates.text()) for f in read.features] == [
        (lab.uid, lab.train_class.lower(), "bbox" if lab.label_type == "BoundingBox" else "polygon", lab.date)
        for lab in labels
    ]
    for f, lab in zip(read.features, labels, strict=True):
        assert f.geometry.symmetric_difference(lab.geom).area < 0.01 * lab.geom.area
    said = "ARTS (abbreviated names)" if abbreviated else "ARTS"
    assert any(r.getMessage().startswith(f"{path}: {said}: 5 features") for r in caplog.records)


def test_every_bad_value_is_refused_in_one_error_naming_file_features_and_allowed_values(tmp_path: Path) -> None:
    many = [Label(f"M{i:02d}", "Postive", "Polygon", "2022-07-01", LABELS[1].geom) for i in range(22)]
    odd = [
        Label("lower", "positive", "Polygon", "2022-07-01", LABELS[1].geom),
        Label("box", "Positive", "Box", "2019-13-01", LABELS[1].geom),
        Label("twice", "Positive", "Polygon", "2022-07-01", LABELS[1].geom),
        Label("twice", "Positive", "Polygon", "", LABELS[1].geom),
    ]
    labels = [*many, *odd, LABELS[0]]
    rows = [arts_fields(lab) for lab in labels]
    path = write_arts_geojson(tmp_path / "bad.geojson", [*labels[:-1], None], rows)  # type: ignore[list-item]
    with pytest.raises(InventoryError) as err:
        read_inventory_file(path, GRID, ARTS)
    text = str(err.value)
    assert text.startswith(f"{path}: 7 problems:")
    assert (
        "'TrainClass' value 'Postive': M00, M01," in text
        and "M19 and 2 more; allowed values: 'Positive', 'Negative' (case-sensitive)" in text
    )
    assert "'TrainClass' value 'positive': lower;" in text
    assert "'LabelType' value 'Box': box; allowed values: 'Polygon', 'BoundingBox'" in text
    assert "'BaseMapDate' value '2019-13-01': box; a date is YYYY-MM-DD" in text
    assert "'BaseMapDate' is blank: twice" in text
    assert "id column 'UID' repeats 'twice': row 24, row 25; ids must be unique" in text
    assert "geometry is empty: P1-hole" in text


def test_an_invalid_polygon_is_repaired_and_named_in_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_arts_geojson(tmp_path / "arts.geojson", LABELS)
    with caplog.at_level(logging.WARNING, logger=READER):
        read = read_inventory_file(path, GRID, ARTS)
    tie = read.features[-1]
    assert tie.repaired and tie.geometry.is_valid and tie.geometry.geom_type == "MultiPolygon"
    assert tie.geometry.area == pytest.approx(2 * 100 * 200 / 2, rel=1e-3), "both triangles kept"
    assert [f.uid for f in read.repaired] == ["V1-bowtie"] and not read.features[0].repaired
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"{path}: 1 invalid polygon(s) repaired with make_valid: V1-bowtie"]


def test_mapped_columns_class_type_and_date(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    labels = LABELS[:4]
    rows = [
        {"id": "a", "kind": " rts ", "shape": "outline", "img_date": "2019-7-5"},
        {"id": "b", "kind": "rts", "shape": "outline", "img_date": "2019-07-05T10:42:00"},
        {"id": "c", "kind": "bg", "shape": "outline", "img_date": ""},
        {"id": "d", "kind": "rts", "shape": "box", "img_date": "2019-07-01,2019-07-31"},
    ]
    path = write_vector(tmp_path / "inv.gpkg", labels, rows, "EPSG:32608")
    columns = {
        "class_column": "kind",
        "positive_values": ["rts"],
        "negative_values": [" bg "],
        "label_type_column": "shape",
        "polygon_values": ["outline"],
        "bbox_values": ["box"],
        "date_column": "img_date",
    }
    cfg = polygons(id_column="id", columns=columns)
    with caplog.at_level(logging.INFO, logger=READER):
        read = read_inventory_file(path, GRID, cfg)
    assert read.schema.kind == "mapped"
    assert [(f.uid, f.train_class, f.label_type) for f in read.features] == [
        ("a", "positive", "polygon"),
        ("b", "positive", "polygon"),
        ("c", "negative", "polygon"),
        ("d", "positive", "bbox"),
    ]
    day = DateRange(dt.date(2019, 7, 5), dt.date(2019, 7, 5))
    assert [f.dates for f in read.features] == [day, day, None, DateRange(dt.date(2019, 7, 1), dt.date(2019, 7, 31))]
    assert any("mapped columns: 4 features: Positive 3" in r.getMessage() for r in caplog.records)
    rows[1]["shape"] = "Outline"
    path = write_vector(tmp_path / "bad.gpkg", labels, rows, "EPSG:32608")
    with pytest.raises(
        InventoryError, match=r"bad\.gpkg: 'shape' value 'Outline': b; allowed values: 'outline', 'box'"
    ):
        read_inventory_file(path, GRID, cfg)
    with pytest.raises(InventoryError, match=r"polygons\.columns\.date_column: column 'date' is not in"):
        read_inventory_file(path, GRID, polygons(columns={**columns, "date_column": "date"}))
    with pytest.raises(ConfigError, match=r"\['bg'\] in both positive_values and negative_values"):
        polygons(columns={**columns, "positive_values": ["rts", "bg"]})
    with pytest.raises(ConfigError, match="schema mapped needs columns"):
        polygons(schema="mapped")


def test_plain_files_and_files_with_some_arts_fields(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    labels = [LABELS[0], LABELS[1]]
    plain = write_vector(tmp_path / "plain.gpkg", labels, [{"name": "x", "RegionName": "r"}] * 2, "EPSG:4326")
    with caplog.at_level(logging.INFO, logger=READER):
        read = read_inventory_file(plain, GRID, ARTS)
    assert read.schema.kind == "plain" and {(f.train_class, f.label_type, f.dates) for f in read.features} == {
        ("positive", "polygon", None)
    }
    assert [f.uid for f in read.features] == ["plain-0", "plain-1"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{plain}: no class column: every polygon is an RTS: 2 features: Positive 2 (Polygon 2)"
    ]
    with pytest.raises(
        InventoryError, match=r"plain\.gpkg: polygons\.schema is arts, but the file lacks .*'CentroidLat'"
    ):
        read_inventory_file(plain, GRID, polygons(schema="arts"))
    partial = write_vector(
        tmp_path / "partial.shp",
        labels,
        [{"TrainClass": "Positive", "RegionName": "r"}] * 2,
        "EPSG:3413",
        abbreviated=True,
    )
    with pytest.raises(
        InventoryError,
        match=r"partial\.shp: has ARTS's class field 'TrnClss' but not every required "
        r"ARTS field: it lacks \['CentroidLat', 'CentroidLon', 'CreatorLab', "
        r"'BaseMapDate', 'BaseMapSource', 'BaseMapResolution', 'LabelType'\]",
    ):
        read_inventory_file(partial, GRID, ARTS)
    arts = write_arts_geojson(tmp_path / "arts.geojson", LABELS[:3])
    as_plain = read_inventory_file(arts, GRID, polygons(schema="plain"))
    assert {f.train_class for f in as_plain.features} == {"positive"}, "schema plain: the classes are not read"


def test_an_arts_file_read_as_epsg_3413_with_lon_lat_coordinates_is_refused(tmp_path: Path) -> None:
    lonlat = shapely.box(-133.01, 68.0, -133.0, 68.01)  # degrees, and no crs member: ARTS reads EPSG:3413
    feature = {"type": "Feature", "properties": arts_fields(LABELS[0]), "geometry": shapely.geometry.mapping(lonlat)}
    path = tmp_path / "lonlat.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [feature]}))
    with pytest.raises(LabelPolygonError, match=r"lonlat\.geojson: declares no CRS and is read as EPSG:3413"):
        read_inventory_file(path, GRID, ARTS)


def test_date_values() -> None:
    day = dt.date(2019, 7, 5)
    assert (
        date_range(dt.datetime(2019, 7, 5, 10, 0)) == date_range(day) == date_range("2019-07-05") == DateRange(day, day)
    )
    assert date_range("2019-07-05T10:42:00+00:00") == DateRange(day, day)
    assert date_range(" ") is None and date_range(None) is None
    both = date_range("2019-07-01, 2019-08-15")
    assert both is not None and both.age_days(dt.date(2019, 7, 20)) == 0 and both.age_days(dt.date(2019, 8, 25)) == 10
    for bad in ("2019-13-01", "July 2019", "2019-08-01,2019-07-01"):
        with pytest.raises(DateError):
            date_range(bad)
