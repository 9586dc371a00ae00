"""`rts arts export` (rtscore.review.arts_export): a campaign's objects and a review's verdicts -> an ARTS
contribution that passes the ARTS check, its geometry the objects' in EPSG:3413, its UIDs ARTS's; unreviewed
objects, the relationships with a prior file, and the refusals."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import shapely
from rasterio.transform import Affine
from rasterio.warp import transform, transform_geom
from shapely.geometry import mapping, shape

from flows.cli.main import main
from rtscore.data.inventory.arts import ARTS_CRS, ARTS_CRS_URN, arts_uid, reproject
from rtscore.data.inventory.check import check_arts
from rtscore.mapping.campaign import INDEX_FILE, OBJECTS_FILE
from rtscore.mapping.objects_layer import write_objects
from rtscore.mapping.polygons import RtsObject
from rtscore.review.arts_export import ArtsExportError, ContributionSettings, export_arts
from rtscore.review.manifest import (
    HEADER_FILE,
    MANIFEST_FILE,
    CampaignRef,
    ChipSettings,
    ReviewHeader,
    ReviewObject,
    Selection,
    object_line,
    review_id,
)
from rtscore.storage import sha256_file
from tests.data.inventory.test_check import arts_properties, feature, write_geojson

UTM = "EPSG:32610"  # UTM 10N: Banks Island's longitudes
PX = 3.0
SIDE = 64
(X0,), (Y0,) = transform("EPSG:4326", UTM, [-122.5], [72.0])
X0, Y0 = round(X0 / PX) * PX, round(Y0 / PX) * PX
# object id -> (pixel box col0, row0, col1, row1 from scene s0's origin, scenes, prob_mean, verdict)
OBJECTS: dict[int, tuple[tuple[int, int, int, int], tuple[str, ...], float, str]] = {
    1: ((10, 10, 20, 18), ("s0",), 0.61, "rts"),
    2: ((74, 10, 82, 20), ("s1",), 0.72, "rts"),
    3: ((58, 30, 70, 38), ("s0", "s1"), 0.83, "rts"),  # across the two scenes' border
    4: ((30, 44, 36, 50), ("s0",), 0.55, "unsure"),
    5: ((40, 52, 50, 58), ("s0",), 0.66, "not_rts"),
}
CREATOR, SOURCE, DAY = "Permafrost Lab", "PlanetScope", "2026-03-01"


def utm_box(cols_rows: tuple[int, int, int, int]) -> shapely.Polygon:
    c0, r0, c1, r1 = cols_rows
    return shapely.box(X0 + c0 * PX, Y0 - r1 * PX, X0 + c1 * PX, Y0 - r0 * PX)


def write_scene(path: Path, k: int, tags: dict[str, str]) -> None:
    profile = dict(driver="GTiff", height=SIDE, width=SIDE, count=3, dtype="uint8", crs=UTM)
    with rasterio.open(path, "w", transform=Affine(PX, 0, X0 + k * SIDE * PX, 0, -PX, Y0), **profile) as f:
        f.write(np.full((3, SIDE, SIDE), 90, np.uint8))
        f.update_tags(**tags)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A campaign (2 UTM scenes of 3 m, s0 dated by its tag, s1 only by the scene list; 5 objects), a review of
    it (regions, inventory ids) and its verdicts (3 rts, 1 unsure, 1 not_rts)."""
    root = tmp_path_factory.mktemp("arts")
    c = root / "campaign"
    c.mkdir()
    write_scene(root / "s0.tif", 0, {"ACQUISITION_DATE": "2021-07-14"})
    write_scene(root / "s1.tif", 1, {})
    (root / "scenes.csv").write_text(f"path,date\n{root / 's0.tif'},\n{root / 's1.tif'},2021-08-02\n")
    index = [
        {
            "type": "Feature",
            "geometry": transform_geom(UTM, "EPSG:4326", mapping(utm_box((k * SIDE, 0, (k + 1) * SIDE, SIDE)))),
            "properties": {"scene_id": f"s{k}", "uri": str(root / f"s{k}.tif")},
        }
        for k in (0, 1)
    ]
    (c / INDEX_FILE).write_text(json.dumps({"type": "FeatureCollection", "features": index}))
    objects = []
    for oid, (px, scenes, p, _) in OBJECTS.items():
        g = utm_box(px)
        objects.append(
            RtsObject(oid, shapely.MultiPolygon([g]), scenes, int(g.area / PX**2), p, p + 0.1, g.area, g.area,
                      g.bounds, "", False)
        )  # fmt: skip
    write_objects(c / OBJECTS_FILE, objects, UTM)
    sha = sha256_file(c / OBJECTS_FILE)
    header, rdir = write_review(root / "review", c, sha)
    verdicts = {
        "type": "FeatureCollection",
        "rts_review": {
            "schema_version": 1,
            "review_id": header.review_id,
            "objects_sha256": sha,
            "package_sha256": header.campaign.package_sha256,
        },
        "features": [
            {"type": "Feature", "geometry": None, "properties": {"object_id": oid, "verdict": v, "reviewer": "ab"}}
            for oid, (_, _, _, v) in OBJECTS.items()
        ],
    }
    (root / "verdicts.geojson").write_text(json.dumps(verdicts))
    return {"root": root, "campaign": c, "objects": objects, "sha": sha, "header": header, "review": rdir}


def write_review(rdir: Path, c: Path, sha: str) -> tuple[ReviewHeader, Path]:
    """A review directory's header and manifest (no chips: the export reads neither): every object in region
    banks-north; object 1 overlaps two inventory polygons, object 2 none."""
    rdir.mkdir()
    ref = CampaignRef(uri=str(c), objects_sha256=sha, package_sha256="b" * 64, crs_wkt=UTM)
    header = ReviewHeader(
        review_id=review_id(ref, Selection(), list(OBJECTS)),
        campaign=ref,
        selection=Selection(),
        chips=ChipSettings(),
        n_objects=len(OBJECTS),
        code_sha256="c" * 64,
    )
    uids = {1: ["uid-a", "uid-b"], 2: []}
    lines = [object_line(review_object(oid, scenes[0], p, uids.get(oid))) for oid, (_, scenes, p, _) in OBJECTS.items()]
    (rdir / HEADER_FILE).write_text(header.model_dump_json())
    (rdir / MANIFEST_FILE).write_text("\n".join(lines) + "\n")
    return header, rdir


def review_object(oid: int, scene: str, p: float, uids: list[str] | None) -> ReviewObject:
    """A manifest line of the export's fields (the chip fields are not read by the ARTS export)."""
    return ReviewObject(
        object_id=oid, scene_id=scene, scene_uri="s.tif", region="banks-north", inventory_uids=uids, prob_mean=p,
        prob_max=p, ground_area_m2=1.0, geometry={"type": "Point", "coordinates": [0, 0]}, geometry_wkt="POINT (0 0)",
        chip=f"chips/{oid}.png", overlay=f"chips/{oid}.svg", chip_window=(0, 0, 64, 64), chip_outline=[],
        pixel_ground_m=PX, chip_sha256="d" * 64,
    )  # fmt: skip


def object_of(f: dict[str, Any]) -> int:
    m = re.search(r"object (\d+)", f["properties"]["Notes"])
    assert m is not None
    return int(m[1])


def test_round_trip_export_passes_the_check_with_the_objects_geometry_and_arts_uids(
    campaign: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, out = campaign["root"], tmp_path / "contribution.geojson"
    args = ["--campaign", str(campaign["campaign"]), "--output", str(out), "--creator", CREATOR, "--source", SOURCE]
    args += ["--review", str(campaign["review"]), "--verdicts", str(root / "verdicts.geojson")]
    assert main(["arts", "export", *args, "--scene-list", str(root / "scenes.csv"), "--contribution-date", DAY]) == 0
    assert capsys.readouterr().out.strip() == (
        f"wrote {out}: 4 ARTS features (3 Positive, 1 Negative; 0 unreviewed); left out: 1 unsure"
    )
    assert check_arts(out).ok and main(["arts", "check", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["crs"] == {"type": "name", "properties": {"name": ARTS_CRS_URN}}  # for rts tile to read back
    feats = {object_of(f): f for f in doc["features"]}
    assert sorted(feats) == [1, 2, 3, 5]
    by_id = {o.object_id: o for o in campaign["objects"]}
    for oid, f in feats.items():
        p = f["properties"]
        want = shape(transform_geom(UTM, ARTS_CRS, mapping(by_id[oid].geometry)))
        assert shape(f["geometry"]).symmetric_difference(want).area < 1e-6  # the object, in EPSG:3413
        assert p["UID"] == arts_uid(p) and p["TrainClass"] == ("Negative" if oid == 5 else "Positive")
        assert (p["LabelType"], p["BaseMapResolution"], p["ContributionDate"]) == ("Polygon", 3, DAY)
        assert (p["CreatorLab"], p["BaseMapSource"], p["RegionName"]) == (CREATOR, SOURCE, "banks-north")
        assert p["Area"] == pytest.approx(by_id[oid].area_m2, rel=2e-3)  # UTM's scale error near its meridian
        assert p["MergedRTS"] is None and p["UnknownRelationship"] is None
    dates = {oid: (f["properties"]["BaseMapDate"], f["properties"]["BaseMapID"]) for oid, f in feats.items()}
    assert dates[1] == ("2021-07-14", "s0")  # the GeoTIFF's tag
    assert dates[2] == ("2021-08-02", "s1")  # the scene list's date column
    assert dates[3] == ("2021-07-14,2021-08-02", "s0,s1")  # several scenes: the range
    rid, campaign_id = campaign["header"].review_id[:12], campaign["sha"][:12]
    assert feats[1]["properties"]["Notes"] == (
        f"reviewed rts by ab (review {rid}, campaign {campaign_id}, object 1); overlaps inventory uid-a, uid-b"
    )
    assert feats[5]["properties"]["Notes"] == f"reviewed not_rts by ab (review {rid}, campaign {campaign_id}, object 5)"
    # The UID by hand: uuid5 of the nine required fields written as ARTS writes them (centroid to 5 decimals, the
    # resolution 3, not 3.0), concatenated.
    p1 = feats[1]["properties"]
    assert (p1["CentroidLat"], p1["CentroidLon"]) == (71.99961, -122.49871)
    literal = "71.99961-122.49871banks-northPermafrost Lab2021-07-14PlanetScope3PositivePolygon"
    assert p1["UID"] == str(uuid.uuid5(uuid.NAMESPACE_DNS, literal))


def test_unreviewed_objects_only_when_asked_and_noted_as_model_detections(
    campaign: dict[str, Any], tmp_path: Path
) -> None:
    settings = ContributionSettings(
        creator=CREATOR,
        source=SOURCE,
        region="Banks Island",
        base_map_date="2021-07-01,2021-08-31",
        resolution=3.0,
        contribution_date=dt.date(2026, 3, 1),
    )
    with pytest.raises(ArtsExportError, match=r"nothing to export: 5 object\(s\), 0 judged.*--include-unreviewed"):
        export_arts(campaign["campaign"], tmp_path / "a.geojson", settings)
    assert not (tmp_path / "a.geojson").exists()
    r = export_arts(
        campaign["campaign"], tmp_path / "a.geojson", settings.model_copy(update={"include_unreviewed": True})
    )
    assert (r.features, r.positive, r.negative, r.unreviewed) == (5, 5, 0, 5)
    assert check_arts(tmp_path / "a.geojson").ok
    feats = {object_of(f): f["properties"] for f in json.loads((tmp_path / "a.geojson").read_text())["features"]}
    assert feats[4]["Notes"] == f"unreviewed model detection (p_mean=0.550, campaign {campaign['sha'][:12]}, object 4)"
    assert {(p["TrainClass"], p["RegionName"], p["BaseMapDate"]) for p in feats.values()} == {
        ("Positive", "Banks Island", "2021-07-01,2021-08-31")
    }


def test_a_prior_file_gives_proposed_relationships_for_overlaps_not_for_touching(
    campaign: dict[str, Any], tmp_path: Path
) -> None:
    overlapping = reproject(utm_box((15, 10, 25, 18)), UTM, ARTS_CRS)  # half of object 1
    touching = reproject(utm_box((82, 10, 90, 20)), UTM, ARTS_CRS)  # shares object 2's east edge
    far = reproject(utm_box((200, 200, 210, 210)), UTM, ARTS_CRS)
    prior = write_geojson(
        tmp_path / "main.geojson", [feature(g, arts_properties(g)) for g in (overlapping, touching, far)]
    )
    uid_a = arts_properties(overlapping)["UID"]
    settings = ContributionSettings(creator=CREATOR, source=SOURCE, base_map_date="2021-07-14", resolution=3.0)
    out = tmp_path / "new.geojson"
    r = export_arts(
        campaign["campaign"], out, settings, verdicts=campaign["root"] / "verdicts.geojson",
        review=campaign["review"], prior=prior,
    )  # fmt: skip
    assert r.overlapping == 1 and r.relationships == str(tmp_path / "new_relationships.csv")
    assert check_arts(out).ok
    feats = {object_of(f): f["properties"] for f in json.loads(out.read_text())["features"]}
    assert feats[1]["UnknownRelationship"] == uid_a  # proposed, never decided: the other fields stay empty
    assert all(feats[k]["UnknownRelationship"] is None for k in (2, 3, 5))
    assert all(feats[1][k] is None for k in ("MergedRTS", "SplitRTS", "NewRTS", "StabilizedRTS"))
    with open(tmp_path / "new_relationships.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1
    row = rows[0]
    assert (row["new_uid"], row["object_id"], row["prior_uid"], row["relationship"]) == (
        feats[1]["UID"],
        "1",
        uid_a,
        "",
    )
    assert float(row["overlap_m2"]) == pytest.approx(float(row["new_area_m2"]) / 2, abs=0.01)  # written to 2 decimals
    assert float(row["new_area_m2"]) == feats[1]["Area"]

    with pytest.raises(ArtsExportError, match=r"index.geojson: not an ARTS file \(no UID, CentroidLat"):
        export_arts(campaign["campaign"], out, settings, prior=campaign["campaign"] / INDEX_FILE)


def test_refusals_name_the_file_the_object_or_the_scene(campaign: dict[str, Any], tmp_path: Path) -> None:
    c, root = campaign["campaign"], campaign["root"]
    settings = ContributionSettings(creator=CREATOR, source=SOURCE, include_unreviewed=True)
    with pytest.raises(ArtsExportError, match=rf"campaign {tmp_path} has no objects.gpkg"):
        export_arts(tmp_path, tmp_path / "x.geojson", settings)
    with pytest.raises(ArtsExportError, match=r"object\(s\) \[1, 2, 3, 4, 5\] have no region: give --region"):
        export_arts(c, tmp_path / "x.geojson", settings)
    with pytest.raises(ArtsExportError, match=r"scene\(s\) s1 \(.*s1.tif\) have no acquisition date.*--base-map-date"):
        export_arts(c, tmp_path / "x.geojson", settings, review=campaign["review"])
    other = json.loads((root / "verdicts.geojson").read_text())
    other["rts_review"]["objects_sha256"] = "f" * 64
    (tmp_path / "other.geojson").write_text(json.dumps(other))
    with pytest.raises(ArtsExportError, match=r"verdicts of another review: they judged objects with sha256 ffff"):
        export_arts(c, tmp_path / "x.geojson", settings, verdicts=tmp_path / "other.geojson")
    other["rts_review"].update(review_id="e" * 64, objects_sha256=campaign["sha"])
    (tmp_path / "other.geojson").write_text(json.dumps(other))
    with pytest.raises(ArtsExportError, match=r"verdicts of review eeeeeeeeeeee, not of the review given"):
        export_arts(c, tmp_path / "x.geojson", settings, verdicts=tmp_path / "other.geojson", review=campaign["review"])
    assert not (tmp_path / "x.geojson").exists()


def test_an_export_read_back_by_rts_tile_labels_the_objects_and_keeps_their_uids(
    campaign: dict[str, Any], tmp_path: Path
) -> None:
    """The round trip of issue 36: campaign objects -> ARTS export -> the check passes -> `rts tile` reads the file
    as ARTS -> each tile's labels are the objects' own rasterisation (confirmed objects 1, the rejected one 0), and
    the UIDs the exporter computed are the tiles' UIDs and NegativeUIDs."""
    from rtscore.config.tiling import TilingConfig
    from rtscore.data.geotiff.root import read_metadata
    from rtscore.data.raster.vector_labels import rasterize_labels
    from rtscore.data.tiling.run import tile_scenes

    root, out = campaign["root"], tmp_path / "contribution.geojson"
    settings = ContributionSettings(creator=CREATOR, source=SOURCE, contribution_date=dt.date(2026, 3, 1))
    export_arts(campaign["campaign"], out, settings, verdicts=root / "verdicts.geojson", review=campaign["review"],
                scene_list=str(root / "scenes.csv"))  # fmt: skip
    assert check_arts(out).ok
    feats = {object_of(f): f["properties"]["UID"] for f in json.loads(out.read_text())["features"]}
    cfg = TilingConfig.model_validate(
        {
            "scenes": [str(root / "s0.tif"), str(root / "s1.tif")],
            "scene_dates": {"s1.tif": "2021-08-02"},  # s0 is dated by its tag
            "polygons": {"path": str(out)},  # no schema: the ARTS fields say what it is
            "regions": {"column": "RegionName"},
            "grid": {"crs": UTM, "pixel_size": PX, "tile_size": 32},
            "min_valid_fraction": 0.0,
            "splits": {"train": ["banks-north"]},
            "split_rules": {"min_val_regions": 1, "min_test_positives": 0},
        }
    )
    manifest = tile_scenes(cfg, tmp_path / "tiles")
    assert (manifest.counts.polygons, manifest.counts.negative_polygons, manifest.counts.stale_labels) == (4, 1, 0)
    by_id = {o.object_id: o for o in campaign["objects"]}
    positives = [{"type": "Feature", "geometry": mapping(by_id[i].geometry), "properties": {}} for i in (1, 2, 3)]
    labelled, negatives = set(), set()
    for row in read_metadata(tmp_path / "tiles"):
        with rasterio.open(tmp_path / "tiles" / "labels" / f"{row['Tile_id']}.tif") as f:
            label, t = f.read(1), f.transform
        with rasterio.open(tmp_path / "tiles" / "PLANET-RGB" / f"{row['Tile_id']}.tif") as f:
            valid = f.read(4) > 0
        want = rasterize_labels(positives, t, 32)
        want[~valid] = 255
        np.testing.assert_array_equal(label, want, err_msg=row["Tile_id"])
        labelled |= set(filter(None, row["UIDs"].split(";")))
        negatives |= set(filter(None, row["NegativeUIDs"].split(";")))
    assert labelled == {feats[1], feats[2]}  # object 3 spans a tile edge: ignore, not labelled 1, in every tile
    assert negatives == {feats[5]}
