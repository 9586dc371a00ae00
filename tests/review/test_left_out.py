"""Issue 38: in the cells ingest cuts, the campaign's objects that no label covers are 255, not background.

Scene A is round 1's (regions west: train, east: test); scene B, 600 m east, only mapped. Cell W of B is train, its
east neighbour E test (regions bwest/beast, their border on the cells' edge). In W the campaign found H (judged
not_rts: the hard negative that cuts W), U (judged unsure), X (found, not exported for review) and S (judged rts,
across W's east edge into E: held out). Round 2 judges U again, from a second campaign, as rts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import shapely
import yaml
from rasterio.warp import transform

from rtscore.config.tiling import load_tiling_config
from rtscore.data.tiling.pixels import GridCell
from rtscore.data.tiling.run import tile_scenes
from rtscore.review.ingest import ingest_review
from rtscore.review.round_files import AREA_IGNORE
from tests.data.tiling.test_run import PX, UTM, X0, Y0, blob, metadata, write_gpkg, write_scene
from tests.review.conftest import assert_only_cells_differ
from tests.review.test_ingest import (
    GSD,
    INVENTORY,
    SIZE,
    TILE,
    XB,
    cell_id,
    export_review,
    over,
    tile_label,
    verdict_doc,
    write_regions,
    write_verdicts,
)


def cell_box_utm(tile_id: str) -> tuple[float, float, float, float]:
    """The UTM bounds of a grid cell (EPSG:3857) of the tiling's grid."""
    col, row = (int(v) for v in tile_id[1:].split("_r"))
    x0, y0, x1, y1 = GridCell(col, row, TILE, PX).bounds
    xs, ys = transform("EPSG:3857", UTM, [x0, x1], [y0, y1])
    return xs[0], ys[0], xs[1], ys[1]


W = cell_id(shapely.Point(XB + 576, Y0 - 250).buffer(1))
WX0, WY0, WX1, WY1 = cell_box_utm(W)
CX, CY = (WX0 + WX1) / 2, (WY0 + WY1) / 2
H, U, X = blob(CX - 60, CY + 55, 25, 31), blob(CX - 60, CY - 55, 25, 32), blob(CX + 40, CY + 60, 20, 33)
S = blob(WX1, CY - 50, 30, 34)  # across W's east edge
FAR = blob(CX, CY - 600, 25, 35)  # two cells south: found, not judged, in no cell that is cut
FOUND = {1: H, 2: U, 3: X, 4: S, 5: FAR}


REGIONS = {
    "west": shapely.box(X0 - 3000, Y0 - 5000, X0 + 576, Y0 + 3000),
    "east": shapely.box(X0 + 576, Y0 - 5000, X0 + 1464, Y0 + 3000),
    "bwest": shapely.box(X0 + 1464, Y0 - 5000, WX1, Y0 + 3000),
    "beast": shapely.box(WX1, Y0 - 5000, X0 + 6000, Y0 + 3000),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("left-out")
    (tmp / "scenes").mkdir()
    write_scene(tmp / "scenes" / "a.tif", X0, INVENTORY, size=SIZE, gsd=GSD, seed=1)
    write_scene(tmp / "b.tif", XB, list(FOUND.values()), size=SIZE, gsd=GSD, seed=2)
    write_gpkg(tmp / "rts.gpkg", INVENTORY, ["x"] * len(INVENTORY))
    write_regions(tmp / "regions.gpkg", REGIONS)
    doc = {
        "scenes": ["scenes/a.tif"],
        "polygons": {"path": "rts.gpkg", "id_column": "UID"},
        "regions": {"path": "regions.gpkg", "name_column": "name"},
        "grid": {"pixel_size": PX, "tile_size": TILE},
        "splits": {"train": ["west", "bwest"], "test": ["east", "beast"]},
        "output": "tiles",
    }
    (tmp / "tile.yaml").write_text(yaml.safe_dump(doc))
    tile_scenes(load_tiling_config(tmp / "tile.yaml"), tmp / "tiles")
    export_review(tmp, FOUND, dict.fromkeys(FOUND, tmp / "b.tif"), exported={1, 2, 4, 5})
    return tmp


def areas(root: Path) -> list[tuple[int, str, int]]:
    """areas.gpkg of a round: (object id, review id, ignore flag) of each area, sorted."""
    import pyogrio

    meta, _, _, fields = pyogrio.raw.read(root / "review" / "areas.gpkg")
    cols = dict(zip(meta["fields"], fields, strict=True))
    rows = zip(cols["object_id"], cols["review_id"], cols[AREA_IGNORE], strict=True)
    return sorted((int(o), str(r), int(i)) for o, r, i in rows)


def test_unlabelled_objects_in_a_cut_cell_are_ignored_and_a_later_verdict_labels_them(
    world: Path, tmp_path: Path
) -> None:
    verdicts = write_verdicts(tmp_path / "v1.geojson", verdict_doc(world, {1: "not_rts", 2: "unsure", 4: "rts"}))
    r1 = tmp_path / "r1"
    result = ingest_review(str(world / "review"), verdicts, str(world / "tile.yaml"), str(r1), held_out="skip")
    outcomes = {o.object_id: (o.outcome, o.split) for o in result.objects}
    assert outcomes == {
        1: ("hard_negative", "train"),
        2: ("left_out_unsure", "train"),
        4: ("left_out_held_out", "test"),
    }
    assert result.counts.ignored == 3 and "3 unlabelled object(s) in the cells cut ignored (255)" in (
        result.summary_line()
    )
    rows = {r["Tile_id"]: r for r in metadata(r1)}
    assert rows[W]["TrainClass"] == "negative" and rows[W]["RegionName"] == "bwest"
    assert cell_id(FAR) not in rows and cell_id(shapely.Point(WX1 + 100, CY)) not in rows, "E and FAR are not cut"
    label, tr = tile_label(r1, W)
    assert (label[over(H, tr)] == 0).all(), "the hard negative is background"
    for name, geom in (("unsure", U), ("not exported", X), ("held out", S)):
        assert (label[over(geom, tr)] == 255).all(), f"the {name} object is ignored, not background"
    assert (label[~(over(U, tr) | over(X, tr) | over(S, tr))] == 0).all()
    assert_only_cells_differ(world / "tiles", r1, {W})
    rid = result.review_id
    assert areas(r1) == [(1, rid, 0), (2, rid, 1), (3, rid, 1), (4, rid, 1)]

    # Round 2: another campaign found U again (object 1), judged rts: U is labelled, X and S stay ignored.
    again = export_review(world, {1: U}, {1: world / "b.tif"}, name="again")
    v2 = write_verdicts(tmp_path / "v2.geojson", verdict_doc(world, {1: "rts"}, review="again"))
    r2 = tmp_path / "r2"
    second = ingest_review(str(again), v2, str(r1 / "review" / "tile.yaml"), str(r2), held_out="skip")
    assert second.counts.confirmed == 1 and second.counts.ignored == 0
    label, tr = tile_label(r2, W)
    assert (label[over(U, tr)] == 1).all() and (label[over(H, tr)] == 0).all()
    assert (label[over(X, tr)] == 255).all() and (label[over(S, tr)] == 255).all()
    assert areas(r2) == sorted([(1, rid, 0), (1, second.review_id, 0), (3, rid, 1), (4, rid, 1)]), "U judged now"
