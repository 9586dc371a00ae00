"""ObjectPixels: `<uid>@<row>,<col>` entries naming a pixel of each RTS of a tile (issue 36, point 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtscore.data.inventory.object_pixels import (
    ObjectPixel,
    ObjectPixelsError,
    format_object_pixels,
    parse_object_pixels,
    rotated_object_pixels,
    split_ids,
)
from rtscore.data.tiles import RawTile, TileInventory


def test_entries_read_back_as_written_and_a_bad_one_is_named() -> None:
    text = "a1b2@12,40; 7f-c@0,3"
    pixels = parse_object_pixels(text)
    assert pixels == [ObjectPixel("a1b2", 12, 40), ObjectPixel("7f-c", 0, 3)]
    assert format_object_pixels(pixels) == "a1b2@12,40;7f-c@0,3" and parse_object_pixels("") == []
    assert split_ids(" u1;; u2 ;") == ["u1", "u2"]
    for bad in ("a1b2@12", "a1b2@-1,3", "@1,2", "a1b2 12,40"):
        with pytest.raises(ObjectPixelsError, match=r"is not <uid>@<row>,<col>"):
            parse_object_pixels(f"ok@1,1;{bad}")


def test_a_rotated_tile_carries_its_object_pixels_to_where_its_rts_went() -> None:
    size = 8
    label = np.zeros((size, size), np.uint8)
    label[1, 5] = label[6, 2] = 1
    inv = TileInventory(uids="u;v", object_pixels="u@1,5;v@6,2", latitude=70.5)
    tile = RawTile(
        tile_id="t",
        region="r",
        rgb=np.zeros((3, size, size), np.uint8),
        alpha=np.full((size, size), 255, np.uint8),
        label_exact=label,
        pixel_area_m2=1.0,
        inventory=inv,
    )
    for k in range(4):
        turned = tile.rotated(k)
        assert turned.inventory is not None and turned.inventory.uids == "u;v"
        assert math.isclose(turned.inventory.latitude, 70.5)
        assert all(turned.label_exact[p.row, p.col] == 1 for p in parse_object_pixels(turned.inventory.object_pixels))
    assert rotated_object_pixels("u@1,5", 1, size) == "u@2,1"
