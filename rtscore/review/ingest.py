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

import logging
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from rtscore.config.base import StrictModel
from rtscore.config.tiling import TilingConfig, load_tiling_config
from rtscore.data.splits.blocking import SPLIT_ORDER
from rtscore.data.tiling.rules import check_tiling_config
from rtscore.data.tiling.run import TilingCounts, TilingManifest, fingerprint, tile_scenes
from rtscore.data.tiling.state import FINGERPRINT, MANIFEST_JSON, STATE_DIR
from rtscore.report import md_table
from rtscore.review.left_out import left_out_areas
from rtscore.review.manifest import ReviewError
from rtscore.review.placement import (
    HeldOut,
    NewRegions,
    ObjectOutcome,
    Plan,
    check_footprints,
    check_tile_regions,
    place_objects,
)
from rtscore.review.review_inputs import ReviewInputs, read_review
from rtscore.review.round_files import (
    AREAS_FILE,
    INGEST_JSON,
    INVENTORY_FILE,
    PIPELINE_YAML,
    REVIEW_DIR,
    TILE_YAML,
    copy_verdicts,
    next_tiling_config,
    pipeline_doc,
    portable_tiling_config,
    same_tiles,
    write_areas,
    write_inventory,
)
from rtscore.storage import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)
DEFAULT_RUN_PARENT = "artifacts"  # where `rts run` puts a run directory by default: the next round's goes beside it


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
    ignored: int = Field(
        0,
        description="The campaign's objects in the cells cut that no label covers (unsure, held out, not judged): "
        "255 there (rtscore.review.left_out).",
    )


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
    unchanged: bool = Field(
        False,
        description="The new root's tiles are the parent's, byte for byte (no verdict changed a tile): the round "
        "adds nothing to train on.",
    )

    def summary_line(self) -> str:
        """What `rts review ingest` prints."""
        c, t = self.counts, self.tiling
        held = f", {c.left_out_held_out} in val/test regions left out" if c.left_out_held_out else ""
        train = f"; regions added to train: {c.new_train_regions}" if c.new_train_regions else ""
        ignored = f", {c.ignored} unlabelled object(s) in the cells cut ignored (255)" if c.ignored else ""
        return (
            f"wrote {self.output} (dataset version {self.version}, parent {self.parent}): {c.confirmed} confirmed RTS "
            f"added to the inventory, {c.false_positives} false positives cut as hard negatives, {c.unsure} unsure "
            f"left out{held}{ignored}{train}; {t.tiles} tiles ({t.positive} positive, {t.negative} negative)"
            + self.next_step()
        )

    def next_step(self) -> str:
        """The end of :meth:`summary_line`: the whole command that trains the next round, in a run directory of its
        own (the default, ``artifacts/<config file name>``, is ``artifacts/pipeline`` for every round), or, when the
        round adds nothing, that it does and no command."""
        if self.unchanged:
            return (
                "; the round adds nothing: its tiles are the parent's, byte for byte (no verdict changed a tile), so "
                "training on it would repeat the parent's run"
            )
        if self.pipeline_config is None:
            return ""
        run = shlex.quote(f"{DEFAULT_RUN_PARENT}/{self.version}")
        return f"; next: rts run --config {shlex.quote(self.pipeline_config)} --run {run}"

    def render_markdown(self) -> str:
        """The review-ingest flow's artifact: the new version, its lineage and what each split gained."""
        rows = [
            [split, n.get("confirmed", 0), n.get("false_positives", 0)]
            for split, n in sorted(self.counts.per_split.items())
        ]
        table = md_table(["split", "confirmed RTS", "hard negatives"], rows)
        return (
            f"# Dataset version {self.version}\n\n{self.summary_line()}\n\nReview {self.review_id[:12]} "
            f"({self.verdicts}, sha256 {self.verdicts_sha256[:12]}), campaign {self.campaign}.\n\n"
            + "\n".join(table if rows else [*table, ""])  # no split gained: the blank line it always had
            + "\n"
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
    tiles (the pipeline's ``splits.min_distance_m``; 0: they may touch, never overlap); no new tile overlaps a tile of
    another split either, val and test included.

    Raises:
        ReviewError: verdicts of another review or campaign, objects not in the manifest, a campaign mapped again
            or by another package, a tiling config without splits, an object in a val/test region (held_out
            refuse), in a region of no split (new_regions refuse) or outside every region, a scene on gs:// or
            missing, an output that is not new; each naming the file and the objects. Nothing is written.
        TilingError, ConfigError: the tiling or pipeline config unusable, or unlike on a split rule (nothing written).
    """
    src = read_review(review, verdicts, campaign)
    cfg_path = Path(tiling_config)
    cfg = _round_config(cfg_path, pipeline_config)
    parent = _parent(cfg, cfg_path)
    out = Path(output).expanduser().absolute()
    _check_output(out, parent.root)
    plan = place_objects(src, cfg, cfg_path, held_out=held_out, new_regions=new_regions)
    rnd = _Round(src, cfg, parent, plan)
    _check_and_complete(rnd, min_distance_m)
    pipeline = pipeline_doc(Path(pipeline_config), out) if pipeline_config is not None else None
    name = _version(parent, version)
    counts = _counts(plan, src.header.review_id)
    verdict_name, tile_yaml, manifest = _write_version(out, rnd, name, counts, pipeline)
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
        pipeline_config=str(tile_yaml.parent / PIPELINE_YAML) if pipeline is not None else None,
        held_out=held_out,
        new_regions=new_regions,
        counts=counts,
        objects=[p.outcome for p in plan.objects if p.outcome is not None],
        tiling=manifest.counts,
        unchanged=same_tiles(parent.root, out),
    )
    atomic_write_json(tile_yaml.parent / INGEST_JSON, result.model_dump(mode="json"))
    return result


def _round_config(path: Path, pipeline_config: str | None) -> TilingConfig:
    """The round's tiling config, whose split rules a pipeline config given with it must hold too (one set of rules
    in both files: :func:`~rtscore.data.tiling.rules.check_tiling_config`)."""
    cfg = load_tiling_config(path)
    if pipeline_config is not None:
        check_tiling_config(str(path), cfg.split_rules, pipeline_config)
    return cfg


@dataclass
class _Round:
    """What step 1 checked, nothing written yet: the review read, the round's tiling config, its parent root and
    where each judged object goes. Writing the version takes them together: every file it writes derives from them."""

    src: ReviewInputs
    cfg: TilingConfig
    parent: Parent
    plan: Plan


def _check_and_complete(rnd: _Round, min_distance_m: float) -> None:
    """The placed objects checked against the parent (regions, spatial blocking), then the campaign's unlabelled
    objects in the cells they cut (``plan.ignore_areas``, rtscore.review.left_out)."""
    plan = rnd.plan
    check_tile_regions(plan, rnd.cfg, rnd.parent.root)
    check_footprints(plan, rnd.cfg, rnd.parent.root, rnd.src.verdicts_path, min_distance_m)
    plan.ignore_areas = left_out_areas(plan, rnd.src, rnd.cfg)


def _write_version(
    out: Path, rnd: _Round, name: str, counts: IngestCounts, pipeline: str | None
) -> tuple[str, Path, TilingManifest]:
    """Step 2, all or nothing: the next round's inputs under ``<out>/review/`` (the verdict file copied, the
    inventory, the areas, ``tile.yaml`` with the version's lineage, ``pipeline.yaml``), then ``rts tile`` cutting
    ``out`` from them. Its own step because a failure anywhere in it is undone as a whole (:func:`_undo`): a refused
    ingest leaves no half-written root, one that stopped while tiling resumes. Returns the copied verdict file's name,
    ``tile.yaml`` and what tiling made."""
    created = not out.exists()
    review_dir = out / REVIEW_DIR
    src, cfg, plan = rnd.src, rnd.cfg, rnd.plan
    try:
        review_dir.mkdir(parents=True, exist_ok=True)
        verdict_name = copy_verdicts(src.verdicts_path, review_dir)
        write_inventory(review_dir / INVENTORY_FILE, plan, cfg, src.header.review_id)
        write_areas(review_dir / AREAS_FILE, plan, cfg.grid.crs, src.header.review_id)
        lineage = {
            "version": name,
            "parent": str(rnd.parent.root),
            "parent_fingerprint": rnd.parent.fingerprint,
            "review": {
                "review_id": src.header.review_id,
                "verdicts": verdict_name,
                "verdicts_sha256": src.verdicts_sha256,
            },
            "counts": {k: v for k, v in counts.model_dump().items() if isinstance(v, int)},
        }
        tile_yaml = review_dir / TILE_YAML
        atomic_write_text(tile_yaml, portable_tiling_config(next_tiling_config(cfg, plan, lineage), review_dir))
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
    return verdict_name, tile_yaml, manifest


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


def _counts(plan: Plan, rid: str) -> IngestCounts:
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
        ignored=sum(props.get("review_id") == rid for props, _ in plan.ignore_areas),
    )


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
