"""`rts review ingest`: a review's verdicts -> the next dataset version (docs/review.md, "Ingest").

:func:`ingest_review` reads a review export (``review.json``, ``manifest.jsonl``), a verdict file (the review page's
GeoJSON or a Label Studio export) and the round's tiling config, and writes the next data root:

1. **Checked first; nothing written on refusal.** The verdicts belong to this review (its id, and the campaign's
   objects and package when the file names them); every judged object is in the manifest; the campaign still holds
   the objects layer the review was exported from (object ids are renumbered when a campaign is mapped again) and
   was mapped by the same package. Each judged object (``rts``, ``not_rts``) is placed in the grid cells of the
   tiling config it touches, each cell in its region (``RegionOf``, as ``rts tile`` places it) and the region in its
   split (the config's ``splits``, required: a derived split could move regions). An object in a val/test region
   is refused (``held_out="refuse"``), left out (``skip``) or added to that split (``add``), never to train; an
   object in a region of no split is refused, or its region added to train (``new_regions="train"``). In column
   mode (regions from the inventory) a confirmed polygon could move a tile of another region to another split:
   refused, naming the tiles.
2. **The next round's inputs** under ``<output>/review/``: ``inventory.gpkg`` (the round's polygons on the grid CRS
   with their id and region, plus one polygon per confirmed object, id ``review-<review_id[:8]>-<object_id>``;
   columns ``review_status`` inventory/confirmed, ``review_id``, ``object_id``), ``areas.gpkg`` (the judged objects
   placed, with verdict, region and split), a copy of the verdict file, ``tile.yaml`` (the round's tiling config
   with that inventory, the judged objects' scenes added under a ``focus`` on the areas, new regions in train if
   asked, ``output: ..``, and ``lineage``) and, given a pipeline config, ``pipeline.yaml`` (every geotiff data root
   pointing at ``<output>``). ``rts tile`` then cuts ``<output>`` from ``tile.yaml``: confirmed RTS are positives
   by its rules, the cells of false positives are tiles whose labels are 0 there (hard negatives); ``unsure`` is
   left out.
3. **The record**: ``<output>/review/ingest.json`` (:class:`IngestResult`), written last.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rtscore.config.base import StrictModel, read_yaml
from rtscore.config.pipeline import parse_pipeline_config
from rtscore.config.splits import region_splits
from rtscore.config.tiling import TilingConfig, load_tiling_config
from rtscore.data.blocking import TRAIN, BlockingError, Bounds, check_blocking, data_root_footprints
from rtscore.data.tile_pixels import GridCell, grid_cells
from rtscore.data.tiling import TilingCounts, TilingManifest, fingerprint, tile_scenes
from rtscore.data.tiling_inventory import Inventory, RegionOf, read_inventory
from rtscore.data.tiling_scenes import scene_paths
from rtscore.data.tiling_state import FINGERPRINT, MANIFEST_JSON, METADATA_CSV, STATE_DIR
from rtscore.data.vector_labels import read_polygons
from rtscore.mapping.campaign import OBJECTS_FILE, SUMMARY_JSON
from rtscore.mapping.outputs import CampaignRoot
from rtscore.review.manifest import HEADER_FILE, MANIFEST_FILE, ReviewError, ReviewHeader, ReviewObject, iter_objects
from rtscore.review.manifest import read_header as read_header_file
from rtscore.review.verdict_file import read_verdicts
from rtscore.review.verdicts import Verdict, VerdictSet
from rtscore.storage import atomic_write_json, atomic_write_text
from rtscore.storage.files import sha256_file

log = logging.getLogger(__name__)

REVIEW_DIR = "review"  # <output>/review/: what the round was made from
INGEST_JSON = "ingest.json"
INVENTORY_FILE = "inventory.gpkg"
AREAS_FILE = "areas.gpkg"
TILE_YAML = "tile.yaml"
PIPELINE_YAML = "pipeline.yaml"
OWN_FILES = (INGEST_JSON, INVENTORY_FILE, AREAS_FILE, TILE_YAML, PIPELINE_YAML)
DEFAULT_ID_COLUMN = "uid"  # the id column of inventory.gpkg when the round's inventory has none
HELD_OUT = ("val", "test")
SPLIT_ORDER = {"train": 0, "val": 1, "test": 2}  # an object in cells of several splits takes the strictest

HeldOut = Literal["refuse", "skip", "add"]
NewRegions = Literal["refuse", "train"]
Outcome = Literal["confirmed", "hard_negative", "left_out_unsure", "left_out_held_out"]


class ObjectOutcome(StrictModel):
    """What ingest did with one judged object."""

    object_id: int
    verdict: Literal["rts", "not_rts", "unsure"]
    region: str | None = Field(None, description="The region of the cell holding the object (None: unsure).")
    split: str | None = Field(None, description="The strictest split of the cells it touches (None: unsure).")
    regions: list[str] = Field(default_factory=list, description="Every region of the cells it touches.")
    outcome: Outcome = Field(
        ...,
        description="confirmed: a polygon of the inventory; hard_negative: its cells cut with label 0 over it; "
        "left_out_unsure; left_out_held_out: in a val/test region with held_out skip.",
    )
    uid: str | None = Field(None, description="Its id in inventory.gpkg and metadata.csv UIDs (confirmed only).")


class IngestCounts(StrictModel):
    """What the verdicts added."""

    confirmed: int = Field(..., description="rts verdicts added to the inventory.")
    false_positives: int = Field(..., description="not_rts verdicts whose cells are cut as hard negatives.")
    unsure: int = Field(..., description="unsure verdicts (left out).")
    left_out_held_out: int = Field(..., description="Judged objects in val/test regions left out (held_out skip).")
    per_split: dict[str, dict[str, int]] = Field(
        ..., description="split -> {confirmed, false_positives} of the objects added."
    )
    new_train_regions: list[str] = Field(default_factory=list, description="Regions added to train (new_regions).")


class IngestResult(StrictModel):
    """``<output>/review/ingest.json``: the dataset version a review made, where it came from, what it holds."""

    schema_version: Literal[1] = 1
    version: str = Field(..., description="The new data root's dataset version.")
    output: str = Field(..., description="The new data root.")
    parent: str = Field(..., description="The parent data root (the round's tiling config's output).")
    parent_fingerprint: str = Field(..., description="Its tiling.json config_fingerprint.")
    fingerprint: str = Field(..., description="The new root's tiling.json config_fingerprint.")
    review_id: str
    review: str = Field(..., description="The review directory.")
    verdicts: str = Field(..., description="The verdict file's name (copied into <output>/review/).")
    verdicts_sha256: str
    campaign: str = Field(..., description="The campaign checked (its objects layer and package).")
    tiling_config: str = Field(..., description="The next round's tiling config (<output>/review/tile.yaml).")
    pipeline_config: str | None = Field(None, description="<output>/review/pipeline.yaml (None: none given).")
    held_out: HeldOut
    new_regions: NewRegions
    counts: IngestCounts
    objects: list[ObjectOutcome]
    tiling: TilingCounts = Field(..., description="What rts tile cut into the new root.")

    def summary_line(self) -> str:
        """What `rts review ingest` prints."""
        c, t = self.counts, self.tiling
        held = f", {c.left_out_held_out} in val/test regions left out" if c.left_out_held_out else ""
        train = f"; regions added to train: {c.new_train_regions}" if c.new_train_regions else ""
        run = f"; next: rts run --config {self.pipeline_config}" if self.pipeline_config else ""
        return (
            f"wrote {self.output} (dataset version {self.version}, parent {self.parent}): {c.confirmed} confirmed RTS "
            f"added to the inventory, {c.false_positives} false positives cut as hard negatives, {c.unsure} unsure "
            f"left out{held}{train}; {t.tiles} tiles ({t.positive} positive, {t.negative} negative){run}"
        )

    def render_markdown(self) -> str:
        """The review-ingest flow's artifact: the new version, its lineage and what each split gained."""
        rows = "\n".join(
            f"| {split} | {n.get('confirmed', 0)} | {n.get('false_positives', 0)} |"
            for split, n in sorted(self.counts.per_split.items())
        )
        return (
            f"# Dataset version {self.version}\n\n{self.summary_line()}\n\nReview {self.review_id[:12]} "
            f"({self.verdicts}, sha256 {self.verdicts_sha256[:12]}), campaign {self.campaign}.\n\n"
            f"| split | confirmed RTS | hard negatives |\n|---|---|---|\n{rows}\n"
        )


def ingest_review(
    review: str,
    verdicts: str,
    tiling_config: str,
    output: str,
    *,
    held_out: HeldOut = "refuse",
    new_regions: NewRegions = "refuse",
    campaign: str | None = None,
    version: str | None = None,
    pipeline_config: str | None = None,
    min_distance_m: float = 0.0,
) -> IngestResult:
    """A review's verdicts -> the next dataset version under ``output`` (module docstring). ``min_distance_m``: the
    ground distance every new train tile keeps from the val/test tiles, and every new val/test tile from the train
    tiles (the pipeline's ``splits.min_distance_m``; 0: they may touch, never overlap).

    Raises:
        ReviewError: verdicts of another review or campaign, objects not in the manifest, a campaign mapped again
            or by another package, a tiling config without splits, an object in a val/test region (held_out
            refuse), in a region of no split (new_regions refuse) or outside every region, a scene on gs:// or
            missing, an output that is not new; each naming the file and the objects. Nothing is written.
        TilingError, ConfigError: the tiling or pipeline config unusable (nothing written either).
    """
    src = _read_review(review, verdicts, campaign)
    cfg_path = Path(tiling_config)
    cfg = load_tiling_config(cfg_path)
    parent = _parent(cfg, cfg_path)
    out = Path(output).expanduser().absolute()
    _check_output(out, parent.root)
    plan = _place(src, cfg, cfg_path, held_out=held_out, new_regions=new_regions)
    _check_tile_regions(plan, cfg, parent)
    _check_footprints(plan, cfg, parent, src.verdicts_path, min_distance_m)
    pipeline = _pipeline_doc(Path(pipeline_config), out) if pipeline_config is not None else None
    name = _version(parent, version)
    counts = _counts(plan)
    created = not out.exists()
    review_dir = out / REVIEW_DIR
    try:
        review_dir.mkdir(parents=True, exist_ok=True)
        verdict_name = _copy_verdicts(src.verdicts_path, review_dir)
        _write_inventory(review_dir / INVENTORY_FILE, plan, cfg, src.header.review_id)
        _write_areas(review_dir / AREAS_FILE, plan, cfg.grid.crs, src.header.review_id)
        lineage = {
            "version": name,
            "parent": str(parent.root),
            "parent_fingerprint": parent.fingerprint,
            "review": {
                "review_id": src.header.review_id,
                "verdicts": verdict_name,
                "verdicts_sha256": src.verdicts_sha256,
            },
            "counts": {k: v for k, v in counts.model_dump().items() if isinstance(v, int)},
        }
        tile_yaml = review_dir / TILE_YAML
        atomic_write_text(tile_yaml, _tile_yaml(cfg, plan, lineage))
        if pipeline is not None:
            atomic_write_text(review_dir / PIPELINE_YAML, pipeline)
        new_cfg = load_tiling_config(tile_yaml)
        state = out / STATE_DIR / FINGERPRINT
        if not state.exists():  # the root holds review/ now: mark it rts tile's (a fresh root: nothing to set aside)
            atomic_write_text(state, fingerprint(new_cfg) + "\n")
        manifest = tile_scenes(new_cfg, out)
    except BaseException:
        _undo(out, created)
        raise
    result = IngestResult(
        version=name,
        output=str(out),
        parent=str(parent.root),
        parent_fingerprint=parent.fingerprint,
        fingerprint=manifest.config_fingerprint,
        review_id=src.header.review_id,
        review=review,
        verdicts=verdict_name,
        verdicts_sha256=src.verdicts_sha256,
        campaign=src.campaign,
        tiling_config=str(tile_yaml),
        pipeline_config=str(review_dir / PIPELINE_YAML) if pipeline is not None else None,
        held_out=held_out,
        new_regions=new_regions,
        counts=counts,
        objects=[p.outcome for p in plan.objects if p.outcome is not None],
        tiling=manifest.counts,
    )
    atomic_write_json(review_dir / INGEST_JSON, result.model_dump(mode="json"))
    return result


# --------------------------------------------------------------------------------------------- reading


@dataclass
class ReviewInputs:
    """A review, its verdicts and the campaign, checked against each other."""

    header: ReviewHeader
    header_path: str
    manifest_path: str
    objects: dict[int, ReviewObject]
    verdict_set: VerdictSet
    verdicts_path: Path
    verdicts_sha256: str
    campaign: str


def _read_review(review: str, verdicts: str, campaign: str | None) -> ReviewInputs:
    """The review's header and manifest, the verdicts and the campaign, each checked against the others."""
    root = CampaignRoot(review)
    header_path = root.fetch(HEADER_FILE) or root.path(HEADER_FILE)
    header = read_header_file(header_path)
    manifest_path = root.fetch(MANIFEST_FILE) or root.path(MANIFEST_FILE)
    objects = {o.object_id: o for o in iter_objects(manifest_path)}
    hname, mname = root.uri_of(HEADER_FILE), root.uri_of(MANIFEST_FILE)
    vpath = Path(verdicts)
    vs = read_verdicts(vpath)
    if vs.review_id != header.review_id:
        raise ReviewError(
            f"{vpath}: verdicts of another review: the file names review {vs.review_id[:12]}, {hname} is review "
            f"{header.review_id[:12]}; ingest verdicts with the review they were made on"
        )
    for key, want in (
        ("objects_sha256", header.campaign.objects_sha256),
        ("package_sha256", header.campaign.package_sha256),
    ):
        got = getattr(vs, key)
        if got is not None and got != want:
            raise ReviewError(
                f"{vpath}: its {key} {got[:12]} is not the one of {hname} ({want[:12]}): verdicts of another "
                "campaign or package"
            )
    unknown = [v.object_id for v in vs.verdicts if v.object_id not in objects]
    if unknown:
        raise ReviewError(
            f"{vpath}: object(s) {unknown[:20]} not in the review manifest {mname} ({len(objects)} objects): "
            "verdicts edited or of another export"
        )
    where = campaign if campaign is not None else header.campaign.uri
    _check_campaign(where, header, hname)
    return ReviewInputs(header, hname, mname, objects, vs, vpath, sha256_file(vpath), where)


def _check_campaign(uri: str, header: ReviewHeader, hname: str) -> None:
    """The campaign still holds the objects layer and the package the review was exported from."""
    root = CampaignRoot(uri)
    objects = root.fetch(OBJECTS_FILE)
    if objects is None:
        raise ReviewError(
            f"{root.uri_of(OBJECTS_FILE)}: not found; the review {hname} was exported from campaign "
            f"{header.campaign.uri} (give the campaign's location if it moved)"
        )
    sha = sha256_file(objects)
    if sha != header.campaign.objects_sha256:
        raise ReviewError(
            f"{root.uri_of(OBJECTS_FILE)}: sha256 {sha[:12]} is not the one {hname} was exported from "
            f"({header.campaign.objects_sha256[:12]}): the campaign was mapped again since the export: object ids "
            "may name other objects; export again"
        )
    summary = root.fetch(SUMMARY_JSON)
    package = None
    if summary is not None:
        try:
            package = (json.loads(summary.read_text()).get("mapping_identity") or {}).get("package_sha256")
        except (OSError, ValueError, AttributeError):
            package = None
    if package != header.campaign.package_sha256:
        raise ReviewError(
            f"{root.uri_of(SUMMARY_JSON)}: the campaign names package {str(package)[:12]}, {hname} was exported from "
            f"package {header.campaign.package_sha256[:12]}: another package mapped it; export again"
        )


@dataclass
class Parent:
    """The round's data root (the tiling config's output) and what its tiling.json says."""

    root: Path
    fingerprint: str
    manifest: TilingManifest


def _parent(cfg: TilingConfig, cfg_path: Path) -> Parent:
    if cfg.output is None:
        raise ReviewError(f"{cfg_path}: names no output: the round's data root (the parent) must be its output")
    root = Path(cfg.output).resolve()
    path = root / MANIFEST_JSON
    try:
        manifest = TilingManifest.model_validate_json(path.read_text())
    except (OSError, ValueError) as err:
        raise ReviewError(
            f"{path}: the round's data root is not tiled ({type(err).__name__}); run `rts tile --config {cfg_path}` "
            "first: the next version records its parent"
        ) from None
    return Parent(root, manifest.config_fingerprint, manifest)


def _check_output(out: Path, parent: Path) -> None:
    resolved = out.resolve()
    if resolved == parent or parent in resolved.parents or resolved in parent.parents:
        raise ReviewError(f"output {out}: the parent data root {parent} holds it or is it; choose a new directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReviewError(
            f"output {out}: exists and is not empty; choose a new directory (an ingest that stopped while tiling "
            f"resumes with `rts tile --config {out / REVIEW_DIR / TILE_YAML}`)"
        )


def _version(parent: Parent, given: str | None) -> str:
    """``given``, else the parent's version (its root's name without one) with the round number counted up:
    ``tiles`` -> ``tiles+r1`` -> ``tiles+r2``."""
    if given is not None:
        return given
    base = parent.manifest.lineage.version if parent.manifest.lineage is not None else parent.root.name
    m = re.fullmatch(r"(.*)\+r(\d+)", base)
    return f"{m[1]}+r{int(m[2]) + 1}" if m else f"{base}+r1"


# --------------------------------------------------------------------------------------------- placing


@dataclass
class PlacedObject:
    """A judged object on the grid: its geometry (grid CRS), cells, regions and split, and its outcome."""

    obj: ReviewObject
    verdict: Verdict
    geom: Any = None
    cells: list[GridCell] = field(default_factory=list)
    cell_regions: list[str | None] = field(default_factory=list)
    outcome: ObjectOutcome | None = None

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


def _place(src: ReviewInputs, cfg: TilingConfig, cfg_path: Path, *, held_out: HeldOut, new_regions: NewRegions) -> Plan:
    """Each judged object in its cells, regions and split; the held-out and new-region rules applied."""
    import shapely

    if cfg.splits is None:
        raise ReviewError(
            f"{cfg_path}: no `splits`: without them the split is derived per root and could move a region to "
            "another split between rounds; put the round's splits (split -> regions) in the tiling config"
        )
    split_of = region_splits(cfg.splits)
    inventory = read_inventory(cfg)
    region_of = RegionOf(cfg, inventory)
    ts, px = cfg.grid.tile_size, cfg.grid.pixel_size
    placed: list[PlacedObject] = []
    cell_regions: dict[tuple[int, int], str | None] = {}
    for v in src.verdict_set.verdicts:
        p = PlacedObject(src.objects[v.object_id], v)
        placed.append(p)
        if v.verdict == "unsure":
            p.outcome = ObjectOutcome(object_id=v.object_id, verdict="unsure", outcome="left_out_unsure")
            continue
        p.geom = _grid_geometry(p.obj, src, cfg.grid.crs)
        p.cells = [c for c in grid_cells(p.geom.bounds, ts, px) if p.geom.intersects(shapely.box(*c.bounds))]
        for c in p.cells:
            if (c.col, c.row) not in cell_regions:
                cell_regions[(c.col, c.row)] = region_of(c, inventory.touching(c))
        p.cell_regions = [cell_regions[(c.col, c.row)] for c in p.cells]
    judged = [p for p in placed if p.verdict.verdict != "unsure"]
    outside = [p.obj.object_id for p in judged if None in p.cell_regions]
    if outside:
        raise ReviewError(
            f"{src.verdicts_path}: object(s) {outside} lie in grid cells whose centre is in no region of "
            f"{cfg.regions.path} ({cfg_path}): extend the regions"
        )
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
    splits = {k: list(v) for k, v in cfg.splits.items()}
    if new_train:
        splits["train"] = [*splits.get("train", []), *new_train]
    held = [p for p in judged if any(split_of[str(r)] in HELD_OUT for r in p.cell_regions)]
    if held and held_out == "refuse":
        which = [f"{p.obj.object_id} ({_names(p, split_of)})" for p in held]
        raise ReviewError(
            f"{src.verdicts_path}: object(s) {_listed(which)} lie in val/test regions of {cfg_path}: adding them "
            "would change the val/test set; --held-out skip leaves them out, add puts them in their split"
        )
    every_scene = {p.resolve() for p in scene_paths(cfg.scenes)}
    added: list[str] = []
    missing: list[str] = []
    for p in judged:
        regions = [str(r) for r in p.cell_regions]
        home = _home_region(p, cfg)
        split = max((split_of[r] for r in regions), key=lambda s: SPLIT_ORDER.get(s, 0))
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
        elif scene not in every_scene and str(scene) not in added:
            added.append(str(scene))
    if missing:
        raise ReviewError(f"{src.manifest_path}: " + "; ".join(missing))
    known = set(inventory.uids)
    again = [p.obj.object_id for p in judged if p.outcome is not None and p.outcome.uid in known]
    if again:
        raise ReviewError(
            f"{src.verdicts_path}: object(s) {again} are already confirmed in the round's inventory "
            f"{cfg.polygons.path} (this review was ingested before); judge them unsure or leave them out"
        )
    earlier_scenes: list[str] = []
    earlier_areas: list[dict[str, Any]] = []
    if cfg.focus is not None:  # an earlier ingest's: its scenes stay cut only around its areas
        earlier_scenes = [str(s) for s in scene_paths(cfg.focus.scenes)]
        earlier_areas = read_polygons(cfg.focus.path, cfg.grid.crs)
    focus_scenes = earlier_scenes + [a for a in added if a not in earlier_scenes]
    return Plan(placed, splits, new_train, added, focus_scenes, earlier_areas, inventory, cell_regions)


def _grid_geometry(obj: ReviewObject, src: ReviewInputs, grid_crs: str) -> Any:
    """The object's outline (manifest geometry_wkt, campaign CRS) on the grid CRS."""
    import shapely
    from rasterio.crs import CRS
    from rasterio.warp import transform_geom

    try:
        geom = shapely.from_wkt(obj.geometry_wkt)
        moved = transform_geom(CRS.from_wkt(src.header.campaign.crs_wkt), grid_crs, shapely.geometry.mapping(geom))
    except Exception as err:  # shapely's and PROJ's errors for a broken outline or CRS
        raise ReviewError(f"{src.manifest_path}: object {obj.object_id}: geometry_wkt unusable ({err})") from None
    return shapely.make_valid(shapely.geometry.shape(moved))


def _home_region(p: PlacedObject, cfg: TilingConfig) -> str:
    """The region of the cell holding the object's representative point (inside it)."""
    point = p.geom.representative_point()
    for c, r in zip(p.cells, p.cell_regions, strict=True):
        x0, y0, x1, y1 = c.bounds
        if x0 <= point.x < x1 and y0 <= point.y < y1:
            return str(r)
    return str(p.cell_regions[0])


def _listed(items: list[str], most: int = 20) -> str:
    """``items`` joined, the first ``most`` of them and how many more."""
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _names(p: PlacedObject, split_of: dict[str, str] | None = None) -> str:
    regions = sorted({str(r) for r in p.cell_regions})
    if split_of is None:
        return "region " + ", ".join(repr(r) for r in regions)
    return "region " + ", ".join(f"{r!r} in {split_of.get(r, 'no split')}" for r in regions)


def _check_tile_regions(plan: Plan, cfg: TilingConfig, parent: Parent) -> None:
    """Regions from an inventory column: a cell's region is that of the polygons in it (else the nearest), so a
    confirmed polygon can change the region of a cell; refused when it changes the cell's split (the parent's tiles
    and the judged objects' cells)."""
    if cfg.regions.column is None:
        return
    confirmed = [p for p in plan.objects if p.outcome is not None and p.outcome.outcome == "confirmed"]
    if not confirmed:
        return
    inv = _grown_inventory(plan, confirmed)
    region_of = RegionOf(cfg, inv)
    split_of = region_splits(plan.splits)
    before: dict[tuple[int, int], str] = {k: str(v) for k, v in plan.cell_regions.items() if v is not None}
    for row in _parent_rows(parent.root):
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
        raise ReviewError(
            f"{cfg.polygons.path}: regions come from its column {cfg.regions.column!r}, and the confirmed object(s) "
            f"{ids} would move grid cells to another split: {'; '.join(moved[:10])}; leave those objects out "
            "(unsure) or give the regions as a region file"
        )


def _check_footprints(plan: Plan, cfg: TilingConfig, parent: Parent, verdicts: Path, buffer_m: float) -> None:
    """Spatial blocking by geometry (guide §10.1) before anything is cut: the cells the verdicts add, against the
    parent's tiles and each other, by split; a new train cell within ``buffer_m`` of a val/test tile (or a new
    val/test cell within it of a train tile) is refused naming both tiles (rtscore.data.blocking)."""
    split_of = region_splits(plan.splits)
    old, _ = data_root_footprints(parent.root, split_of)
    new: dict[str, dict[str, Bounds]] = {}
    for p in plan.objects:
        if not p.included:
            continue
        for c, region in zip(p.cells, p.cell_regions, strict=True):
            new.setdefault(split_of[str(region)], {})[c.tile_id] = c.bounds
    every = {s: {**old.get(s, {}), **new.get(s, {})} for s in {*old, *new}}
    try:
        for footprints in (
            {TRAIN: new.get(TRAIN, {}), **{s: every[s] for s in every if s != TRAIN}},  # new train vs all val/test
            {TRAIN: every.get(TRAIN, {}), **{s: new[s] for s in new if s != TRAIN}},  # new val/test vs all train
        ):
            check_blocking(footprints, cfg.grid.crs, buffer_m)
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
    regions = None
    if inv.regions is not None:
        regions = [*inv.regions, *(str(p.outcome.region) for p in confirmed if p.outcome is not None)]
    return Inventory(features, geoms, uids, regions, shapely.STRtree(geoms))


def _counts(plan: Plan) -> IngestCounts:
    outcomes = [p.outcome for p in plan.objects if p.outcome is not None]
    per_split: dict[str, dict[str, int]] = {}
    for o in outcomes:
        if o.outcome in ("confirmed", "hard_negative") and o.split is not None:
            row = per_split.setdefault(o.split, {"confirmed": 0, "false_positives": 0})
            row["confirmed" if o.outcome == "confirmed" else "false_positives"] += 1
    n = {k: sum(o.outcome == k for o in outcomes) for k in ("confirmed", "hard_negative", "left_out_unsure")}
    return IngestCounts(
        confirmed=n["confirmed"],
        false_positives=n["hard_negative"],
        unsure=n["left_out_unsure"],
        left_out_held_out=sum(o.outcome == "left_out_held_out" for o in outcomes),
        per_split=dict(sorted(per_split.items(), key=lambda kv: SPLIT_ORDER.get(kv[0], 9))),
        new_train_regions=plan.new_train_regions,
    )


# --------------------------------------------------------------------------------------------- writing


def _copy_verdicts(path: Path, review_dir: Path) -> str:
    name = path.name if path.name not in OWN_FILES else f"verdicts-{path.name}"
    tmp = review_dir / f".{name}.tmp"
    shutil.copyfile(path, tmp)
    tmp.replace(review_dir / name)
    return name


def _write_layer(path: Path, geoms: list[Any], columns: dict[str, Any], crs: str) -> None:
    """One MultiPolygon layer (pyogrio raw: geopandas is not a dependency), under a temporary name."""
    import numpy as np
    import pyogrio
    import shapely

    multi = [g if g.geom_type == "MultiPolygon" else shapely.MultiPolygon([g]) for g in _polygonal(geoms)]
    tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        pyogrio.raw.write(
            tmp,
            geometry=np.asarray([shapely.to_wkb(g) for g in multi], dtype=object),
            field_data=list(columns.values()),
            fields=list(columns),
            crs=crs,
            driver="GPKG",
            layer=path.stem,
            geometry_type="MultiPolygon",
            encoding="UTF-8",
        )
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _polygonal(geoms: list[Any]) -> list[Any]:
    """Each geometry's polygons (make_valid can leave a collection with lines)."""
    import shapely

    out = []
    for g in geoms:
        if g.geom_type in ("Polygon", "MultiPolygon"):
            out.append(g)
            continue
        parts = [p for p in getattr(g, "geoms", []) if p.geom_type in ("Polygon", "MultiPolygon")]
        out.append(shapely.union_all(parts) if parts else g)
    return out


def _write_inventory(path: Path, plan: Plan, cfg: TilingConfig, rid: str) -> None:
    """inventory.gpkg: the round's polygons (their geometry as read on the grid CRS, id, region column, the ignore
    flag when present) and one polygon per confirmed object."""
    import numpy as np
    import shapely

    inv = plan.inventory
    confirmed = [p for p in plan.objects if p.outcome is not None and p.outcome.outcome == "confirmed"]
    geoms = [shapely.geometry.shape(f["geometry"]) for f in inv.features] + [p.geom for p in confirmed]
    n_old = len(inv.features)
    columns: dict[str, Any] = {
        cfg.polygons.id_column or DEFAULT_ID_COLUMN: np.array(
            [*inv.uids, *(str(p.outcome.uid) for p in confirmed if p.outcome)], dtype=object
        )
    }
    if cfg.regions.column is not None and inv.regions is not None:
        regions = [*inv.regions, *(str(p.outcome.region) for p in confirmed if p.outcome)]
        columns[cfg.regions.column] = np.array(regions, dtype=object)
    if any("ignore" in (f.get("properties") or {}) for f in inv.features):
        flags = [int(bool((f.get("properties") or {}).get("ignore", False))) for f in inv.features]
        columns["ignore"] = np.array(flags + [0] * len(confirmed), dtype=np.int64)
    columns["review_status"] = np.array(["inventory"] * n_old + ["confirmed"] * len(confirmed), dtype=object)
    columns["review_id"] = np.array([""] * n_old + [rid] * len(confirmed), dtype=object)
    columns["object_id"] = np.array([0] * n_old + [p.obj.object_id for p in confirmed], dtype=np.int64)
    _write_layer(path, geoms, columns, cfg.grid.crs)


AREA_TEXT = ("verdict", "region", "split", "review_id")


def _write_areas(path: Path, plan: Plan, crs: str, rid: str) -> None:
    """areas.gpkg, the focus of the added scenes: the judged objects added (confirmed and false positives) with
    verdict, region, split and review, after the areas of the round's own focus (an earlier ingest's)."""
    import numpy as np
    import shapely

    rows = [(dict(f["properties"]), shapely.geometry.shape(f["geometry"])) for f in plan.earlier_areas]
    for p in plan.objects:
        if p.included and p.outcome is not None:
            o = p.outcome
            props = {"object_id": o.object_id, "verdict": o.verdict, "region": o.region, "split": o.split}
            rows.append(({**props, "review_id": rid}, p.geom))
    columns = {
        "object_id": np.array([int(r.get("object_id") or 0) for r, _ in rows], dtype=np.int64),
        **{k: np.array([str(r.get(k) or "") for r, _ in rows], dtype=object) for k in AREA_TEXT},
    }
    _write_layer(path, [g for _, g in rows], columns, crs)


def _tile_yaml(cfg: TilingConfig, plan: Plan, lineage: dict[str, Any]) -> str:
    """The next round's tiling config (paths absolute but its own files, beside it; output the root above)."""
    import yaml

    doc = cfg.model_dump(mode="json", exclude_none=True)
    doc["polygons"] = {"path": INVENTORY_FILE, "id_column": cfg.polygons.id_column or DEFAULT_ID_COLUMN}
    doc["scenes"] = [*cfg.scenes, *plan.added_scenes]
    doc.pop("focus", None)
    if plan.focus_scenes:
        doc["focus"] = {"path": AREAS_FILE, "scenes": plan.focus_scenes}
    doc["splits"] = plan.splits
    doc["output"] = ".."
    doc["lineage"] = lineage
    return yaml.safe_dump(doc, sort_keys=False)


def _pipeline_doc(path: Path, out: Path) -> str:
    """The pipeline config with every geotiff generation config's data_root at ``out`` (relative to
    ``<out>/review/pipeline.yaml``), generation configs named by path inlined; validated before anything is written.
    """
    import yaml

    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ReviewError(f"{path}: a pipeline config is a mapping")
    base = path.resolve().parent
    review_dir = out / REVIEW_DIR
    gen = dict((data.get("data") or {}).get("generation") or {})
    pointed = 0
    for split in ("train", "val", "test"):
        v = gen.get(split)
        if isinstance(v, str):
            v = read_yaml(base / v)
        if isinstance(v, dict) and isinstance(v.get("geotiff"), dict):
            v = {**v, "geotiff": {**v["geotiff"], "data_root": os.path.relpath(out, review_dir)}}
            pointed += 1
        if v is not None:
            gen[split] = v
    if not pointed:
        raise ReviewError(f"{path}: no generation config of source geotiff: no data_root to point at {out}")
    data = {**data, "data": {**(data.get("data") or {}), "generation": gen}}
    parse_pipeline_config(data, review_dir)
    return yaml.safe_dump(data, sort_keys=False)


def _undo(out: Path, created: bool) -> None:
    """Remove what a refused ingest wrote: the output it created (or emptied: it was empty), unless tiles were
    written (then it resumes with rts tile --config <out>/review/tile.yaml)."""
    tiles = out / STATE_DIR / "tiles"
    if tiles.is_dir() and any(tiles.iterdir()):
        log.warning(
            "rts review ingest: stopped while tiling %s; resume with rts tile --config %s",
            out,
            out / REVIEW_DIR / TILE_YAML,
        )
        return
    if created:
        shutil.rmtree(out, ignore_errors=True)
    elif out.is_dir():
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
