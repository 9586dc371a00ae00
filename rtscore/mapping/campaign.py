"""A mapping campaign run in process: settings checked, package loaded, scenes listed with their identities, drift
gate, chunks of scenes through ``rts predict``'s code (:mod:`rtscore.mapping.chunk`), the manifest-log, then the
campaign's objects, footprint index and summary (docs/mapping.md, "Running a campaign").

A scene is mapped again unless its latest log record is complete for the same scene identity (raster and EXTRA
raster) and the same mapping identity (package, mapping code, settings); records of another identity stay in the
log and are counted in one warning line when the campaign is prepared. The GPU fan-out of chunks (``map-chunk``
flow runs) is not here: :func:`run_campaign` runs the chunks in this process, one after the other.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.pipeline import DEFAULT_MIN_OBJECT_AREA_M2
from rtscore.data.raster.bands import EXTRA_SUFFIX, MAP_FIXES, open_checked
from rtscore.errors import PipelineError
from rtscore.inference.drift import ChannelDrift, DriftReport, drift_report
from rtscore.inference.predict import (
    DEFAULT_BATCH,
    LoadedPackage,
    extra_input,
    load_package,
    warn_if_no_min_object_area,
)
from rtscore.inference.stream import gdal_env
from rtscore.mapping import DEFAULT_CHUNK_SIZE
from rtscore.mapping.area import AREA_CACHE, union_ground_m2
from rtscore.mapping.campaign_log import (
    CampaignLog,
    CampaignSummary,
    MapIdentity,
    SceneRecord,
    is_current,
    latest,
    other_identity,
    summarize,
)
from rtscore.mapping.chunk import (
    check_settings,
    has_valid_pixel,
    mapping_identity,
    package_sha256,
    run_chunk,
    scene_job,
)
from rtscore.mapping.fetch import FINISH_DIR, FetchedParts, fetch_scene_parts, merge_state_path
from rtscore.mapping.footprints import lonlat_cache_path, lonlat_footprint_texts
from rtscore.mapping.handover import todo_chunks
from rtscore.mapping.merge import merge_table
from rtscore.mapping.objects_layer import ObjectTable, write_object_table
from rtscore.mapping.outputs import (
    SCENES_DIR,
    CampaignRoot,
    SceneOutputs,
    scene_outputs,
    scene_rels,
    staged_input,
)
from rtscore.mapping.polygons import SceneParts, size_bin_key
from rtscore.mapping.scenes import CampaignError, Scene, chunk_scenes, list_scenes
from rtscore.metrics.objects import reaches_min_area
from rtscore.report import md_table
from rtscore.storage import atomic_write_json, atomic_write_text
from rtscore.storage.files import os_errors

DRIFT_DIR = "drift"  # <output>/drift/: the drift report of the campaign's sample
OBJECTS_FILE = "objects.gpkg"
INDEX_FILE = "index.geojson"
SUMMARY_MD = "summary.md"
SUMMARY_JSON = "summary.json"
DRIFT_SAMPLE = 8  # scenes the drift check reads

_log = logging.getLogger(__name__)

__all__ = [  # re-exported from outputs.py and chunk.py
    "SCENES_DIR",
    "CampaignRoot",
    "SceneOutputs",
    "has_valid_pixel",
    "mapping_identity",
    "package_sha256",
    "run_chunk",
    "scene_job",
    "scene_outputs",
]


def drop_extra_siblings(scenes: Sequence[Scene]) -> list[Scene]:
    """The scenes without the EXTRA rasters (``<id>_extra``) of other scenes of the list: those are read with their
    RGB scene (as ``rts predict`` reads them), never mapped on their own."""
    ids = {s.scene_id for s in scenes}
    return [s for s in scenes if not (s.scene_id.endswith(EXTRA_SUFFIX) and s.scene_id[: -len(EXTRA_SUFFIX)] in ids)]


def drift_sample(
    pkg: LoadedPackage,
    scenes: Sequence[Scene],
    stack: contextlib.ExitStack[bool | None],
    n: int = DRIFT_SAMPLE,
    *,
    cache_dir: Path | None = None,
) -> list[tuple[Scene, Path]]:
    """Up to ``n`` scenes spread evenly over the (sorted) list that open under the package's contract, read whole
    without error and hold valid pixels, each with its local path: gs:// scenes are staged as for mapping
    (:func:`~rtscore.mapping.outputs.staged_input`, pinned to their listed generation), the sampled ones kept until
    ``stack`` closes, the others removed at once. A scene that does not qualify (corrupt, wrong bands, full NoData,
    rewritten) is left to fail or be skipped on its own when mapped, not to block the campaign; the sample is read
    twice (here, then by the drift report), a small cost next to a campaign."""
    if not scenes:
        return []
    step = max(1, len(scenes) // n)
    order = list(scenes[::step]) + [s for i, s in enumerate(scenes) if i % step]
    extra = bool(pkg.binding.extra_bands)
    picked: list[tuple[Scene, Path]] = []
    for s in order:
        if len(picked) == n:
            break
        with contextlib.ExitStack() as one:
            try:
                path = one.enter_context(staged_input(s, extra, cache_dir))
                if _readable_with_data(pkg, path):
                    picked.append((s, path))
                    stack.push(one.pop_all())  # kept staged until the drift report has read it
            except Exception as err:  # any unreadable scene just isn't sampled
                _log.info("drift sample: %s left out (%s)", s.uri, err)
    return picked


def _readable_with_data(pkg: LoadedPackage, path: Path) -> bool:
    """Whether every block of ``path`` reads under the package's contract, and one holds a valid pixel."""
    found = False
    extra = extra_input(pkg.binding, path, None)
    with gdal_env(), open_checked(pkg.contract, pkg.binding, path, extra, fixes=MAP_FIXES) as raster:
        for _, window in raster.src.block_windows(1):
            found |= bool(raster.read(window)[2].any())
    return found


class DriftNotMeasured(BaseModel):
    """The drift check could not run on the campaign's sample and the campaign maps anyway (``allow_drift``)."""

    model_config = ConfigDict(extra="forbid")

    ok: None = Field(None, description="No verdict: drift was not measured.")
    error: str = Field(..., description="Why the check could not run.")


class CampaignResult(CampaignSummary):
    """``summary.json``: the log's summary of the scenes, the identity mapped under, what the done scenes gave
    (ground area, objects) and the throughput; summary.md renders it (:func:`render_summary`)."""

    mapping_identity: MapIdentity = Field(..., description="Package, mapping code and settings mapped under.")
    km2_mapped_ground: float = Field(
        ...,
        ge=0,
        description="Ground km² mapped: the union of the done scenes' valid pixels, where scenes overlap counted once "
        "(rtscore.mapping.area: their footprints united in an equal-area projection, within 0.01 %).",
    )
    km2_scenes_sum: float = Field(
        ...,
        ge=0,
        description="The done scenes' valid pixels' ground km² added up scene by scene: overlaps counted once per "
        "scene covering them (the area read and predicted; km2_per_second uses it).",
    )
    objects: int = Field(
        ..., ge=0, description="RTS objects of the done scenes, merged across scenes, at least min_object_area_m2."
    )
    objects_under_min_area: int = Field(
        ..., ge=0, description="Merged objects under min_object_area_m2: not written to the objects layer."
    )
    min_object_area_m2: float = Field(..., ge=0, description="The package's package.min_object_area_m2 (ground m²).")
    objects_partial: int = Field(..., ge=0, description="Objects cut by a scene's edge.")
    objects_by_size_bin_m2: dict[str, int] = Field(..., description="Objects by ground size bin (m²).")
    windows_per_second: float | None = Field(..., description="Windows per second of scene time (None: no time).")
    km2_per_second: float | None = Field(
        ..., description="km2_scenes_sum per second of scene time: the area read and predicted (None: no time)."
    )
    wall_seconds_this_run: float = Field(..., ge=0, description="Wall time of this run's mapping.")
    drift_ok: bool | None = Field(..., description="The drift verdict (None: not checked or not measured).")
    log: str = Field(..., description="The campaign's manifest-log.")
    objects_file: str | None = Field(..., description="objects.gpkg, relative to the output (None: no done scene).")
    index_file: str = Field(..., description="The footprint index, relative to the output.")


class _MappedPackage(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)

    package_sha256: str | None = None


class MappedWith(BaseModel):
    """What other modules check in a campaign's ``summary.json``: the package it was mapped with
    (``mapping_identity.package_sha256`` of :class:`CampaignResult`). Only that is read, the rest of the document
    ignored, so that a summary written by an older rtscore (or one holding just this field) still answers; a summary
    naming no package reads as None."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    mapping_identity: _MappedPackage | None = None

    @property
    def package_sha256(self) -> str | None:
        return None if self.mapping_identity is None else self.mapping_identity.package_sha256


def check_drift(
    pkg: LoadedPackage, scenes: Sequence[Scene], output: str | Path | CampaignRoot, *, allow_drift: bool
) -> DriftReport | DriftNotMeasured:
    """``rts drift`` on a sample of the scenes (:func:`drift_sample`), report in ``<output>/drift/`` (published for
    a gs:// output), its rasters named by scene id. The verdict is the sample's pooled one (a dataset-level report,
    guide §4.1); a blocker (or a sample on which drift cannot be measured) refuses the campaign unless
    ``allow_drift``, with a message naming the blocked channels (and whether they lie outside the training regions'
    range) and the sampled scenes whose own shift exceeds a limit on them (:func:`drift_block_text`)."""
    root = output if isinstance(output, CampaignRoot) else CampaignRoot(output)
    where = root.local / DRIFT_DIR
    sample: list[tuple[Scene, Path]] = []
    try:
        with contextlib.ExitStack() as stack:
            sample = drift_sample(pkg, scenes, stack, cache_dir=root.cache_dir)
            if not sample:
                raise CampaignError("no scene of the campaign opens under the package's raster contract")
            names = [s.scene_id for s, _ in sample]
            report = drift_report(pkg, [p for _, p in sample], where, names=names, fixes=MAP_FIXES)
        root.publish(sorted(p for p in where.rglob("*") if p.is_file()))
        where_text = root.uri_of(DRIFT_DIR)
    except PipelineError as err:
        if allow_drift:
            _log.warning("drift check could not run (%s); mapping anyway (--allow-drift)", err)
            return DriftNotMeasured(error=str(err))
        raise CampaignError(f"drift check could not run on {len(sample)} sampled scene(s): {err}") from None
    if not report.ok:
        text = f"{drift_block_text(report)} (report: {where_text})"
        if not allow_drift:
            raise CampaignError(f"campaign refused: {text}; map anyway with --allow-drift")
        _log.warning("%s; mapping anyway (--allow-drift)", text)
    return report


def drift_block_text(report: DriftReport) -> str:
    """One sentence on a blocked drift report of a campaign's sample: the blocked channels with their pooled shift
    and where it lies against the training regions' means, then the scenes that drive it (their own shift on the
    blocked channels) or, when none does alone, that the spread between scenes does."""
    blocked = [ch for ch in report.channels if ch.blocker]

    def where(ch: ChannelDrift) -> str:
        if ch.regions is None:
            return "training regions not recorded"
        inside = "inside" if ch.regions.mean_inside else "outside"
        return f"{inside} the training regions' means {ch.regions.mean_min:.3f} … {ch.regions.mean_max:.3f}"

    channels = "; ".join(
        f"{ch.channel} mean {ch.new_mean:.3f} vs {ch.train_mean:.3f} ({ch.mean_shift_sigma:+.2f} σ_train, std ratio "
        f"{ch.std_ratio:.2f}; {where(ch)})"
        for ch in blocked
    )
    n = len(report.per_file)
    text = f"input drift on {', '.join(report.blockers)} over the {n} sampled scene(s) pooled: {channels}"
    index = {ch.channel: c for c, ch in enumerate(report.channels)}
    drivers = [f for f in report.per_file if f.name in report.blocking_files]
    if not drivers:
        return f"{text}; no sampled scene exceeds a limit on its own (the spread between the scenes drives it)"
    named = ", ".join(
        f"{f.name} ("
        + ", ".join(
            f"{c} {f.mean_shift_sigma[index[c]]:+.2f} σ, std ratio {f.std_ratio[index[c]]:.2f}"
            for c in f.exceeds
            if c in report.blockers
        )
        + ")"
        for f in drivers
    )
    return f"{text}; scene(s) beyond a limit on their own: {named}"


@dataclass
class CampaignPlan:
    """A prepared campaign (:func:`prepare_campaign`): its scenes, their chunks, the loaded package, the identity it
    maps under, the drift report. What a ``map-region`` flow decides before mapping, in process or by ``map-chunk``
    runs."""

    package: LoadedPackage
    identity: MapIdentity
    scenes: list[Scene]
    chunks: list[list[Scene]]
    output: CampaignRoot
    drift: DriftReport | DriftNotMeasured | None
    records: list[SceneRecord] = field(default_factory=list)  # the log as read when planning, oldest first

    @property
    def package_sha256(self) -> str:
        return self.identity.package_sha256

    @property
    def log(self) -> CampaignLog:
        return self.output.log()


def check_parameters(*, chunk_size: int, stride: int | None = None, batch_size: int = DEFAULT_BATCH) -> None:
    """Refuse a campaign's parameters that cannot be right, before any package is loaded or output written.

    Raises:
        CampaignError: naming the parameter and its value.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise CampaignError(f"chunk size must be a whole number of scenes >= 1; got {chunk_size!r}")
    check_settings(stride=stride, batch_size=batch_size)


def prepare_campaign(
    package: str | Path,
    input: str | Path,
    output: str | Path,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    drift_check: bool = True,
    allow_drift: bool = False,
    *,
    device: str = "auto",
    stride: int | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> CampaignPlan:
    """Everything a campaign decides before mapping, each failure before anything is written into ``output``: the
    parameters (:func:`check_parameters`), the package loaded (refused when it fails the checks of
    ``rts package verify``) and the identity it maps under
    (:func:`~rtscore.mapping.chunk.mapping_identity`: the stride against its tile size), the scenes listed with
    their identities (their EXTRA rasters' too when the package reads EXTRA bands; without the EXTRA rasters of
    other scenes as scenes); then the output created, one warning line counting the log's records of another
    identity (their scenes are mapped again), drift checked on a sample (:func:`check_drift`) and the scenes split
    into chunks of ``chunk_size``."""
    check_parameters(chunk_size=chunk_size, stride=stride, batch_size=batch_size)
    pkg = load_package(package, device=device)
    warn_if_no_min_object_area(pkg)
    identity = mapping_identity(pkg, stride=stride, batch_size=batch_size)
    scenes = drop_extra_siblings(list_scenes(input, extra=bool(pkg.binding.extra_bands)))
    out = CampaignRoot(output)
    with os_errors("create", out.local):
        out.local.mkdir(parents=True, exist_ok=True)
    records = out.log().read()  # once per campaign run: every chunk is planned from it
    log_other_identity(scenes, out.log(), identity, records)
    drift = check_drift(pkg, scenes, out, allow_drift=allow_drift) if drift_check else None
    return CampaignPlan(pkg, identity, scenes, chunk_scenes(scenes, chunk_size), out, drift, records)


def log_other_identity(
    scenes: Sequence[Scene], log: CampaignLog, identity: MapIdentity, records: Sequence[SceneRecord] | None = None
) -> int:
    """One warning line when the latest records of some scenes were made from other content or under another
    identity (``campaign_log.other_identity``): how many, and what differs. The records stay in the log (history);
    nothing resumes from them, their scenes are mapped again. ``records``: the log as read already (default: read
    here). Returns how many."""
    why = other_identity(scenes, log.read() if records is None else records, identity)
    n = sum(why.values())
    if n:
        parts = ", ".join(f"{k}: {v}" for k, v in sorted(why.items()))
        _log.warning(
            "campaign log %s: %d record(s) of another identity set aside (%s): kept in the log, not resumed; "
            "those scenes are mapped again under %s",
            log.uri(),
            n,
            parts,
            identity.short(),
        )
    return n


def finish_campaign(plan: CampaignPlan, wall_seconds: float = 0.0) -> CampaignResult:
    """The campaign's objects, footprint index and summary from the log (:func:`write_campaign_outputs`)."""
    return write_campaign_outputs(
        plan.scenes,
        plan.log,
        plan.output,
        plan.identity,
        drift=plan.drift,
        wall_seconds=wall_seconds,
        threshold_source=plan.package.deployment.threshold_source,
        min_object_area_m2=plan.package.min_object_area_m2,
    )


def run_campaign(
    package: str | Path,
    input: str | Path,
    output: str | Path,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    drift_check: bool = True,
    allow_drift: bool = False,
    *,
    device: str = "auto",
    stride: int | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> CampaignResult:
    """:func:`prepare_campaign`, the chunks in process (:func:`run_chunk`), then :func:`finish_campaign`; the
    summary (as ``summary.json``)."""
    plan = prepare_campaign(
        package,
        input,
        output,
        chunk_size,
        drift_check,
        allow_drift,
        device=device,
        stride=stride,
        batch_size=batch_size,
    )
    started = time.perf_counter()
    run_chunks_here(plan)
    return finish_campaign(plan, time.perf_counter() - started)


def run_chunks_here(plan: CampaignPlan) -> None:
    """The campaign's chunks with scenes left (:func:`~rtscore.mapping.handover.todo_chunks`), in this process, one
    after the other, each into its own log file. The plan decided what is left from the log read once, so no chunk
    reads the log again."""
    log = plan.log
    for todo in todo_chunks(plan.chunks, plan.records, plan.identity):
        writer = log.writer(todo.index)
        run_chunk(plan.package, todo.scenes, plan.output, writer, identity=plan.identity, log_records=())


def write_campaign_outputs(
    scenes: Sequence[Scene],
    log: CampaignLog,
    output: str | Path | CampaignRoot,
    identity: MapIdentity,
    *,
    drift: DriftReport | DriftNotMeasured | None = None,
    wall_seconds: float = 0.0,
    threshold_source: str | None = None,
    min_object_area_m2: float = DEFAULT_MIN_OBJECT_AREA_M2,
) -> CampaignResult:
    """objects.gpkg (every done scene's objects, merged), index.geojson (one footprint per done scene) and
    summary.md / summary.json (the ground mapped: the union of the done scenes' footprints,
    :func:`~rtscore.mapping.area.union_ground_m2`, and their sum) from the log and the done scenes' parts files (no
    raster is read; for a gs:// output the parts files new or changed since the last finish are downloaded, the
    campaign files written locally and uploaded; the merge is redone only where scenes changed).
    Done scenes are those whose latest record is ``done`` for their current identity under
    ``identity``. ``threshold_source`` is the package's (recorded in the summary; a max-F1 fallback is called out in
    summary.md); ``min_object_area_m2`` the package's (objects under it are counted, not written:
    the size test of :func:`~rtscore.mapping.polygons.keep_min_area`)."""
    out = output if isinstance(output, CampaignRoot) else CampaignRoot(output)
    records = log.read()
    summary = summarize(scenes, records, identity, threshold_source=threshold_source)
    last = latest(records)
    done = [s for s in scenes if (r := last.get(s.scene_id)) is not None and r.status == "done"]
    done = [s for s in done if is_current(last[s.scene_id], s, identity)]
    fetched, features, ground_m2 = _done_scene_parts(out, done, last)
    _write_index(out, features)
    del features
    km2_union = union_ground_m2([f.parts for f in fetched], out.local / FINISH_DIR / AREA_CACHE) / 1e6
    # the parts go with the merge: a campaign of 10^5 quads holds ~10^6 of them, and the layer is written after
    objects, under_min_area = _write_objects_layer(out, _handed_over(fetched), min_object_area_m2)
    seconds = sum(last[s.scene_id].seconds for s in done)
    km2 = ground_m2 / 1e6  # scene by scene
    result = CampaignResult(
        **summary.model_dump(),
        mapping_identity=identity,
        km2_mapped_ground=km2_union,
        km2_scenes_sum=km2,
        objects=len(objects),
        objects_under_min_area=under_min_area,
        min_object_area_m2=min_object_area_m2,
        objects_partial=int(objects.partial.sum()),
        objects_by_size_bin_m2=dict(
            sorted(Counter(b or "other" for b in objects.size_bin_labels()).items(), key=lambda kv: size_bin_key(kv[0]))
        ),
        windows_per_second=summary.windows / seconds if seconds > 0 else None,
        km2_per_second=km2 / seconds if seconds > 0 else None,
        wall_seconds_this_run=wall_seconds,
        drift_ok=None if drift is None else drift.ok,
        log=log.uri(),
        objects_file=OBJECTS_FILE if done else None,
        index_file=INDEX_FILE,
    )
    atomic_write_json(out.path(SUMMARY_JSON), result.model_dump(mode="json"))
    atomic_write_text(out.path(SUMMARY_MD), render_summary(result))
    out.publish([out.path(INDEX_FILE), out.path(SUMMARY_JSON), out.path(SUMMARY_MD)])
    return result


def _write_index(out: CampaignRoot, features: list[str]) -> None:
    """index.geojson from its features' JSON texts: what ``json.dumps`` of the FeatureCollection writes, byte for
    byte, without parsing the 10^5 footprints again."""
    text = '{"type": "FeatureCollection", "features": [' + ", ".join(features) + "]}\n"
    atomic_write_text(out.path(INDEX_FILE), text)


def _done_scene_parts(
    out: CampaignRoot, done: Sequence[Scene], last: Mapping[str, SceneRecord]
) -> tuple[list[FetchedParts], list[str], float]:
    """Each done scene's parts file (fetched concurrently, downloaded for a gs:// output only when new or changed:
    :func:`~rtscore.mapping.fetch.fetch_scene_parts`), its footprint as a feature of index.geojson (EPSG:4326, with
    the scene's id, URI and output files relative to the campaign; the feature's JSON text, as ``json.dumps`` writes
    it) and its ground mapped (its valid pixels' area, summed over the scenes). Its own step: the one pass over the
    done scenes' files; everything the campaign's files hold is drawn from what it returns, no raster read."""
    fetched = fetch_scene_parts(out, done)
    if out.remote:
        n = sum(f.downloaded for f in fetched)
        _log.info("campaign finish: %d parts file(s) downloaded, %d taken from the mirror", n, len(fetched) - n)
    lonlat = lonlat_footprint_texts(fetched, lonlat_cache_path(out))
    features, ground_m2 = [], 0.0
    for f, geometry in zip(fetched, lonlat, strict=True):
        s = f.scene
        ground_m2 += last[s.scene_id].valid_pixels * f.pixel_m2
        props = json.dumps({"scene_id": s.scene_id, "uri": s.uri, **scene_rels(s)})
        features.append(f'{{"type": "Feature", "geometry": {geometry}, "properties": {props}}}')
    return fetched, features, ground_m2


def _handed_over(fetched: list[FetchedParts]) -> tuple[list[SceneParts], list[str]]:
    """The parts and parts-file sha256s of ``fetched``, which is emptied: the caller keeps no reference to them."""
    parts, shas = [f.parts for f in fetched], [f.sha256 for f in fetched]
    fetched.clear()
    return parts, shas


def _write_objects_layer(
    out: CampaignRoot, handed: tuple[list[SceneParts], list[str]], min_object_area_m2: float
) -> tuple[ObjectTable, int]:
    """objects.gpkg: the done scenes' parts merged into objects (one across a scene seam; redone only where scenes
    changed since the last finish, equal to a full merge: :func:`~rtscore.mapping.merge.merge_table`), those
    under the package's minimum area counted and left out, written and published; with no done scene the layer is
    deleted, not left stale. Its own step: the campaign's one objects layer and the rule of what it holds. Returns
    the objects written (as columns) and how many were under the minimum area. ``handed``: the scenes' parts and
    their files' sha256s, released once merged (the layer is written in batches from the columns: memory stays
    bounded)."""
    parts, shas = handed
    if not parts:
        out.delete(OBJECTS_FILE)  # no done scene: no objects layer (not a stale one)
        return ObjectTable.empty(), 0
    state = merge_state_path(out)
    crs, table, report = merge_table(parts, shas, state)
    parts.clear()
    _log.info("campaign finish: %s", report.text())
    ground = table.figures[:, 3]
    keep = np.fromiter((reaches_min_area(float(a), min_object_area_m2) for a in ground), np.bool_, len(ground))
    kept = table.take(keep)
    out.publish([write_object_table(out.path(OBJECTS_FILE), kept, crs)])
    return kept, len(table) - len(kept)


def render_summary(data: CampaignResult) -> str:
    """summary.md: scenes by status (with the failures' reasons), area mapped, objects by size bin, throughput."""

    def rate(v: float | None, unit: str) -> str:
        return "n/a" if v is None or not math.isfinite(v) else f"{v:,.3f} {unit}"

    ident = data.mapping_identity
    lines = [
        "# Mapping campaign summary",
        "",
        f"Package sha256 `{data.package_sha256}`; {data.scenes} scenes.",
        "",
        f"Mapping code `{ident.code_sha256[:12]}`, stride {ident.settings.stride} px, batch "
        f"{ident.settings.batch_size} (only records of this package, code and settings count).",
        "",
        *(
            [
                f"**Threshold: max-F1 fallback** (`threshold_source: {data.threshold_source}`): calibration could "
                "not reach its target precision; expect a lower precision than targeted.",
                "",
            ]
            if data.threshold_source not in (None, "target_precision")
            else []
        ),
        *md_table(
            ["status", "scenes"],
            [
                ("done", data.done),
                ("skipped-full-nodata", data.skipped_full_nodata),
                ("failed", data.failed),
                ("pending", data.pending),
            ],
        ),
        "",
        f"Mapped {data.km2_mapped_ground:,.3f} km² of ground (the union of the done scenes' valid pixels: where "
        f"scenes overlap, counted once); {data.km2_scenes_sum:,.3f} km² scene by scene (overlaps counted once per "
        f"scene). {data.windows:,} windows in {data.seconds:,.1f} s of scene time: "
        f"{rate(data.windows_per_second, 'windows/s')}, {rate(data.km2_per_second, 'km²/s')} (scene by scene).",
        "",
        f"{data.objects} RTS objects ({data.objects_partial} partial); {data.objects_under_min_area} under "
        f"{data.min_object_area_m2:,g} m² (the package's min_object_area_m2) left out.",
        "",
        *md_table(["size bin (ground m²)", "objects"], list(data.objects_by_size_bin_m2.items())),
    ]
    if data.failures:
        lines += ["", "## Failed scenes", "", *(f"- `{k}`: {v}" for k, v in data.failures.items())]
    lines += ["", f"Log: `{data.log}`"]
    return "\n".join(lines) + "\n"
