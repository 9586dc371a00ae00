"""Whole-raster inference with a deployment package: sliding windows, the deployment numerics, COG outputs.

Every input raster (and its EXTRA raster) is first checked against the package's raster contract, the one the
training rasters met (`rtscore.data.bands.open_checked`: band sources, dtypes, CRS, pixel size, grid of the
EXTRA raster, undeclared NaN/inf in EXTRA); a mismatch is refused naming the file before any pixel is read.

A raster of any size (at least one tile) is cut into tile-sized windows at a stride (default half a tile;
the last window of a row/column is clamped to the border, so nothing is padded). Each window is read on its own
(never the whole raster): its channels through the package's input binding (the EXTRA bands training read,
`rtscore.config.binding`), its NoData by the contract's rule, and put through the
package's input transform (`rtscore.data.normalization.InputTransform`: clipping to the training percentiles,
alpha-0 pixels to the channel's training mean, ``(x - mean) / std``), exactly as the training and evaluation
dataset does. A window that is entirely NoData (alpha 0) is skipped: no model call, its pixels are NoData, and
it is listed in the log and in ``<name>_predict.json`` (guide §4.4). Every other window goes through
:func:`rtscore.inference.numerics.predict_logits` with the package's tta/scales/fusion/precision, on the GPU
when there is one (``device="auto"``, as calibration ran), is divided by the calibrated temperature and turned
into probabilities. Overlapping windows are averaged in probability space (as TTA and scale fusion are, guide
§11.2) with weights that fall off from the window centre, so tile borders, where the model sees the least
context, count least. The fusion keeps a rolling band of ``tile + 256`` rows (:class:`OverlapFusion`) and
writes finished rows as they come (:func:`write_maps`), so memory grows with the raster's width, not its area.

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from rtscore.config.binding import InputBinding, RasterBandMap, RasterContract
from rtscore.data.bands import CheckedRaster, open_checked
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
OUT_BLOCK = 256  # block size of the output GeoTIFFs, and the rows the fusion hands out at a time
GDAL_CACHE_MB = 128  # GDAL's block cache while predict and drift read and write

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
        """What the training rasters were: inputs are checked against it (`rtscore.data.bands.open_checked`)."""
        return self.model_config.contract

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
    warn_if_no_contract(mc, pkg)
    log.info("package %s on %s at %s", pkg, dev, precision)
    run_model = prepare_model(model.to(dev), dep.torch_compile)
    return LoadedPackage(pkg, run_model, mc, stats, dep, dev, precision)


def warn_if_no_contract(mc: PackagedModelConfig, pkg: Path) -> None:
    """Log that a package built before the raster contract was recorded is checked against the legacy one."""
    if mc.raster is None:
        log.warning(
            "package %s: %s records no raster contract (built before it was recorded): inputs are checked as "
            "EPSG:3857, uint8 RGB, float32 EXTRA, pixel size not checked; rebuild the package to check them all",
            pkg,
            MODEL,
        )


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


def fused_rows(
    pkg: LoadedPackage,
    raster: CheckedRaster,
    windows: Sequence[tuple[int, int]],
    skipped: list[tuple[int, int]],
    *,
    batch_size: int,
    block: int = OUT_BLOCK,
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Calibrated probabilities of a checked raster, read window by window, as blocks of finished rows
    (first row, (n, W) float32 probabilities, 0 where no window ran, and the valid mask).

    Windows that are NoData throughout are appended to ``skipped`` and never reach the model (guide §4.4);
    the others run in batches of ``batch_size`` in row-major order; a package whose scales hold 0.5 reads each
    window's context (its 2x field of view) from the raster too."""
    from rasterio.windows import Window

    tile = pkg.tile_size
    context = None
    if needs_context(pkg.deployment.scales):  # 0.5x: each window's 2x field of view, read from the raster

        def region(row: int, col: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
            return _raw_region(raster, Window(col, row, w, h))

        context = ContextWindows(region, raster.height, raster.width, tile, pkg.prepare_raw)
    fusion = OverlapFusion(raster.height, raster.width, tile, block)
    pending: list[tuple[int, int, np.ndarray | None]] = []  # windows read, in order; None: skipped
    images: list[np.ndarray] = []

    def run_pending() -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        ran = [(y, x) for y, x, valid in pending if valid is not None]
        probs: Iterator[np.ndarray] = iter(())
        if ran:
            ctx = None if context is None else context.batch(ran)
            probs = iter(window_probabilities(pkg, np.stack(images), ctx))
        for y, x, valid in pending:
            yield from fusion.finished(y)
            if valid is not None:
                fusion.add(y, x, next(probs), valid)
        pending.clear()
        images.clear()

    for y, x in windows:
        rgb, extra, valid = raster.read(Window(x, y, tile, tile))
        if not valid.any():
            skipped.append((y, x))
            pending.append((y, x, None))
            continue
        images.append(pkg.input_transform(rgb, extra, valid.astype(np.uint8)))
        pending.append((y, x, valid))
        if len(images) == batch_size:
            yield from run_pending()
    yield from run_pending()
    yield from fusion.rest()


def _raw_region(raster: CheckedRaster, window: Any) -> tuple[np.ndarray, np.ndarray]:
    """(C, h, w) float32 raw channels (RGB, then EXTRA) and uint8 alpha (255 valid, 0 NoData) of a region."""
    rgb, extra, valid = raster.read(window)
    parts = [rgb.astype(np.float32)] + ([extra] if extra is not None else [])
    return np.concatenate(parts), np.where(valid, 255, 0).astype(np.uint8)


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


def gdal_env() -> Any:
    """GDAL settings of predict and drift: a block cache of :data:`GDAL_CACHE_MB` MB, so that memory does not
    grow with the raster (GDAL's default is 5 % of the machine's RAM)."""
    import rasterio

    return rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_MB)


def check_inputs(
    pkg: LoadedPackage,
    inputs: Sequence[Path],
    *,
    extra_tif: str | Path | None = None,
    rgb_bands: RasterBandMap | None = None,
) -> None:
    """Check every input raster (and its EXTRA raster) against the package's contract before any is predicted,
    so that a bad file of a batch leaves no output of the others behind; the first mismatch is raised."""
    contract = input_contract(pkg.contract, rgb_bands)
    with gdal_env():
        for f in inputs:
            with open_checked(contract, pkg.binding, f, extra_input(pkg.binding, f, extra_tif)):
                pass


def predict_raster(
    package_dir: str | Path | LoadedPackage,
    input_tif: str | Path,
    output_dir: str | Path,
    *,
    device: str = "auto",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
    batch_size: int = 8,
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
    pkg = package_dir if isinstance(package_dir, LoadedPackage) else load_package(package_dir, device=device)
    src = Path(input_tif)
    if not src.is_file():
        raise PredictError(f"input raster not found: {src}")
    dep = pkg.deployment
    if dep.threshold is None or dep.temperature is None:
        raise PredictError(f"package {pkg.path}: {DEPLOYMENT} is not calibrated (threshold/temperature null)")
    tile = pkg.tile_size
    step = tile // 2 if stride is None else stride
    if not 0 < step <= tile:
        raise PredictError(f"stride {step} must be in [1, tile size {tile}]")
    out = Path(output_dir)
    contract = input_contract(pkg.contract, rgb_bands)
    extra = extra_input(pkg.binding, src, extra_tif)
    skipped: list[tuple[int, int]] = []
    with gdal_env(), open_checked(contract, pkg.binding, src, extra, check_finite=check_finite) as raster:
        ys, xs = window_starts(raster.height, tile, step), window_starts(raster.width, tile, step)
        windows = [(y, x) for y in ys for x in xs]
        out.mkdir(parents=True, exist_ok=True)
        prob_path, mask_path = out / f"{src.stem}_prob.tif", out / f"{src.stem}_mask.tif"
        strips = fused_rows(pkg, raster, windows, skipped, batch_size=batch_size)
        n_valid, n_positive = write_maps(strips, raster.profile, prob_path, mask_path, float(dep.threshold))
        extra_path = raster.extra_path
    if skipped:
        log.info(
            "%s: skipped %d of %d windows that are entirely NoData (row, col): %s",
            src.name,
            len(skipped),
            len(windows),
            skipped,
        )
    manifest = PredictManifest(
        input=str(src),
        extra_input=None if extra_path is None else str(extra_path),
        package=str(pkg.path),
        prob=str(prob_path),
        mask=str(mask_path),
        device=str(pkg.device),
        precision=pkg.precision,
        deployment_precision=dep.precision,
        tile_size=tile,
        stride=step,
        windows=len(windows),
        windows_run=len(windows) - len(skipped),
        skipped_full_nodata=skipped,
        valid_pixels=n_valid,
        positive_pixels=n_positive,
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
        skipped_windows=len(skipped),
        valid_pixels=n_valid,
        positive_pixels=n_positive,
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
    package_dir: str | Path | LoadedPackage,
    inputs: Sequence[Path],
    output_dir: str | Path,
    *,
    device: str = "auto",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
    rgb_bands: RasterBandMap | None = None,
) -> list[PredictOutputs]:
    """:func:`predict_raster` over several rasters with one package load; every raster is checked first
    (:func:`check_inputs`), so a bad one stops the batch before any output is written."""
    pkg = load_package(package_dir, device=device) if not isinstance(package_dir, LoadedPackage) else package_dir
    check_inputs(pkg, inputs, extra_tif=extra_tif, rgb_bands=rgb_bands)
    return [
        predict_raster(pkg, f, output_dir, stride=stride, extra_tif=extra_tif, rgb_bands=rgb_bands, check_finite=False)
        for f in inputs
    ]
