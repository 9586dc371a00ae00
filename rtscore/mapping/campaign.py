"""A mapping campaign run in process: drift gate, chunks of scenes through ``rts predict``'s code, the manifest-log,
then the campaign's objects, footprint index and summary (docs/mapping.md, "Running a campaign").

Per scene (:func:`run_chunk`): the scene is opened and checked against the package's raster contract; a scene
without one valid pixel (the contract's NoData rule, read block by block and stopped at the first valid pixel) is
``skipped-full-nodata`` without inference; every other one goes through :mod:`rtscore.inference.stream` (the engine
of ``rts predict``: same windows, numerics, COGs; the chunk's scenes share batches, and reading, inference and
writing overlap) into ``<output>/scenes/<scene_id>/``. Any failure of one scene is recorded as ``failed`` with its
reason and the chunk goes on. The GPU fan-out of chunks (``map-chunk`` flow runs) is not here: :func:`run_campaign`
runs the chunks in this process, one after the other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtscore.data.bands import CheckedRaster, open_checked
from rtscore.errors import PipelineError
from rtscore.inference.drift import drift_report
from rtscore.inference.predict import (
    DEFAULT_BATCH,
    EXTRA_SUFFIX,
    LoadedPackage,
    extra_input,
    load_package,
    window_model,
    write_manifest,
)
from rtscore.inference.stream import JobOutcome, RasterJob, gdal_env, run_stream
from rtscore.mapping.campaign_log import (
    CampaignError,
    CampaignLog,
    LogWriter,
    Scene,
    SceneRecord,
    chunk_scenes,
    latest,
    list_scenes,
    plan,
    summarize,
)
from rtscore.mapping.outputs import (
    SCENES_DIR,
    CampaignRoot,
    SceneOutputs,
    finish_scene,
    read_scene_parts,
    scene_outputs,
    staged_input,
)
from rtscore.mapping.polygons import merge_parts, size_bin_key, write_objects
from rtscore.package.format import SUMS
from rtscore.storage import atomic_write_json, atomic_write_text
from rtscore.storage.files import os_errors, sha256_file
from rtscore.storage.gcs import GS

DRIFT_DIR = "drift"  # <output>/drift/: the drift report of the campaign's sample
OBJECTS_FILE = "objects.gpkg"
INDEX_FILE = "index.geojson"
SUMMARY_MD = "summary.md"
SUMMARY_JSON = "summary.json"
DRIFT_SAMPLE = 8  # scenes the drift check reads
DEFAULT_CHUNK_SIZE = 50

_log = logging.getLogger(__name__)

__all__ = ["SCENES_DIR", "CampaignRoot", "SceneOutputs", "scene_outputs"]  # re-exported from outputs.py


def package_sha256(package_dir: str | Path) -> str:
    """The package's identity: the sha256 of its ``SHA256SUMS`` as ``rts package build`` writes it (one
    ``<sha256>  <file>`` line per other file, by name), recomputed from the files' content. A built, intact package
    gets the sha256 of its ``SHA256SUMS`` file; an edited file changes the identity even when ``SHA256SUMS`` was not
    regenerated, and a package without ``SHA256SUMS`` has one too."""
    pkg = Path(package_dir)
    if not pkg.is_dir():
        raise CampaignError(f"package directory not found: {pkg}")
    files = sorted(p for p in pkg.iterdir() if p.is_file() and p.name != SUMS and not p.name.startswith("."))
    text = "".join(f"{sha256_file(p)}  {p.name}\n" for p in files)
    return hashlib.sha256(text.encode()).hexdigest()


def has_valid_pixel(pkg: LoadedPackage, path: Path) -> bool:
    """Whether ``path`` has one valid pixel by the package's NoData rule (alpha, dataset mask, EXTRA nodata): read
    block by block and stopped at the first valid pixel (a scene with data: usually its first block). Checks the
    raster (and its EXTRA raster) against the package's contract first, as ``rts predict`` does."""
    with gdal_env(), open_checked(pkg.contract, pkg.binding, path, extra_input(pkg.binding, path, None)) as raster:
        for _, window in raster.src.block_windows(1):
            if raster.read(window)[2].any():
                return True
    return False


def _reason(scene: Scene, err: Exception) -> str:
    """A failed scene's reason: a PipelineError's message, else the exception's type and message; the scene's file
    is named when the message does not name it already."""
    text = str(err) if isinstance(err, PipelineError) else f"{type(err).__name__}: {err}"
    if err.__cause__ is not None and not isinstance(err, PipelineError):  # GDAL's own words (rasterio chains them)
        text += f" ({type(err.__cause__).__name__}: {err.__cause__})"
    if scene.uri in text or (not scene.uri.startswith(GS) and Path(scene.uri).name in text):
        return text
    return f"{scene.uri}: {text}"  # a gs:// scene's messages name its staged copy: name the object too


def run_chunk(
    package: str | Path | LoadedPackage,
    scenes: Sequence[Scene],
    output: str | Path | CampaignRoot,
    log: LogWriter,
    *,
    package_id: str | None = None,
    stride: int | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> list[SceneRecord]:
    """Map the scenes of one chunk that the log does not have as complete (:func:`~campaign_log.plan`) and append
    one record per scene to ``log``: ``done``, ``skipped-full-nodata`` or ``failed`` (a failing scene never stops the
    chunk). Returns the records appended.

    The scenes go through one window stream (:mod:`rtscore.inference.stream`): while one scene's windows are read
    (a gs:// scene first downloaded, :func:`~rtscore.mapping.outputs.staged_input`), the model runs on batches that
    hold the windows of the scene before it, and the one before that is written, vectorised and published
    (:func:`~rtscore.mapping.outputs.finish_scene`) before its record is appended. Every model call has one batch
    shape, so each scene's outputs are those of ``rts predict`` on it alone, bit for bit. A record's ``seconds`` is
    the chunk time since the previous record (the stages overlap, so the records' seconds add up to the chunk's wall
    time).
    """
    pkg = package if isinstance(package, LoadedPackage) else load_package(package)
    pid = package_id or package_sha256(pkg.path)
    root = output if isinstance(output, CampaignRoot) else CampaignRoot(output)
    model = window_model(pkg, stride=stride, batch_size=batch_size)
    todo = plan(scenes, log.log.read(), pid)
    records: list[SceneRecord] = []
    clock = [time.perf_counter()]

    def on_outcome(outcome: JobOutcome) -> None:
        scene: Scene = outcome.job.key
        now = time.perf_counter()
        seconds, clock[0] = now - clock[0], now
        try:
            if outcome.status == "failed":
                raise outcome.error or RuntimeError("failed without an error")
            if outcome.status == "nothing":
                record = SceneRecord.now(scene, pid, "skipped-full-nodata", seconds=seconds)
            else:
                assert outcome.result is not None
                outs = scene_outputs(root, scene)
                got = write_manifest(pkg, model, outcome.job, outcome.result, outs.manifest, scene.uri)
                finish_scene(root, scene, outs)  # all of the scene's files published before its record
                record = SceneRecord.now(
                    scene,
                    pid,
                    "done",
                    windows=got.windows - got.skipped_windows,
                    valid_pixels=got.valid_pixels,
                    positive_pixels=got.positive_pixels,
                    seconds=seconds,
                )
        except Exception as err:  # one scene's failure is its record, not the chunk's end
            reason = _reason(scene, err)
            _log.warning("scene %s failed: %s", scene.scene_id, reason)
            record = SceneRecord.now(scene, pid, "failed", reason=reason, seconds=seconds)
        log.append(record)  # the commit point; a log that cannot be written stops the chunk
        records.append(record)
        _log.info("scene %s: %s (%.1f s)", scene.scene_id, record.status, record.seconds)

    run_stream(model, [scene_job(pkg, root, s) for s in todo], on_outcome)
    return records


def scene_job(pkg: LoadedPackage, root: CampaignRoot, scene: Scene) -> RasterJob:
    """The stream job of one scene: opened in the read thread, where a scene without a valid pixel (block by block,
    stopped at the first valid one) is ``nothing`` to predict; otherwise checked against the package's contract as
    ``rts predict`` does, its maps written under ``<output>/scenes/<scene_id>/`` (staged locally for a gs:// root).
    A gs:// scene is downloaded for the time it is read (:func:`~rtscore.mapping.outputs.staged_input`)."""
    outs = scene_outputs(root, scene)

    def open_scene(stack: ExitStack) -> CheckedRaster | None:
        src = stack.enter_context(staged_input(scene, bool(pkg.binding.extra_bands), root.cache_dir))
        if not has_valid_pixel(pkg, src):
            return None
        outs.dir.mkdir(parents=True, exist_ok=True)
        extra = extra_input(pkg.binding, src, None)
        # has_valid_pixel checked the contract and scanned EXTRA for undeclared NaN/inf already
        return stack.enter_context(open_checked(pkg.contract, pkg.binding, src, extra, check_finite=False))

    return RasterJob(scene, open_scene, outs.prob, outs.mask)


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
) -> list[Path]:
    """Up to ``n`` scenes spread evenly over the (sorted) list that open under the package's contract, read whole
    without error and hold valid pixels, as local paths: gs:// scenes are staged as for mapping
    (:func:`~rtscore.mapping.outputs.staged_input`, pinned to their listed generation), the sampled ones kept until
    ``stack`` closes, the others removed at once. A scene that does not qualify (corrupt, wrong bands, full NoData,
    rewritten) is left to fail or be skipped on its own when mapped, not to block the campaign; the sample is read
    twice (here, then by the drift report), a small cost next to a campaign."""
    if not scenes:
        return []
    step = max(1, len(scenes) // n)
    order = list(scenes[::step]) + [s for i, s in enumerate(scenes) if i % step]
    extra = bool(pkg.binding.extra_bands)
    picked: list[Path] = []
    for s in order:
        if len(picked) == n:
            break
        with contextlib.ExitStack() as one:
            try:
                path = one.enter_context(staged_input(s, extra, cache_dir))
                if _readable_with_data(pkg, path):
                    picked.append(path)
                    stack.push(one.pop_all())  # kept staged until the drift report has read it
            except Exception as err:  # any unreadable scene just isn't sampled
                _log.info("drift sample: %s left out (%s)", s.uri, err)
    return picked


def _readable_with_data(pkg: LoadedPackage, path: Path) -> bool:
    """Whether every block of ``path`` reads under the package's contract, and one holds a valid pixel."""
    found = False
    with gdal_env(), open_checked(pkg.contract, pkg.binding, path, extra_input(pkg.binding, path, None)) as raster:
        for _, window in raster.src.block_windows(1):
            found |= bool(raster.read(window)[2].any())
    return found


def check_drift(
    pkg: LoadedPackage, scenes: Sequence[Scene], output: str | Path | CampaignRoot, *, allow_drift: bool
) -> dict[str, Any]:
    """``rts drift`` on a sample of the scenes (:func:`drift_sample`), report in ``<output>/drift/`` (published for
    a gs:// output); a blocker (or a sample on which drift cannot be measured) refuses the campaign unless
    ``allow_drift``."""
    root = output if isinstance(output, CampaignRoot) else CampaignRoot(output)
    where = root.local / DRIFT_DIR
    try:
        with contextlib.ExitStack() as stack:
            sample = drift_sample(pkg, scenes, stack, cache_dir=root.cache_dir)
            if not sample:
                raise CampaignError("no scene of the campaign opens under the package's raster contract")
            report = drift_report(pkg, sample, where)
        root.publish(sorted(p for p in where.rglob("*") if p.is_file()))
        where_text = root.uri_of(DRIFT_DIR)
    except PipelineError as err:
        if allow_drift:
            _log.warning("drift check could not run (%s); mapping anyway (--allow-drift)", err)
            return {"ok": None, "error": str(err)}
        raise CampaignError(f"drift check could not run on {len(sample)} sampled scene(s): {err}") from None
    if not report["ok"]:
        text = f"input drift on {', '.join(report['blockers'])} (report: {where_text})"
        if not allow_drift:
            raise CampaignError(f"campaign refused: {text}; map anyway with --allow-drift")
        _log.warning("%s; mapping anyway (--allow-drift)", text)
    return report


@dataclass
class CampaignPlan:
    """A prepared campaign (:func:`prepare_campaign`): its scenes, their chunks, the loaded package, the drift
    report. What a ``map-region`` flow decides before mapping, in process or by ``map-chunk`` runs."""

    package: LoadedPackage
    package_sha256: str
    scenes: list[Scene]
    chunks: list[list[Scene]]
    output: CampaignRoot
    drift: dict[str, Any] | None

    @property
    def log(self) -> CampaignLog:
        return self.output.log()


def prepare_campaign(
    package: str | Path,
    input: str | Path,
    output: str | Path,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    drift_check: bool = True,
    allow_drift: bool = False,
    *,
    device: str = "auto",
) -> CampaignPlan:
    """List the scenes (without the EXTRA rasters of other scenes), load the package (refused before anything is
    written when it fails the checks of ``rts package verify``), check drift on a sample (:func:`check_drift`) and
    split the scenes into chunks of ``chunk_size``."""
    scenes = drop_extra_siblings(list_scenes(input))
    pkg = load_package(package, device=device)
    out = CampaignRoot(output)
    with os_errors("create", out.local):
        out.local.mkdir(parents=True, exist_ok=True)
    pid = package_sha256(pkg.path)
    drift = check_drift(pkg, scenes, out, allow_drift=allow_drift) if drift_check else None
    return CampaignPlan(pkg, pid, scenes, chunk_scenes(scenes, chunk_size), out, drift)


def chunk_of(scenes: Sequence[Scene], scene_ids: Sequence[str], *, what: str) -> list[Scene]:
    """The scenes of ``scenes`` named by ``scene_ids``, in that order (a ``map-chunk`` run's scenes, re-listed on
    its worker). Raises CampaignError naming the ids the input does not list (a changed input since planning)."""
    by_id = {s.scene_id: s for s in scenes}
    missing = [i for i in scene_ids if i not in by_id]
    if missing:
        raise CampaignError(
            f"{what}: scene(s) {', '.join(missing)} not in the campaign input (changed since planning?)"
        )
    return [by_id[i] for i in scene_ids]


def finish_campaign(plan: CampaignPlan, wall_seconds: float = 0.0) -> dict[str, Any]:
    """The campaign's objects, footprint index and summary from the log (:func:`write_campaign_outputs`)."""
    return write_campaign_outputs(
        plan.scenes,
        plan.log,
        plan.output,
        plan.package_sha256,
        drift=plan.drift,
        wall_seconds=wall_seconds,
        threshold_source=plan.package.deployment.threshold_source,
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
) -> dict[str, Any]:
    """:func:`prepare_campaign`, the chunks in process (:func:`run_chunk`), then :func:`finish_campaign`; the
    summary (as ``summary.json``)."""
    plan = prepare_campaign(package, input, output, chunk_size, drift_check, allow_drift, device=device)
    log = plan.log
    started = time.perf_counter()
    for k, chunk in enumerate(plan.chunks):
        run_chunk(plan.package, chunk, plan.output, log.writer(k), package_id=plan.package_sha256, stride=stride)
    return finish_campaign(plan, time.perf_counter() - started)


def write_campaign_outputs(
    scenes: Sequence[Scene],
    log: CampaignLog,
    output: str | Path | CampaignRoot,
    pid: str,
    *,
    drift: dict[str, Any] | None = None,
    wall_seconds: float = 0.0,
    threshold_source: str | None = None,
) -> dict[str, Any]:
    """objects.gpkg (every done scene's objects, merged), index.geojson (one footprint per done scene) and
    summary.md / summary.json from the log and the done scenes' parts files (no raster is read; for a gs:// output
    the parts files are downloaded, the campaign files written locally and uploaded). ``threshold_source`` is the
    package's (recorded in the summary; a max-F1 fallback is called out in summary.md)."""
    from rasterio.warp import transform_geom
    from shapely.geometry import mapping

    out = output if isinstance(output, CampaignRoot) else CampaignRoot(output)
    records = log.read()
    summary = summarize(scenes, records, pid, threshold_source=threshold_source)
    last = latest(records)
    done = [s for s in scenes if (r := last.get(s.scene_id)) is not None and r.status == "done"]
    done = [s for s in done if last[s.scene_id].package_sha256 == pid and last[s.scene_id].input == s.identity]
    parts, features, ground_m2 = [], [], 0.0
    for s in done:
        o = scene_outputs(out, s)
        sp, pixel_m2 = read_scene_parts(out, s)
        parts.append(sp)
        ground_m2 += last[s.scene_id].valid_pixels * pixel_m2
        rel = {k: out.rel(getattr(o, k)) for k in ("prob", "mask", "manifest", "parts")}
        features.append(
            {
                "type": "Feature",
                "geometry": transform_geom(sp.crs, "EPSG:4326", mapping(sp.footprint)),
                "properties": {"scene_id": s.scene_id, "uri": s.uri, **rel},
            }
        )
    objects: list[Any] = []
    if parts:
        crs, objects = merge_parts(parts)
        out.publish([write_objects(out.path(OBJECTS_FILE), objects, crs)])
    else:
        out.delete(OBJECTS_FILE)  # no done scene: no objects layer (not a stale one)
    atomic_write_text(out.path(INDEX_FILE), json.dumps({"type": "FeatureCollection", "features": features}) + "\n")
    seconds = sum(last[s.scene_id].seconds for s in done)
    km2 = ground_m2 / 1e6
    data: dict[str, Any] = {
        **summary.model_dump(),
        "km2_mapped_ground": km2,
        "objects": len(objects),
        "objects_partial": sum(1 for ob in objects if ob.partial),
        "objects_by_size_bin_m2": dict(
            sorted(Counter(ob.size_bin or "other" for ob in objects).items(), key=lambda kv: size_bin_key(kv[0]))
        ),
        "windows_per_second": summary.windows / seconds if seconds > 0 else None,
        "km2_per_second": km2 / seconds if seconds > 0 else None,
        "wall_seconds_this_run": wall_seconds,
        "drift_ok": None if drift is None else drift.get("ok"),
        "log": log.uri(),
        "objects_file": OBJECTS_FILE if parts else None,
        "index_file": INDEX_FILE,
    }
    atomic_write_json(out.path(SUMMARY_JSON), data)
    atomic_write_text(out.path(SUMMARY_MD), render_summary(data))
    out.publish([out.path(INDEX_FILE), out.path(SUMMARY_JSON), out.path(SUMMARY_MD)])
    return data


def render_summary(data: dict[str, Any]) -> str:
    """summary.md: scenes by status (with the failures' reasons), area mapped, objects by size bin, throughput."""

    def rate(v: float | None, unit: str) -> str:
        return "n/a" if v is None or not math.isfinite(v) else f"{v:,.3f} {unit}"

    lines = [
        "# Mapping campaign summary",
        "",
        f"Package sha256 `{data['package_sha256']}`; {data['scenes']} scenes.",
        "",
        *(
            [
                f"**Threshold: max-F1 fallback** (`threshold_source: {data['threshold_source']}`): calibration could "
                "not reach its target precision; expect a lower precision than targeted.",
                "",
            ]
            if data.get("threshold_source") not in (None, "target_precision")
            else []
        ),
        "| status | scenes |",
        "|---|---|",
        f"| done | {data['done']} |",
        f"| skipped-full-nodata | {data['skipped_full_nodata']} |",
        f"| failed | {data['failed']} |",
        f"| pending | {data['pending']} |",
        "",
        f"Mapped {data['km2_mapped_ground']:,.3f} km² (ground, valid pixels of the done scenes); "
        f"{data['windows']:,} windows in {data['seconds']:,.1f} s of scene time: "
        f"{rate(data['windows_per_second'], 'windows/s')}, {rate(data['km2_per_second'], 'km²/s')}.",
        "",
        f"{data['objects']} RTS objects ({data['objects_partial']} partial).",
        "",
        "| size bin (ground m²) | objects |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in data["objects_by_size_bin_m2"].items()),
    ]
    if data["failures"]:
        lines += ["", "## Failed scenes", "", *(f"- `{k}`: {v}" for k, v in data["failures"].items())]
    lines += ["", f"Log: `{data['log']}`"]
    return "\n".join(lines) + "\n"
