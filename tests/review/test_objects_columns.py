"""rtscore.review.objects_columns and select_rows: the review chooses on the objects layer's columns and reads the
chosen objects only, and chooses what reading every object (read_objects) and select() chose, in the same order,
down to the export's bytes."""

from __future__ import annotations

import math
import random
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyogrio
import pytest
import shapely
import yaml

import rtscore.review.export as export_mod
from bench.review_export_bench import ORIGIN_X, PIXEL, write_campaign
from rtscore.config.splits import region_splits
from rtscore.data.tiling.inventory import RegionOf, read_inventory
from rtscore.data.tiling.pixels import GridCell
from rtscore.mapping.objects_layer import read_objects, write_objects
from rtscore.mapping.polygons import RtsObject
from rtscore.review.manifest import MANIFEST_FILE, Selection, iter_objects
from rtscore.review.objects_columns import ObjectColumns, centroids, read_columns, read_rows
from rtscore.review.regions import RegionPlacer
from rtscore.review.select import PROB_BINS, Attributes, allocate, select, select_rows

N_LAYER = 300
SIZE_BINS = ("0-2000", "2000-10000", "10000-50000", "50000-1e+12")  # the last as an older layer wrote it


# ------------------------------------------------------------------------------------------------ the old choice
def reference_select(
    objects: Sequence[RtsObject], selection: Selection, regions: Mapping[int, str | None] | None = None
) -> list[RtsObject]:
    """select() as it was before the columnar choice, object by object: the oracle the new one must equal."""
    by_id = sorted(objects, key=lambda o: o.object_id)
    mode = selection.mode
    if mode == "all":
        return by_id
    if mode == "min-prob":
        assert selection.min_prob is not None
        return [o for o in by_id if o.prob_max >= selection.min_prob]
    assert selection.n is not None
    if mode == "uncertain":
        assert selection.threshold is not None
        thr = selection.threshold
        return sorted(by_id, key=lambda o: (abs(o.prob_mean - thr), o.object_id))[: selection.n]
    low, regions = selection.threshold or 0.0, regions or {}

    def prob_bin(prob: float) -> int:
        if low >= 1.0:
            return 0
        return min(max(int(np.floor((prob - low) / (1.0 - low) * PROB_BINS)), 0), PROB_BINS - 1)

    strata: dict[tuple[int, str, str], list[RtsObject]] = {}
    for o in by_id:
        strata.setdefault((prob_bin(o.prob_mean), o.size_bin, regions.get(o.object_id) or ""), []).append(o)
    keys = sorted(strata)
    rng = np.random.Generator(np.random.PCG64(selection.seed))
    alloc = allocate({k: len(strata[k]) for k in keys}, selection.n, rng)
    chosen: list[RtsObject] = []
    for k in keys:
        members, take = strata[k], alloc[k]
        if take >= len(members):
            chosen += members
        elif take:
            chosen += [members[i] for i in sorted(rng.choice(len(members), size=take, replace=False).tolist())]
    return sorted(chosen, key=lambda o: o.object_id)


def reference_regions(objects: Sequence[RtsObject], crs: Any, cfg: Any) -> tuple[dict[int, str | None], Any]:
    """The export's regions as they were: every object read whole, its centroid's grid cell's region."""
    from rasterio.warp import transform as warp

    if not objects:
        return {}, None
    inventory = read_inventory(cfg)
    region_of = RegionOf(cfg, inventory)
    cents = [o.geometry.centroid for o in objects]
    xs, ys = warp(crs, cfg.grid.crs, [c.x for c in cents], [c.y for c in cents])
    span = cfg.grid.tile_size * cfg.grid.pixel_size
    out: dict[int, str | None] = {}
    for o, x, y in zip(objects, xs, ys, strict=True):
        cell = GridCell(math.floor(x / span), math.floor(y / span), cfg.grid.tile_size, cfg.grid.pixel_size)
        out[o.object_id] = region_of(cell, inventory.touching(cell))
    return out, inventory


def reference_choose(layer: ObjectColumns, selection: Selection, cfg: Any) -> tuple[Any, Any]:
    """export._choose as it was: read_objects, every object's region, select(); the chosen objects placed by their
    outlines (rtscore.review.regions, the rule ingest uses)."""
    _, objects = read_objects(layer.path)
    regions, inventory = reference_regions(objects, layer.crs, cfg) if cfg is not None else ({}, None)
    chosen = reference_select(objects, selection, regions)
    if cfg is None:
        return chosen, {}
    placer = RegionPlacer(cfg, layer.crs, inventory, region_splits(cfg.splits) if cfg.splits else {})
    return chosen, {o.object_id: placer.place(o.geometry) for o in chosen}


# ------------------------------------------------------------------------------------------------ a layer
def same(a: RtsObject, b: RtsObject) -> bool:
    fields = ("object_id", "scene_ids", "n_pixels", "prob_mean", "prob_max", "area_m2", "ground_area_m2", "bbox")
    return all(getattr(a, f) == getattr(b, f) for f in (*fields, "size_bin", "partial")) and shapely.to_wkb(
        a.geometry
    ) == shapely.to_wkb(b.geometry)


def layer_objects(n: int = N_LAYER, seed: int = 0) -> list[RtsObject]:
    """``n`` objects in shuffled order (a row's feature id is not its object id), probabilities on a coarse grid
    (ties for the uncertain order), four size bins, some objects of several scenes or parts."""
    rng = random.Random(seed)
    out = []
    for i in range(1, n + 1):
        x, y = rng.uniform(0, 5000), rng.uniform(0, 5000)
        g = shapely.box(x, y, x + rng.uniform(5, 80), y + rng.uniform(5, 80))
        if i % 9 == 0:
            g = shapely.MultiPolygon([g, shapely.box(x + 100, y, x + 110, y + 10)])
        p_mean = rng.choice([0.5, 0.52, 0.55, 0.6, 0.63, 0.7, 0.8, 0.9, 0.95, 0.99, 0.3])
        out.append(
            RtsObject(
                object_id=i,
                geometry=g,
                scene_ids=("s0", "s1") if i % 7 == 0 else (f"s{i % 3}",),
                n_pixels=int(g.area),
                prob_mean=p_mean,
                prob_max=min(1.0, p_mean + rng.choice([0.0, 0.05, 0.2])),
                area_m2=g.area,
                ground_area_m2=g.area * 0.9,
                bbox=tuple(g.bounds),
                size_bin=SIZE_BINS[i % 4 if i % 5 else 0],
                partial=i % 11 == 0,
            )
        )
    rng.shuffle(out)
    return out


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layer") / "objects.gpkg"
    write_objects(path, layer_objects(), "EPSG:3413")
    return path


def test_the_columns_are_read_objects_attributes_and_read_rows_its_objects(layer: Path) -> None:
    crs, objects = read_objects(layer)
    cols = read_columns(layer)
    assert cols.crs == crs and len(cols) == len(objects) == N_LAYER
    want = Attributes.of(objects)
    for f in ("object_id", "prob_mean", "prob_max", "size_bin"):
        np.testing.assert_array_equal(getattr(cols.attrs, f), getattr(want, f))
    assert "50000+" in set(cols.attrs.size_bin)  # an older label read as it is named now
    assert cols.fids.tolist() != cols.attrs.object_id.tolist()  # shuffled: feature ids are not object ids
    rows = np.array([250, 3, 0, 299, 41, 40])
    for batch in (7, 100, 50_000):  # windows read by feature id and, mostly chosen, in sequence
        got = read_rows(cols, rows, batch=batch)
        assert all(same(g, objects[r]) for g, r in zip(got, rows.tolist(), strict=True))
    every = read_rows(cols, np.arange(N_LAYER)[::-1], batch=64)
    assert all(same(g, o) for g, o in zip(every, objects[::-1], strict=True))
    cents = np.concatenate([np.column_stack(xy) for xy in centroids(cols, batch=32)])
    np.testing.assert_array_equal(cents, [(o.geometry.centroid.x, o.geometry.centroid.y) for o in objects])


def test_rows_whose_feature_ids_skip_are_read_by_their_ids(layer: Path, tmp_path: Path) -> None:
    holes = tmp_path / "holes.gpkg"
    holes.write_bytes(layer.read_bytes())
    with sqlite3.connect(holes) as db:  # features deleted: feature ids 1.. with gaps, rows 0.. without
        db.execute("DROP TRIGGER IF EXISTS rtree_rts_objects_geom_delete")
        db.execute("DELETE FROM rts_objects WHERE fid % 5 = 0")
    _, objects = read_objects(holes)
    cols = read_columns(holes)
    assert len(cols) == len(objects) == N_LAYER - N_LAYER // 5 and cols.fids[4] == 6
    rows = np.array([4, 5, 200, 1])
    assert all(same(g, objects[r]) for g, r in zip(read_rows(cols, rows, batch=8), rows.tolist(), strict=True))
    assert all(same(g, o) for g, o in zip(read_rows(cols, np.arange(len(cols)), batch=50), objects, strict=True))


SELECTIONS = [
    Selection(mode="all"),
    Selection(mode="min-prob", min_prob=0.0),
    Selection(mode="min-prob", min_prob=0.7),
    Selection(mode="min-prob", min_prob=0.95),
    Selection(mode="min-prob", min_prob=1.0),
    *(Selection(mode="uncertain", n=n, threshold=t) for n in (1, 17, 400) for t in (0.5, 0.6, 0.0, 1.0)),
    *(
        Selection(mode="stratified", n=n, seed=seed, threshold=t)
        for n in (1, 7, 40, 299, 1000)
        for seed in (0, 5)
        for t in (None, 0.5, 0.63, 1.0)
    ),
]


@pytest.mark.parametrize("with_regions", [False, True])
def test_the_choice_on_columns_is_selects_choice_over_read_objects_in_every_mode(
    layer: Path, with_regions: bool
) -> None:
    _, objects = read_objects(layer)
    cols = read_columns(layer)
    rng = random.Random(1)
    names: list[str | None] = ["north", "south", "east", None, ""]
    regions = {o.object_id: rng.choice(names) for o in objects} if with_regions else {}
    by_row = [regions.get(int(i)) for i in cols.attrs.object_id] if with_regions else None
    for sel in SELECTIONS:
        want = [o.object_id for o in reference_select(objects, sel, regions)]
        rows = select_rows(cols.attrs, sel, by_row)
        assert cols.attrs.object_id[rows].tolist() == want, sel
        assert [o.object_id for o in read_rows(cols, rows)] == want, sel
        assert [o.object_id for o in select(objects, sel, regions)] == want, sel
    assert select_rows(Attributes.of([]), Selection(mode="stratified", n=3), []).tolist() == []


def _tiling_config(root: Path, objects: Sequence[RtsObject]) -> Path:
    """Regions west / east of a grid line through the scenes and an inventory polygon over object 3."""
    span = 128 * PIXEL
    border = math.floor((ORIGIN_X + 256 * PIXEL) / span) * span
    west, east = shapely.box(ORIGIN_X - 1e4, 1e7, border, 1.2e7), shapely.box(border, 1e7, ORIGIN_X + 1e4, 1.2e7)
    inventory = [shapely.box(0, 0, 1, 1), shapely.buffer(objects[2].geometry, PIXEL)]
    for name, geoms in (("regions.gpkg", [west, east]), ("rts.gpkg", inventory)):
        pyogrio.raw.write(
            root / name,
            geometry=np.array([shapely.to_wkb(g) for g in geoms], dtype=object),
            field_data=[np.array(["west", "east"][: len(geoms)], dtype=object)],
            fields=["name"],
            crs="EPSG:3857",
            driver="GPKG",
            geometry_type="Polygon",
        )
    cfg = {
        "scenes": ["scenes/*.tif"],
        "polygons": {"path": str(root / "rts.gpkg")},
        "regions": {"path": str(root / "regions.gpkg"), "name_column": "name"},
        "grid": {"pixel_size": PIXEL, "tile_size": 128},
        "splits": {"train": ["west"], "test": ["east"]},
    }
    (root / "tile.yaml").write_text(yaml.safe_dump(cfg))
    return root / "tile.yaml"


def test_an_export_gives_the_bytes_it_gave_reading_every_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, pkg = write_campaign(tmp_path / "campaign", 30, 2, 256, nodata_value_scene=1)
    _, objects = read_objects(c / "objects.gpkg")
    tiling = str(_tiling_config(tmp_path, objects))
    cases = [
        (Selection(mode="stratified", n=9, seed=4), tiling),  # every object's region: streamed centroids
        (Selection(mode="uncertain", n=5), tiling),  # the chosen objects' regions only
        (Selection(mode="min-prob", min_prob=0.8), None),
    ]
    for k, (sel, cfg) in enumerate(cases):
        new = export_mod.export_review(str(c), str(pkg), str(tmp_path / f"new{k}"), sel, tiling_config=cfg)
        with monkeypatch.context() as m:
            m.setattr(export_mod, "_choose", reference_choose)
            old = export_mod.export_review(str(c), str(pkg), str(tmp_path / f"old{k}"), sel, tiling_config=cfg)
        assert new == old  # review id, selection, count
        a, b = tmp_path / f"new{k}", tmp_path / f"old{k}"
        files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
        assert len([f for f in files if f.suffix == ".png"]) == new.n_objects > 0
        for f in files:
            assert (a / f).read_bytes() == (b / f).read_bytes(), (sel, f)
        if cfg is not None:  # placed: every object lies in the west or east region
            assert {o.region for o in iter_objects(a / MANIFEST_FILE)} <= {"west", "east"}
