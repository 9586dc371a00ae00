"""`rts tile`: GeoTIFF scenes or quads (any CRS, any size) and an RTS polygon inventory cut into the tile layout of
docs/geotiff.md#the-tile-layout (PLANET-RGB/, EXTRA/, labels/, metadata.csv, splits.yaml) on a fixed grid.

Rules (docs/geotiff.md, "From scenes and polygons: rts tile"):

* **Grid.** Tile (c, r) of the grid CRS covers x in [c S, (c+1) S), y in [r S, (r+1) S) with S = tile_size x
  pixel_size: anchored at the CRS origin, so the tiles of two scenes (or two runs) line up pixel for pixel. Its id
  is ``c<c>_r<r>``. Every cell a scene's footprint touches is a candidate (a scene of ``focus.scenes``: only the
  cells touching an area of ``focus.path``, and it gives pixels to no other cell: elsewhere a cell is cut from the
  other scenes as if it were not there); a cell without a valid pixel, or with fewer than ``min_valid_fraction`` of
  its pixels valid (a sliver at a scene edge), is skipped and counted.
* **Checked first.** Before any tile: the scenes' headers, each scene's native pixel against the grid's (upsampling
  beyond ``grid.max_resample_factor`` refused), the inventory and regions, and the split rules on the plan
  (`rtscore.data.tiling.plan`: with ``splits`` the rules of a given split, without it the derivation ingestion
  will run); the plan's size is logged.
* **Pixels.** For each tile only the window of each scene that covers it is read (plus a 2-pixel margin for the
  kernel): memory is bounded by one tile and one scene window, never by the scene or mosaic. Validity (the one
  NoData rule, `rtscore.data.raster.bands.valid_mask`) is warped with nearest neighbour; RGB and EXTRA
  bands with ``resampling`` (bilinear by default), NoData pixels excluded from the kernel. Scenes overlap: per
  pixel, the first scene in config order with a valid pixel wins.
* **Outputs.** PLANET-RGB/<id>.tif: R, G, B, alpha uint8, colour interpretation tagged, LZW; NoData pixels RGB 0,
  alpha 0. EXTRA/<id>.tif: float32, declared nodata NaN (NDVI where nir + red is 0, a companion raster's NoData),
  0 on NoData pixels. labels/<id>.tif: uint8, the polygons rasterised directly on the tile grid
  (`rtscore.data.raster.vector_labels.rasterize_labels`): 1 inside a whole RTS, 255 over an RTS cut by the tile edge or
  touching NoData, 255 on NoData, else 0. The inventory is read by its schema (ARTS, mapped columns or plain;
  `rtscore.data.inventory.reader`): a Negative polygon is background (0), a Positive bounding box and a label too old
  for its scene (`rtscore.data.tiling.dates`) are 255 (docs/inventories.md). metadata.csv: TrainClass positive when
  a pixel is 1; UIDs the RTS with a pixel of 1; NegativeUIDs the Negatives with a valid pixel; ObjectPixels a pixel
  of each UID's label 1.
* **Resumable.** Each file is written under a temporary name and renamed; a tile's record (``.rts-tile/tiles/``) is
  written after its files, so a tile with a record and all its files is skipped on a re-run; metadata.csv,
  splits.yaml and ``tiling.json`` are written at the end, atomically, from the records (and only when their
  content changes: a re-run that finds everything done leaves the root untouched).
* **One identity.** The records are valid only for the run's identity (:func:`fingerprint`: this module's code
  closure, the settings that decide the tiles' content, the listing identity of every input file; never a path).
  A root tiled under another identity is not resumed: its tiles, records and lists are set aside into
  ``.rts-tile/set_aside/<UTC time>/`` (one warning line names it) and the run starts fresh, so tiles of two
  identities are never mixed.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, JsonValue

from rtscore.config.splits import SplitError
from rtscore.config.tiling import Lineage, TilingConfig, resolve_paths
from rtscore.data.inventory.object_pixels import join_ids
from rtscore.data.splits.regions import derive_splits
from rtscore.data.tiling.dates import LabelAges, check_label_ages
from rtscore.data.tiling.files import metadata_csv, tile_lonlat, write_if_changed, write_tile
from rtscore.data.tiling.inventory import (
    Focus,
    Inventory,
    RegionOf,
    cell_scenes,
    read_focus,
    read_inventory,
    tile_labels,
)
from rtscore.data.tiling.pixels import Datasets, GridCell, Scene, TilingError, grid_cells, render_pixels
from rtscore.data.tiling.plan import (
    Placed,
    TileProbe,
    check_split_rules,
    focus_estimates,
    kept,
    plan_line,
    scene_outlines,
)
from rtscore.data.tiling.scenes import check_resampling, check_scenes, scene_paths
from rtscore.data.tiling.state import (
    MANIFEST_JSON,
    METADATA_CSV,
    SPLITS_YAML,
    TileRecord,
    complete_record,
    prepare_output,
    write_record,
)
from rtscore.identity import file_identity, resume_key
from rtscore.storage import atomic_write_json

log = logging.getLogger(__name__)


class TilingCounts(BaseModel):
    """What a tiling run found and wrote."""

    candidate_tiles: int = Field(..., description="Grid cells touched by a scene footprint.")
    tiles: int = Field(..., description="Tiles written (listed in metadata.csv).")
    positive: int = Field(..., description="Tiles with at least one RTS pixel (label 1).")
    negative: int = Field(..., description="Tiles without an RTS pixel.")
    skipped_no_valid_pixels: int = Field(..., description="Candidate cells without a valid pixel in any scene.")
    skipped_sparse: int = Field(
        0, description="Cells with valid pixels, fewer than min_valid_fraction of the tile (slivers): not written."
    )
    estimated_tiles: int = Field(
        0,
        description="The plan's estimate of the tiles, logged before the first: cells in a region at least "
        "min_valid_fraction inside a scene footprint (an upper bound: NoData inside a scene is not in it).",
    )
    skipped_outside_regions: int = Field(..., description="Cells whose centre lies in no region polygon.")
    polygons: int = Field(..., description="Polygons in the inventory.")
    polygons_labelled: int = Field(..., description="Polygons labelled 1 (whole, on valid pixels) in some tile.")
    polygons_outside_scenes: int = Field(..., description="Polygons that touch no scene footprint (not tiled).")
    negative_polygons: int = Field(
        0, description="Negative polygons of the inventory (mapped background: label 0, listed in NegativeUIDs)."
    )
    tiles_with_negatives: int = Field(0, description="Tiles holding a valid pixel of a Negative polygon.")
    bounding_boxes: int = Field(0, description="Positive bounding boxes of the inventory: ignore (255) over their box.")
    stale_labels: int = Field(
        0, description="Labels more than polygons.max_label_age_days from their scene's acquisition: ignored (255)."
    )
    repaired_polygons: int = Field(0, description="Invalid polygons of the inventory repaired with make_valid.")
    undated_scenes: int = Field(
        0, description="Scenes without an acquisition date (scene_dates or a date tag): their labels not age-checked."
    )

    def labels_line(self) -> str:
        """The inventory's polygons as tiled, in one line (the CLI and the Prefect artifact print it): how many were
        labelled, and what was not labelled 1 and why (docs/inventories.md)."""
        parts = [f"{self.polygons} in the inventory, {self.polygons_labelled} labelled whole in a tile"]
        if self.negative_polygons:
            parts.append(f"{self.negative_polygons} Negative (background, 0) in {self.tiles_with_negatives} tile(s)")
        if self.bounding_boxes:
            parts.append(f"{self.bounding_boxes} bounding box(es) ignored (255)")
        if self.stale_labels:
            parts.append(f"{self.stale_labels} stale label(s) (polygons.max_label_age_days)")
        if self.repaired_polygons:
            parts.append(f"{self.repaired_polygons} invalid polygon(s) repaired")
        if self.undated_scenes:
            parts.append(f"{self.undated_scenes} scene(s) without a date (their labels not age-checked)")
        if self.polygons_outside_scenes:
            parts.append(f"{self.polygons_outside_scenes} touching no scene")
        return "; ".join(parts)


class TilingManifest(BaseModel):
    """``tiling.json``: what was tiled, how, and what came out (written last: its presence means done)."""

    output: str = Field(..., description="The data root written.")
    config_fingerprint: str = Field(
        ...,
        description="The run's identity: sha256 of the tiling code, the settings that decide the tiles' content and "
        "every input file's identity (fingerprint()); records of another identity are set aside, not resumed.",
    )
    config: dict[str, JsonValue] = Field(..., description="The tiling config (a JSON document), paths absolute.")
    scenes: list[str] = Field(..., description="The scenes, in priority order (first valid pixel wins).")
    extra_bands: list[str] = Field(..., description="EXTRA band names, in band order.")
    regions: dict[str, int] = Field(..., description="Tiles written per RegionName.")
    counts: TilingCounts = Field(..., description="Counts of tiles and polygons.")
    resumed_tiles: int = Field(..., description="Tiles found complete from an earlier run and kept.")
    warnings: list[str] = Field(
        default_factory=list,
        description="What the run warned of: scenes downsampled without average, split regions that get no tile, a "
        "thin test split, a derivation the written tiles fail.",
    )
    lineage: Lineage | None = Field(
        None, description="The dataset version, its parent and the review it adds (config lineage; None: none)."
    )


# GDAL reads these beside a file without being told: a scene's external mask and auxiliary metadata, a
# shapefile's attributes, index, CRS and encoding. They are part of the file's identity when present.
# Settings that decide no tile's content: where the root goes, its splits and their rules, the resampling limit
# (a run it allows cuts the same tiles whatever it is).
IDENTITY_EXCLUDES: dict[str, Any] = {
    "output": True,
    "splits": True,
    "split_rules": True,
    "grid": {"max_resample_factor"},
}


# Sections that are absent from the identity when empty, so a config without them keeps its identity's settings.
OPTIONAL_SECTIONS = ("focus", "lineage", "scene_dates")


def identity_settings(cfg: TilingConfig) -> dict[str, Any]:
    """The settings part of :func:`fingerprint`: the config but :data:`IDENTITY_EXCLUDES`, every input file's
    identity in place of its path; ``focus``, ``lineage`` and ``scene_dates`` only when given (their path-free
    parts: the focus files' identities, the lineage but its parent's path)."""
    doc = cfg.model_dump(mode="json", exclude=IDENTITY_EXCLUDES)
    doc["scenes"] = [file_identity(p) for p in scene_paths(cfg.scenes)]
    doc["polygons"]["path"] = file_identity(Path(cfg.polygons.path))
    if cfg.regions.path is not None:
        doc["regions"]["path"] = file_identity(Path(cfg.regions.path))
    for band, band_doc in zip(cfg.extra, doc["extra"], strict=True):
        for key in ("nir", "red", "band"):
            source = getattr(band, key)
            if source is not None and source.path is not None:
                band_doc[key]["path"] = file_identity(Path(source.path))
    for key in OPTIONAL_SECTIONS:
        if doc.get(key) is None:
            doc.pop(key, None)
    if cfg.focus is not None:
        doc["focus"]["path"] = file_identity(Path(cfg.focus.path))
        doc["focus"]["scenes"] = [file_identity(p) for p in scene_paths(cfg.focus.scenes)]
    if cfg.lineage is not None:
        doc["lineage"].pop("parent")
    return doc


def fingerprint(cfg: TilingConfig) -> str:
    """The identity of a tiling run: sha256 of the code that cuts the tiles (this module's import closure), the
    settings that decide the tiles' content (the config but :data:`IDENTITY_EXCLUDES`) and the identity of every
    input file in place of its path (scenes in priority order, polygons, regions, companion rasters).

    Paths do not enter it: the same run from another working directory, through an absolute ``--config`` or
    after moving the inputs together is the same run. A record or tile written under another identity is
    never resumed (:func:`prepare_output` sets it aside).
    """
    return resume_key(__name__, identity_settings(cfg))


# --------------------------------------------------------------------------------------------- the run


def _plan(
    cfg: TilingConfig, scenes: list[Scene], inventory: Inventory, focus: Focus | None
) -> tuple[list[GridCell], int]:
    """Candidate cells of every scene footprint (each once; a scene of ``focus.scenes`` gives only the cells
    touching an area of ``focus.path``, its own with ``scene_column``), and the polygons touching no scene footprint.

    Raises:
        TilingError: no polygon overlaps any scene.
    """
    import shapely

    seen: set[tuple[int, int]] = set()
    cells: list[GridCell] = []
    for s in scenes:
        only_near = focus is not None and focus.only_near(s.path)
        for c in grid_cells(s.bounds, cfg.grid.tile_size, cfg.grid.pixel_size):
            if only_near and focus is not None and not focus.touches(c, s.path):
                continue
            if (c.col, c.row) not in seen:
                seen.add((c.col, c.row))
                cells.append(c)
    cells.sort(key=lambda c: (-c.row, c.col))
    footprints = shapely.union_all([shapely.box(*s.bounds) for s in scenes])
    outside = sum(1 for g in inventory.geoms if not g.intersects(footprints))
    if outside == len(inventory.geoms):
        x0, y0, x1, y1 = footprints.bounds
        px0, py0, px1, py1 = shapely.union_all(inventory.geoms).bounds
        raise TilingError(
            f"{cfg.polygons.path}: none of its {outside} polygons overlaps the {len(scenes)} scene(s) (scenes cover "
            f"x {x0:.0f}..{x1:.0f}, y {y0:.0f}..{y1:.0f}, polygons x {px0:.0f}..{px1:.0f}, y {py0:.0f}..{py1:.0f} in "
            f"{cfg.grid.crs}); are they of the same area, and is the polygon file's CRS right?"
        )
    return cells, outside


def _place(cfg: TilingConfig, cells: list[GridCell], inventory: Inventory, region_of: RegionOf) -> list[Placed]:
    """The cells that lie in a region, each with its polygons and region (no pixel read).

    Raises:
        TilingError: a cell holding RTS whose centre lies in no region polygon.
    """
    placed = []
    for cell in cells:
        touching = inventory.touching(cell)
        region = region_of(cell, touching)
        if region is None:
            if touching:
                raise TilingError(
                    f"{cfg.regions.path}: tile {cell.tile_id} holds polygons {[inventory.uids[i] for i in touching]} "
                    "but its centre lies in no region polygon; extend the regions"
                )
            continue
        placed.append(Placed(cell, touching, region))
    return placed


def tile_scenes(cfg: TilingConfig, output: str | Path, *, overwrite: bool = False) -> TilingManifest:
    """`rts tile`: cut ``cfg.scenes`` and ``cfg.polygons`` into the tile layout under ``output`` (module docstring).

    Every input and setting is checked before a tile is written; a re-run of the same identity
    (:func:`fingerprint`) resumes (finished tiles kept), one of another identity sets the earlier run aside and
    starts fresh; ``tiling.json`` is written last. A re-run that finds every tile done rewrites nothing.

    Raises:
        TilingError: a scene without CRS or with unusable bands, a scene the grid upsamples beyond
            ``grid.max_resample_factor``, an empty polygon file, a polygon column that does not exist, no overlap
            between polygons and scenes, a plan that breaks the split rules, an output that is not ours.
        LabelPolygonError: a polygon file without CRS (not GeoJSON) or unreadable.
    """
    root = Path(output)
    datasets = Datasets()
    try:
        plan = _checked_plan(cfg, datasets)
        fp = fingerprint(cfg)
        prepare_output(root, fp, overwrite=overwrite)
        done = _tile_all(root, cfg, plan, datasets)
    finally:
        datasets.close()
    if not done.records:
        raise TilingError(
            f"no tile of {len(plan.cells)} grid cells has a valid pixel in the scenes {cfg.scenes}"
            + (f" ({done.sparse} have fewer than min_valid_fraction {cfg.min_valid_fraction:g})" if done.sparse else "")
        )
    _write_lists(root, cfg, done.records)
    warnings = plan.warnings + _derivation_warnings(cfg, done.records)
    manifest = _manifest(root, cfg, fp, plan, done, warnings)
    _write_manifest(root, manifest)
    return manifest


@dataclass(frozen=True)
class RunPlan:
    """A tiling run checked before its first tile: the scenes, the inventory, the candidate cells and those placed
    in a region (with the plan's estimates), the polygons outside every scene, what the checks warned of."""

    scenes: list[Scene]
    inventory: Inventory
    cells: list[GridCell]
    placed: list[Placed]
    outside: int
    warnings: list[str]
    ages: LabelAges
    focus: Focus | None = None  # config focus: its scenes give pixels only to the cells touching its areas


def _checked_plan(cfg: TilingConfig, datasets: Datasets) -> RunPlan:
    """Every input and setting checked, in this order, before a tile is written (tile_scenes' Raises): the scenes'
    headers, their native pixel against the grid's, the inventory (its values, the labels' ages) and regions, the
    focus (its areas file, its scenes among the scenes), the cells, the split rules."""
    scenes = check_scenes(cfg, datasets)
    warnings = check_resampling(cfg, scenes, datasets)
    for w in warnings:
        log.warning("rts tile: %s", w)
    inventory = read_inventory(cfg)
    outlines = scene_outlines(scenes, datasets, cfg.grid.crs)
    ages = check_label_ages(cfg, scenes, outlines, inventory, datasets)
    inventory = replace(inventory, stale=ages.stale)
    region_of = RegionOf(cfg, inventory)
    focus = read_focus(cfg)
    cells, outside = _plan(cfg, scenes, inventory, focus)
    placed = focus_estimates(_place(cfg, cells, inventory, region_of), inventory, outlines, scenes, focus)
    log.info(plan_line(len(cells), placed, cfg, len(scenes)))
    split = check_split_rules(cfg, TileProbe(cfg, scenes, datasets, placed, focus))
    for w in split.warnings:
        log.warning("rts tile: %s", w)
    warnings += ages.warnings + split.warnings
    return RunPlan(scenes, inventory, cells, placed, outside, warnings, ages, focus)


@dataclass
class TiledCells:
    """The records of the tiles written (or kept), the tiles kept from an earlier run, the cells without a valid
    pixel and those with fewer than min_valid_fraction."""

    records: list[TileRecord]
    resumed: int
    empty: int
    sparse: int = 0


def _tile_all(root: Path, cfg: TilingConfig, plan: RunPlan, datasets: Datasets) -> TiledCells:
    """Each placed cell rendered and written (:func:`_tile`) unless a complete record says it is done; its record
    written after its files."""
    done = TiledCells([], 0, 0)
    for k, p in enumerate(plan.placed):
        record = complete_record(root, p.cell.tile_id)
        if record is not None:
            done.resumed += record.status == "written"
        else:
            (root / MANIFEST_JSON).unlink(missing_ok=True)  # "done" again only once this run is done
            scenes = cell_scenes(plan.focus, p.cell, plan.scenes)
            ignore = plan.focus.ignored(p.cell) if plan.focus is not None else []
            record = _tile(root, p.cell, scenes, cfg, datasets, plan.inventory, p.touching, ignore, p.region)
            write_record(root, record)
        if record.status == "written":
            done.records.append(record)
        elif record.status == "sparse":
            done.sparse += 1
        else:
            done.empty += 1
        if (k + 1) % 100 == 0:
            log.info("rts tile: %d of %d grid cells done (%d tiles)", k + 1, len(plan.placed), len(done.records))
    return done


def _write_lists(root: Path, cfg: TilingConfig, records: list[TileRecord]) -> None:
    """metadata.csv from the records, and splits.yaml from the config (none without config splits)."""
    write_if_changed(root / METADATA_CSV, metadata_csv(r.metadata_row for r in records))
    if cfg.splits is not None:
        import yaml

        write_if_changed(root / SPLITS_YAML, yaml.safe_dump(cfg.splits, sort_keys=False))
    else:
        (root / SPLITS_YAML).unlink(missing_ok=True)  # one of an earlier run with splits: ingestion derives them


def _derivation_warnings(cfg: TilingConfig, records: list[TileRecord]) -> list[str]:
    """Without config splits, the derivation ingestion will run, on the tiles written: the plan's check passed on
    estimates (NoData inside a scene can leave fewer tiles and positives), so a failure here is a warning."""
    if cfg.splits is not None:
        return []
    rules = cfg.split_rules
    try:
        derive_splits(
            [r.metadata_row for r in records],
            min_test_positives=rules.min_test_positives,
            min_val_regions=rules.min_val_regions,
        )
    except SplitError as err:
        warning = f"the split ingestion derives (no splits in the config) fails on the tiles written: {err}"
        log.warning("rts tile: %s", warning)
        return [warning]
    return []


def _manifest(
    root: Path, cfg: TilingConfig, fp: str, plan: RunPlan, done: TiledCells, warnings: list[str]
) -> TilingManifest:
    """What the run tiled, how, and what came out."""
    records = done.records
    regions = Counter(r.metadata_row["RegionName"] for r in records)
    labelled = {u for r in records for u in r.labelled}
    n_pos = sum(r.metadata_row["TrainClass"] == "positive" for r in records)
    absolute = resolve_paths(cfg, Path.cwd())  # the manifest says the same whatever the working directory
    config = absolute.model_dump(mode="json")
    for key in OPTIONAL_SECTIONS:  # absent when not given: a config without them records what it did before
        if config.get(key) is None:
            config.pop(key, None)
    return TilingManifest(
        output=str(root.resolve()),
        config_fingerprint=fp,
        config=config,
        scenes=[str(s.path.resolve()) for s in plan.scenes],
        extra_bands=[e.name for e in cfg.extra],
        regions=dict(sorted(regions.items())),
        counts=TilingCounts(
            candidate_tiles=len(plan.cells),
            tiles=len(records),
            positive=n_pos,
            negative=len(records) - n_pos,
            skipped_no_valid_pixels=done.empty,
            skipped_sparse=done.sparse,
            estimated_tiles=sum(p.coverage >= cfg.min_valid_fraction for p in plan.placed),
            skipped_outside_regions=len(plan.cells) - len(plan.placed),
            polygons=len(plan.inventory.geoms),
            polygons_labelled=len(labelled),
            polygons_outside_scenes=plan.outside,
            negative_polygons=plan.inventory.negatives,
            tiles_with_negatives=sum(bool(r.metadata_row.get("NegativeUIDs")) for r in records),
            bounding_boxes=plan.inventory.bounding_boxes,
            stale_labels=len(plan.ages.stale),
            repaired_polygons=plan.inventory.repaired,
            undated_scenes=len(plan.ages.undated_scenes),
        ),
        resumed_tiles=done.resumed,
        warnings=warnings,
        lineage=absolute.lineage,
    )


def _write_manifest(root: Path, manifest: TilingManifest) -> None:
    """``tiling.json``, unless it already says the same of the same tiles (``resumed_tiles`` aside: it counts what
    this run kept, and a re-run that kept everything changed nothing)."""
    path = root / MANIFEST_JSON
    try:
        before = TilingManifest.model_validate_json(path.read_text())
    except (OSError, ValueError):
        before = None
    if before is not None and before.model_copy(update={"resumed_tiles": manifest.resumed_tiles}) == manifest:
        return
    atomic_write_json(path, manifest.model_dump(mode="json"))


def _tile(
    root: Path,
    cell: GridCell,
    scenes: list[Scene],
    cfg: TilingConfig,
    datasets: Datasets,
    inventory: Inventory,
    touching: list[int],
    ignore: list[Any],
    region: str,
) -> TileRecord:
    """Render and write one tile; its record (status written, empty: no valid pixel, or sparse: fewer than
    min_valid_fraction, not written). ``touching``: the inventory polygons touching the cell; ``ignore``: the focus's
    ignore areas in it."""
    px = render_pixels(cell, scenes, cfg, datasets)
    if px is None:
        return TileRecord(tile_id=cell.tile_id, status="empty", files={})
    if not kept(px, cfg):
        return TileRecord(tile_id=cell.tile_id, status="sparse", files={}, valid_fraction=float(px.valid.mean()))
    labels = tile_labels(cell, inventory, touching, px.valid, ignore)
    files = write_tile(root, cell, px, labels.label, cfg)
    lon, lat = tile_lonlat(cell, cfg.grid.crs)
    row = {
        "Tile_id": cell.tile_id,
        "centroid_lat": f"{lat:.6f}",
        "centroid_lon": f"{lon:.6f}",
        "TrainClass": "positive" if labels.uids else "negative",
        "RegionName": region,
        "UIDs": join_ids(labels.uids),
        "NegativeUIDs": join_ids(labels.negative_uids),
        "ObjectPixels": labels.object_pixels_text(),
    }
    return TileRecord(tile_id=cell.tile_id, status="written", files=files, row=row, uids=labels.uids)
