"""Whole-raster inference with a deployment package: sliding windows, the deployment numerics, COG outputs.

A raster of any size (at least one tile) is cut into tile-sized windows at a stride (default half a tile;
the last window of a row/column is clamped to the border, so nothing is padded). The raster's channels are read
with the package's input binding (the EXTRA bands training read, `rtscore.config.binding`) and put through the
package's input transform (`rtscore.data.normalization.InputTransform`: clipping to the training percentiles,
alpha-0 pixels to the channel's training mean, ``(x - mean) / std``), exactly as the training and evaluation
dataset does. A window that is entirely NoData (alpha 0) is skipped: no model call, its pixels are NoData, and
it is listed in the log and in ``<name>_predict.json`` (guide §4.4). Every other window goes through
:func:`rtscore.inference.numerics.predict_logits` with the package's tta/scales/fusion/precision, on the GPU
when there is one (``device="auto"``, as calibration ran), is divided by the calibrated temperature and turned
into probabilities. Overlapping windows are averaged in probability space (as TTA and scale fusion are, guide
§11.2) with weights that fall off from the window centre, so tile borders, where the model sees the least
context, count least.

Outputs, CRS and transform of the input kept:

* ``<name>_prob.tif``: float32 probabilities, NoData ``-1.0`` where the input alpha is 0 (Cloud-Optimized).
* ``<name>_mask.tif``: uint8 ``prob >= threshold`` -> 1, else 0; NoData 255 (Cloud-Optimized).
* ``<name>_predict.json``: :class:`PredictManifest`, what ran (device, precision, windows, skipped windows).

With one window per pixel (stride = tile size on a raster made of whole tiles) the probabilities are bit for
bit those of the evaluation path (``sigmoid(predict_logits(model, tile) / T)`` of the dataset's tile, guide §4.6)
on the same device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from rtscore.config.binding import InputBinding
from rtscore.data.bands import read_bound_bands, unreadable_extra
from rtscore.data.normalization import InputTransform, NormalizationStats, load_normalization_stats
from rtscore.errors import PipelineError
from rtscore.inference.context import ContextWindows, needs_context
from rtscore.inference.numerics import predict_logits, prepare_model
from rtscore.models import load_model
from rtscore.package.format import DEPLOYMENT, MODEL, STATS, WEIGHTS, PackagedModelConfig
from rtscore.package.verify import read_deployment_config, read_model_config
from rtscore.runtime import DeviceError, inference_precision, resolve_device
from rtscore.storage import atomic_write_text

if TYPE_CHECKING:
    import torch

    from rtscore.config.deployment import DeploymentConfig

PROB_NODATA = -1.0
MASK_NODATA = 255
EXTRA_SUFFIX = "_extra"
MANIFEST_SUFFIX = "_predict.json"

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


@dataclass
class WindowedProbabilities:
    """:func:`predict_array`'s result: (H, W) float32 probabilities (0 where no window ran) and the windows."""

    prob: np.ndarray
    windows: list[tuple[int, int]]
    skipped: list[tuple[int, int]]


def load_package(package_dir: str | Path, *, device: str = "auto") -> LoadedPackage:
    """Load a package: calibrated deployment config, channel-bound stats, weights (weights_only) strictly.

    ``device`` 'auto' takes the GPU when there is one (calibration ran there at the deployment precision), else
    the CPU; the precision is the deployment's (fp16 has no CPU autocast and runs as fp32 there, with a warning).
    """
    pkg = Path(package_dir)
    if not pkg.is_dir():
        raise PredictError(f"package directory not found: {pkg}")
    try:
        dev = resolve_device(device, key="--device")
    except DeviceError as err:
        raise PredictError(str(err)) from None
    try:
        mc = read_model_config(pkg / MODEL)
        dep = read_deployment_config(pkg / DEPLOYMENT)
        stats = load_normalization_stats(pkg / STATS, mc.channels.extra)
    except ValueError as err:  # ConfigError and NormalizationStatsError are ValueErrors
        raise PredictError(f"package {pkg}: {err}") from None
    if stats.channel_names != mc.channels.names:
        raise PredictError(
            f"package {pkg}: {STATS} channels {stats.channel_names} differ from {MODEL} channels {mc.channels.names}"
        )
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
    log.info("package %s on %s at %s", pkg, dev, precision)
    run_model = prepare_model(model.to(dev), dep.torch_compile)
    return LoadedPackage(pkg, run_model, mc, stats, dep, dev, precision)


def window_starts(length: int, tile: int, stride: int) -> list[int]:
    """Window offsets along one axis: every ``stride``, the last one clamped so it ends at the border."""
    if length < tile:
        raise PredictError(f"raster side {length} px is smaller than the package's tile size {tile}")
    starts = list(range(0, length - tile + 1, stride))
    if starts[-1] != length - tile:
        starts.append(length - tile)
    return starts


def window_weights(tile: int) -> np.ndarray:
    """(tile, tile) fusion weights: separable tent, highest at the centre, positive at the border."""
    idx = np.arange(tile, dtype=np.float64)
    ramp = np.minimum(idx + 0.5, tile - idx - 0.5) / (tile / 2.0)
    return np.outer(ramp, ramp)


def extra_path_for(input_tif: Path) -> Path:
    """The EXTRA raster of an RGB raster: ``EXTRA/<name>`` of a DATA_LAYOUT.md root when the raster is its
    ``PLANET-RGB/<name>``, else the sibling ``<stem>_extra.tif``."""
    if input_tif.parent.name == "PLANET-RGB":
        layout = input_tif.parent.parent / "EXTRA" / input_tif.name
        if layout.is_file():
            return layout
    return input_tif.with_name(f"{input_tif.stem}{EXTRA_SUFFIX}{input_tif.suffix}")


@dataclass
class RasterInputs:
    """A raster's bound channels as stored: (3, H, W) uint8 RGB, (E, H, W) float32 EXTRA, (H, W) uint8 alpha."""

    rgb: np.ndarray
    extra: np.ndarray | None
    alpha: np.ndarray
    profile: dict[str, Any]
    extra_path: Path | None

    def stacked(self) -> np.ndarray:
        """(C, H, W) float32 raw channels, RGB then EXTRA (the layout of a 0.5x context's source)."""
        parts = [self.rgb.astype(np.float32)] + ([self.extra.astype(np.float32)] if self.extra is not None else [])
        return np.concatenate(parts)


def read_inputs(binding: InputBinding, input_tif: Path, extra_tif: Path | None = None) -> RasterInputs:
    """The raster's channels read with the package's input binding (the bands training read), and its alpha."""
    import rasterio

    with rasterio.open(input_tif) as src:
        if src.count not in (3, 4):
            raise PredictError(
                f"{input_tif}: {src.count} bands; expected an RGB (3) or RGB + alpha (4) raster "
                f"for channels {binding.names[:3]}"
            )
        alpha = src.read(4) if src.count == 4 else src.dataset_mask()
        profile = dict(src.profile)
        if not binding.extra_bands:
            rgb, extra = read_bound_bands(binding, src, None)
            return RasterInputs(rgb, extra, alpha.astype(np.uint8), profile, None)
        path = extra_tif if extra_tif is not None else extra_path_for(input_tif)
        if not path.is_file():
            raise PredictError(
                f"{input_tif}: the package needs EXTRA channels {binding.extra_names}, but the EXTRA raster {path} "
                "was not found (pass it explicitly or place it next to the RGB raster)"
            )
        with rasterio.open(path) as ex:
            if (ex.height, ex.width) != (src.height, src.width) or ex.transform != src.transform or ex.crs != src.crs:
                raise PredictError(f"{path}: grid differs from {input_tif} (size, transform or CRS)")
            missing = unreadable_extra(binding, ex.count)
            if missing:
                raise PredictError(
                    f"{path}: {ex.count} bands; EXTRA channels {[c.name for c in missing]} (bands "
                    f"{[c.band for c in missing]}) are missing"
                )
            rgb, extra = read_bound_bands(binding, src, ex)
    return RasterInputs(rgb, extra, alpha.astype(np.uint8), profile, path)


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


def predict_array(
    pkg: LoadedPackage,
    image: np.ndarray,
    nodata: np.ndarray,
    *,
    stride: int | None = None,
    batch_size: int = 8,
    context: ContextWindows | None = None,
) -> WindowedProbabilities:
    """Calibrated probabilities of a normalised (C, H, W) image with its (H, W) NoData mask, window by window.

    ``context`` gives each window's 0.5x input (its 2x field of view from the surrounding raster); required
    when the package's scales hold 0.5.

    Windows that are NoData throughout are skipped (no model call; guide §4.4); pixels no window covered stay 0
    (they are NoData: the caller marks them).
    """
    tile = pkg.tile_size
    step = tile // 2 if stride is None else stride
    if not 0 < step <= tile:
        raise PredictError(f"stride {step} must be in [1, tile size {tile}]")
    _, h, w = image.shape
    windows = [(y, x) for y in window_starts(h, tile, step) for x in window_starts(w, tile, step)]
    full_nodata = [bool(nodata[y : y + tile, x : x + tile].all()) for y, x in windows]
    run = [win for win, skip in zip(windows, full_nodata, strict=True) if not skip]
    weight = window_weights(tile)
    acc = np.zeros((h, w), np.float64)
    norm = np.zeros((h, w), np.float64)
    for i in range(0, len(run), batch_size):
        chunk = run[i : i + batch_size]
        batch = np.stack([image[:, y : y + tile, x : x + tile] for y, x in chunk])  # the windows are read here
        ctx = None if context is None else context.batch(chunk)
        for (y, x), p in zip(chunk, window_probabilities(pkg, batch, ctx), strict=True):
            acc[y : y + tile, x : x + tile] += weight * p
            norm[y : y + tile, x : x + tile] += weight
    prob = np.divide(acc, norm, out=np.zeros_like(acc), where=norm > 0).astype(np.float32)
    skipped = [win for win, skip in zip(windows, full_nodata, strict=True) if skip]
    return WindowedProbabilities(prob, windows, skipped)


def write_cog(path: Path, data: np.ndarray, profile: dict[str, Any], *, nodata: float, resampling: str) -> Path:
    """Write one band as a Cloud-Optimized GeoTIFF (GDAL's COG driver: tiled, overviews, deflate)."""
    import rasterio

    h, w = data.shape
    tmp = path.with_name(f".{path.name}.tmp")
    out_profile = {
        "driver": "COG",
        "width": w,
        "height": h,
        "count": 1,
        "dtype": data.dtype.name,
        "crs": profile.get("crs"),
        "transform": profile["transform"],
        "nodata": nodata,
        "compress": "deflate",
        "blocksize": 256,
        "overview_resampling": resampling,
    }
    try:
        with rasterio.open(tmp, "w", **out_profile) as dst:
            dst.write(data, 1)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def predict_raster(
    package_dir: str | Path | LoadedPackage,
    input_tif: str | Path,
    output_dir: str | Path,
    *,
    device: str = "auto",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
    batch_size: int = 8,
) -> PredictOutputs:
    """Probabilities, mask and manifest of one RGB(+alpha) raster; see the module docstring.

    ``package_dir`` may be an already loaded package (to run many rasters with one load). ``extra_tif``
    is the EXTRA raster when the package has extra channels (default: ``<stem>_extra.tif`` next to the input).
    """
    pkg = package_dir if isinstance(package_dir, LoadedPackage) else load_package(package_dir, device=device)
    src = Path(input_tif)
    if not src.is_file():
        raise PredictError(f"input raster not found: {src}")
    dep = pkg.deployment
    if dep.threshold is None or dep.temperature is None:
        raise PredictError(f"package {pkg.path}: {DEPLOYMENT} is not calibrated (threshold/temperature null)")
    raw = read_inputs(pkg.binding, src, Path(extra_tif) if extra_tif is not None else None)
    image = pkg.input_transform(raw.rgb, raw.extra, raw.alpha)
    nodata = raw.alpha == 0
    context = None
    if needs_context(dep.scales):  # 0.5x: each window's 2x field of view from the raw raster
        context = ContextWindows(raw.stacked(), raw.alpha, pkg.tile_size, pkg.prepare_raw)
    windows = predict_array(pkg, image, nodata, stride=stride, batch_size=batch_size, context=context)
    if windows.skipped:
        log.info(
            "%s: skipped %d of %d windows that are entirely NoData (row, col): %s",
            src.name,
            len(windows.skipped),
            len(windows.windows),
            windows.skipped,
        )
    prob = windows.prob
    prob[nodata] = PROB_NODATA
    mask = (prob >= float(dep.threshold)).astype(np.uint8)
    mask[nodata] = MASK_NODATA
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    prob_path = write_cog(out / f"{src.stem}_prob.tif", prob, raw.profile, nodata=PROB_NODATA, resampling="average")
    mask_path = write_cog(out / f"{src.stem}_mask.tif", mask, raw.profile, nodata=MASK_NODATA, resampling="nearest")
    manifest = PredictManifest(
        input=str(src),
        extra_input=None if raw.extra_path is None else str(raw.extra_path),
        package=str(pkg.path),
        prob=str(prob_path),
        mask=str(mask_path),
        device=str(pkg.device),
        precision=pkg.precision,
        deployment_precision=dep.precision,
        tile_size=pkg.tile_size,
        stride=pkg.tile_size // 2 if stride is None else stride,
        windows=len(windows.windows),
        windows_run=len(windows.windows) - len(windows.skipped),
        skipped_full_nodata=windows.skipped,
        valid_pixels=int((~nodata).sum()),
        positive_pixels=int((mask == 1).sum()),
        threshold=float(dep.threshold),
        temperature=float(dep.temperature),
    )
    manifest_path = out / f"{src.stem}{MANIFEST_SUFFIX}"
    atomic_write_text(manifest_path, manifest.model_dump_json(indent=2) + "\n")
    return PredictOutputs(
        prob=prob_path,
        mask=mask_path,
        manifest=manifest_path,
        windows=manifest.windows,
        skipped_windows=len(windows.skipped),
        valid_pixels=manifest.valid_pixels,
        positive_pixels=manifest.positive_pixels,
    )


def input_rasters(input_path: str | Path) -> list[Path]:
    """The RGB rasters of a file, a directory (``*.tif``; EXTRA siblings ``*_extra.tif`` left out) or a data root
    (its ``PLANET-RGB/``)."""
    p = Path(input_path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise PredictError(f"input not found: {p}")
    if (p / "PLANET-RGB").is_dir():  # a data root in the layout of DATA_LAYOUT.md
        p = p / "PLANET-RGB"
    files = sorted(
        f for f in p.iterdir() if f.suffix.lower() in (".tif", ".tiff") and not f.stem.endswith(EXTRA_SUFFIX)
    )
    if not files:
        raise PredictError(f"{p}: no .tif rasters")
    return files


def predict_many(
    package_dir: str | Path,
    inputs: Sequence[Path],
    output_dir: str | Path,
    *,
    device: str = "auto",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
) -> list[PredictOutputs]:
    """:func:`predict_raster` over several rasters with one package load."""
    pkg = load_package(package_dir, device=device)
    return [predict_raster(pkg, f, output_dir, stride=stride, extra_tif=extra_tif) for f in inputs]
