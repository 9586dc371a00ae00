"""The label-age check of `rts tile` (rtscore.data.tiling.dates): scene dates from scene_dates before the tag, stale
labels refused when asked, an undated scene warned of once and counted."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest

from rtscore.data.tiling.run import TilingError, tile_scenes
from tests.data.inventory.world import LABELS, tiling_config, write_vector


def test_stale_labels_refused_naming_them_their_dates_and_the_scene_date_of_scene_dates(world: Path) -> None:
    cfg = tiling_config(world, scene_dates={"nope*.tif": "2022-07-15"})
    with pytest.raises(TilingError, match=r"scene_dates: \['nope\*\.tif'\] match\(es\) no scene file name"):
        tile_scenes(cfg, world / "stale-tiles")
    polygons = {"path": "arts.geojson", "stale_labels": "refuse", "max_label_age_days": 740}
    cfg = tiling_config(world, polygons=polygons, scene_dates={"dated*.tif": "2024-07-15"})  # the tag says 2022
    with pytest.raises(TilingError) as err:
        tile_scenes(cfg, world / "stale-tiles")
    text = str(err.value)
    assert "arts.geojson: 5 label(s) are more than polygons.max_label_age_days=740 days from their scene" in text
    for named in (
        "P1-hole (2021-08-01; dated.tif 2024-07-15: 1079 d)",
        "N1-negative (2022-07-01; dated.tif 2024-07-15: 745 d)",
        "S1-stale (2016-01-01,2019-12-31; dated.tif 2024-07-15: 1658 d)",
        "V1-bowtie (2022-07-05; dated.tif 2024-07-15: 741 d)",
        "B1-box (2022-07-01;",
    ):
        assert named in text
    assert "R1-range" not in text, "a range ending 714 days before the scene is within 740"
    assert "stale_labels: ignore" in text
    assert not (world / "stale-tiles").exists()


def test_an_undated_scene_is_one_warning_and_counted_and_its_labels_are_not_checked(
    world: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [
        {"id": f"m{i}", "kind": "slump" if lab.train_class == "Positive" else "other", "when": "2010-07-01"}
        for i, lab in enumerate(LABELS[:3])
    ]
    write_vector(world / "mapped.gpkg", LABELS[:3], rows, "EPSG:32608")
    columns = {
        "class_column": "kind",
        "positive_values": ["slump"],
        "negative_values": ["other"],
        "date_column": "when",
    }
    cfg = tiling_config(
        world,
        scenes=["undated.tif"],
        polygons={"path": "mapped.gpkg", "id_column": "id", "columns": columns},
        regions={"groups": {}},  # the tile diagonal: every label of this small world in one group
        splits={"train": ["group-1"]},
    )
    with caplog.at_level(logging.INFO):
        out = tile_scenes(cfg, world / "undated-tiles")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith("rts tile: 1 scene(s) carry no acquisition date")
    assert str(world / "undated.tif") in warned[0]
    assert (out.counts.undated_scenes, out.counts.stale_labels, out.counts.negative_polygons) == (1, 0, 1)
    assert any(
        "mapped.gpkg: mapped columns: 3 features: Positive 2 (Polygon 2), Negative 1" in r.getMessage()
        for r in caplog.records
    )
    with open(world / "undated-tiles" / "metadata.csv", newline="") as fh:
        rows_out = list(csv.DictReader(fh))
    assert {r["RegionName"] for r in rows_out} == {"group-1"} and out.regions == {"group-1": 4}
    assert sorted(u for r in rows_out for u in r["UIDs"].split(";") if u) == ["m0", "m1"]
    assert [r["NegativeUIDs"] for r in rows_out if r["NegativeUIDs"]] == ["m2"]
