"""rtscore.review.export: a campaign's objects -> chips, overlays, manifest and header; refusals; resume."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyogrio
import pytest
import rasterio
import shapely
import yaml

import rtscore.review.export as export_mod
from bench.review_export_bench import ORIGIN_X, ORIGIN_Y, PIXEL, write_campaign
from rtscore.data.raster.ground import web_mercator_latitude
from rtscore.mapping.campaign import INDEX_FILE, SUMMARY_JSON
from rtscore.mapping.objects_layer import read_objects
from rtscore.review.manifest import (
    HEADER_FILE,
    MANIFEST_FILE,
    ChipSettings,
    ReviewError,
    Selection,
    iter_objects,
    read_header,
)
from tests.review.test_chips import decode_png

SIDE = 256
N = 40


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """2 scenes of 256 px (s0: RGB + alpha, s1: RGB with nodata=0), 40 objects; every 25th on the top edge."""
    return write_campaign(tmp_path_factory.mktemp("campaign"), N, 2, SIDE, nodata_value_scene=1)


def scene_rgba(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(3, h, w) RGB and (h, w) valid of a campaign scene, read directly (alpha band, else nodata=0 on R, G, B)."""
    with rasterio.open(path) as f:
        data = f.read()
    return data[:3], (data[3] > 0) if data.shape[0] == 4 else ~(data[:3] == 0).all(axis=0)


def test_chips_are_the_scenes_pixels_nodata_is_alpha_0_and_the_manifest_reads_back(
    campaign: tuple[Path, Path], tmp_path: Path
) -> None:
    c, pkg = campaign
    header = export_mod.export_review(str(c), str(pkg), str(tmp_path / "r"), Selection())
    out = tmp_path / "r"
    assert read_header(out / HEADER_FILE) == header and header.n_objects == N
    objs = list(iter_objects(out / MANIFEST_FILE))
    assert [o.object_id for o in objs] == list(range(1, N + 1))  # selection order: all, by object id
    nodata_seen = edge_seen = 0
    for o in objs:
        rgb, valid = scene_rgba(Path(o.scene_uri))
        chip = decode_png((out / o.chip).read_bytes())
        col, row, w, h = o.chip_window
        assert chip.shape == (h, w, 4) and w == h >= 64
        want_valid = np.zeros((h, w), bool)
        want_rgb = np.zeros((3, h, w), np.uint8)
        r0, c0, r1, c1 = max(row, 0), max(col, 0), min(row + h, SIDE), min(col + w, SIDE)
        want_valid[r0 - row : r1 - row, c0 - col : c1 - col] = valid[r0:r1, c0:c1]
        want_rgb[:, r0 - row : r1 - row, c0 - col : c1 - col] = rgb[:, r0:r1, c0:c1]
        np.testing.assert_array_equal(chip[..., 3], np.where(want_valid, 255, 0))
        np.testing.assert_array_equal(np.moveaxis(chip[..., :3], -1, 0)[:, want_valid], want_rgb[:, want_valid])
        assert (chip[~want_valid][:, :3] == 0).all()
        nodata_seen += int((~want_valid[r0 - row : r1 - row, c0 - col : c1 - col]).any())
        edge_seen += int(row < 0)
        assert o.chip_sha256 and (out / o.overlay).read_text().startswith("<svg")
        lat = web_mercator_latitude(ORIGIN_Y - (row + h / 2) * PIXEL)  # the chip centre's (EPSG:3857: PIXEL cos φ)
        assert o.pixel_ground_m == pytest.approx(PIXEL * math.cos(math.radians(lat)), rel=1e-9)
        assert o.region is None and o.split is None
    assert nodata_seen >= 2 and edge_seen >= 1  # NoData inside the scenes (both kinds) and a window over the edge
    assert {o.scene_id for o in objs} == {"s0", "s1"}  # an alpha scene and a nodata-value scene


def test_two_exports_give_the_same_bytes(campaign: tuple[Path, Path], tmp_path: Path) -> None:
    c, pkg = campaign
    sel = Selection(mode="stratified", n=12, seed=3)
    for name in ("a", "b"):
        export_mod.export_review(str(c), str(pkg), str(tmp_path / name), sel, ChipSettings(context=1.0, min_px=32))
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len([f for f in files if f.suffix == ".png"]) == 12
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_another_package_is_refused_naming_both_and_nothing_is_written(
    campaign: tuple[Path, Path], tmp_path: Path
) -> None:
    c, pkg = campaign
    other = tmp_path / "other"
    shutil.copytree(pkg, other)
    (other / "model_config.yaml").write_text((pkg / "model_config.yaml").read_text() + "# edited\n")
    mapped = json.loads((c / SUMMARY_JSON).read_text())["mapping_identity"]["package_sha256"]
    with pytest.raises(ReviewError, match=rf"package {other} \(sha256 \w{{12}}\) did not map .*{mapped[:12]}"):
        export_mod.export_review(str(c), str(other), str(tmp_path / "r"), Selection())
    assert not (tmp_path / "r").exists()


def test_a_campaign_without_summary_and_a_scene_not_in_the_index_are_refused(
    campaign: tuple[Path, Path], tmp_path: Path
) -> None:
    c, pkg = campaign
    bare = tmp_path / "bare"
    shutil.copytree(c, bare)
    (bare / SUMMARY_JSON).unlink()
    with pytest.raises(ReviewError, match=rf"campaign {bare} has no summary.json"):
        export_mod.export_review(str(bare), str(pkg), str(tmp_path / "r"), Selection())
    shutil.copy(c / SUMMARY_JSON, bare / SUMMARY_JSON)
    index = json.loads((bare / INDEX_FILE).read_text())
    index["features"] = [f for f in index["features"] if f["properties"]["scene_id"] != "s1"]
    (bare / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(ReviewError, match=r"object 2: its scene s1 is not in the campaign's index.geojson"):
        export_mod.export_review(str(bare), str(pkg), str(tmp_path / "r"), Selection())
    assert not (tmp_path / "r").exists()


def test_an_unreadable_scene_is_refused_naming_object_and_scene_before_any_chip(
    campaign: tuple[Path, Path], tmp_path: Path
) -> None:
    c, pkg = campaign
    moved = tmp_path / "c"
    shutil.copytree(c, moved)
    index = json.loads((moved / INDEX_FILE).read_text())
    bad = tmp_path / "s1.tif"
    bad.write_bytes(b"not a tiff")
    for f in index["features"]:
        if f["properties"]["scene_id"] == "s1":
            f["properties"]["uri"] = str(bad)
    (moved / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(ReviewError, match=rf"object 2, 4, .*: scene s1 \({bad}\) cannot be read"):
        export_mod.export_review(str(moved), str(pkg), str(tmp_path / "r"), Selection())
    assert not (tmp_path / "r").exists()


def test_resume_skips_chips_already_written_and_another_review_needs_overwrite(
    campaign: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, pkg = campaign
    out = tmp_path / "r"
    sel = Selection(mode="min-prob", min_prob=0.7)
    first = export_mod.export_review(str(c), str(pkg), str(out), sel)
    manifest = (out / MANIFEST_FILE).read_bytes()
    ids = [o.object_id for o in iter_objects(out / MANIFEST_FILE)]
    (out / "chips" / f"{ids[1]}.png").unlink()
    (out / "chips" / f"{ids[2]}.svg").write_text("<svg/>")  # edited: not the recorded one
    (out / MANIFEST_FILE).unlink()  # as after a crash before the end
    written: list[int] = []
    real = export_mod._write_chip

    def counting(*args: object, **kw: object) -> str:
        written.append(args[1].object_id)  # type: ignore[attr-defined]
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(export_mod, "_write_chip", counting)
    again = export_mod.export_review(str(c), str(pkg), str(out), sel)
    assert sorted(written) == sorted(ids[1:3])
    assert again == first and (out / MANIFEST_FILE).read_bytes() == manifest
    with pytest.raises(ReviewError, match=r"holds another review .*overwrite=True"):
        export_mod.export_review(str(c), str(pkg), str(out), Selection(mode="stratified", n=5))
    written.clear()
    export_mod.export_review(str(c), str(pkg), str(out), Selection(mode="stratified", n=5), overwrite=True)
    assert len(written) == 5 and len(list((out / "chips").glob("*.png"))) == 5
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ReviewError, match=r"holds files that are not this review's"):
        export_mod.export_review(str(c), str(pkg), str(tmp_path / "other"), sel)


def test_uncertain_takes_the_packages_threshold_and_extras_run_after_the_manifest(
    campaign: tuple[Path, Path], tmp_path: Path
) -> None:
    c, pkg = campaign
    seen: list[int] = []

    def page(d: Path) -> list[Path]:
        seen.append(sum(1 for _ in iter_objects(d / MANIFEST_FILE)))
        (d / "index.html").write_text("<html></html>")
        return [d / "index.html"]

    header = export_mod.export_review(
        str(c), str(pkg), str(tmp_path / "r"), Selection(mode="uncertain", n=4), extras=[page]
    )
    assert header.selection.threshold == 0.5 and seen == [4]  # the package's deployment threshold
    probs = [abs(o.prob_mean - 0.5) for o in iter_objects(tmp_path / "r" / MANIFEST_FILE)]
    assert probs == sorted(probs)  # closest first: the manifest is in the selection's order
    # stratified bins the probability between the package's threshold and 1: it is recorded too
    strat = export_mod.export_review(str(c), str(pkg), str(tmp_path / "s"), Selection(mode="stratified", n=6))
    assert strat.selection.threshold == 0.5 and strat.n_objects == 6


def test_regions_and_splits_are_those_ingest_gives_the_object(campaign: tuple[Path, Path], tmp_path: Path) -> None:
    """The page shows what ingest does (issue 38): the region of the cell holding a point inside the object, and the
    strictest split of every cell it touches: an object across the train/test border is a test object."""
    c, pkg = campaign
    span = 128 * PIXEL
    _, objects = read_objects(c / "objects.gpkg")
    lines = [math.ceil(o.geometry.bounds[0] / span) * span for o in objects]
    border = next(x for x, o in zip(lines, objects, strict=True) if x < o.geometry.bounds[2])  # a grid line across one
    west, east = shapely.box(ORIGIN_X - 1e4, 1e7, border, 1.2e7), shapely.box(border, 1e7, ORIGIN_X + 1e4, 1.2e7)
    names = np.array(["west", "east", "far"], dtype=object)
    overlapping = shapely.buffer(objects[2].geometry, PIXEL)  # object 3 and any close neighbour
    top = max(objects[3].geometry.exterior.coords if objects[3].geometry.geom_type == "Polygon" else
              objects[3].geometry.geoms[0].exterior.coords, key=lambda xy: xy[1])  # fmt: skip
    touching = shapely.Polygon([top, (top[0] - PIXEL, top[1] + 5 * PIXEL), (top[0] + PIXEL, top[1] + 5 * PIXEL)])
    inventory = [shapely.box(0, 0, 1, 1), overlapping, touching]  # rts-0, rts-1, rts-2 (no id column)
    for name, geoms in (("regions.gpkg", [west, east]), ("rts.gpkg", inventory)):
        pyogrio.raw.write(
            tmp_path / name,
            geometry=np.array([shapely.to_wkb(g) for g in geoms], dtype=object),
            field_data=[names[: len(geoms)]],
            fields=["name"],
            crs="EPSG:3857",
            driver="GPKG",
            geometry_type="Polygon",
        )
    cfg = {
        "scenes": ["scenes/*.tif"],
        "polygons": {"path": "rts.gpkg"},
        "regions": {"path": "regions.gpkg", "name_column": "name"},
        "grid": {"pixel_size": PIXEL, "tile_size": 128},
        "splits": {"train": ["west"], "test": ["east"]},
    }
    (tmp_path / "tile.yaml").write_text(yaml.safe_dump(cfg))
    header = export_mod.export_review(
        str(c), str(pkg), str(tmp_path / "r"), Selection(), tiling_config=str(tmp_path / "tile.yaml")
    )
    assert header.tiling is not None and header.tiling.splits == cfg["splits"]
    by_id = {o.object_id: o.geometry for o in objects}
    across = 0
    for o in iter_objects(tmp_path / "r" / MANIFEST_FILE):
        g = by_id[o.object_id]
        regions = [r for r, on_side in (("east", g.bounds[2] > border), ("west", g.bounds[0] < border)) if on_side]
        home = "west" if g.representative_point().x < border else "east"
        assert (o.region, o.regions, o.split) == (home, regions, "test" if "east" in regions else "train")
        across += len(regions) == 2
        # the inventory polygons it overlaps: a shared area, not a touching vertex
        overlaps = shapely.intersection(by_id[o.object_id], overlapping).area > 0
        assert o.inventory_uids == (["rts-1"] if overlaps else []), o.object_id
        assert shapely.touches(by_id[o.object_id], touching) == (o.object_id == 4)
    assert across, "an object across the border: in test, whatever its point's region"
