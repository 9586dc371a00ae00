"""evaluation/test_objects.csv (issue 36, point 6): every ground-truth object of the test tiles, named by the
inventory ids whose ObjectPixels pixel it holds, and which seeds found it."""

from __future__ import annotations

import csv
import io

import pytest

from rtscore.evaluation import EvaluationError
from rtscore.evaluation.groups import TestTiles
from rtscore.evaluation.object_table import ObjectTable
from tests.evaluation.conftest import PIXEL_AREA_M2, TILES, Passes, loader, metadata, seed_pass


def test_every_object_is_a_row_named_by_its_inventory_ids_with_the_seeds_that_found_it(passes: Passes) -> None:
    table = ObjectTable.of(passes.evs[1], passes.tiles)
    for s, ev in passes.evs.items():
        table.add_seed(s, ev)
    rows = list(csv.DictReader(io.StringIO(table.csv_text())))
    assert list(rows[0]) == [
        "tile_id",
        "region",
        "latitude",
        "uids",
        "area_m2",
        "found_seed_1",
        "found_seed_2",
        "found_seeds",
    ]
    assert len(rows) == sum(len(t.objects) for t in TILES) == 10
    by_uids = {r["uids"]: r for r in rows}
    assert by_uids["u-a0-1"]["tile_id"] == "a0" and by_uids["u-a0-2"]["tile_id"] == "a0"  # two objects, two ids
    assert by_uids["u-a0-1"]["area_m2"] == f"{16 * PIXEL_AREA_M2:.1f}"
    assert by_uids["u-a0-2"]["area_m2"] == f"{15 * PIXEL_AREA_M2:.1f}"
    assert "u-a1-1;u-a1-2" in by_uids  # two ids whose pixels lie in one object (a merged RTS)
    assert [r["tile_id"] for r in rows if r["uids"] == ""] == ["a2"]  # an object no id names
    a0 = by_uids["u-a0-1"]
    assert (a0["region"], a0["latitude"], a0["found_seed_1"], a0["found_seed_2"], a0["found_seeds"]) == (
        "north slope",
        "62.00000",
        "1",
        "1",
        "2 of 2",
    )
    assert (by_uids["u-a5"]["found_seeds"], by_uids["u-a5"]["found_seed_2"]) == ("1 of 2", "0")
    assert by_uids["u-b1"]["found_seeds"] == "0 of 2" and by_uids["u-b4"]["latitude"] == "75.00000"


def test_a_store_without_inventory_ids_gives_the_objects_unnamed_and_a_seed_of_other_tiles_is_refused(
    passes: Passes,
) -> None:
    bare = metadata(TILES, latitudes=False)
    bare.object_pixels = None
    tiles = TestTiles.of(bare)
    ev = seed_pass(passes.cfg, tiles, loader(TILES, 1))
    table = ObjectTable.of(ev, tiles)
    table.add_seed(1, ev)
    rows = list(csv.DictReader(io.StringIO(table.csv_text())))
    assert len(rows) == 10 and {r["uids"] for r in rows} == {""} and {r["latitude"] for r in rows} == {""}
    fewer = seed_pass(passes.cfg, tiles, loader(TILES[1:], 2))
    with pytest.raises(EvaluationError, match="seed 2's test pass holds other ground-truth objects"):
        table.add_seed(2, fewer)
