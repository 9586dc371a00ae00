"""``rts review export``'s library: a campaign's objects -> a review directory (docs/review.md, "The export").

:func:`export_review` checks everything it can before writing anything: the campaign has ``summary.json`` and
``objects.gpkg``; the package given is the one that mapped it (its identity, ``package_sha256``, equals the
summary's ``mapping_identity.package_sha256``); the selection has what its mode needs; every selected object's scene
is in ``index.geojson`` and (a local scene) opens under the package's raster contract; the output directory is empty
or holds this same review (else ``overwrite``).

It reads the objects layer's attribute columns, not its geometries (rtscore.review.objects_columns), places the
objects (with a tiling config: each chosen object's region and split as ingest places it, rtscore.review.regions;
for a stratified sample every object's region for its stratum, from centroids streamed a batch at a time),
selects on the columns (rtscore.review.select), and reads the geometries of the chosen objects only: at 10^6
objects a stratified selection of 100 adds ~190 MiB to the process, not the ~1.75 GiB of every object read whole
(bench/review_export_bench.py ``--select-only``). It writes the chips scene by scene (one scene open, or for a gs://
scene downloaded, at a time: memory does not grow with the campaign), each object's chip and overlay
(rtscore.review.chips) followed by its manifest line appended to a hidden work file ``.export-work.jsonl``. The
manifest (``manifest.jsonl``, in the selection's order) and ``review.json`` are written last, atomically. A re-run of
the same review (same review id) skips the objects whose chip and overlay exist with the sha256 the work file
recorded. Then the ``extras`` (the page, Label Studio) write into the review directory, and a gs:// output gets
every file published.

An object of several scenes is read from the scene whose footprint (index.geojson) holds most of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rtscore.config.base import load_config
from rtscore.config.binding import InputBinding, RasterContract
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.splits import region_splits
from rtscore.config.tiling import TilingConfig, load_tiling_config
from rtscore.data.raster.bands import MAP_FIXES, CheckedRaster, RasterContractError, open_checked
from rtscore.data.tiling.inventory import read_inventory
from rtscore.errors import PipelineError
from rtscore.identity.code import closure_hash
from rtscore.inference.predict import input_contract
from rtscore.inference.stream import gdal_env
from rtscore.mapping.campaign import INDEX_FILE, OBJECTS_FILE, SUMMARY_JSON, MappedWith
from rtscore.mapping.campaign_log import latest
from rtscore.mapping.chunk import package_sha256
from rtscore.mapping.outputs import CampaignRoot, staged_input
from rtscore.mapping.polygons import RtsObject
from rtscore.mapping.scenes import Scene
from rtscore.package.format import DEPLOYMENT, MODEL
from rtscore.package.verify import read_model_config
from rtscore.review.chips import (
    chip_outline,
    chip_window,
    overlay_svg,
    pixel_geometry,
    pixel_ground_m,
    png_bytes,
    read_chip,
    write_atomic,
)
from rtscore.review.manifest import (
    CHIPS_DIR,
    HEADER_FILE,
    LABEL_STUDIO_DIR,
    MANIFEST_FILE,
    PAGE_DATA_FILE,
    PAGE_FILE,
    CampaignRef,
    ChipSettings,
    ReviewError,
    ReviewHeader,
    ReviewObject,
    Selection,
    TilingRef,
    object_line,
    review_id,
)
from rtscore.review.objects_columns import ObjectColumns, centroids, read_columns, read_rows
from rtscore.review.regions import Place, RegionPlacer
from rtscore.review.scene_plan import SceneRef, plan_by_scene, read_index, read_json_object
from rtscore.review.select import select_rows
from rtscore.storage import atomic_write_text, sha256_file
from rtscore.storage.gcs import GS

_log = logging.getLogger(__name__)

WORK_FILE = ".export-work.jsonl"  # the chips written so far: {"review_id"} then one {"object", "svg_sha256"} a line
GS_PREFIX = GS

Extra = Callable[[Path], list[Path]]


def export_review(
    campaign: str,
    package: str,
    output: str,
    selection: Selection,
    chips: ChipSettings = ChipSettings(),  # noqa: B008 (a frozen pydantic model: safe as a default)
    tiling_config: str | None = None,
    *,
    extras: Sequence[Extra] = (),
    overwrite: bool = False,
    cache_dir: str | Path | None = None,
) -> ReviewHeader:
    """Export the review of ``campaign``'s objects chosen by ``selection`` into ``output`` (module docstring).

    Args:
        campaign: The campaign's output root (local or gs://), as ``rts map --output`` wrote it.
        package: The deployment package that mapped it (a local directory).
        output: The review directory (local or gs://; a gs:// one is written in the cache's mirror and published).
        selection: Which objects; ``uncertain`` and ``stratified`` without a threshold take the package's.
        chips: The chip window settings.
        tiling_config: The tiling config the training data was cut with: regions and splits of the objects.
        extras: Writers called with the local review directory once the manifest is written; they return the
            files they wrote (published with the rest for a gs:// output).
        overwrite: Export into a directory holding another review (its review files are removed first).
        cache_dir: The local cache for gs:// campaigns, scenes and outputs (default ``$RTS_CACHE_DIR``).

    Raises:
        ReviewError: a campaign without summary or objects, another package, a selection missing what its mode
            needs, a selected object whose scene is not in the index or cannot be read (object and scene named),
            an output directory holding something else.
    """
    croot = CampaignRoot(campaign, cache_dir=cache_dir)
    summary_path, objects_path = _fetch(croot, SUMMARY_JSON), _fetch(croot, OBJECTS_FILE)
    mapped_with = _mapped_package(summary_path)
    pkg = Path(package)
    this, contract = _package_that_mapped(pkg, mapped_with, croot)
    selection = _with_threshold(selection, pkg)
    layer = _read_columns(objects_path)
    crs = layer.crs
    ref = CampaignRef(
        uri=croot.uri, objects_sha256=sha256_file(objects_path), package_sha256=this, crs_wkt=crs.to_wkt()
    )
    tiling, cfg = _tiling(tiling_config)
    chosen, places = _choose(layer, selection, cfg)
    rid = review_id(ref, selection, [o.object_id for o in chosen])
    plan = plan_by_scene(chosen, crs, read_index(_fetch(croot, INDEX_FILE)))
    _precheck_local_scenes(plan, contract)
    oroot = CampaignRoot(output, cache_dir=cache_dir)
    done = _prepare_output(oroot.local, rid, overwrite)
    header = _header(rid, ref, selection, chips, tiling, len(chosen))
    run = _ChipRun(oroot.local, rid, contract, crs, chips, places, cache_dir)
    _write_chips(run, croot, plan, chosen, done)
    _finish(oroot, header, [o.object_id for o in chosen], extras)
    return header


def _package_that_mapped(pkg: Path, mapped_with: str, croot: CampaignRoot) -> tuple[str, RasterContract]:
    """The package's identity (``package_sha256``) and input raster contract, once it is the one that mapped.

    A review's chips and ids stand for what that package saw: another package (even a retrained one of the same
    name) is refused before any object, scene or output is touched, naming both sha256 prefixes.
    """
    try:
        this = package_sha256(pkg)
    except PipelineError as err:
        raise ReviewError(f"package {pkg}: {err}") from None
    if this != mapped_with:
        raise ReviewError(
            f"package {pkg} (sha256 {this[:12]}) did not map campaign {croot.uri}: its {SUMMARY_JSON} names package "
            f"sha256 {mapped_with[:12] or '(none)'}; export with the package that mapped it"
        )
    try:
        mc = read_model_config(pkg / MODEL)
    except PipelineError as err:
        raise ReviewError(f"package {pkg}: {err}") from None
    return this, input_contract(mc.contract, None)


def _choose(
    layer: ObjectColumns, selection: Selection, cfg: TilingConfig | None
) -> tuple[list[RtsObject], dict[int, Place]]:
    """The objects ``selection`` chooses (in review order) and the place of each under the tiling config (region,
    regions, split, the inventory polygons it overlaps); no place without a config.

    The choice reads the layer's columns; only the chosen objects are read whole. A stratified selection's strata
    take every object's region (the centroid's cell: centroids streamed a batch of geometries at a time); each
    chosen object is then placed by its outline as ingest places it (rtscore.review.regions), so a reviewer sees
    the split ingest puts it in.
    """
    placer = _placer(cfg, layer) if cfg is not None and len(layer) else None
    every = _every_region(layer, placer) if placer is not None and selection.mode == "stratified" else None
    rows = select_rows(layer.attrs, selection, every)
    try:
        chosen = read_rows(layer, rows)
    except PipelineError as err:
        raise ReviewError(str(err)) from None
    if placer is None:
        return chosen, {}
    return chosen, {o.object_id: placer.place(o.geometry) for o in chosen}


def _header(
    rid: str, ref: CampaignRef, selection: Selection, chips: ChipSettings, tiling: TilingRef | None, n: int
) -> ReviewHeader:
    """The review's ``review.json`` record: what was reviewed, how it was chosen and cut, and the exporting code.

    Built before any chip is written but written last (by :func:`_finish`), so a review directory with a header is a
    complete one.
    """
    return ReviewHeader(
        review_id=rid,
        campaign=ref,
        selection=selection,
        chips=chips,
        tiling=tiling,
        n_objects=n,
        code_sha256=closure_hash(__name__),
    )


@dataclass(frozen=True, eq=False)
class _ChipRun:
    """What every chip of one export is cut with: the local review directory, the review id, the raster contract,
    the campaign CRS, the chip settings, the objects' places (region, regions, split, the inventory polygons each
    overlaps; none without a tiling config) and the scene cache."""

    out: Path
    rid: str
    contract: RasterContract
    crs: Any
    chips: ChipSettings
    places: Mapping[int, Place]
    cache_dir: str | Path | None


def _write_chips(
    run: _ChipRun,
    croot: CampaignRoot,
    plan: Mapping[SceneRef, list[RtsObject]],
    chosen: Sequence[RtsObject],
    done: set[int],
) -> None:
    """Write the chips not ``done`` scene by scene, each chip's manifest line appended to the work file at once.

    One scene is open (or downloaded) at a time, so memory does not grow with the campaign; the work file, headed by
    the review id, is what lets a re-run of the same review skip the chips already written.
    """
    out, rid = run.out, run.rid
    (out / CHIPS_DIR).mkdir(parents=True, exist_ok=True)
    work = out / WORK_FILE
    gs_scenes = _gs_scenes(croot, plan)
    with work.open("a") as wf, gdal_env():
        if work.stat().st_size == 0:
            wf.write(json.dumps({"review_id": rid}) + "\n")
            wf.flush()
        kept = sum(1 for o in chosen if o.object_id in done)
        if kept:
            _log.info("review %s: %d of %d chips kept from an earlier export", rid[:12], kept, len(chosen))
        written_n = kept
        for scene, objs in plan.items():
            todo = [o for o in objs if o.object_id not in done]
            if not todo:
                continue
            with _open_scene(scene, gs_scenes.get(scene.scene_id), run.contract, todo, run.cache_dir) as raster:
                for o in todo:
                    line = _write_chip(raster, o, scene, run.crs, run.chips, run.places.get(o.object_id), out)
                    wf.write(line + "\n")
                    wf.flush()
            written_n += len(todo)
            _log.info("scene %s: %d chips (%d of %d)", scene.scene_id, len(todo), written_n, len(chosen))


def _finish(oroot: CampaignRoot, header: ReviewHeader, order: Sequence[int], extras: Sequence[Extra]) -> None:
    """Write the manifest (in the selection's ``order``) and ``review.json`` last, then the extras, and publish.

    Last because a manifest and header mark a finished export; the extras read them, and a gs:// output gets every
    file, the extras' included, in one publish.
    """
    out = oroot.local
    written = _write_manifest(out, out / WORK_FILE, order)
    atomic_write_text(out / HEADER_FILE, header.model_dump_json(indent=2) + "\n")
    files = [out / MANIFEST_FILE, out / HEADER_FILE, *written]
    for extra in extras:
        files += extra(out)
    oroot.publish(files)


# ------------------------------------------------------------------------------------------------ checks
def _fetch(root: CampaignRoot, rel: str) -> Path:
    try:
        path = root.fetch(rel)
    except PipelineError as err:
        raise ReviewError(f"campaign {root.uri}: {rel}: {err}") from None
    if path is None:
        raise ReviewError(
            f"campaign {root.uri} has no {rel}; is it the --output of `rts map`, and has a scene been mapped?"
        )
    return path


def _mapped_package(summary: Path) -> str:
    """The package a campaign's summary.json names ('' when none)."""
    try:
        package = MappedWith.model_validate(
            read_json_object(summary, "a campaign summary (a JSON object)")
        ).package_sha256
    except ValidationError as err:
        raise ReviewError(f"{summary}: not a campaign summary ({err.errors()[0]['msg']})") from None
    return package or ""


def _read_columns(path: Path) -> ObjectColumns:
    try:
        return read_columns(path)
    except PipelineError as err:
        raise ReviewError(str(err)) from None


def _with_threshold(selection: Selection, pkg: Path) -> Selection:
    """``uncertain`` and ``stratified`` without a threshold: the package's (deployment_config.yaml), recorded in the
    selection: the objects nearest it, or the probability bins between it and 1 (every mapped object's mean is at
    least the threshold its pixels passed, so bins from 0 would leave the lower ones empty)."""
    if selection.mode not in ("uncertain", "stratified") or selection.threshold is not None:
        return selection
    try:
        thr = load_config(DeploymentConfig, pkg / DEPLOYMENT).threshold
    except PipelineError as err:
        raise ReviewError(f"package {pkg}: {err}; give the selection's threshold") from None
    if thr is None:
        if selection.mode == "stratified":
            return selection  # bins between 0 and 1
        raise ReviewError(f"package {pkg}: {DEPLOYMENT} has no threshold; give the selection's threshold")
    return selection.model_copy(update={"threshold": thr})


def _tiling(path: str | None) -> tuple[TilingRef | None, TilingConfig | None]:
    if path is None:
        return None, None
    try:
        cfg = load_tiling_config(path)
    except (PipelineError, ValueError, OSError) as err:
        raise ReviewError(f"tiling config {path}: {err}") from None
    return TilingRef(path=str(path), sha256=sha256_file(Path(path)), splits=cfg.splits), cfg


def _placer(cfg: TilingConfig, layer: ObjectColumns) -> RegionPlacer:
    """The config's inventory and region rule, read once (refused as a tiling config error)."""
    try:
        inventory = read_inventory(cfg)
        return RegionPlacer(cfg, layer.crs, inventory, region_splits(cfg.splits) if cfg.splits else {})
    except PipelineError as err:
        raise ReviewError(f"tiling config: {err}") from None


def _every_region(layer: ObjectColumns, placer: RegionPlacer) -> list[str | None]:
    """Every row's region: the centroids of a batch of geometries at a time (memory bounded by the batch)."""
    out: list[str | None] = []
    try:
        for xs, ys in centroids(layer):
            out += placer.regions(xs.tolist(), ys.tolist())
    except PipelineError as err:
        raise ReviewError(str(err)) from None
    return out


def _precheck_local_scenes(plan: Mapping[SceneRef, list[RtsObject]], contract: RasterContract) -> None:
    """Open every local scene under the contract (metadata only) before anything is written."""
    binding = InputBinding.of_extra([])
    for scene, objs in plan.items():
        if scene.uri.startswith(GS_PREFIX):
            continue
        try:
            with open_checked(contract, binding, scene.uri, check_finite=False, fixes=MAP_FIXES):
                pass
        except (PipelineError, OSError) as err:
            raise _unreadable(scene, objs, err) from None


def _unreadable(scene: SceneRef, objs: Sequence[RtsObject], err: BaseException) -> ReviewError:
    ids = ", ".join(str(o.object_id) for o in objs[:10]) + (f" and {len(objs) - 10} more" if len(objs) > 10 else "")
    return ReviewError(f"object {ids}: scene {scene.scene_id} ({scene.uri}) cannot be read: {err}")


def _prepare_output(out: Path, rid: str, overwrite: bool) -> set[int]:
    """The objects already written by this review, after checking that ``out`` is
    empty or holds this review; ``overwrite`` clears another review's files first."""
    if not out.exists() or not any(out.iterdir()):
        return set()
    work = out / WORK_FILE
    theirs = _work_review_id(work) or _header_review_id(out / HEADER_FILE)
    if theirs == rid:
        return _done_chips(out, work)
    if not overwrite:
        what = f"another review (review id {theirs[:12]})" if theirs else "files that are not this review's"
        raise ReviewError(
            f"{out} holds {what}: export into an empty directory, or pass overwrite=True (--overwrite) to replace "
            "its review files"
        )
    for name in (WORK_FILE, MANIFEST_FILE, HEADER_FILE, PAGE_FILE, PAGE_DATA_FILE):
        (out / name).unlink(missing_ok=True)
    for name in (CHIPS_DIR, LABEL_STUDIO_DIR):
        shutil.rmtree(out / name, ignore_errors=True)
    return set()


def _work_review_id(work: Path) -> str | None:
    try:
        with work.open() as f:
            first = f.readline()
        return str(json.loads(first)["review_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _header_review_id(path: Path) -> str | None:
    try:
        return str(json.loads(path.read_text())["review_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _work_records(work: Path) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(byte offset, length, record) of each whole object line of the work file (a torn last line is skipped)."""
    with work.open("rb") as f:
        f.readline()  # {"review_id"}
        while True:
            pos = f.tell()
            raw = f.readline()
            if not raw:
                return
            try:
                rec = json.loads(raw)
                ReviewObject.model_validate(rec["object"])
            except (ValueError, KeyError, TypeError):
                continue
            yield pos, len(raw), rec


def _done_chips(out: Path, work: Path) -> set[int]:
    """The objects whose chip and overlay are on disk with the sha256 the work file recorded."""
    done: set[int] = set()
    if not work.is_file():
        return done
    for _, _, rec in _work_records(work):
        obj = rec["object"]
        png, svg = out / obj["chip"], out / obj["overlay"]
        ok = png.is_file() and svg.is_file() and sha256_file(png) == obj["chip_sha256"]
        if ok and sha256_file(svg) == rec.get("svg_sha256"):
            done.add(int(obj["object_id"]))
    return done


# ------------------------------------------------------------------------------------------------ scenes, chips
def _gs_scenes(croot: CampaignRoot, plan: Mapping[SceneRef, list[RtsObject]]) -> dict[str, Scene]:
    """The gs:// scenes of the plan as the campaign log's latest record of each saw them (downloads are pinned to
    the generation that was mapped)."""
    remote = [s for s in plan if s.uri.startswith(GS_PREFIX)]
    if not remote:
        return {}
    last = latest(croot.log().read())
    out = {}
    for s in remote:
        rec = last.get(s.scene_id)
        if rec is None:
            raise _unreadable(s, plan[s], ReviewError("no record of it in the campaign log"))
        out[s.scene_id] = Scene(s.scene_id, s.uri, rec.input)
    return out


@contextmanager
def _open_scene(
    scene: SceneRef,
    remote: Scene | None,
    contract: RasterContract,
    objs: Sequence[RtsObject],
    cache_dir: str | Path | None,
) -> Iterator[CheckedRaster]:
    binding = InputBinding.of_extra([])
    with ExitStack() as stack:
        try:
            path = Path(scene.uri) if remote is None else stack.enter_context(staged_input(remote, False, cache_dir))
            raster = stack.enter_context(open_checked(contract, binding, path, check_finite=False, fixes=MAP_FIXES))
        except (PipelineError, OSError) as err:
            raise _unreadable(scene, objs, err) from None
        yield raster


def _write_chip(
    raster: CheckedRaster,
    o: RtsObject,
    scene: SceneRef,
    crs: Any,
    settings: ChipSettings,
    place: Place | None,
    out: Path,
) -> str:
    """Write one object's chip and overlay; its work line (the manifest record and the overlay's sha256).
    ``place``: the object's region, split and inventory polygons (None: no tiling config)."""
    from rasterio.errors import RasterioError
    from rasterio.warp import transform_geom
    from shapely.geometry import mapping

    px = pixel_geometry(o.geometry, crs, raster.src.crs, raster.src.transform)
    window = chip_window(px, settings)
    try:
        rgba = read_chip(raster, window)
        ground_m = pixel_ground_m(raster, window)
    except (RasterioError, RasterContractError) as err:
        raise _unreadable(scene, [o], err) from None
    png = png_bytes(rgba)
    outline = chip_outline(px, window)
    svg = overlay_svg(o.object_id, window.size, outline, o.prob_mean, o.prob_max, o.ground_area_m2, ground_m)
    chip_rel, svg_rel = f"{CHIPS_DIR}/{o.object_id}.png", f"{CHIPS_DIR}/{o.object_id}.svg"
    write_atomic(out / chip_rel, png)
    write_atomic(out / svg_rel, svg.encode())
    obj = ReviewObject(
        object_id=o.object_id,
        scene_id=scene.scene_id,
        scene_uri=scene.uri,
        region=place.region if place else None,
        regions=place.regions if place else None,
        split=place.split if place else None,
        inventory_uids=place.inventory_uids if place else None,
        prob_mean=min(max(o.prob_mean, 0.0), 1.0),
        prob_max=min(max(o.prob_max, 0.0), 1.0),
        ground_area_m2=o.ground_area_m2,
        size_bin=o.size_bin or None,
        partial=o.partial,
        geometry=transform_geom(crs, "EPSG:4326", mapping(o.geometry)),
        geometry_wkt=o.geometry.wkt,
        chip=chip_rel,
        overlay=svg_rel,
        chip_window=window.as_tuple(),
        chip_outline=outline,
        pixel_ground_m=ground_m,
        chip_sha256=hashlib.sha256(png).hexdigest(),
    )
    return json.dumps(
        {"object": json.loads(object_line(obj)), "svg_sha256": hashlib.sha256(svg.encode()).hexdigest()},
        separators=(",", ":"),
    )


def _write_manifest(out: Path, work: Path, order: Sequence[int]) -> list[Path]:
    """manifest.jsonl from the work file, in ``order`` (the selection's), atomically; the chip files it names.
    Only the work file's offsets are held in memory."""
    where: dict[int, tuple[int, int]] = {}
    for pos, n, rec in _work_records(work):
        where[int(rec["object"]["object_id"])] = (pos, n)  # a re-written object: its latest line
    missing = [i for i in order if i not in where]
    if missing:
        raise ReviewError(f"{work}: no chip was recorded for object(s) {missing[:10]}; export again")
    final = out / MANIFEST_FILE
    tmp = out / f".{MANIFEST_FILE}.tmp"
    files: list[Path] = []
    with work.open("rb") as src, tmp.open("w") as dst:
        for i in order:
            pos, n = where[i]
            src.seek(pos)
            obj = json.loads(src.read(n))["object"]
            dst.write(json.dumps(obj, separators=(",", ":")) + "\n")
            files += [out / obj["chip"], out / obj["overlay"]]
    tmp.replace(final)
    return files
