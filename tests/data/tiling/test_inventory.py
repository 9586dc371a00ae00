"""`rts tile` on an ARTS inventory (rtscore.data.tiling.inventory): Negative polygons background and listed, a
bounding box ignore, a stale label ignore, a repaired bow-tie, a hole left background, ObjectPixels inside label 1,
and a misspelt class refused before any tile."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import shapely
from rasterio.features import geometry_mask

from rtscore.data.tiling.run import TilingError, TilingManifest, tile_scenes
from tests.data.inventory.world import (
    HOLE,
    LABELS,
    TILE,
    Label,
    arts_fields,
    tile_id,
    tiling_config,
    write_vector,
)

BY = {lab.uid: lab for lab in LABELS}


class Kept(logging.Handler):
    """The log records of a module-scoped run (caplog is function-scoped)."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def tiled(world: Path) -> tuple[TilingManifest, Path, list[str]]:
    """One run over the ARTS file, the log lines it wrote (INFO and up)."""
    handler = Kept(logging.INFO)
    root_logger = logging.getLogger("rtscore")
    level = root_logger.level
    root_logger.addHandler(handler)
    root_logger.setLevel(logging.INFO)
    try:
        out = tile_scenes(tiling_config(world), world / "tiles")
    finally:
        root_logger.removeHandler(handler)
        root_logger.setLevel(level)
    return out, world / "tiles", [r.getMessage() for r in handler.records]


def read_label(root: Path, tid: str) -> tuple[np.ndarray, Any]:
    with rasterio.open(root / "labels" / f"{tid}.tif") as f:
        return f.read(1), f.transform


def pixels(geom: shapely.Geometry, transform: Any, inset: float = 10.0) -> np.ndarray:
    """The tile pixels whose centres lie inside ``geom`` shrunk by ``inset`` metres (clear of its edge)."""
    return geometry_mask([geom.buffer(-inset)], out_shape=(TILE, TILE), transform=transform, invert=True)


def metadata(root: Path) -> dict[str, dict[str, str]]:
    with open(root / "metadata.csv", newline="") as fh:
        return {r["Tile_id"]: r for r in csv.DictReader(fh)}


def test_classes_label_types_dates_and_geometry_in_the_labels_and_counts(
    tiled: tuple[TilingManifest, Path, list[str]],
) -> None:
    out, root, lines = tiled
    rows = metadata(root)
    assert len(rows) == 4

    tl, tr, bl, br = tile_id(0, 1), tile_id(1, 1), tile_id(0, 0), tile_id(1, 0)
    label, t = read_label(root, tl)  # a Positive with a hole: the hole is background
    ring = BY["P1-hole"].geom
    assert (label[pixels(ring, t)] == 1).all() and (label[pixels(HOLE, t)] == 0).all() and pixels(HOLE, t).sum() > 50
    assert rows[tl]["UIDs"] == "P1-hole" and rows[tl]["TrainClass"] == "positive"

    label, t = read_label(root, tr)  # a range holding the scene's date, and a Negative partly under it
    assert (label[pixels(BY["R1-range"].geom, t)] == 1).all(), "a Positive wins where a Negative overlaps it"
    only_negative = BY["N1-negative"].geom.difference(BY["R1-range"].geom)
    assert (label[pixels(only_negative, t)] == 0).all(), "a Negative is background, never 1 or 255"
    assert (rows[tr]["UIDs"], rows[tr]["NegativeUIDs"]) == ("R1-range", "N1-negative")

    label, t = read_label(root, bl)  # a Positive bounding box: ignore over its box, not an RTS
    assert (label[pixels(BY["B1-box"].geom, t)] == 255).all() and not (label == 1).any()
    assert rows[bl]["TrainClass"] == "negative" and rows[bl]["UIDs"] == ""

    label, t = read_label(root, br)  # a range ending 2.5 years before the scene: ignore; a bow-tie repaired: an RTS
    assert (label[pixels(BY["S1-stale"].geom, t)] == 255).all()
    tie = shapely.make_valid(BY["V1-bowtie"].geom)
    assert (label[pixels(tie, t, inset=5.0)] == 1).all() and rows[br]["UIDs"] == "V1-bowtie"

    for r in rows.values():  # ObjectPixels: one pixel of each UID, inside its label 1 and its own polygon
        label, t = read_label(root, r["Tile_id"])
        entries = [e for e in r["ObjectPixels"].split(";") if e]
        assert [e.split("@")[0] for e in entries] == [u for u in r["UIDs"].split(";") if u]
        for e in entries:
            uid, at = e.split("@")
            row, col = map(int, at.split(","))
            assert label[row, col] == 1
            assert shapely.make_valid(BY[uid].geom).contains(shapely.Point(*(t @ (col + 0.5, row + 0.5))))

    c = out.counts
    assert (c.polygons, c.negative_polygons, c.tiles_with_negatives, c.bounding_boxes) == (6, 1, 1, 1)
    assert (c.stale_labels, c.repaired_polygons, c.undated_scenes, c.polygons_labelled) == (1, 1, 0, 3)
    assert any("S1-stale (2016-01-01,2019-12-31; dated.tif 2022-07-15: 927 d)" in w for w in out.warnings)
    assert c.labels_line() == (  # what rts tile prints and the tile-scenes artifact shows
        "6 in the inventory, 3 labelled whole in a tile; 1 Negative (background, 0) in 1 tile(s); 1 bounding box(es) "
        "ignored (255); 1 stale label(s) (polygons.max_label_age_days); 1 invalid polygon(s) repaired"
    )
    inventory_line = [ln for ln in lines if "arts.geojson: ARTS" in ln]
    counts = "Positive 5 (Polygon 4, BoundingBox 1), Negative 1 (Polygon 1)"
    assert inventory_line == [f"{root.parent / 'arts.geojson'}: ARTS: 6 features: {counts}"]
    assert sum("repaired with make_valid: V1-bowtie" in ln for ln in lines) == 1
    recorded = json.loads((root / "tiling.json").read_text())["counts"]
    assert recorded["negative_polygons"] == 1 and recorded["stale_labels"] == 1


def test_a_misspelt_class_is_refused_before_any_tile_naming_value_feature_and_allowed_values(world: Path) -> None:
    labels = [LABELS[0], LABELS[1], Label("N2", "negative", "Polygon", "2022-07-01", LABELS[2].geom)]
    rows = [arts_fields(labels[0]), arts_fields(labels[1], TrainClass="Postive "), arts_fields(labels[2])]
    write_vector(world / "misspelt.shp", labels, rows, "EPSG:3413", abbreviated=True)
    cfg = tiling_config(world, polygons={"path": "misspelt.shp"})
    with pytest.raises(TilingError) as err:
        tile_scenes(cfg, world / "misspelt-tiles")
    text = str(err.value)
    assert "misspelt.shp: 2 problems:" in text
    assert "'TrnClss' value 'Postive': R1-range; allowed values: 'Positive', 'Negative' (case-sensitive)" in text
    assert "'TrnClss' value 'negative': N2;" in text
    assert not (world / "misspelt-tiles").exists()
