"""Windows of many rasters through one model, with reading, inference and writing overlapped: the engine of
``rts predict`` (one raster or many) and of a mapping campaign's chunk (docs/mapping.md, "Inside a chunk").

Three stages, each in its own thread, joined by bounded queues (memory is bounded by the queues, a batch, and
one rolling fusion band per raster being written, never by a raster's area):

* **read** (a thread): the rasters in order; each is opened (the job's ``open``: contract check, staging), cut into
  windows, and every window read on its own, prepared (the package's input transform; its 0.5x context when the
  scales need it) and queued. A window that is NoData throughout is queued as skipped (guide §4.4: never run).
* **infer** (the calling thread): windows of consecutive rasters fill the same batches, so a raster's last
  windows share a batch with the next raster's first ones. Every model call gets exactly ``batch_size`` windows
  (the last batch padded with zeros): on the CPU the kernels pick their algorithm by batch shape, and with one
  shape a window's probabilities do not depend on which windows share its batch, so a raster maps to the same
  bits alone (``rts predict``) or in a chunk beside other rasters, after a retry or in another order.
* **write** (a thread): each raster's windows, in row-major order, go through the overlap fusion
  (:class:`OverlapFusion`) into its probability and mask COGs (:func:`write_maps`); the job's outcome is then
  handed to ``on_outcome`` (in this thread, in job order: writing a manifest, vectorising, uploading, a log record
  overlap with the next rasters' inference).

A raster that fails (unreadable, refused by its contract, a corrupt block, a failed write) is that job's outcome,
its partial files removed; the stream goes on. An error of the model, or raised by ``on_outcome``, stops the
stream: both threads end, every partial file is removed, and the error is raised to the caller.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rtscore.data.raster.bands import CheckedRaster
from rtscore.inference.context import ContextWindows

OUT_BLOCK = 256  # block size of the output GeoTIFFs, and the rows the fusion hands out at a time
PROB_NODATA = -1.0
MASK_NODATA = 255
GDAL_CACHE_MB = 128  # GDAL's block cache while predict and drift read and write
QUEUE_BATCHES = 2  # windows queued between the stages, in batches

log = logging.getLogger(__name__)


def gdal_env() -> Any:
    """GDAL settings of predict and drift: a block cache of :data:`GDAL_CACHE_MB` MB, so that memory does not
    grow with the raster (GDAL's default is 5 % of the machine's RAM)."""
    import rasterio

    return rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_MB)


# ----------------------------------------------------------------------------------------------- fusion, COGs
def window_weights(tile: int) -> np.ndarray:
    """(tile, tile) fusion weights: separable tent, highest at the centre, positive at the border."""
    idx = np.arange(tile, dtype=np.float64)
    ramp = np.minimum(idx + 0.5, tile - idx - 0.5) / (tile / 2.0)
    return np.outer(ramp, ramp)


class OverlapFusion:
    """Weighted overlap fusion of window probabilities over a rolling band of rows, so that memory is bounded by
    ``(block + tile) x width``, never by the raster's height.

    Windows arrive in row-major order. Before a window at row ``y`` is added, every row above ``y`` is final (no
    later window reaches it): :meth:`finished` hands those rows out in whole blocks of ``block`` rows (the output
    GeoTIFF's block height, so each block of it is written once) and moves the band down. Sums run in float64 in
    the windows' order, so each pixel's value is the one a whole-raster accumulator gives, bit for bit.
    """

    def __init__(self, height: int, width: int, tile: int, block: int) -> None:
        self.height, self.tile, self.block = height, tile, block
        rows = block + tile
        self.acc = np.zeros((rows, width), np.float64)
        self.norm = np.zeros((rows, width), np.float64)
        self.valid = np.zeros((rows, width), bool)
        self.top = 0  # raster row of the band's first row
        self.weight = window_weights(tile)

    def add(self, y: int, x: int, prob: np.ndarray, valid: np.ndarray) -> None:
        """Add a window's (tile, tile) probabilities and valid mask at raster offset (``y``, ``x``)."""
        r = y - self.top
        if r < 0 or r + self.tile > self.acc.shape[0]:  # a caller that skipped :meth:`finished`: a bug
            raise ValueError(f"window at row {y} outside the band of rows {self.top}..{self.top + len(self.acc)}")
        rows, cols = slice(r, r + self.tile), slice(x, x + self.tile)
        self.acc[rows, cols] += self.weight * prob
        self.norm[rows, cols] += self.weight
        self.valid[rows, cols] = valid

    def finished(self, y: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """The whole blocks of rows above row ``y`` as (first row, (n, W) float32 probabilities, valid mask)."""
        while y - self.top >= self.block:
            yield self._emit(self.block)

    def rest(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """The rows not handed out yet (after the last window)."""
        if self.top < self.height:
            yield self._emit(self.height - self.top)

    def _emit(self, n: int) -> tuple[int, np.ndarray, np.ndarray]:
        acc, norm = self.acc[:n], self.norm[:n]
        prob = np.divide(acc, norm, out=np.zeros_like(acc), where=norm > 0).astype(np.float32)
        out = (self.top, prob, self.valid[:n].copy())
        for a in (self.acc, self.norm, self.valid):
            a[:-n] = a[n:]
            a[-n:] = 0
        self.top += n
        return out


def _gtiff_profile(profile: dict[str, Any], dtype: str, nodata: float) -> dict[str, Any]:
    return {
        "driver": "GTiff",
        "width": profile["width"],
        "height": profile["height"],
        "count": 1,
        "dtype": dtype,
        "crs": profile.get("crs"),
        "transform": profile["transform"],
        "nodata": nodata,
        "tiled": True,
        "blockxsize": OUT_BLOCK,
        "blockysize": OUT_BLOCK,
        "compress": "deflate",
        "bigtiff": "IF_SAFER",
    }


def partial_path(final: Path) -> Path:
    """Where ``final`` is written before it is complete (hidden, in the same directory: renamed into place)."""
    return final.with_name(f".{final.name}.partial")


def write_maps(
    strips: Iterable[tuple[int, np.ndarray, np.ndarray]],
    profile: dict[str, Any],
    prob_path: Path,
    mask_path: Path,
    threshold: float,
) -> tuple[int, int]:
    """Write finished strips of probabilities (first row, (n, W) float32, valid mask) as the probability and mask
    COGs; (valid pixels, positive pixels).

    The strips go into tiled GeoTIFFs under temporary names as they come (one block row at a time), which GDAL's
    COG driver then copies block by block (overviews included) into COGs, renamed into place last. Nothing is
    left under the final names unless both are complete, and every temporary file is removed on any error.
    """
    import rasterio
    import rasterio.shutil
    from rasterio.windows import Window

    tmp_prob, tmp_mask = partial_path(prob_path), partial_path(mask_path)
    cog_prob, cog_mask = Path(f"{tmp_prob}.cog"), Path(f"{tmp_mask}.cog")
    n_valid = n_positive = 0
    try:
        with (
            rasterio.open(tmp_prob, "w", **_gtiff_profile(profile, "float32", PROB_NODATA)) as dp,
            rasterio.open(tmp_mask, "w", **_gtiff_profile(profile, "uint8", MASK_NODATA)) as dm,
        ):
            for row, prob, valid in strips:
                prob[~valid] = PROB_NODATA
                mask = (prob >= threshold).astype(np.uint8)
                mask[~valid] = MASK_NODATA
                window = Window(0, row, prob.shape[1], prob.shape[0])
                dp.write(prob, 1, window=window)
                dm.write(mask, 1, window=window)
                n_valid += int(valid.sum())
                n_positive += int((mask == 1).sum())
        for tmp, cog, resampling in ((tmp_prob, cog_prob, "average"), (tmp_mask, cog_mask, "nearest")):
            rasterio.shutil.copy(
                tmp, cog, driver="COG", compress="deflate", blocksize=OUT_BLOCK, overview_resampling=resampling
            )
        cog_prob.replace(prob_path)
        cog_mask.replace(mask_path)
    finally:
        for t in (tmp_prob, tmp_mask, cog_prob, cog_mask):
            t.unlink(missing_ok=True)
    return n_valid, n_positive


# ----------------------------------------------------------------------------------------------- the stream
@dataclass(frozen=True)
class WindowModel:
    """What the stream needs of a model: the package's side of windows (``rts predict`` builds it from a loaded
    package, :func:`rtscore.inference.predict.window_model`).

    Attributes:
        tile: Window size in pixels.
        stride: Window stride in pixels (what ``windows`` steps by; recorded in manifests).
        windows: ``(height, width) -> [(row, col), ...]`` window offsets of a raster, row-major.
        prepare: ``(rgb, extra, alpha uint8) -> (C, tile, tile)`` model input of a window (the input transform).
        probabilities: ``(batch, context or None) -> (B, tile, tile)`` calibrated probabilities.
        threshold: Mask threshold.
        batch_size: Windows per model call (every call gets exactly this many).
        context: ``(raw channels, alpha) -> model input`` of a window's 0.5x context when the scales need one.
    """

    tile: int
    stride: int
    windows: Callable[[int, int], list[tuple[int, int]]]
    prepare: Callable[[np.ndarray, np.ndarray | None, np.ndarray], np.ndarray]
    probabilities: Callable[[np.ndarray, np.ndarray | None], np.ndarray]
    threshold: float
    batch_size: int = 8
    context: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None


@dataclass
class RasterJob:
    """One raster of a stream.

    Attributes:
        key: The caller's handle (a path, a scene), given back in the outcome.
        open: Opens the checked raster, entering what must stay open (files, staged downloads) into the given
            ExitStack, which closes once the raster is read; returns None when there is nothing to predict (the
            outcome is then ``nothing``, no output written). Runs in the read thread.
        prob: The probability COG to write.
        mask: The mask COG to write.
    """

    key: Any
    open: Callable[[ExitStack], CheckedRaster | None]
    prob: Path
    mask: Path


@dataclass
class RasterResult:
    """What the stream wrote for one raster."""

    windows: int
    skipped: list[tuple[int, int]]  # (row, col) offsets of the windows skipped as NoData throughout
    valid_pixels: int
    positive_pixels: int
    extra_path: Path | None


@dataclass
class JobOutcome:
    """How a job ended: ``done`` (``result``), ``nothing`` (``open`` returned None) or ``failed`` (``error``)."""

    job: RasterJob
    status: Literal["done", "nothing", "failed"]
    result: RasterResult | None = None
    error: BaseException | None = None


class _Stopped(Exception):
    """The stream is stopping (another stage failed): leave, cleaning up."""


@dataclass
class _Start:
    job: int
    profile: dict[str, Any]
    windows: int
    extra_path: Path | None


@dataclass
class _Window:
    job: int
    y: int
    x: int
    valid: np.ndarray | None  # None: NoData throughout, not run
    image: np.ndarray | None = None  # read -> infer: the prepared window
    context: np.ndarray | None = None
    prob: np.ndarray | None = None  # infer -> write


@dataclass
class _End:
    job: int


@dataclass
class _Fail:
    job: int
    error: BaseException


@dataclass
class _Nothing:
    job: int


_DONE = object()  # end of the stream (read -> infer -> write)


@dataclass
class _Channel:
    """A bounded queue whose ends give up when the stream stops."""

    stop: threading.Event
    size: int
    q: queue.Queue[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.q = queue.Queue(self.size)

    def put(self, item: Any) -> None:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def get(self) -> Any:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                return self.q.get(timeout=0.1)
            except queue.Empty:
                continue


def run_stream(model: WindowModel, jobs: Iterable[RasterJob], on_outcome: Callable[[JobOutcome], None]) -> None:
    """Predict ``jobs`` through ``model`` (module docstring); ``on_outcome`` gets each job's outcome in job order,
    in the write thread. Raises the model's error, or the first error ``on_outcome`` raised, after both threads
    have ended and removed their partial files."""
    stream = _Stream(model, list(jobs), on_outcome)
    stream.run()


class _Stream:
    def __init__(self, model: WindowModel, jobs: list[RasterJob], on_outcome: Callable[[JobOutcome], None]) -> None:
        self.model, self.jobs, self.on_outcome = model, jobs, on_outcome
        self.stop = threading.Event()
        size = QUEUE_BATCHES * model.batch_size
        self.to_infer, self.to_write = _Channel(self.stop, size), _Channel(self.stop, size)
        self.errors: list[BaseException] = []  # fatal errors of the threads, first one raised

    def run(self) -> None:
        # each thread runs in a copy of the caller's context: what the caller's context carries (a Prefect flow
        # run's, so that the scenes' log lines reach the run's logs in the UI) holds in the stages too
        threads = [
            threading.Thread(
                target=contextvars.copy_context().run, args=(self._guard, stage), name=f"rts-{name}", daemon=True
            )
            for name, stage in (("read", self._read), ("write", self._write))
        ]
        for t in threads:
            t.start()
        try:
            self._infer()
        except _Stopped:
            pass
        except BaseException as err:
            self.errors.append(err)
            self.stop.set()
        for t in threads:
            t.join()
        if self.errors:
            raise self.errors[0]

    def _guard(self, stage: Callable[[], None]) -> None:
        try:
            stage()
        except _Stopped:
            pass
        except BaseException as err:  # handed to the caller's thread
            self.errors.append(err)
            self.stop.set()

    # -- read
    def _read(self) -> None:
        with gdal_env():
            for k, job in enumerate(self.jobs):
                try:
                    self._read_job(k, job)
                except _Stopped:
                    raise
                except Exception as err:  # this raster's failure, after the windows it queued
                    self.to_infer.put(_Fail(k, err))
        self.to_infer.put(_DONE)

    def _read_job(self, k: int, job: RasterJob) -> None:
        from rasterio.windows import Window

        model = self.model
        with ExitStack() as stack:
            raster = job.open(stack)
            if raster is None:
                self.to_infer.put(_Nothing(k))
                return
            windows = model.windows(raster.height, raster.width)
            context = _context_reader(raster, model)
            self.to_infer.put(_Start(k, raster.profile, len(windows), raster.extra_path))
            tile = model.tile
            for y, x in windows:
                rgb, extra, valid = raster.read(Window(x, y, tile, tile))
                if not valid.any():
                    self.to_infer.put(_Window(k, y, x, None))
                    continue
                image = model.prepare(rgb, extra, valid.astype(np.uint8))
                ctx = None if context is None else context.batch([(y, x)])[0]
                self.to_infer.put(_Window(k, y, x, valid, image, ctx))
        self.to_infer.put(_End(k))

    # -- infer
    def _infer(self) -> None:
        pending: list[Any] = []  # messages in order, the windows among them waiting for a full batch
        run: list[_Window] = []
        while True:
            msg = self.to_infer.get()
            if msg is _DONE:
                break
            pending.append(msg)
            if isinstance(msg, _Window) and msg.valid is not None:
                run.append(msg)
                if len(run) == self.model.batch_size:
                    self._run_batch(run, pending)
        if run:
            self._run_batch(run, pending)
        for m in pending:
            self.to_write.put(m)
        self.to_write.put(_DONE)

    def _run_batch(self, run: list[_Window], pending: list[Any]) -> None:
        n, size = len(run), self.model.batch_size

        def padded(arrays: list[np.ndarray]) -> np.ndarray:  # one batch shape: see the module docstring
            return np.stack(arrays + [np.zeros_like(arrays[0])] * (size - n))

        images = padded([w.image for w in run if w.image is not None])
        contexts = [w.context for w in run if w.context is not None]
        probs = self.model.probabilities(images, padded(contexts) if contexts else None)
        for w, p in zip(run, probs[:n], strict=True):
            w.prob, w.image, w.context = p, None, None
        for m in pending:
            self.to_write.put(m)
        pending.clear()
        run.clear()

    # -- write
    def _write(self) -> None:
        with gdal_env():
            while (msg := self.to_write.get()) is not _DONE:
                job = self.jobs[msg.job]
                if isinstance(msg, _Nothing):
                    outcome = JobOutcome(job, "nothing")
                elif isinstance(msg, _Fail):  # failed before its first window
                    outcome = JobOutcome(job, "failed", error=msg.error)
                else:
                    outcome = self._write_job(msg, job)
                self.on_outcome(outcome)

    def _write_job(self, start: _Start, job: RasterJob) -> JobOutcome:
        model = self.model
        fusion = OverlapFusion(start.profile["height"], start.profile["width"], model.tile, OUT_BLOCK)
        skipped: list[tuple[int, int]] = []
        state = {"ended": False}

        def strips() -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
            while True:
                msg = self.to_write.get()
                if isinstance(msg, _End):
                    state["ended"] = True
                    yield from fusion.rest()
                    return
                if isinstance(msg, _Fail):
                    state["ended"] = True
                    raise msg.error
                yield from fusion.finished(msg.y)
                if msg.valid is None:
                    skipped.append((msg.y, msg.x))
                else:
                    fusion.add(msg.y, msg.x, msg.prob, msg.valid)

        started = time.perf_counter()
        try:
            n_valid, n_positive = write_maps(strips(), start.profile, job.prob, job.mask, model.threshold)
        except _Stopped:
            raise
        except Exception as err:  # this raster's failure (its read or its write): drain its windows, go on
            while not state["ended"]:
                msg = self.to_write.get()
                state["ended"] = isinstance(msg, _End | _Fail)
            return JobOutcome(job, "failed", error=err)
        log.debug("%s written in %.2f s", job.prob.name, time.perf_counter() - started)
        result = RasterResult(start.windows, skipped, n_valid, n_positive, start.extra_path)
        return JobOutcome(job, "done", result=result)


def _context_reader(raster: CheckedRaster, model: WindowModel) -> Any:
    """The raster's 0.5x contexts (:class:`rtscore.inference.context.ContextWindows`) when the model needs them."""
    if model.context is None:
        return None
    from rasterio.windows import Window

    def region(row: int, col: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        rgb, extra, valid = raster.read(Window(col, row, w, h))
        parts = [rgb.astype(np.float32)] + ([extra] if extra is not None else [])
        return np.concatenate(parts), np.where(valid, 255, 0).astype(np.uint8)

    return ContextWindows(region, raster.height, raster.width, model.tile, model.context)
