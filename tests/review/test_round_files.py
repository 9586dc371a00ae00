"""A review round's inventory.gpkg and tiling config (rtscore.review.round_files): the next round reads the same
labels (class, label type, dates, ids) and, with buffered groups, the same region names."""

from __future__ import annotations

from pathlib import Path

import yaml

from rtscore.config.base import parse_config
from rtscore.config.tiling import TilingConfig
from rtscore.data.inventory.reader import read_inventory_file
from rtscore.data.tiling.inventory import read_inventory
from rtscore.review.placement import Plan
from rtscore.review.round_files import GROUP_COLUMN, next_tiling_config, write_inventory
from tests.data.inventory.world import GRID, LABELS, tiling_config, write_arts_geojson, write_scene


def test_the_next_round_reads_the_same_labels_and_groups(tmp_path: Path) -> None:
    write_scene(tmp_path / "dated.tif", "2022-07-15")
    write_arts_geojson(tmp_path / "arts.geojson", LABELS)
    cfg = tiling_config(tmp_path, regions={"groups": {"buffer_m": 100.0}}, splits={"train": ["group-1"]})
    inventory = read_inventory(cfg)
    plan = Plan([], {"train": sorted(set(inventory.regions or []))}, [], [], [], [], inventory, {})
    review = tmp_path / "review"
    review.mkdir()
    write_inventory(review / "inventory.gpkg", plan, cfg, "r1")
    lineage = {"version": "v2", "parent": "..", "parent_fingerprint": "ab" * 32}
    doc = yaml.safe_load(next_tiling_config(cfg, plan, lineage))
    assert doc["regions"] == {"column": GROUP_COLUMN} and doc["polygons"]["schema"] == "mapped"
    nxt = parse_config(TilingConfig, doc)
    again = read_inventory_file(review / "inventory.gpkg", GRID, nxt.polygons, nxt.regions.column)
    before = [
        (f.uid, f.train_class, f.label_type, f.dates, r)
        for f, r in zip(inventory.labels, inventory.regions or [], strict=True)
    ]
    after = [(f.uid, f.train_class, f.label_type, f.dates, f.region) for f in again.features]
    assert after == before and len({r for *_, r in before}) > 1, "several groups, kept by name"
    for a, b in zip(again.features, inventory.labels, strict=True):
        assert a.geometry.symmetric_difference(b.geometry).area < 1e-6
