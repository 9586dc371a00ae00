"""One chunk of a mapping campaign, scene by scene through ``rts predict``'s code into the manifest-log; and the
identity a chunk maps under (docs/mapping.md, "Inside a chunk" and "When a scene is mapped again").

Per scene (:func:`run_chunk`): the scene is opened and checked against the package's raster contract; a scene
without one valid pixel (the contract's NoData rule, read block by block and stopped at the first valid pixel) is
``skipped-full-nodata`` without inference; every other one goes through :mod:`rtscore.inference.stream` (the engine
of ``rts predict``: same windows, numerics, COGs; the chunk's scenes share batches, and reading, inference and
writing overlap) into ``<output>/scenes/<scene_id>/``. Any failure of one scene is recorded as ``failed`` with its
reason and the chunk goes on.

This module's import closure is the mapping's code identity (:func:`mapping_identity`): the window stream, the
fusion and COG writing, the deployment numerics, the raster contract, the parts files and the log records. An edit
anywhere in it makes every record of the log one of another identity; the campaign-level code (drift gate, objects,
summary: :mod:`rtscore.mapping.campaign`) is outside it on purpose, since it does not change a scene's outputs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path

from rtscore.data.raster.bands import MAP_FIXES, CheckedRaster, open_checked
from rtscore.errors import PipelineError
from rtscore.identity import closure_hash
from rtscore.inference.predict import (
    DEFAULT_BATCH,
    LoadedPackage,
    check_size,
    extra_input,
    load_package,
    window_model,
    write_manifest,
)
from rtscore.inference.stream import JobOutcome, RasterJob, WindowModel, gdal_env, run_stream
from rtscore.mapping.campaign_log import LogWriter, MapIdentity, MapSettings, SceneRecord, plan
from rtscore.mapping.outputs import CampaignRoot, finish_scene, scene_outputs, staged_input
from rtscore.mapping.scenes import CampaignError, Scene
from rtscore.package.format import package_sha256 as package_identity
from rtscore.storage.gcs import GS

CODE_MODULE = __name__  # the module whose import closure is the mapping's code identity

_log = logging.getLogger(__name__)


def package_sha256(package_dir: str | Path) -> str:
    """The package's identity (:func:`rtscore.package.format.package_sha256`, which owns it), for a directory that
    must exist.

    Raises:
        CampaignError: ``package_dir`` is not a directory.
    """
    pkg = Path(package_dir)
    if not pkg.is_dir():
        raise CampaignError(f"package directory not found: {pkg}")
    return package_identity(pkg)


def check_settings(*, stride: int | None = None, batch_size: int = DEFAULT_BATCH) -> None:
    """Refuse settings that cannot be right for any package (before one is loaded).

    Raises:
        CampaignError: naming the setting and its value.
    """
    if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int) or stride < 1):
        raise CampaignError(f"stride must be a whole number of pixels >= 1 (or unset: half a tile); got {stride!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise CampaignError(f"batch size must be a whole number >= 1; got {batch_size!r}")


def mapping_identity(
    pkg: LoadedPackage, *, stride: int | None = None, batch_size: int = DEFAULT_BATCH, package_id: str | None = None
) -> MapIdentity:
    """What this process maps ``pkg``'s scenes under: the package's sha256 (``package_id`` when already computed),
    the code identity of the mapping (:func:`rtscore.identity.closure_hash` of this module) and the settings that
    change the outputs (the resolved stride; the batch size, since outputs are the same bits at one batch shape
    only). The device is not part of it (docs/mapping.md).

    Raises:
        CampaignError: a stride or batch size that cannot be right.
        PredictError: a stride outside [1, tile size], an uncalibrated package.
    """
    check_settings(stride=stride, batch_size=batch_size)
    model = window_model(pkg, stride=stride, batch_size=batch_size)  # the stride against the tile size
    return MapIdentity(
        package_sha256=package_id or package_sha256(pkg.path),
        code_sha256=closure_hash(CODE_MODULE),
        settings=MapSettings(stride=model.stride, batch_size=batch_size),
    )


def has_valid_pixel(pkg: LoadedPackage, path: Path) -> bool:
    """Whether ``path`` has one valid pixel by the package's NoData rule (alpha, mask, RGB nodata, EXTRA nodata): read
    block by block and stopped at the first valid pixel (a scene with data: usually its first block). Checks the
    raster (and its EXTRA raster) against the package's contract first, as ``rts predict`` does."""
    extra = extra_input(pkg.binding, path, None)
    with gdal_env(), open_checked(pkg.contract, pkg.binding, path, extra, fixes=MAP_FIXES) as raster:
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
    identity: MapIdentity | None = None,
    log_records: Iterable[SceneRecord] | None = None,
) -> list[SceneRecord]:
    """Map the scenes of one chunk that the log does not have as complete under ``identity``
    (:func:`~campaign_log.plan`; default: :func:`mapping_identity` of the package with the default settings) and
    append one record per scene to ``log``: ``done``, ``skipped-full-nodata`` or ``failed`` (a failing scene never
    stops the chunk). The settings of ``identity`` are the ones mapped with. Returns the records appended.

    ``log_records`` are the log records to plan from (oldest first): a campaign in process passes none (its plan,
    made from the log read once, handed over only the scenes left), a ``map-chunk`` run the records of its own
    chunk's files newer than the plan (:func:`~rtscore.mapping.handover.run_planned_chunk`); default: the whole log,
    read here.

    The scenes go through one window stream (:mod:`rtscore.inference.stream`): while one scene's windows are read
    (a gs:// scene first downloaded, :func:`~rtscore.mapping.outputs.staged_input`), the model runs on batches that
    hold the windows of the scene before it, and the one before that is written, vectorised and published
    (:func:`~rtscore.mapping.outputs.finish_scene`) before its record is appended. Every model call has one batch
    shape, so each scene's outputs are those of ``rts predict`` on it alone, bit for bit. A record's ``seconds`` is
    the chunk time since the previous record (the stages overlap, so the records' seconds add up to the chunk's wall
    time).

    Raises:
        CampaignError: the package reads EXTRA bands and a scene was listed without its EXTRA raster.
    """
    pkg = package if isinstance(package, LoadedPackage) else load_package(package)
    ident = identity or mapping_identity(pkg)
    _check_extra_listed(pkg, scenes)
    root = output if isinstance(output, CampaignRoot) else CampaignRoot(output)
    model = window_model(pkg, stride=ident.settings.stride, batch_size=ident.settings.batch_size)
    todo = plan(scenes, log.log.read() if log_records is None else log_records, ident)
    records: list[SceneRecord] = []
    clock = [time.perf_counter()]

    def on_outcome(outcome: JobOutcome) -> None:
        scene: Scene = outcome.job.key
        now = time.perf_counter()
        seconds, clock[0] = now - clock[0], now
        try:
            record = _finished_record(pkg, model, root, ident, outcome, seconds)
        except Exception as err:  # one scene's failure is its record, not the chunk's end
            reason = _reason(scene, err)
            _log.warning("scene %s failed: %s", scene.scene_id, reason)
            record = SceneRecord.now(scene, ident, "failed", reason=reason, seconds=seconds)
        if record.status != "done":
            clear_scene_outputs(root, scene)
        log.append(record)  # the commit point; a log that cannot be written stops the chunk
        records.append(record)
        _log.info("scene %s: %s (%.1f s)", scene.scene_id, record.status, record.seconds)

    run_stream(model, [scene_job(pkg, root, s) for s in todo], on_outcome)
    return records


def clear_scene_outputs(root: CampaignRoot, scene: Scene) -> None:
    """Remove the scene's outputs under their final names (the local files and, for gs://, the objects) after an
    attempt that did not map it: ``failed``, or ``skipped-full-nodata`` under this package's NoData rule. Files left
    by an earlier mapping of the scene (another package, other content, the files of this attempt before it failed)
    would otherwise lie under the campaign's names beside a record that does not cover them. A file that cannot be
    removed is a warning naming it; the scene's record is still appended."""
    outs = scene_outputs(root, scene)
    try:
        for path in outs.files():
            path.unlink(missing_ok=True)
        if root.remote:
            root.store().delete([root.rel(p) for p in outs.files()])
        with contextlib.suppress(OSError):  # an empty scene directory goes too; one holding anything else stays
            outs.dir.rmdir()
    except (OSError, PipelineError) as err:
        _log.warning("scene %s: its earlier outputs under %s could not be removed: %s", scene.scene_id, outs.dir, err)


def _check_extra_listed(pkg: LoadedPackage, scenes: Sequence[Scene]) -> None:
    """Refuse, before anything is mapped, scenes listed without the EXTRA raster that the package reads: their
    identity in the log would not cover the EXTRA input their outputs depend on.

    Raises:
        CampaignError: naming the scenes.
    """
    if pkg.binding.extra_bands:
        unlisted = [s.scene_id for s in scenes if s.extra is None]
        if unlisted:
            raise CampaignError(
                f"scene(s) {', '.join(unlisted)} listed without their EXTRA raster, which the package reads: list "
                "them with list_scenes(..., extra=True) so that their identity covers it"
            )


def _finished_record(
    pkg: LoadedPackage,
    model: WindowModel,
    root: CampaignRoot,
    ident: MapIdentity,
    outcome: JobOutcome,
    seconds: float,
) -> SceneRecord:
    """The record of one scene the stream has finished: ``skipped-full-nodata`` for a scene without a valid pixel;
    otherwise its manifest written and all of its files published (:func:`~rtscore.mapping.outputs.finish_scene`)
    before its ``done`` record is made, so that a record never names files that are not there. A failed outcome is
    raised (its error), for the caller to record as ``failed`` like any other failure of the scene."""
    scene: Scene = outcome.job.key
    if outcome.status == "failed":
        raise outcome.error or RuntimeError("failed without an error")
    if outcome.status == "nothing":
        return SceneRecord.now(scene, ident, "skipped-full-nodata", seconds=seconds)
    assert outcome.result is not None
    outs = scene_outputs(root, scene)
    got = write_manifest(pkg, model, outcome.job, outcome.result, outs.manifest, scene.uri)
    finish_scene(root, scene, outs)  # all of the scene's files published before its record
    return SceneRecord.now(
        scene,
        ident,
        "done",
        windows=got.windows - got.skipped_windows,
        valid_pixels=got.valid_pixels,
        positive_pixels=got.positive_pixels,
        seconds=seconds,
    )


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
        raster = stack.enter_context(
            open_checked(pkg.contract, pkg.binding, src, extra, check_finite=False, fixes=MAP_FIXES)
        )
        check_size(raster, pkg.tile_size)
        return raster

    return RasterJob(scene, open_scene, outs.prob, outs.mask)
