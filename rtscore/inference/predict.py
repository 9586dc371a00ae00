"""Whole-raster inference with a deployment package: sliding windows, the deployment numerics, COG outputs.

A package is used only once it passed the checks of ``rts package verify`` that need no forward pass
(:func:`load_package`). Every input raster (and its EXTRA raster) is then checked against the package's raster
contract, the one the training rasters met (`rtscore.data.raster.bands.open_checked`: band sources, dtypes, CRS, pixel
size, grid of the EXTRA raster, undeclared NaN/inf in EXTRA); a mismatch is refused naming the file before any
pixel is read.

A raster of any size (at least one tile) is cut into tile-sized windows at a stride (default half a tile;
the last window of a row/column is clamped to the border, so nothing is padded). Windows go through the window
stream (:mod:`rtscore.inference.stream`: reading, inference and writing overlapped in three threads, the windows of
several rasters sharing batches, every model call at one batch shape). Each window is read on its own (never the
whole raster): its channels through the package's input binding (the EXTRA bands training read,
`rtscore.config.binding`), its NoData by the contract's rule, and put through the package's input transform
(`rtscore.data.normalization.input_transform.InputTransform`: clipping to the training percentiles, alpha-0 pixels to
the channel's training mean, ``(x - mean) / std``), exactly as the training and evaluation dataset does. A window that
is entirely NoData (alpha 0) is skipped: no model call, its pixels are NoData; the log counts them and
``<name>_predict.json`` lists them (guide §4.4). Every other window goes through
:func:`rtscore.inference.numerics.predict_logits` with the package's tta/scales/fusion/precision, on the GPU
when there is one (``device="auto"``, as calibration ran), is divided by the calibrated temperature and turned
into probabilities. Overlapping windows are averaged in probability space (as TTA and scale fusion are, guide
§11.2) with weights that fall off from the window centre, so tile borders, where the model sees the least
context, count least. The fusion keeps a rolling band of ``tile + 256`` rows and writes finished rows as they
come, so memory grows with the raster's width, not its area.

Outputs, CRS and transform of the input kept:

* ``<name>_prob.tif``: float32 probabilities, NoData ``-1.0`` where the input alpha is 0 (Cloud-Optimized).
* ``<name>_mask.tif``: uint8 ``prob >= threshold`` -> 1, else 0; NoData 255 (Cloud-Optimized).
* ``<name>_predict.json``: :class:`PredictManifest`, what ran (device, precision, windows, skipped windows).

With one window per pixel (stride = tile size on a raster made of whole tiles) the probabilities are bit for
bit those of the evaluation path (``sigmoid(predict_logits(model, tile) / T)`` of the dataset's tile, guide §4.6)
on the same device at the same batch shape (CPU kernels differ in the last bits between batch shapes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from rtscore.config.binding import InputBinding, RasterBandMap, RasterContract
from rtscore.data.normalization.input_transform import InputTransform
from rtscore.data.normalization.stats import NormalizationStats
from rtscore.data.raster.bands import EXTRA_SUFFIX, RGB_DIR, CheckedRaster, extra_candidates, open_checked
from rtscore.errors import PipelineError
from rtscore.inference.context import needs_context
from rtscore.inference.numerics import predict_logits, prepare_model
from rtscore.inference.stream import (
    JobOutcome,
    RasterJob,
    RasterResult,
    WindowModel,
    gdal_env,
    run_stream,
)
from rtscore.models import load_model
from rtscore.package.format import (
    DEPLOYMENT,
    MODEL,
    WEIGHTS,
    PackagedModelConfig,
    PackageError,
    refuse_output_in_package,
)
from rtscore.package.verify import audited_package, warn_if_fallback_threshold
from rtscore.runtime import DeviceError, inference_precision, resolve_device
from rtscore.storage import atomic_write_text

if TYPE_CHECKING:
    import torch

    from rtscore.config.deployment import DeploymentConfig

MANIFEST_SUFFIX = "_predict.json"
DEFAULT_BATCH = 8  # windows per model call

log = logging.getLogger(__name__)


class PredictError(PipelineError):
    """Inference cannot run: refused package, raster that does not fit the package's channels, bad stride."""


@dataclass
class LoadedPackage:
    """A deployment package ready to run: prepared model, its input binding and transform, calibrated numerics."""

    path: Path
    model: Callable[[torch.Tensor], torch.Tensor]
    model_config: PackagedModelConfig
    stats: NormalizationStats
    deployment: DeploymentConfig
    device: torch.device
    precision: str

    @property
    def tile_size(self) -> int:
        return self.model_config.tile_size

    @property
    def binding(self) -> InputBinding:
        return self.model_config.channels.binding

    @property
    def extra_names(self) -> list[str]:
        return self.binding.extra_names

    @property
    def contract(self) -> RasterContract:
        """What the training rasters were: inputs are checked against it (`rtscore.data.raster.bands.open_checked`)."""
        return self.model_config.contract

    @property
    def min_object_area_m2(self) -> float:
        """The smallest object `rts map` writes (ground m²): the package's ``package.min_object_area_m2``, the
        default for a package built before it was recorded (:func:`warn_if_no_min_object_area`)."""
        return self.model_config.effective_min_object_area_m2

    @property
    def input_transform(self) -> InputTransform:
        return InputTransform.from_stats(self.stats, nodata_fill=self.model_config.nodata_handling)

    def prepare_raw(self, channels: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        """The model input of (C, H, W) raw channels (RGB holding uint8 values, then EXTRA), as a store tile's."""
        rgb = np.clip(np.rint(channels[:3]), 0, 255).astype(np.uint8)
        extra = channels[3:] if channels.shape[0] > 3 else None
        return self.input_transform(rgb, extra, alpha)


class PredictManifest(BaseModel):
    """``<name>_predict.json``: what one raster's prediction ran with and what it skipped."""

    input: str = Field(..., description="The RGB(+alpha) raster.")
    extra_input: str | None = Field(None, description="The EXTRA raster read (None without EXTRA channels).")
    package: str = Field(..., description="The deployment package.")
    prob: str = Field(..., description="The probability COG.")
    mask: str = Field(..., description="The mask COG.")
    device: str = Field(..., description="Torch device the model ran on.")
    precision: str = Field(..., description="Precision the model ran at.")
    deployment_precision: str = Field(..., description="deployment_config.yaml precision (calibration's).")
    tile_size: int = Field(..., description="Window size in pixels.")
    stride: int = Field(..., description="Window stride in pixels.")
    windows: int = Field(..., description="Windows of the raster.")
    windows_run: int = Field(..., description="Windows run through the model.")
    skipped_full_nodata: list[tuple[int, int]] = Field(
        default_factory=list, description="(row, col) pixel offsets of the windows skipped as full NoData (§4.4)."
    )
    valid_pixels: int = Field(..., description="Pixels with alpha > 0.")
    positive_pixels: int = Field(..., description="Valid pixels at or above the threshold.")
    threshold: float = Field(..., description="The package's calibrated threshold.")
    threshold_source: str = Field(
        ...,
        description="deployment_config.yaml threshold_source: 'target_precision', or 'max_f1_fallback' when the "
        "calibration target precision was not reachable and the max-F1 threshold shipped (warned on every load).",
    )
    temperature: float = Field(..., description="The package's calibrated temperature.")


@dataclass
class PredictOutputs:
    """What :func:`predict_raster` wrote."""

    prob: Path
    mask: Path
    manifest: Path
    windows: int
    skipped_windows: int
    valid_pixels: int
    positive_pixels: int


def load_package(package_dir: str | Path, *, device: str = "auto") -> LoadedPackage:
    """Load a package for use, only through the checks of ``rts package verify`` that need no forward pass
    (:func:`~rtscore.package.verify.audited_package`: SHA256SUMS, the zip CRCs and pickle globals of
    ``weights.pth``, duplicate-free YAML, calibrated numerics, raster contract, channel binding; run once per process
    while the package's files are unchanged), then its weights (weights_only) strictly into the declared model.
    A max-F1 fallback threshold is a warning on every load.

    ``device`` 'auto' takes the GPU when there is one (calibration ran there at the deployment precision), else
    the CPU; the precision is the deployment's (fp16 has no CPU autocast and runs as fp32 there, with a warning).

    Raises:
        PredictError: the package fails a check (one line naming the package, the check and the file), its
            weights do not load, or ``device`` is not available.
    """
    pkg = Path(package_dir)
    if not pkg.is_dir():
        raise PredictError(f"package directory not found: {pkg}")
    try:
        dev = resolve_device(device, key="--device")
    except DeviceError as err:
        raise PredictError(str(err)) from None
    try:
        audited = audited_package(pkg)
    except PackageError as err:
        raise PredictError(str(err)) from None
    mc, dep = audited.model_config, audited.deployment
    try:
        model = load_model(pkg / WEIGHTS, mc, "cpu")
    except Exception as err:
        raise PredictError(
            f"package {pkg}: {WEIGHTS} does not load into {MODEL}: {type(err).__name__}: {err}"
        ) from None
    precision = inference_precision(dep.precision, dev)
    if precision != dep.precision:
        log.warning(
            "deployment precision %s has no %s autocast: running %s; probabilities differ slightly from the "
            "calibrated numerics (run on a GPU: --device auto or cuda)",
            dep.precision,
            dev.type.upper(),
            precision,
        )
    warn_if_no_contract(mc, pkg)
    warn_if_fallback_threshold(audited)
    log.info("package %s on %s at %s", pkg, dev, precision)
    run_model = prepare_model(model.to(dev), dep.torch_compile)
    return LoadedPackage(pkg, run_model, mc, audited.stats, dep, dev, precision)


def warn_if_no_contract(mc: PackagedModelConfig, pkg: Path) -> None:
    """Log that a package built before the raster contract was recorded is checked against the legacy one."""
    if mc.raster is None:
        log.warning(
            "package %s: %s records no raster contract (built before it was recorded): inputs are checked as "
            "EPSG:3857, uint8 RGB, float32 EXTRA, pixel size not checked; rebuild the package to check them all",
            pkg,
            MODEL,
        )


def warn_if_no_min_object_area(pkg: LoadedPackage) -> None:
    """Log that a package built before the minimum object area was recorded maps at the default one."""
    if pkg.model_config.min_object_area_m2 is None:
        log.warning(
            "package %s: %s records no min_object_area_m2 (built before it was recorded): objects under the default "
            "%g m² are left out of the map; rebuild the package to map with the run's package.min_object_area_m2",
            pkg.path,
            MODEL,
            pkg.min_object_area_m2,
        )


def window_starts(length: int, tile: int, stride: int) -> list[int]:
    """Window offsets along one axis: every ``stride``, the last one clamped so it ends at the border."""
    if length < tile:
        raise PredictError(f"raster side {length} px is smaller than the package's tile size {tile}")
    starts = list(range(0, length - tile + 1, stride))
    if starts[-1] != length - tile:
        starts.append(length - tile)
    return starts


def extra_path_for(input_tif: Path) -> Path:
    """The EXTRA raster of an RGB raster: ``EXTRA/<name>`` of a data root (the tile layout) when the raster is its
    ``PLANET-RGB/<name>`` and that file exists, else the sibling ``<stem>_extra.tif``
    (:func:`rtscore.data.raster.bands.extra_candidates`)."""
    *first, last = extra_candidates(input_tif)
    return next((c for c in first if c.is_file()), last)


def window_probabilities(pkg: LoadedPackage, batch: np.ndarray, context: np.ndarray | None = None) -> np.ndarray:
    """(B, tile, tile) float32 calibrated probabilities of a (B, C, tile, tile) batch of normalised windows: the
    deployment numerics (TTA, scales, fusion, precision), then ``sigmoid(z / T)``, as evaluation computes them.
    ``context`` holds the windows' prepared 0.5x inputs when the scales need them."""
    import torch

    dep = pkg.deployment
    if dep.temperature is None:
        raise PredictError(f"package {pkg.path}: {DEPLOYMENT} has no calibrated temperature; run calibrate first")
    x = torch.from_numpy(batch).to(pkg.device)
    ctx = None if context is None else torch.from_numpy(context).to(pkg.device)
    with torch.inference_mode():
        z = predict_logits(
            pkg.model, x, tta=dep.tta, scales=dep.scales, fusion=dep.fusion, precision=pkg.precision, context=ctx
        )
        prob = torch.sigmoid((z / float(dep.temperature)).float())
    return prob.cpu().numpy()


def extra_input(binding: InputBinding, input_tif: Path, extra_tif: str | Path | None) -> Path | None:
    """The EXTRA raster of an input when the package reads EXTRA channels (``extra_tif``, else
    :func:`extra_path_for`), else None."""
    if not binding.extra_bands:
        return None
    return Path(extra_tif) if extra_tif is not None else extra_path_for(input_tif)


def input_contract(contract: RasterContract, rgb_bands: RasterBandMap | None) -> RasterContract:
    """The contract inputs are checked against: the package's, with ``rgb_bands`` (``--rgb-bands``) as its band
    map for files whose band layout differs from the training rasters'."""
    return contract if rgb_bands is None else contract.model_copy(update={"rgb_bands": rgb_bands})


def check_size(raster: CheckedRaster, tile: int) -> None:
    """Refuse a raster smaller than one tile in either direction (no window fits it), naming it.

    Raises:
        PredictError: naming the file, its size and the tile size.
    """
    if raster.height < tile or raster.width < tile:
        raise PredictError(
            f"{raster.path}: {raster.height}x{raster.width} px is smaller than the package's tile size {tile} "
            f"(a raster holds at least one {tile}x{tile} window)"
        )


def check_inputs(
    pkg: LoadedPackage,
    inputs: Sequence[Path],
    *,
    extra_tif: str | Path | None = None,
    rgb_bands: RasterBandMap | None = None,
) -> None:
    """Check every input raster (and its EXTRA raster) against the package's contract, and its size against the tile
    size, before any is predicted, so that a bad file of a batch leaves no output of the others behind; the first
    mismatch is raised, naming its file."""
    contract = input_contract(pkg.contract, rgb_bands)
    with gdal_env():
        for f in inputs:
            with open_checked(contract, pkg.binding, f, extra_input(pkg.binding, f, extra_tif)) as raster:
                check_size(raster, pkg.tile_size)


def window_model(pkg: LoadedPackage, *, stride: int | None = None, batch_size: int = DEFAULT_BATCH) -> WindowModel:
    """The package's side of the window stream (:mod:`rtscore.inference.stream`): windows every ``stride`` pixels
    (default half a tile), the input transform, the calibrated probabilities, the threshold.

    Raises:
        PredictError: an uncalibrated package, a stride outside [1, tile size].
    """
    dep = pkg.deployment
    if dep.threshold is None or dep.temperature is None:
        raise PredictError(f"package {pkg.path}: {DEPLOYMENT} is not calibrated (threshold/temperature null)")
    tile = pkg.tile_size
    step = tile // 2 if stride is None else stride
    if not 0 < step <= tile:
        raise PredictError(f"stride {step} must be in [1, tile size {tile}]")

    def windows(height: int, width: int) -> list[tuple[int, int]]:
        return [(y, x) for y in window_starts(height, tile, step) for x in window_starts(width, tile, step)]

    def probabilities(batch: np.ndarray, context: np.ndarray | None) -> np.ndarray:
        return window_probabilities(pkg, batch, context)

    return WindowModel(
        tile=tile,
        windows=windows,
        prepare=pkg.input_transform,
        probabilities=probabilities,
        threshold=float(dep.threshold),
        batch_size=batch_size,
        context=pkg.prepare_raw if needs_context(dep.scales) else None,
        stride=step,
    )


def output_paths(input_tif: Path, output_dir: Path) -> tuple[Path, Path, Path]:
    """The probability COG, mask COG and manifest ``rts predict`` writes for ``input_tif`` into ``output_dir``."""
    stem = input_tif.stem
    return output_dir / f"{stem}_prob.tif", output_dir / f"{stem}_mask.tif", output_dir / f"{stem}{MANIFEST_SUFFIX}"


def raster_job(
    pkg: LoadedPackage,
    input_tif: Path,
    output_dir: Path,
    *,
    extra_tif: str | Path | None = None,
    rgb_bands: RasterBandMap | None = None,
    check_finite: bool = True,
    key: Any = None,
) -> RasterJob:
    """The stream job of one RGB(+alpha) raster: opened and checked against the package's contract (``rgb_bands``
    replaces its band map) in the read thread, its maps written under :func:`output_paths`."""
    contract = input_contract(pkg.contract, rgb_bands)
    extra = extra_input(pkg.binding, input_tif, extra_tif)

    def open_raster(stack: ExitStack) -> CheckedRaster:
        if not input_tif.is_file():
            raise PredictError(f"input raster not found: {input_tif}")
        raster = stack.enter_context(open_checked(contract, pkg.binding, input_tif, extra, check_finite=check_finite))
        check_size(raster, pkg.tile_size)
        output_dir.mkdir(parents=True, exist_ok=True)
        return raster

    prob, mask, _ = output_paths(input_tif, output_dir)
    return RasterJob(input_tif if key is None else key, open_raster, prob, mask)


def write_manifest(
    pkg: LoadedPackage, model: WindowModel, job: RasterJob, result: RasterResult, path: Path, input: str
) -> PredictOutputs:
    """The manifest ``path`` (:class:`PredictManifest`) of a raster the stream wrote from ``input``; its
    :class:`PredictOutputs`."""
    dep = pkg.deployment
    skipped = result.skipped
    if skipped:
        log.info(  # the count; their offsets are listed in the manifest (a scene may skip hundreds)
            "%s: skipped %d of %d windows that are entirely NoData (their offsets: skipped_full_nodata in %s)",
            Path(input).name,
            len(skipped),
            result.windows,
            path.name,
        )
    manifest = PredictManifest(
        input=input,
        extra_input=None if result.extra_path is None else str(result.extra_path),
        package=str(pkg.path),
        prob=str(job.prob),
        mask=str(job.mask),
        device=str(pkg.device),
        precision=pkg.precision,
        deployment_precision=dep.precision,
        tile_size=model.tile,
        stride=model.stride,
        windows=result.windows,
        windows_run=result.windows - len(skipped),
        skipped_full_nodata=skipped,
        valid_pixels=result.valid_pixels,
        positive_pixels=result.positive_pixels,
        threshold=model.threshold,
        threshold_source=str(dep.threshold_source),
        temperature=float(dep.temperature),  # type: ignore[arg-type]  # window_model checked it
    )
    atomic_write_text(path, manifest.model_dump_json(indent=2) + "\n")
    return PredictOutputs(
        prob=job.prob,
        mask=job.mask,
        manifest=path,
        windows=result.windows,
        skipped_windows=len(skipped),
        valid_pixels=result.valid_pixels,
        positive_pixels=result.positive_pixels,
    )


def predict_raster(
    package_dir: str | Path | LoadedPackage,
    input_tif: str | Path,
    output_dir: str | Path,
    *,
    device: str = "auto",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
    batch_size: int = DEFAULT_BATCH,
    rgb_bands: RasterBandMap | None = None,
    check_finite: bool = True,
) -> PredictOutputs:
    """Probabilities, mask and manifest of one RGB(+alpha) raster; see the module docstring.

    ``package_dir`` may be an already loaded package (to run many rasters with one load). ``extra_tif``
    is the EXTRA raster when the package has extra channels (default: :func:`extra_path_for`). The raster is
    checked against the package's raster contract before any pixel is read (``rgb_bands`` replaces its band
    map, for files laid out unlike the training rasters); ``check_finite=False`` skips the scan of the EXTRA
    raster for undeclared NaN/inf when :func:`check_inputs` has done it already.
    """
    return predict_many(
        package_dir,
        [Path(input_tif)],
        output_dir,
        device=device,
        stride=stride,
        extra_tif=extra_tif,
        rgb_bands=rgb_bands,
        batch_size=batch_size,
        check_finite=check_finite,
        checked=True,
    )[0]


def input_rasters(input_path: str | Path) -> list[Path]:
    """The RGB rasters of a file, a directory (``*.tif``; EXTRA siblings ``*_extra.tif`` left out) or a data root
    (its ``PLANET-RGB/``)."""
    p = Path(input_path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise PredictError(f"input not found: {p}")
    if (p / RGB_DIR).is_dir():  # a data root in the tile layout (docs/geotiff.md#the-tile-layout)
        p = p / RGB_DIR
    files = sorted(
        f for f in p.iterdir() if f.suffix.lower() in (".tif", ".tiff") and not f.stem.endswith(EXTRA_SUFFIX)
    )
    if not files:
        raise PredictError(f"{p}: no .tif rasters")
    return files


def predict_many(
    package_dir: str | Path | LoadedPackage,
    inputs: Sequence[Path],
    output_dir: str | Path,
    *,
    device: str = "auto",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
    rgb_bands: RasterBandMap | None = None,
    batch_size: int = DEFAULT_BATCH,
    check_finite: bool = False,
    checked: bool = False,
) -> list[PredictOutputs]:
    """:func:`predict_raster` of several rasters with one package load, through one window stream (their windows
    share batches; reading, inference and writing overlap). Every raster is checked first (:func:`check_inputs`,
    unless ``checked``), so a bad one stops the batch before any output is written; a raster that fails later
    stops it too, with its error and without partial files. An ``output_dir`` inside a package is refused first
    (:func:`~rtscore.package.format.refuse_output_in_package`)."""
    refuse_output_in_package(output_dir, package_dir.path if isinstance(package_dir, LoadedPackage) else package_dir)
    pkg = load_package(package_dir, device=device) if not isinstance(package_dir, LoadedPackage) else package_dir
    model = window_model(pkg, stride=stride, batch_size=batch_size)
    if not checked:
        check_inputs(pkg, inputs, extra_tif=extra_tif, rgb_bands=rgb_bands)
    out = Path(output_dir)
    jobs = [
        raster_job(pkg, Path(f), out, extra_tif=extra_tif, rgb_bands=rgb_bands, check_finite=check_finite)
        for f in inputs
    ]
    written: list[PredictOutputs] = []

    def on_outcome(outcome: JobOutcome) -> None:
        if outcome.error is not None:
            raise outcome.error
        assert outcome.result is not None  # raster_job's open never returns None
        src = outcome.job.key
        _, _, manifest = output_paths(src, out)
        written.append(write_manifest(pkg, model, outcome.job, outcome.result, manifest, str(src)))

    run_stream(model, jobs, on_outcome)
    return written
