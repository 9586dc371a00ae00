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


def test_a_confirmed_object_keeps_the_inventory_ids_the_review_manifest_listed(tmp_path: Path) -> None:
    """Identity end to end, back: the ids the review manifest gave a confirmed object (the inventory polygons it
    overlaps) are its inventory_uids in the next round's inventory.gpkg; the round's own polygons keep theirs."""
    import pyogrio
    import shapely

    from rtscore.review.placement import ObjectOutcome, PlacedObject
    from rtscore.review.verdicts import Verdict
    from tests.review.test_arts_export import review_object

    write_scene(tmp_path / "dated.tif", "2022-07-15")
    write_arts_geojson(tmp_path / "arts.geojson", LABELS)
    cfg = tiling_config(tmp_path, regions={"column": "RegionName"})
    inventory = read_inventory(cfg)
    known = inventory.labels[0]
    obj = review_object(7, "s0", 0.8, [known.uid]).model_copy(update={"inventory_uids": [known.uid, "other"]})
    outcome = ObjectOutcome(object_id=7, verdict="rts", region="Peel Plateau", split="train", outcome="confirmed",
                            uid="review-ab-7", inventory_uids=list(obj.inventory_uids or []))  # fmt: skip
    grown = shapely.buffer(known.geometry, 5.0)  # the known slump, re-found a little larger
    placed = PlacedObject(obj, Verdict(object_id=7, verdict="rts"), grown, [], [], outcome)
    plan = Plan([placed], {"train": ["Peel Plateau"]}, [], [], [], [], inventory, {})
    write_inventory(tmp_path / "inventory.gpkg", plan, cfg, "r1")
    meta, _, _, fields = pyogrio.raw.read(tmp_path / "inventory.gpkg")
    cols = dict(zip(meta["fields"], fields, strict=True))
    assert list(cols["inventory_uids"]) == [""] * len(inventory.labels) + [f"{known.uid};other"]
    assert list(cols["uid"])[-1] == "review-ab-7"  # the id column of a round whose inventory names none
