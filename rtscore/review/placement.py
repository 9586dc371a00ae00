"""Where the judged objects of a review fall: each in the grid cells of the round's tiling config it touches, each
cell in its region (``RegionOf``, as ``rts tile`` places tiles) and each region in its split, with the rules that keep
val and test out of train (held-out and new regions, column-mode regions that would move a cell, spatial blocking
by tile footprints)."""

from __future__ import annotations

import csv
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rtscore.config.base import StrictModel
from rtscore.config.splits import region_splits
from rtscore.config.tiling import TilingConfig
from rtscore.data.inventory.reader import InventoryFeature
from rtscore.data.raster.vector_labels import read_polygons
from rtscore.data.raster.warp import MANIFEST_SUFFIX as WARP_RECORD
from rtscore.data.raster.warp import WarpedScene, warp_identity
from rtscore.data.splits.blocking import BlockingError, Bounds, check_blocking, data_root_footprints
from rtscore.data.tiling.inventory import Inventory, RegionOf, read_inventory
from rtscore.data.tiling.pixels import GridCell
from rtscore.data.tiling.scenes import scene_paths
from rtscore.data.tiling.state import METADATA_CSV
from rtscore.review.manifest import ReviewError, ReviewObject
from rtscore.review.regions import RegionPlacer, grid_geometry, home_region, strictest_split, touched_cells
from rtscore.review.review_inputs import ReviewInputs
from rtscore.review.verdicts import Verdict

log = logging.getLogger(__name__)

HELD_OUT = ("val", "test")

HeldOut = Literal["refuse", "skip", "add"]
NewRegions = Literal["refuse", "train"]
Outcome = Literal["confirmed", "hard_negative", "left_out_unsure", "left_out_held_out"]


class ObjectOutcome(StrictModel):
    """What ingest did with one judged object."""

    object_id: int
    verdict: Literal["rts", "not_rts", "unsure"]
    region: str | None = Field(
        None, description="The region of the cell holding the object's representative point (None: in no region)."
    )
    split: str | None = Field(None, description="The strictest split of the cells it touches (None: no split).")
    regions: list[str] = Field(default_factory=list, description="Every region of the cells it touches.")
    outcome: Outcome = Field(
        ...,
        description="confirmed: a polygon of the inventory; hard_negative: its cells cut with label 0 over it; "
        "left_out_unsure; left_out_held_out: in a val/test region with held_out skip.",
    )
    uid: str | None = Field(None, description="Its id in inventory.gpkg and metadata.csv UIDs (confirmed only).")
    inventory_uids: list[str] = Field(
        default_factory=list,
        description="The ids of the round's inventory polygons it overlaps, as the review manifest listed them: a "
        "confirmed object over a known slump says which one (inventory.gpkg column inventory_uids).",
    )


@dataclass
class PlacedObject:
    """A judged object on the grid: its geometry (grid CRS), cells, regions and split, and its outcome."""

    obj: ReviewObject
    verdict: Verdict
    geom: Any = None
    cells: list[GridCell] = field(default_factory=list)
    cell_regions: list[str | None] = field(default_factory=list)
    outcome: ObjectOutcome | None = None
    scene: Path | None = None  # the scene its cells are cut from (an rts warp copy resolved), once included

    @property
    def included(self) -> bool:
        return self.outcome is not None and self.outcome.outcome in ("confirmed", "hard_negative")


@dataclass
class Plan:
    """The judged objects placed, the splits of the next round, the scenes it adds, the round's inventory."""

    objects: list[PlacedObject]
    splits: dict[str, list[str]]
    new_train_regions: list[str]
    added_scenes: list[str]
    focus_scenes: list[str]  # the earlier round's focus scenes, then the added ones
    earlier_areas: list[dict[str, Any]]  # the earlier round's focus areas (grid CRS features), kept in focus
    inventory: Inventory
    cell_regions: dict[tuple[int, int], str | None]
    ignore_areas: list[tuple[dict[str, Any], Any]] = field(default_factory=list)  # rtscore.review.left_out


def place_objects(
    src: ReviewInputs, cfg: TilingConfig, cfg_path: Path, *, held_out: HeldOut, new_regions: NewRegions
) -> Plan:
    """Each judged object in its cells, regions and split; the held-out and new-region rules applied."""
    if cfg.splits is None:
        raise ReviewError(
            f"{cfg_path}: no `splits`: without them the split is derived per root and could move a region to "
            "another split between rounds; put the round's splits (split -> regions) in the tiling config"
        )
    split_of = region_splits(cfg.splits)
    inventory = read_inventory(cfg)
    placed, cell_regions = _place_on_grid(src, cfg, inventory, split_of)
    judged = [p for p in placed if p.verdict.verdict != "unsure"]
    _check_in_regions(judged, src, cfg, cfg_path)
    new_train = _new_train_regions(judged, split_of, src, cfg_path, new_regions)
    splits = {k: list(v) for k, v in cfg.splits.items()}
    if new_train:
        splits["train"] = [*splits.get("train", []), *new_train]
    held = _held_out_objects(judged, split_of, src, cfg_path, held_out)
    added = _decide_outcomes(judged, held, split_of, src, cfg, held_out)
    _check_not_ingested(judged, inventory, src, cfg)
    focus_scenes, earlier_areas = _focus(cfg, added)
    return Plan(placed, splits, new_train, added, focus_scenes, earlier_areas, inventory, cell_regions)


def _place_on_grid(
    src: ReviewInputs, cfg: TilingConfig, inventory: Inventory, split_of: dict[str, str]
) -> tuple[list[PlacedObject], dict[tuple[int, int], str | None]]:
    """Every judged object (in the verdicts' order) with the grid cells it touches and their regions
    (rtscore.review.regions, the rule the review page showed).

    An unsure object gets its outcome at once, placed as the page showed it, and no cells: nothing of it is cut.
    Each cell's region is asked of ``RegionOf`` once and kept (the second value), so objects sharing a cell agree and
    ingest reuses the answer.
    """
    placer = RegionPlacer(cfg, src.header.campaign.crs_wkt, inventory, split_of)
    placed: list[PlacedObject] = []
    for v in src.verdict_set.verdicts:
        p = PlacedObject(src.objects[v.object_id], v)
        placed.append(p)
        p.geom = _grid_geometry(p.obj, src, cfg.grid.crs)
        cells = touched_cells(p.geom, cfg)
        regions = [placer.cell_region(c) for c in cells]
        if v.verdict == "unsure":
            where = placer.place_cells(p.geom, cells, regions)
            p.outcome = ObjectOutcome(
                object_id=v.object_id, verdict="unsure", outcome="left_out_unsure", **where.outcome_fields()
            )
            continue
        p.cells, p.cell_regions = cells, regions
    return placed, placer.cells


def _check_in_regions(judged: list[PlacedObject], src: ReviewInputs, cfg: TilingConfig, cfg_path: Path) -> None:
    """Refuse judged objects in a grid cell whose centre is in no region: such a cell has no split to go to."""
    outside = [p.obj.object_id for p in judged if None in p.cell_regions]
    if outside:
        raise ReviewError(
            f"{src.verdicts_path}: object(s) {outside} lie in grid cells whose centre is in no region of "
            f"{cfg.regions.path} ({cfg_path}): extend the regions"
        )


def _new_train_regions(
    judged: list[PlacedObject], split_of: dict[str, str], src: ReviewInputs, cfg_path: Path, new_regions: NewRegions
) -> list[str]:
    """The regions of judged objects that are in no split, put in train (``split_of`` updated) or refused.

    A region new to the config must not slip into a split silently: ``--new-regions train`` says so explicitly,
    and the round's splits then list it under train (sorted, so the config is the same on a re-run).
    """
    unknown = {r for p in judged for r in p.cell_regions if r is not None and r not in split_of}
    new_train: list[str] = []
    if unknown:
        which = [f"{p.obj.object_id} ({_names(p)})" for p in judged if set(p.cell_regions) & unknown]
        if new_regions == "refuse":
            raise ReviewError(
                f"{src.verdicts_path}: object(s) {_listed(which)} fall in region(s) {sorted(unknown)} that are in no "
                f"split of {cfg_path}; add them to a split there, or --new-regions train puts them in train"
            )
        new_train = sorted(unknown)
        split_of.update({r: "train" for r in new_train})
    return new_train


def _held_out_objects(
    judged: list[PlacedObject], split_of: dict[str, str], src: ReviewInputs, cfg_path: Path, held_out: HeldOut
) -> list[PlacedObject]:
    """The judged objects touching a val/test region; refused with ``held_out`` refuse.

    Adding them would change the val/test set between rounds, so it takes an explicit ``--held-out`` choice.
    """
    held = [p for p in judged if any(split_of[str(r)] in HELD_OUT for r in p.cell_regions)]
    if held and held_out == "refuse":
        which = [f"{p.obj.object_id} ({_names(p, split_of)})" for p in held]
        raise ReviewError(
            f"{src.verdicts_path}: object(s) {_listed(which)} lie in val/test regions of {cfg_path}: adding them "
            "would change the val/test set; --held-out skip leaves them out, add puts them in their split"
        )
    return held


def _decide_outcomes(
    judged: list[PlacedObject],
    held: list[PlacedObject],
    split_of: dict[str, str],
    src: ReviewInputs,
    cfg: TilingConfig,
    held_out: HeldOut,
) -> list[str]:
    """Each judged object's outcome (region, strictest split, uid), and the local scenes the round adds.

    The scenes of included objects must be local files (``rts tile`` reads local scenes); every missing one is named
    in one error. A scene not yet in the config's scenes is returned once, in the objects' order.
    """
    every_scene = {p.resolve() for p in scene_paths(cfg.scenes)}
    added: list[str] = []
    missing: list[str] = []
    for p in judged:
        regions = [str(r) for r in p.cell_regions]
        home = str(home_region(p.geom, p.cells, p.cell_regions))
        split = strictest_split(regions, split_of)
        skip = p in held and held_out == "skip"
        outcome: Outcome = (
            "left_out_held_out" if skip else "confirmed" if p.verdict.verdict == "rts" else "hard_negative"
        )
        p.outcome = ObjectOutcome(
            object_id=p.obj.object_id,
            verdict=p.verdict.verdict,
            region=home,
            split=split,
            regions=sorted(set(regions)),
            outcome=outcome,
            uid=f"review-{src.header.review_id[:8]}-{p.obj.object_id}" if outcome == "confirmed" else None,
            inventory_uids=list(p.obj.inventory_uids or []),
        )
        if skip:
            continue
        uri = p.obj.scene_uri
        if "://" in uri:
            missing.append(f"object {p.obj.object_id}: scene {uri} is not local (rts tile reads local scenes: copy it)")
            continue
        scene = Path(uri).expanduser().resolve()
        if not scene.is_file():
            missing.append(f"object {p.obj.object_id}: scene {uri} not found")
            continue
        p.scene, why = warp_source(scene, every_scene, cfg)
        if why is not None:
            missing.append(f"object {p.obj.object_id}: {why}")
        elif p.scene not in every_scene and str(p.scene) not in added:
            added.append(str(p.scene))
    if missing:
        raise ReviewError(f"{src.manifest_path}: " + "; ".join(missing))
    return added


def warp_source(scene: Path, round_scenes: set[Path], cfg: TilingConfig) -> tuple[Path, str | None]:
    """The scene to cut for an object mapped on ``scene`` (resolved), and why none can be chosen (None: it can).

    ``scene`` itself, unless it is an `rts warp` copy (a ``<stem>_warp.json`` beside it) of one of the round's scenes
    (``round_scenes``, resolved): then that scene, so its cells are cut from the pixels and NoData rule the parent's
    tiles were cut from, not from the copy beside them. The copy's source is the record's ``scene``, or a round's
    scene of its name whose warp identity (name, size, mtime, the config's pixel settings) is the record's (the same
    file, moved). A copy of a scene of no round scene's name is new ground, cut from the copy. Refused (the reason
    returned): a ``_warp.json`` that is not a warp record, and a copy of a file of a round scene's name that is not
    that scene as far as the identity tells (another file, changed since, or warped with other settings)."""
    if scene in round_scenes:
        return scene, None
    record_path = scene.with_name(f"{scene.stem}{WARP_RECORD}")
    if not record_path.is_file():
        return scene, None
    try:
        record = WarpedScene.model_validate_json(record_path.read_text())
    except (OSError, ValueError) as err:
        return scene, (
            f"scene {scene} has {record_path.name} beside it, which is not an rts warp record ({type(err).__name__}): "
            "ingest cannot tell which scene it is a copy of; warp its scene again (rts warp) into that folder"
        )
    source = Path(record.scene).expanduser().resolve()
    named = sorted(s for s in round_scenes if s.name == source.name)
    same = [s for s in named if s == source or warp_identity(cfg, s) == record.identity]
    if same:
        log.info("rts review ingest: %s is an rts warp copy of %s: its cells are cut from that scene", scene, same[0])
        return same[0], None
    if named:
        return scene, (
            f"scene {scene} is an rts warp copy of {source} ({record_path.name}), not of the round's scene {named[0]} "
            "of that name (its warp identity differs: another file, changed since, or warped with other settings): "
            "ingest cannot tell whether they are the same scene, and cutting the copy would put its pixels and NoData "
            f"rule into the parent's cells; if it is that scene, warp it again with the round's tiling config into "
            f"{scene.parent} (rts warp --config <tiling config> --output {scene.parent}); if not, give {source} a name "
            "of its own and warp it again"
        )
    return scene, None


def _check_not_ingested(judged: list[PlacedObject], inventory: Inventory, src: ReviewInputs, cfg: TilingConfig) -> None:
    """Refuse objects whose uid is already in the round's inventory: the same review ingested twice would confirm
    its polygons twice."""
    known = set(inventory.uids)
    again = [p.obj.object_id for p in judged if p.outcome is not None and p.outcome.uid in known]
    if again:
        raise ReviewError(
            f"{src.verdicts_path}: object(s) {again} are already confirmed in the round's inventory "
            f"{cfg.polygons.path} (this review was ingested before); judge them unsure or leave them out"
        )


def _focus(cfg: TilingConfig, added: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The round's focus scenes (an earlier ingest's, then the added ones) and the earlier focus areas.

    An earlier ingest's scenes stay cut only around its areas, so they carry over; a scene added again is listed once.
    """
    earlier_scenes: list[str] = []
    earlier_areas: list[dict[str, Any]] = []
    if cfg.focus is not None:  # an earlier ingest's: its scenes stay cut only around its areas
        earlier_scenes = [str(s) for s in scene_paths(cfg.focus.scenes)]
        earlier_areas = read_polygons(cfg.focus.path, cfg.grid.crs)
    focus_scenes = earlier_scenes + [a for a in added if a not in earlier_scenes]
    return focus_scenes, earlier_areas


def _grid_geometry(obj: ReviewObject, src: ReviewInputs, grid_crs: str) -> Any:
    """The object's outline (manifest geometry_wkt, campaign CRS) on the grid CRS."""
    import shapely
    from rasterio.crs import CRS

    try:
        return grid_geometry(shapely.from_wkt(obj.geometry_wkt), CRS.from_wkt(src.header.campaign.crs_wkt), grid_crs)
    except Exception as err:  # shapely's and PROJ's errors for a broken outline or CRS
        raise ReviewError(f"{src.manifest_path}: object {obj.object_id}: geometry_wkt unusable ({err})") from None


def _listed(items: list[str], most: int = 20) -> str:
    """``items`` joined, the first ``most`` of them and how many more."""
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _names(p: PlacedObject, split_of: dict[str, str] | None = None) -> str:
    regions = sorted({str(r) for r in p.cell_regions})
    if split_of is None:
        return "region " + ", ".join(repr(r) for r in regions)
    return "region " + ", ".join(f"{r!r} in {split_of.get(r, 'no split')}" for r in regions)


def check_tile_regions(plan: Plan, cfg: TilingConfig, parent_root: Path) -> None:
    """Regions from an inventory column or its buffered groups: a cell's region is that of the polygons in it (else
    the nearest), so a confirmed polygon can change the region of a cell; refused when it changes the split of a cell
    the next round cuts: the parent's tiles and the included objects' cells. The cells of objects left out (unsure,
    held out) are not cut, so a nearest region they lose is no move (a first round on new ground moves them as a
    rule: an empty cell takes the region of the nearest polygon, and a confirmed one is nearer)."""
    if cfg.regions.column is None and cfg.regions.groups is None:
        return
    confirmed = [p for p in plan.objects if p.outcome is not None and p.outcome.outcome == "confirmed"]
    if not confirmed:
        return
    inv = _grown_inventory(plan, confirmed)
    region_of = RegionOf(cfg, inv)
    split_of = region_splits(plan.splits)
    cut = {(c.col, c.row) for p in plan.objects if p.included for c in p.cells}
    before = {k: str(v) for k, v in plan.cell_regions.items() if v is not None and k in cut}
    for row in _parent_rows(parent_root):
        m = re.fullmatch(r"c(-?\d+)_r(-?\d+)", row.get("Tile_id", ""))
        if m:
            before[(int(m[1]), int(m[2]))] = row.get("RegionName", "")
    moved = []
    for (col, r), region in sorted(before.items()):
        cell = GridCell(col, r, cfg.grid.tile_size, cfg.grid.pixel_size)
        now = region_of(cell, inv.touching(cell))
        if now is not None and split_of.get(now) != split_of.get(region):
            moved.append(f"{cell.tile_id}: {region!r} ({split_of.get(region)}) -> {now!r} ({split_of.get(now)})")
    if moved:
        ids = [p.obj.object_id for p in confirmed]
        source = f"its column {cfg.regions.column!r}" if cfg.regions.column else "its buffered groups (regions.groups)"
        raise ReviewError(
            f"{cfg.polygons.path}: regions come from {source}, and the confirmed object(s) "
            f"{ids} would move grid cells to another split: {'; '.join(moved[:10])}; leave those objects out "
            "(unsure) or give the regions as a region file"
        )


def check_footprints(plan: Plan, cfg: TilingConfig, parent_root: Path, verdicts: Path, buffer_m: float) -> None:
    """Spatial blocking by geometry (guide §10.1) before anything is cut: the cells the verdicts add, against the
    parent's tiles and each other, every pair of splits (train<->val, train<->test, val<->test); two tiles of
    different splits that overlap, or a train tile and a val/test tile within ``buffer_m`` of ground, with a new
    one among them, are refused naming both tiles (rtscore.data.splits.blocking)."""
    split_of = region_splits(plan.splits)
    old, _ = data_root_footprints(parent_root, split_of)
    new: dict[str, dict[str, Bounds]] = {}
    for p in plan.objects:
        if not p.included:
            continue
        for c, region in zip(p.cells, p.cell_regions, strict=True):
            new.setdefault(split_of[str(region)], {})[c.tile_id] = c.bounds
    added = {f"{s} (new)": s for s in new}
    footprints = {**old, **{f"{s} (new)": tiles for s, tiles in new.items()}}
    try:
        check_blocking(footprints, cfg.grid.crs, buffer_m, split_of=added, fresh=added)
    except BlockingError as err:
        raise ReviewError(f"{verdicts}: the tiles these verdicts add break spatial blocking: {err}") from None


def _parent_rows(root: Path) -> list[dict[str, str]]:
    try:
        with open(root / METADATA_CSV, newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return []


def _grown_inventory(plan: Plan, confirmed: list[PlacedObject]) -> Inventory:
    """The round's inventory plus the confirmed polygons, in memory (as the next round reads inventory.gpkg)."""
    import shapely

    inv = plan.inventory
    geoms = [*inv.geoms, *(p.geom for p in confirmed)]
    features = [*inv.features, *({"geometry": shapely.geometry.mapping(p.geom), "properties": {}} for p in confirmed)]
    uids = [*inv.uids, *(str(p.outcome.uid) for p in confirmed if p.outcome is not None)]
    labels = [
        *inv.labels,
        *(
            InventoryFeature(uid, len(inv.labels) + k, "positive", "polygon", None, None, p.geom)
            for k, (uid, p) in enumerate(zip(uids[len(inv.uids) :], confirmed, strict=True))
        ),
    ]
    regions = None
    if inv.regions is not None:
        regions = [*inv.regions, *(str(p.outcome.region) for p in confirmed if p.outcome is not None)]
    return Inventory(features, geoms, uids, regions, shapely.STRtree(geoms), labels, inv.schema, stale=inv.stale)
