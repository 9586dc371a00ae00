"""`rts review ingest`: a review's verdicts -> the next dataset version (issue 26).

Two 192-pixel UTM scenes (6 m): A, tiled in round 1 (regions west: train, east: test), and B, 600 m east of it, only
mapped by the campaign (north: train, south: in no split). The campaign's objects sit at grid-cell centres, each
wholly inside one cell: 1 (rts) and 2 (not_rts) and 3 (unsure) on B north, 4 (rts) on A east (held out), 5 on B
south (a region of no split).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import shapely
import yaml
from rasterio.crs import CRS
from rasterio.features import rasterize
from rasterio.warp import transform, transform_geom

from rtscore.config.base import ConfigError
from rtscore.config.pipeline import load_pipeline_config
from rtscore.config.tiling import load_tiling_config
from rtscore.data.raster.warp import warp_scenes
from rtscore.data.tiling.run import tile_scenes
from rtscore.mapping.objects_layer import write_objects
from rtscore.mapping.polygons import RtsObject
from rtscore.review.ingest import IngestResult, ingest_review
from rtscore.review.manifest import (
    CampaignRef,
    ChipSettings,
    ReviewError,
    ReviewHeader,
    ReviewObject,
    Selection,
    object_line,
    review_id,
)
from rtscore.review.placement import warp_source
from rtscore.review.verdicts import Verdict, verdicts_geojson
from rtscore.storage.files import sha256_file
from rtscore.storage.gcs import make_client
from tests.conftest import GCS_TEST_BUCKET
from tests.data.tiling.test_run import PX, UTM, X0, Y0, blob, metadata, write_gpkg, write_scene
from tests.review.conftest import assert_only_cells_differ

GSD = 6.0
SIZE = 192  # 1152 m
XB = X0 + 1752  # scene B's west edge: 600 m east of scene A
TILE = 64
SPAN = TILE * PX
PACKAGE = "p" * 64


def cell_centre(x: float, y: float) -> tuple[float, float]:
    """The UTM point at the centre of the grid cell (EPSG:3857) holding UTM (x, y)."""
    [gx], [gy] = transform(UTM, "EPSG:3857", [x], [y])
    cx, cy = (np.floor(gx / SPAN) + 0.5) * SPAN, (np.floor(gy / SPAN) + 0.5) * SPAN
    [ux], [uy] = transform("EPSG:3857", UTM, [cx], [cy])
    return ux, uy


def cell_id(geom_utm: shapely.Geometry) -> str:
    p = shapely.geometry.shape(transform_geom(UTM, "EPSG:3857", shapely.geometry.mapping(geom_utm))).centroid
    return f"c{int(np.floor(p.x / SPAN))}_r{int(np.floor(p.y / SPAN))}"


def at(x: float, y: float, seed: int, r: float = 40.0) -> shapely.Polygon:
    return blob(*cell_centre(x, y), r, seed)


INVENTORY = [at(X0 + 250, Y0 - 300, 1), at(X0 + 300, Y0 - 850, 2), at(X0 + 900, Y0 - 450, 3)]
OBJECTS = {
    1: at(XB + 576, Y0 - 250, 11),  # rts, north
    2: at(XB + 200, Y0 - 250, 12),  # not_rts, north
    3: at(XB + 950, Y0 - 250, 13),  # unsure, north
    4: at(X0 + 900, Y0 - 900, 14),  # rts, east (test)
    5: at(XB + 576, Y0 - 900, 15),  # rts, south (no split)
}
SPLITS = {"train": ["west", "north"], "test": ["east"]}


def write_regions(path: Path, boxes: dict[str, shapely.Polygon] | None = None) -> None:
    """A region file (UTM boxes by name): scene A's west and east, scene B's north and south unless ``boxes``."""
    import pyogrio

    boxes = boxes or {
        "west": shapely.box(X0 - 3000, Y0 - 5000, X0 + 576, Y0 + 3000),
        "east": shapely.box(X0 + 576, Y0 - 5000, X0 + 1464, Y0 + 3000),
        "north": shapely.box(X0 + 1464, Y0 - 576, X0 + 6000, Y0 + 3000),
        "south": shapely.box(X0 + 1464, Y0 - 5000, X0 + 6000, Y0 - 576),
    }
    pyogrio.raw.write(
        path,
        geometry=np.array([shapely.to_wkb(b) for b in boxes.values()], dtype=object),
        field_data=[np.array(list(boxes), dtype=object)],
        fields=["name"],
        crs=UTM,
        driver="GPKG",
        geometry_type="Polygon",
    )


def rts_object(oid: int, geom: shapely.Polygon, scene: str) -> RtsObject:
    return RtsObject(
        object_id=oid,
        geometry=geom,
        scene_ids=(scene,),
        n_pixels=int(geom.area / GSD**2),
        prob_mean=0.7,
        prob_max=0.9,
        area_m2=geom.area,
        ground_area_m2=geom.area,
        bbox=geom.bounds,
        size_bin="1k-10k",
        partial=False,
    )


def review_object(oid: int, geom: shapely.Polygon, scene_uri: str) -> ReviewObject:
    return ReviewObject(
        object_id=oid,
        scene_id=Path(scene_uri).stem,
        scene_uri=scene_uri,
        prob_mean=0.7,
        prob_max=0.9,
        ground_area_m2=geom.area,
        geometry=transform_geom(UTM, "EPSG:4326", shapely.geometry.mapping(geom)),
        geometry_wkt=geom.wkt,
        chip=f"chips/{oid}.png",
        overlay=f"chips/{oid}.svg",
        chip_window=(0, 0, 64, 64),
        chip_outline=[[[1.0, 1.0], [2.0, 1.0], [2.0, 2.0]]],
        pixel_ground_m=GSD,
        chip_sha256="0" * 64,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Scenes, inventory, regions, round 1 tiled (tiles/), a campaign and its review export."""
    tmp = tmp_path_factory.mktemp("ingest")
    (tmp / "scenes").mkdir()
    write_scene(tmp / "scenes" / "a.tif", X0, [*INVENTORY, OBJECTS[4]], size=SIZE, gsd=GSD, seed=1)
    write_scene(tmp / "b.tif", XB, [OBJECTS[k] for k in (1, 2, 3, 5)], size=SIZE, gsd=GSD, seed=2)
    write_gpkg(tmp / "rts.gpkg", INVENTORY, ["x"] * len(INVENTORY))
    write_regions(tmp / "regions.gpkg")
    doc = {
        "scenes": ["scenes/a.tif"],
        "polygons": {"path": "rts.gpkg", "id_column": "UID"},
        "regions": {"path": "regions.gpkg", "name_column": "name"},
        "grid": {"pixel_size": PX, "tile_size": TILE},
        "splits": SPLITS,
        "output": "tiles",
    }
    (tmp / "tile.yaml").write_text(yaml.safe_dump(doc))
    tile_scenes(load_tiling_config(tmp / "tile.yaml"), tmp / "tiles")

    scenes = {1: tmp / "b.tif", 2: tmp / "b.tif", 3: tmp / "b.tif", 4: tmp / "scenes" / "a.tif", 5: tmp / "b.tif"}
    export_review(tmp, OBJECTS, scenes)
    return tmp


def export_review(
    tmp: Path,
    found: dict[int, shapely.Polygon],
    scenes: dict[int, Path],
    name: str = "review",
    exported: set[int] | None = None,
) -> Path:
    """A campaign ``tmp/<name>-campaign`` (``tmp/campaign`` for ``review``) that found ``found`` (object id -> UTM
    outline), each on its scene, and its review export ``tmp/<name>``, every object in it (``exported``: those)."""
    campaign = tmp / ("campaign" if name == "review" else f"{name}-campaign")
    write_objects(campaign / "objects.gpkg", [rts_object(k, g, scenes[k].stem) for k, g in found.items()], UTM)
    (campaign / "summary.json").write_text(json.dumps({"mapping_identity": {"package_sha256": PACKAGE}}))
    ref = CampaignRef(
        uri=str(campaign),
        objects_sha256=sha256_file(campaign / "objects.gpkg"),
        package_sha256=PACKAGE,
        crs_wkt=CRS.from_user_input(UTM).to_wkt(),
    )
    objects = [review_object(k, g, str(scenes[k])) for k, g in found.items() if exported is None or k in exported]
    header = ReviewHeader(
        review_id=review_id(ref, Selection(), [o.object_id for o in objects]),
        campaign=ref,
        selection=Selection(),
        chips=ChipSettings(),
        n_objects=len(objects),
        code_sha256="c" * 64,
    )
    (tmp / name).mkdir()
    (tmp / name / "review.json").write_text(header.model_dump_json())
    (tmp / name / "manifest.jsonl").write_text("".join(object_line(o) + "\n" for o in objects))
    return tmp / name


def header(world: Path, review: str = "review") -> ReviewHeader:
    return ReviewHeader.model_validate_json((world / review / "review.json").read_text())


def verdict_doc(world: Path, verdicts: dict[int, str], review: str = "review") -> dict[str, Any]:
    objects = [
        ReviewObject.model_validate_json(line) for line in (world / review / "manifest.jsonl").read_text().splitlines()
    ]
    vs = [Verdict(object_id=k, verdict=v, reviewer="ab", time="2026-12-02T07:09:41Z") for k, v in verdicts.items()]  # type: ignore[arg-type]
    return verdicts_geojson(header(world, review), objects, vs, reviewer="ab", exported="2026-12-02T07:10:00Z")


def write_verdicts(path: Path, doc: dict[str, Any]) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


MAIN = {1: "rts", 2: "not_rts", 3: "unsure", 4: "rts"}


def ingest(world: Path, verdicts: str, out: Path, **kw: Any) -> IngestResult:
    return ingest_review(str(world / "review"), verdicts, str(world / "tile.yaml"), str(out), **kw)


def tile_label(root: Path, tile: str) -> tuple[np.ndarray, Any]:
    with rasterio.open(root / "labels" / f"{tile}.tif") as f:
        return f.read(1), f.transform


def over(geom_utm: shapely.Geometry, tr: Any) -> np.ndarray:
    g = transform_geom(UTM, "EPSG:3857", shapely.geometry.mapping(geom_utm))
    return rasterize([g], (TILE, TILE), transform=tr) > 0


def test_verdicts_become_the_next_data_root_with_its_lineage(world: Path, tmp_path: Path) -> None:
    """Confirmed RTS -> label 1 in a tile of the new root; a false positive's cell -> a tile with label 0 over it;
    unsure -> nothing; an object in a test region left out (held_out skip); round 1's tiles and splits kept; the
    version, parent and review recorded in ingest.json and tiling.json; a pipeline config pointed at the root."""
    verdicts = write_verdicts(tmp_path / "verdicts.geojson", verdict_doc(world, MAIN))
    gen = {"split": "train", "tile_size": TILE, "source": "geotiff", "geotiff": {"data_root": "tiles"}}
    pipeline = {  # its split rules are tile.yaml's (both the defaults): one set of rules (issue 38, point 5)
        "data": {
            "tile_size": TILE,
            "generation": {"train": "gen-train.yaml", "test": {**gen, "split": "test"}},
        },
    }
    (world / "gen-train.yaml").write_text(yaml.safe_dump(gen))
    (world / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    out = tmp_path / "tiles-r1"
    result = ingest(world, verdicts, out, held_out="skip", pipeline_config=str(world / "pipeline.yaml"))

    rid = header(world).review_id
    c = result.counts
    assert (c.confirmed, c.false_positives, c.unsure, c.left_out_held_out) == (1, 1, 1, 1)
    assert c.per_split == {"train": {"confirmed": 1, "false_positives": 1}}
    outcomes = {o.object_id: (o.outcome, o.region, o.split) for o in result.objects}
    assert outcomes == {
        1: ("confirmed", "north", "train"),
        2: ("hard_negative", "north", "train"),
        3: ("left_out_unsure", "north", "train"),  # placed as the page showed it, not cut
        4: ("left_out_held_out", "east", "test"),
    }
    rows = {r["Tile_id"]: r for r in metadata(out)}
    parent_rows = {r["Tile_id"]: r for r in metadata(world / "tiles")}
    assert all(rows[t] == r for t, r in parent_rows.items()), "round 1's tiles are all there, as they were"
    assert (out / "splits.yaml").read_text() == (world / "tiles" / "splits.yaml").read_text()

    uid = f"review-{rid[:8]}-1"
    t1 = cell_id(OBJECTS[1])
    assert rows[t1]["UIDs"] == uid and rows[t1]["TrainClass"] == "positive" and rows[t1]["RegionName"] == "north"
    label, tr = tile_label(out, t1)
    inside = over(OBJECTS[1], tr)
    assert (label[inside] == 1).mean() > 0.9 and (label == 1).sum() <= inside.sum() * 1.1

    t2 = cell_id(OBJECTS[2])
    assert rows[t2]["TrainClass"] == "negative" and rows[t2]["RegionName"] == "north"
    label, tr = tile_label(out, t2)
    assert (label[over(OBJECTS[2], tr)] == 0).all(), "a hard negative: label 0 over the false positive"
    assert cell_id(OBJECTS[3]) not in rows, "unsure: its cell of the added scene is not cut"
    added = set(rows) - set(parent_rows)
    assert added == {t1, t2}, "the added scene is cut only around the judged objects"
    assert_only_cells_differ(world / "tiles", out, {t1, t2})
    assert rows[cell_id(OBJECTS[4])] == parent_rows[cell_id(OBJECTS[4])], "held out, skipped: unchanged"

    import pyogrio

    meta, _, _, fields = pyogrio.raw.read(out / "review" / "inventory.gpkg")
    cols = dict(zip(meta["fields"], fields, strict=True))
    assert list(cols["UID"]) == ["RTS-000", "RTS-001", "RTS-002", uid]
    assert list(cols["review_status"]) == ["inventory"] * 3 + ["confirmed"] and list(cols["object_id"])[-1] == 1
    assert list(cols["review_id"])[-1] == rid
    area_meta, _, _, area_fields = pyogrio.raw.read(out / "review" / "areas.gpkg")
    areas = dict(zip(area_meta["fields"], area_fields, strict=True))
    assert sorted(areas["object_id"]) == [1, 2] and list(areas["scene"]) == ["b.tif", "b.tif"]

    recorded = IngestResult.model_validate_json((out / "review" / "ingest.json").read_text())
    assert recorded == result and result.version == "tiles+r1" and result.review_id == rid
    assert (out / "review" / "verdicts.geojson").read_bytes() == Path(verdicts).read_bytes()
    parent = json.loads((world / "tiles" / "tiling.json").read_text())
    tiling_json = json.loads((out / "tiling.json").read_text())
    lineage = tiling_json["lineage"]
    assert lineage["version"] == "tiles+r1" and lineage["parent"] == str(world / "tiles")
    assert lineage["parent_fingerprint"] == parent["config_fingerprint"] == result.parent_fingerprint
    assert lineage["review"] == {
        "review_id": rid,
        "verdicts": "verdicts.geojson",
        "verdicts_sha256": sha256_file(Path(verdicts)),
    }
    assert lineage["counts"]["confirmed"] == 1 and tiling_json["config_fingerprint"] == result.fingerprint
    tile_yaml = yaml.safe_load((out / "review" / "tile.yaml").read_text())
    from_round = os.path.relpath(world, out / "review")  # every path of the round's config relative to it
    assert tile_yaml["output"] == ".." and tile_yaml["focus"] == {
        "path": "areas.gpkg",
        "scenes": [f"{from_round}/b.tif"],
        "scene_column": "scene",  # each focus scene cut around its own objects only (issue 38)
        "ignore_column": "ignore",  # unlabelled objects in the cells cut: 255 (tests/review/test_left_out.py)
    }
    assert tile_yaml["scenes"] == [f"{from_round}/scenes/a.tif", f"{from_round}/b.tif"]
    assert tile_yaml["lineage"]["parent"] == f"{from_round}/tiles"
    assert tile_yaml["regions"]["path"] == f"{from_round}/regions.gpkg"
    assert result.summary_line().endswith(
        f"; next: rts run --config {out}/review/pipeline.yaml --run artifacts/tiles+r1"
    ), "the whole command: a run directory of its own, not artifacts/pipeline again"
    assert not result.unchanged

    cfg = load_pipeline_config(out / "review" / "pipeline.yaml")
    roots = {s: g.geotiff.data_root for s, g in cfg.data.generation.items() if g.geotiff is not None}
    assert roots == {"train": str(out.resolve()), "test": str(out.resolve())}

    round2 = str(out / "review" / "tile.yaml")
    with pytest.raises(ReviewError, match=r"object\(s\) \[1\] are already confirmed in the round's inventory"):
        ingest_review(str(world / "review"), verdicts, round2, str(tmp_path / "twice"), held_out="skip")
    assert not (tmp_path / "twice").exists()
    negatives = write_verdicts(tmp_path / "more.geojson", verdict_doc(world, {2: "not_rts"}))
    pipeline = str(world / "pipeline.yaml")
    second = ingest_review(
        str(world / "review"), negatives, round2, str(tmp_path / "tiles-r2"), pipeline_config=pipeline
    )
    assert second.version == "tiles+r2" and second.parent == str(out.resolve())
    assert {r["Tile_id"] for r in metadata(tmp_path / "tiles-r2")} == set(rows), "the same tiles: nothing new"
    assert second.unchanged, "the hard negative was one already: every tile is round 1's, byte for byte"
    said = second.summary_line()
    assert "the round adds nothing: its tiles are the parent's, byte for byte" in said and "rts run" not in said, said


def test_a_round_moved_with_its_inputs_still_reads_them(world: Path, tmp_path: Path) -> None:
    """Issue 38: the next round's tile.yaml names every file relative to itself (scenes, focus, the lineage's parent,
    regions), so a project holding the scenes, the parent root and the round moves (or is copied) and the round
    still cuts the same root: every path read from the new place (the campaign's scene from where it stayed), rts tile
    resuming every tile under one identity."""
    before = tmp_path / "before"
    before.mkdir()
    for name in ("scenes", "tiles"):
        shutil.copytree(world / name, before / name)
    for name in ("rts.gpkg", "regions.gpkg", "tile.yaml"):  # b.tif, the campaign's scene, stays where it was mapped
        shutil.copy(world / name, before / name)
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(world, {1: "rts", 2: "not_rts"}))
    first = ingest_review(str(world / "review"), verdicts, str(before / "tile.yaml"), str(before / "tiles-r1"))
    after = tmp_path / "after"
    before.rename(after)
    cfg = load_tiling_config(after / "tiles-r1" / "review" / "tile.yaml")
    assert cfg.focus is not None and cfg.lineage is not None and cfg.regions.path is not None and cfg.output
    named = [*cfg.scenes, *cfg.focus.scenes, cfg.focus.path, cfg.lineage.parent, cfg.regions.path, cfg.polygons.path]
    assert all(Path(p).exists() and not Path(p).is_relative_to(before) for p in [*named, cfg.output]), named
    assert cfg.focus.scenes == [str(world / "b.tif")] and Path(cfg.scenes[0]).is_relative_to(after)
    again = tile_scenes(cfg, after / "tiles-r1")
    assert again.config_fingerprint == first.fingerprint, "the same inputs, read from their new place"
    assert again.resumed_tiles == again.counts.tiles == first.tiling.tiles


# scene C: west of and over scene A's west and south edges; objects mapped on it (21: new ground, 22: inside A)
XC = X0 - 600
ON_C = {21: at(X0 - 300, Y0 - 1500, 21), 22: at(X0 + 250, Y0 - 600, 22)}


def test_ingest_cuts_again_only_the_cells_holding_judged_objects(world: Path, tmp_path: Path) -> None:
    """Issue 38: a scene the review adds was a focus scene that filled the NoData of every parent cell it covered:
    A's edge tiles changed (test tiles among them) and cells too sparse before became tiles. Now every parent tile
    (images, labels, split) is byte for byte the parent's but the judged objects' cells: 22's (a parent tile, now
    positive) and 21's (new ground, a hard negative)."""
    write_scene(tmp_path / "c.tif", XC, list(ON_C.values()), size=300, gsd=GSD, seed=3)
    export_review(tmp_path, ON_C, {k: tmp_path / "c.tif" for k in ON_C}, "review-c")
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(tmp_path, {21: "not_rts", 22: "rts"}, "review-c"))
    out = tmp_path / "tiles-r1"
    result = ingest_review(str(tmp_path / "review-c"), verdicts, str(world / "tile.yaml"), str(out))
    assert {o.object_id: (o.outcome, o.split) for o in result.objects} == {
        21: ("hard_negative", "train"),
        22: ("confirmed", "train"),
    }
    cells = {cell_id(g) for g in ON_C.values()}
    assert_only_cells_differ(world / "tiles", out, cells)
    parent, rows = {r["Tile_id"]: r for r in metadata(world / "tiles")}, {r["Tile_id"]: r for r in metadata(out)}
    t21, t22 = cell_id(ON_C[21]), cell_id(ON_C[22])
    assert t21 not in parent and rows[t21]["TrainClass"] == "negative", "a hard negative on new ground"
    assert parent[t22]["TrainClass"] == "negative" and rows[t22]["TrainClass"] == "positive"
    assert {t: r for t, r in rows.items() if t not in cells} == {t: r for t, r in parent.items() if t not in cells}


def test_a_warped_copy_of_a_parent_scene_is_cut_from_that_scene_or_refused_with_the_reason(
    world: Path, tmp_path: Path
) -> None:
    """Issue 38: a campaign maps `rts warp` copies; an object on the copy of scene A (which the parent tiled) is cut
    from A itself (the copy is not added: its pixels and NoData rule never reach the parent's cells), so only its
    cell changes. A copy whose record names another file of A's name (its identity not A's) or that is not a warp
    record is refused before anything is written, saying why."""
    cfg = load_tiling_config(world / "tile.yaml")
    warp_scenes(cfg, tmp_path / "warped")
    copy = tmp_path / "warped" / "a.tif"
    found = {31: at(X0 + 250, Y0 - 600, 31)}
    review = str(export_review(tmp_path, found, {31: copy}, "review-w"))
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(tmp_path, {31: "rts"}, "review-w"))
    out = tmp_path / "tiles-r1"
    result = ingest_review(review, verdicts, str(world / "tile.yaml"), str(out))
    assert result.counts.confirmed == 1
    tile_yaml = yaml.safe_load((out / "review" / "tile.yaml").read_text())
    a_tif = os.path.relpath(world / "scenes" / "a.tif", out / "review")  # the round's paths are relative to it
    assert tile_yaml["scenes"] == [a_tif] and "focus" not in tile_yaml, "the copy is A"
    assert_only_cells_differ(world / "tiles", out, {cell_id(found[31])})
    assert {r["Tile_id"]: r for r in metadata(out)}[cell_id(found[31])]["TrainClass"] == "positive"

    record = json.loads((tmp_path / "warped" / "a_warp.json").read_text())
    a = (world / "scenes" / "a.tif").resolve()
    moved = {**record, "scene": str(tmp_path / "elsewhere" / "a.tif")}
    (tmp_path / "warped" / "a_warp.json").write_text(json.dumps(moved))
    assert warp_source(copy.resolve(), {a}, cfg) == (a, None), "A moved since it was warped: the same identity"
    (tmp_path / "warped" / "a_warp.json").write_text(json.dumps({**moved, "identity": "0" * 64}))
    for words in (
        ["manifest.jsonl", f"object 31: scene {copy.resolve()} is an rts warp copy of", "elsewhere/a.tif",
         f"not of the round's scene {a} of that name", "warp it again with the round's tiling config"],
        ["manifest.jsonl", "object 31:", "a_warp.json beside it, which is not an rts warp record"],
    ):  # fmt: skip
        with pytest.raises(ReviewError) as err:
            ingest_review(review, verdicts, str(world / "tile.yaml"), str(tmp_path / "refused"))
        assert all(w in str(err.value) for w in words), str(err.value)
        assert not (tmp_path / "refused").exists(), "nothing written on refusal"
        (tmp_path / "warped" / "a_warp.json").write_text("{not json")


def test_a_pipeline_config_with_other_split_rules_than_the_tiling_configs_is_refused(
    world: Path, tmp_path: Path
) -> None:
    """Issue 38 (5): the round's tiling config and pipeline config hold one set of split rules; two values of one
    rule are refused, naming both files, the rule and both values, before anything is written."""
    verdicts = write_verdicts(tmp_path / "verdicts.geojson", verdict_doc(world, MAIN))
    gen = {"split": "train", "tile_size": TILE, "source": "geotiff", "geotiff": {"data_root": "tiles"}}
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump({"data": {"tile_size": TILE, "generation": {"train": gen}}, "splits": {"min_test_positives": 1}})
    )
    out = tmp_path / "tiles-r1"
    with pytest.raises(ConfigError) as err:
        ingest(world, verdicts, out, held_out="skip", pipeline_config=str(pipeline))
    assert (
        f"split rules disagree: split_rules.min_test_positives is 100 in {world / 'tile.yaml'}, "
        f"splits.min_test_positives is 1 in {pipeline}." in str(err.value)
    )
    assert not out.exists(), "nothing written on refusal"


def refused(world: Path, verdicts: str, out: Path, *words: str, **kw: Any) -> str:
    with pytest.raises(ReviewError) as err:
        ingest(world, verdicts, out, **kw)
    text = str(err.value)
    for w in words:
        assert w in text, text
    assert not out.exists(), "nothing written on refusal"
    return text


def test_val_test_regions_are_refused_skipped_or_added_never_to_train(world: Path, tmp_path: Path) -> None:
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(world, {1: "rts", 4: "rts"}))
    refused(
        world,
        verdicts,
        tmp_path / "o1",
        verdicts,
        "object(s) 4 (region 'east' in test)",
        "would change the val/test set",
    )
    result = ingest(world, verdicts, tmp_path / "o2", held_out="add")
    assert {o.object_id: o.split for o in result.objects} == {1: "train", 4: "test"}
    assert result.counts.per_split == {
        "train": {"confirmed": 1, "false_positives": 0},
        "test": {"confirmed": 1, "false_positives": 0},
    }
    rows = {r["Tile_id"]: r for r in metadata(tmp_path / "o2")}
    assert rows[cell_id(OBJECTS[4])]["RegionName"] == "east" and rows[cell_id(OBJECTS[4])]["TrainClass"] == "positive"
    assert yaml.safe_load((tmp_path / "o2" / "splits.yaml").read_text()) == SPLITS


def test_a_region_in_no_split_is_refused_or_added_to_train(world: Path, tmp_path: Path) -> None:
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(world, {5: "rts"}))
    refused(
        world, verdicts, tmp_path / "o1", verdicts, "object(s) 5 (region 'south')", "in no split", "--new-regions train"
    )
    result = ingest(world, verdicts, tmp_path / "o2", new_regions="train")
    assert result.counts.new_train_regions == ["south"]
    assert yaml.safe_load((tmp_path / "o2" / "splits.yaml").read_text())["train"] == ["west", "north", "south"]


def test_verdicts_not_of_this_review_are_refused_naming_file_and_objects(world: Path, tmp_path: Path) -> None:
    doc = verdict_doc(world, MAIN)
    doc["features"].append({**doc["features"][0], "properties": {**doc["features"][0]["properties"], "object_id": 99}})
    v = write_verdicts(tmp_path / "extra.geojson", doc)
    refused(world, v, tmp_path / "o", v, "object(s) [99] not in the review manifest", "manifest.jsonl")

    other = verdict_doc(world, MAIN)
    other["rts_review"]["review_id"] = "f" * 64
    v = write_verdicts(tmp_path / "other.geojson", other)
    refused(world, v, tmp_path / "o", v, "verdicts of another review", "f" * 12, header(world).review_id[:12])

    broken = verdict_doc(world, MAIN)
    broken["features"][1]["geometry"] = {"type": "Polygon", "coordinates": "edited"}
    v = write_verdicts(tmp_path / "broken.geojson", broken)
    refused(world, v, tmp_path / "o", v, "features[1] (object 2)", "not valid GeoJSON geometry")


def test_a_verdict_header_missing_a_key_or_a_file_of_no_verdict_is_refused_by_name(world: Path, tmp_path: Path) -> None:
    """Issue 38: the header (rts_review) must hold every key the page writes that ingest checks by, each missing one
    named (a file holding only review_id was accepted); a file judging no object is refused (it recorded a dataset
    version with the review ingested). Nothing written either way."""
    rid = header(world).review_id
    only_id = verdict_doc(world, MAIN)
    only_id["rts_review"] = {"review_id": rid}
    v = write_verdicts(tmp_path / "only-id.geojson", only_id)
    missing = "rts_review.schema_version, rts_review.objects_sha256, rts_review.package_sha256"
    refused(world, v, tmp_path / "o", v, f"the header lacks {missing}", "export the verdicts again", held_out="skip")
    no_package = verdict_doc(world, MAIN)
    del no_package["rts_review"]["package_sha256"]
    v = write_verdicts(tmp_path / "no-package.geojson", no_package)
    refused(world, v, tmp_path / "o", v, "the header lacks rts_review.package_sha256: ", held_out="skip")
    blank = verdict_doc(world, MAIN)
    blank["rts_review"]["objects_sha256"] = ""
    v = write_verdicts(tmp_path / "blank.geojson", blank)
    refused(world, v, tmp_path / "o", v, "rts_review.objects_sha256 must be a non-empty text", held_out="skip")
    v = write_verdicts(tmp_path / "none.geojson", verdict_doc(world, {}))
    refused(world, v, tmp_path / "o", v, "holds no verdict (no feature): nothing to ingest", held_out="skip")


def test_a_campaign_mapped_again_or_by_another_package_is_refused(world: Path, tmp_path: Path) -> None:
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(world, MAIN))
    campaign = tmp_path / "campaign"
    shutil.copytree(world / "campaign", campaign)
    write_objects(campaign / "objects.gpkg", [rts_object(1, OBJECTS[2], "b")], UTM)
    refused(
        world, verdicts, tmp_path / "o", str(campaign / "objects.gpkg"), "review.json", "mapped again", "export again",
        campaign=str(campaign),
    )  # fmt: skip
    shutil.copy(world / "campaign" / "objects.gpkg", campaign / "objects.gpkg")
    (campaign / "summary.json").write_text(json.dumps({"mapping_identity": {"package_sha256": "q" * 64}}))
    refused(world, verdicts, tmp_path / "o", "summary.json", "qqqqqqqqqqqq", "another package", campaign=str(campaign))
    shutil.copy(world / "campaign" / "summary.json", campaign / "summary.json")
    assert ingest(world, verdicts, tmp_path / "ok", campaign=str(campaign), held_out="skip").counts.confirmed == 1


def test_an_output_that_is_not_new_is_refused_and_left_untouched(world: Path, tmp_path: Path) -> None:
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(world, MAIN))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ReviewError, match="busy: exists and is not empty"):
        ingest(world, verdicts, tmp_path / "busy", held_out="skip")
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["notes.txt"]
    with pytest.raises(ReviewError, match="parent data root"):
        ingest(world, verdicts, world / "tiles" / "next", held_out="skip")


def test_regions_from_a_column_carry_into_the_inventory_and_a_split_moving_polygon_is_refused(
    world: Path, tmp_path: Path
) -> None:
    """Regions from the inventory's column: a confirmed polygon carries its region there; one whose region would
    become that of cells of another split (a cell takes its nearest polygon's region) is refused, naming them."""
    doc = yaml.safe_load((world / "tile.yaml").read_text())
    doc.update(regions={"column": "Region"}, polygons={"path": "rts-col.gpkg", "id_column": "UID"})
    doc.update(splits={"train": ["west"], "test": ["east"]}, output="tiles-col")
    write_gpkg(world / "rts-col.gpkg", INVENTORY, ["west", "west", "east"])
    (world / "tile-col.yaml").write_text(yaml.safe_dump(doc))
    tile_scenes(load_tiling_config(world / "tile-col.yaml"), world / "tiles-col")

    def run(verdicts: dict[int, str], out: Path) -> IngestResult:
        v = write_verdicts(tmp_path / f"{out.name}.geojson", verdict_doc(world, verdicts))
        col = str(world / "tile-col.yaml")
        return ingest_review(str(world / "review"), v, col, str(out), held_out="add", new_regions="train")

    with pytest.raises(ReviewError) as err:
        run({4: "rts"}, tmp_path / "moved")
    assert "rts-col.gpkg: regions come from its column 'Region'" in str(err.value)
    assert "object(s) [4] would move grid cells to another split" in str(err.value)
    moves = r"c-?\d+_r\d+: '(west|east)' \((train|test)\) -> '(west|east)' \((train|test)\)"
    assert re.search(moves, str(err.value)) and not (tmp_path / "moved").exists()

    result = run({1: "rts"}, tmp_path / "ok")
    import pyogrio

    meta, _, _, fields = pyogrio.raw.read(tmp_path / "ok" / "review" / "inventory.gpkg")
    cols = dict(zip(meta["fields"], fields, strict=True))
    assert list(cols["Region"]) == ["west", "west", "east", result.objects[0].region]
    row = {r["Tile_id"]: r for r in metadata(tmp_path / "ok")}[cell_id(OBJECTS[1])]
    assert row["RegionName"] == result.objects[0].region and row["TrainClass"] == "positive"


def test_a_first_round_on_new_ground_with_regions_from_a_column_is_not_refused_for_cells_it_does_not_cut(
    world: Path, tmp_path: Path
) -> None:
    """Issue 38: an empty cell takes the region of the nearest polygon, so a confirmed object on new ground is nearer
    to the cell of a held-out object than the polygon that put it in test. That cell is not cut (the object is left
    out), so its move is no reason to refuse the round; the confirmed object's own cell keeps its split (train)."""
    doc = yaml.safe_load((world / "tile.yaml").read_text())
    doc.update(regions={"column": "Region"}, polygons={"path": "rts-new.gpkg", "id_column": "UID"})
    doc.update(splits={"train": ["west"], "test": ["east"]}, output="tiles-new")
    near_1, beyond_3 = at(XB + 200, Y0 - 250, 21), at(XB + 1450, Y0 - 250, 22)  # west of object 1, east of object 3
    write_gpkg(world / "rts-new.gpkg", [*INVENTORY, near_1, beyond_3], ["west", "west", "east", "west", "east"])
    (world / "tile-new.yaml").write_text(yaml.safe_dump(doc))
    tile_scenes(load_tiling_config(world / "tile-new.yaml"), world / "tiles-new")
    v = write_verdicts(tmp_path / "v.geojson", verdict_doc(world, {1: "rts", 3: "not_rts"}))
    config = str(world / "tile-new.yaml")
    result = ingest_review(str(world / "review"), v, config, str(tmp_path / "r2"), held_out="skip")
    outcomes = {o.object_id: (o.outcome, o.split) for o in result.objects}
    assert outcomes == {1: ("confirmed", "train"), 3: ("left_out_held_out", "test")}
    rows = {r["Tile_id"]: r for r in metadata(tmp_path / "r2")}
    assert rows[cell_id(OBJECTS[1])]["RegionName"] == "west" and cell_id(OBJECTS[3]) not in rows
    assert_only_cells_differ(world / "tiles-new", tmp_path / "r2", {cell_id(OBJECTS[1])})


def test_a_new_val_tile_overlapping_a_test_tile_is_refused_naming_both(world: Path, tmp_path: Path) -> None:
    """Spatial blocking pairs every two splits, val<->test included (issue 35: only train<->val/test were checked):
    with south a val region, object 5's new val cell on the ground of a parent test tile is refused naming both."""
    from rasterio.transform import Affine

    doc = yaml.safe_load((world / "tile.yaml").read_text())
    doc.update(
        scenes=[str(world / "scenes" / "a.tif")],
        polygons={"path": str(world / "rts.gpkg"), "id_column": "UID"},
        regions={"path": str(world / "regions.gpkg"), "name_column": "name"},
        splits={**SPLITS, "val": ["south"]},
        split_rules={**doc.get("split_rules", {}), "min_val_regions": 1},  # south alone in val: the rules accept it
        output=str(tmp_path / "tiles"),
    )
    (tmp_path / "tile.yaml").write_text(yaml.safe_dump(doc))
    shutil.copytree(world / "tiles", tmp_path / "tiles")
    test_tile = next(r["Tile_id"] for r in metadata(tmp_path / "tiles") if r["RegionName"] == "east")
    col, row = (int(v) for v in re.findall(r"-?\d+", cell_id(OBJECTS[5])))
    with rasterio.open(tmp_path / "tiles" / "PLANET-RGB" / f"{test_tile}.tif", "r+") as f:  # 8 px east of the cell
        f.transform = Affine(PX, 0.0, col * SPAN + 8 * PX, 0.0, -PX, (row + 1) * SPAN)
    verdicts = write_verdicts(tmp_path / "v.geojson", verdict_doc(world, {5: "rts"}))
    out = tmp_path / "out"
    with pytest.raises(ReviewError) as err:
        ingest_review(str(world / "review"), verdicts, str(tmp_path / "tile.yaml"), str(out), held_out="add")
    text = str(err.value)
    assert "the tiles these verdicts add break spatial blocking" in text and "(val (new)<->test 1)" in text, text
    assert f"val (new) tile {cell_id(OBJECTS[5])} overlaps test tile {test_tile}" in text, text
    assert not out.exists(), "nothing written on refusal"


def test_a_review_and_campaign_in_a_bucket_are_ingested_like_local_ones(
    world: Path, tmp_path: Path, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review directory and the campaign read from gs:// (the real client against the emulator): the same
    outcome as from local files; the campaign's objects layer is still checked (a re-mapped one is refused)."""
    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "cache"))
    bucket = make_client().bucket(GCS_TEST_BUCKET)
    for rel in ("review/review.json", "review/manifest.jsonl", "campaign/objects.gpkg", "campaign/summary.json"):
        bucket.blob(f"ingest-gs/{rel}").upload_from_filename(str(world / rel))
    verdicts = write_verdicts(tmp_path / "verdicts.geojson", verdict_doc(world, MAIN))
    review, campaign = f"gs://{GCS_TEST_BUCKET}/ingest-gs/review", f"gs://{GCS_TEST_BUCKET}/ingest-gs/campaign"
    local = ingest(world, verdicts, tmp_path / "local", held_out="skip")
    remote = ingest_review(review, verdicts, str(world / "tile.yaml"), str(tmp_path / "gs"), held_out="skip",
                           campaign=campaign)  # fmt: skip
    assert remote.counts == local.counts and remote.objects == local.objects and remote.campaign == campaign
    assert metadata(tmp_path / "gs") == metadata(tmp_path / "local")
    bucket.blob("ingest-gs/campaign/objects.gpkg").upload_from_string(b"mapped again")
    with pytest.raises(ReviewError, match="mapped again"):
        ingest_review(review, verdicts, str(world / "tile.yaml"), str(tmp_path / "gs2"), held_out="skip",
                      campaign=campaign)  # fmt: skip
    assert not (tmp_path / "gs2").exists()
