"""The ARTS check (rtscore.data.inventory.check, `rts arts check`): a file with many problems gets every one listed,
exit 2; a clean GeoJSON and its abbreviated shapefile copy pass."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyogrio
import pytest
import shapely
from rasterio.warp import transform
from shapely.geometry import mapping

from flows.cli.main import main
from rtscore.data.inventory.arts import (
    ABBREVIATIONS,
    ALL_FIELDS,
    ARTS_CRS,
    ARTS_CRS_URN,
    arts_uid,
    centroid_lat_lon,
    equal_area_m2,
)
from rtscore.data.inventory.check import check_arts

CRS_MEMBER = {"type": "name", "properties": {"name": ARTS_CRS_URN}}


def box_3413(lon: float, lat: float, side_m: float = 60.0) -> shapely.Polygon:
    """A square of ``side_m`` metres in EPSG:3413 whose corner is at (lon, lat)."""
    (x,), (y,) = transform("EPSG:4326", ARTS_CRS, [lon], [lat])
    return shapely.box(x, y, x + side_m, y + side_m)


def arts_properties(geom: Any, **fields: Any) -> dict[str, Any]:
    """Every ARTS field of a feature of ``geom`` (EPSG:3413), its centroid and UID as ARTS computes them;
    ``fields`` replace the required ones before the UID is computed."""
    lat, lon = centroid_lat_lon(geom, ARTS_CRS)
    required = {
        "CentroidLat": lat,
        "CentroidLon": lon,
        "RegionName": "Banks Island",
        "CreatorLab": "Permafrost Lab",
        "BaseMapDate": "2021-07-14",
        "BaseMapSource": "PlanetScope",
        "BaseMapResolution": 3,
        "TrainClass": "Positive",
        "LabelType": "Polygon",
        **fields,
    }
    props: dict[str, Any] = dict.fromkeys(ALL_FIELDS)
    props.update(required)
    props.update(ContributionDate="2026-03-01", UID=arts_uid(required), BaseMapID="s0")
    props["Area"] = round(equal_area_m2(geom, ARTS_CRS), 2)
    return props


def feature(geom: Any, props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "Feature", "properties": props, "geometry": None if geom is None else mapping(geom)}


def write_geojson(path: Path, features: list[dict[str, Any]], crs: dict[str, Any] | None = CRS_MEMBER) -> Path:
    doc: dict[str, Any] = {"type": "FeatureCollection", "features": features}
    if crs is not None:
        doc["crs"] = crs
    path.write_text(json.dumps(doc))
    return path


def clean_features(n: int = 3) -> list[tuple[Any, dict[str, Any]]]:
    geoms = [box_3413(-122.0 + 0.01 * k, 72.0 + 0.005 * k) for k in range(n)]
    return [(g, arts_properties(g, TrainClass="Negative" if k == n - 1 else "Positive")) for k, g in enumerate(geoms)]


def test_a_broken_file_gets_every_problem_listed_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = [box_3413(-122.0 + 0.01 * k, 72.0) for k in range(14)]
    bowtie = shapely.Polygon([(0, 0), (40, 40), (40, 0), (0, 20), (0, 0)])
    bowtie = shapely.affinity.translate(bowtie, *g[10].bounds[:2])
    other_uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, "another feature"))
    rows = [
        feature(g[0], arts_properties(g[0])),
        feature(g[1], arts_properties(g[1], TrainClass="positive")),  # misspelt class
        feature(g[2], arts_properties(g[2], BaseMapDate="2019-7-05")),  # unpadded date
        feature(g[3], {**arts_properties(g[3], BaseMapDate="2019-08-01,2019-07-01"), "ContributionDate": "2024/01/02"}),
        feature(g[4], arts_properties(g[4], CentroidLat="71.5")),  # a number written as text
        feature(
            g[5], arts_properties(g[5], CentroidLon=centroid_lat_lon(g[5], ARTS_CRS)[1] + 0.01)
        ),  # not the centroid
        feature(g[6], arts_properties(g[6], BaseMapResolution=-3, LabelType="Box")),
        feature(g[7], {**arts_properties(g[7]), "UID": other_uid}),  # well-formed, not the fields' UID
        feature(g[0], arts_properties(g[0])),  # row 1 again: its UID twice in the file
        feature(g[9], arts_properties(g[9], RegionName=None)),
        feature(bowtie, arts_properties(bowtie)),  # a self-intersecting ring
        feature(shapely.Point(g[11].centroid), arts_properties(g[11])),
        feature(g[12], {**arts_properties(g[12]), "MergedRTS": f"abc,{other_uid}"}),
        feature(None, arts_properties(g[13])),
    ]
    path = write_geojson(tmp_path / "broken.geojson", rows)
    result = check_arts(path)
    found = [(p.feature.split(" (")[0], p.field, p.problem, p.expected) for p in result.problems]
    want = [
        ("row 1", "UID", "also the UID of row(s) 9"),
        ("row 2", "TrainClass", "'positive' is not an allowed value"),
        ("row 3", "BaseMapDate", "'2019-7-05' is not a date YYYY-MM-DD"),
        ("row 4", "BaseMapDate", "the range ends before it starts"),
        ("row 4", "ContributionDate", "'2024/01/02' is not a date"),
        ("row 5", "CentroidLat", "'71.5' is str, not a number"),
        ("row 6", "CentroidLon", "is not the geometry's centroid"),
        ("row 7", "BaseMapResolution", "-3 is out of range"),
        ("row 7", "LabelType", "'Box' is not an allowed value"),
        ("row 8", "UID", f"{other_uid} is not the UID of the feature's fields"),
        ("row 9", "UID", "also the UID of row(s) 1"),
        ("row 10", "RegionName", "missing"),
        ("row 11", "geometry", "invalid: Self-intersection"),
        ("row 12", "geometry", "a Point"),
        ("row 13", "MergedRTS", "'abc' not a UID"),
        ("row 14", "geometry", "none"),
    ]
    assert len(found) == len(want), "\n".join(p.line() for p in result.problems)
    for (row, name, text), (frow, fname, fproblem, _) in zip(want, found, strict=True):
        assert (frow, fname) == (row, name) and text in fproblem, (row, name, text, fproblem)
    expected = {(p[0], p[1]): p[3] for p in found}
    assert expected[("row 8", "UID")].startswith(arts_properties(g[7])["UID"])  # says which UID it should be
    assert expected[("row 2", "TrainClass")] == "one of Positive, Negative"
    assert expected[("row 6", "CentroidLon")].startswith(f"{centroid_lat_lon(g[5], ARTS_CRS)[1]!r} (the centroid")
    assert result.problems[0].feature.endswith(f"(UID {rows[0]['properties']['UID']})")  # named by UID and row

    assert main(["arts", "check", str(path)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == [p.line() for p in result.problems]
    assert out[-1].endswith("16 problem(s): in 14 of 14 features; not a valid ARTS file")


def test_a_clean_file_and_its_abbreviated_shapefile_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    feats = clean_features()
    path = write_geojson(tmp_path / "clean.geojson", [feature(g, p) for g, p in feats], crs=None)
    result = check_arts(path)
    assert result.ok and result.classes == {"Positive": 2, "Negative": 1}
    assert result.notes == ["no crs member: EPSG:3413 assumed, ARTS's CRS"]
    assert main(["arts", "check", str(path)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"{path}: a valid ARTS file: 3 features (2 Positive, 1 Negative), EPSG:3413 "
        "(no crs member: EPSG:3413 assumed, ARTS's CRS)"
    )

    shp = tmp_path / "clean.shp"
    names = [n for n in ALL_FIELDS if feats[0][1][n] is not None]
    columns = [
        np.array([p[n] for _, p in feats], dtype=object if isinstance(feats[0][1][n], str) else None) for n in names
    ]
    pyogrio.raw.write(
        shp,
        geometry=np.array([shapely.to_wkb(g) for g, _ in feats], dtype=object),
        field_data=columns,
        fields=[ABBREVIATIONS[n] for n in names],
        crs=ARTS_CRS,
        driver="ESRI Shapefile",
        geometry_type="Polygon",
    )
    result = check_arts(shp)
    assert result.ok and result.features == 3 and result.notes == [], [p.line() for p in result.problems]

    # A column lacking from the whole file is one problem of the file, named with its abbreviation.
    for _, p in feats:
        del p["LabelType"]
    bare = check_arts(write_geojson(tmp_path / "bare.geojson", [feature(g, p) for g, p in feats]))
    assert [p.line() for p in bare.problems] == [
        "file: LabelType: no such column; expected a column of that name (or 'LablTyp' in a shapefile's abbreviated "
        "names)"
    ]


def test_an_invalid_ring_takes_its_own_or_its_repaired_centroid(tmp_path: Path) -> None:
    """An invalid ring's own centroid (ARTS's script computes that one) can lie anywhere, even off the globe for a
    bow-tie whose halves cancel; the centroid of its repair is the one asked for, and a file carrying either is
    told only that the ring is invalid."""
    bowtie = shapely.Polygon([(0, 0), (40, 40), (40, 0), (0, 20), (0, 0)])
    bowtie = shapely.affinity.translate(bowtie, *box_3413(-122.0, 72.0).bounds[:2])
    repaired = shapely.make_valid(bowtie)
    lat, lon = centroid_lat_lon(repaired, ARTS_CRS)
    for props in (arts_properties(bowtie), arts_properties(bowtie, CentroidLat=lat, CentroidLon=lon)):
        problems = check_arts(write_geojson(tmp_path / "b.geojson", [feature(bowtie, props)])).problems
        assert [(p.field, p.problem.split(":")[0]) for p in problems] == [("geometry", "invalid")]
    wrong = arts_properties(bowtie, CentroidLat=lat + 0.1, CentroidLon=lon)
    problems = check_arts(write_geojson(tmp_path / "b.geojson", [feature(bowtie, wrong)])).problems
    assert [p.field for p in problems] == ["geometry", "CentroidLat"] and problems[1].expected.startswith(repr(lat))
