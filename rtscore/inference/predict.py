"""Whole-raster inference with a deployment package: sliding windows, the deployment numerics, COG outputs.

A raster of any size (at least one tile) is cut into tile-sized windows at a stride (default half a tile;
the last window of a row/column is clamped to the border, so nothing is padded). Each window is normalised
exactly as in training (alpha-0 pixels take the channel's training mean, then ``(x - mean) / std``), run
through :func:`rtscore.inference.numerics.predict_logits` with the package's tta/scales/fusion/precision,
divided by the calibrated temperature and turned into probabilities. Overlapping windows are averaged in
probability space (as TTA and scale fusion are, guide §11.2) with weights that fall off from the window
centre, so tile borders, where the model sees the least context, count least.

Outputs, CRS and transform of the input kept:

* ``<name>_prob.tif``: float32 probabilities, NoData ``-1.0`` where the input alpha is 0 (Cloud-Optimized).
* ``<name>_mask.tif``: uint8 ``prob >= threshold`` -> 1, else 0; NoData 255 (Cloud-Optimized).

With one window per pixel (stride = tile size on a raster made of whole tiles) the probabilities are
exactly those of the evaluation path (``sigmoid(predict_logits(model, tile) / T)``, guide §4.6).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rtscore.data.normalization import NormalizationStats, load_normalization_stats
from rtscore.errors import PipelineError
from rtscore.inference.context import ContextWindows, needs_context
from rtscore.inference.numerics import predict_logits, prepare_model
from rtscore.models import load_model
from rtscore.package.format import DEPLOYMENT, MODEL, STATS, WEIGHTS, PackagedModelConfig
from rtscore.package.verify import read_deployment_config, read_model_config
from rtscore.runtime import inference_precision

if TYPE_CHECKING:
    import torch

    from rtscore.config.deployment import DeploymentConfig

PROB_NODATA = -1.0
MASK_NODATA = 255
EXTRA_SUFFIX = "_extra"


class PredictError(PipelineError):
    """Inference cannot run: refused package, raster that does not fit the package's channels, bad stride."""


@dataclass
class LoadedPackage:
    """A deployment package ready to run: prepared model, its input binding, stats and calibrated numerics."""

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
    def extra_names(self) -> list[str]:
        return [c.name for c in self.model_config.channels.extra]


@dataclass
class PredictOutputs:
    """What :func:`predict_raster` wrote."""

    prob: Path
    mask: Path
    windows: int
    valid_pixels: int
    positive_pixels: int


def load_package(package_dir: str | Path, *, device: str = "cpu") -> LoadedPackage:
    """Load a package: calibrated deployment config, channel-bound stats, weights (weights_only) strictly."""
    import torch

    pkg = Path(package_dir)
    if not pkg.is_dir():
        raise PredictError(f"package directory not found: {pkg}")
    try:
        mc = read_model_config(pkg / MODEL)
        dep = read_deployment_config(pkg / DEPLOYMENT)
        stats = load_normalization_stats(pkg / STATS, [c.name for c in mc.channels.extra])
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
    dev = torch.device(device)
    precision = inference_precision(dep.precision, dev)  # fp16 has no CPU autocast (as in verify_package)
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


def read_inputs(
    pkg: LoadedPackage, input_tif: Path, extra_tif: Path | None = None
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(C, H, W) float32 raw channels in the package's order, (H, W) uint8 alpha, and the RGB profile."""
    import rasterio

    with rasterio.open(input_tif) as src:
        if src.count not in (3, 4):
            raise PredictError(
                f"{input_tif}: {src.count} bands; expected an RGB (3) or RGB + alpha (4) raster "
                f"for channels {pkg.model_config.channels.rgb}"
            )
        rgb = src.read([1, 2, 3])
        alpha = src.read(4) if src.count == 4 else src.dataset_mask()
        profile = dict(src.profile)
        shape = (src.height, src.width)
        transform, crs = src.transform, src.crs
    channels = np.empty((pkg.model_config.in_channels, *shape), np.float32)
    channels[:3] = rgb
    extra = pkg.model_config.channels.extra
    if extra:
        path = extra_tif if extra_tif is not None else extra_path_for(input_tif)
        if not path.is_file():
            raise PredictError(
                f"{input_tif}: the package needs EXTRA channels {pkg.extra_names}, but the EXTRA raster {path} "
                "was not found (pass it explicitly or place it next to the RGB raster)"
            )
        with rasterio.open(path) as ex:
            if (ex.height, ex.width) != shape or ex.transform != transform or ex.crs != crs:
                raise PredictError(f"{path}: grid differs from {input_tif} (size, transform or CRS)")
            missing = [c.name for c in extra if c.band >= ex.count]
            if missing:
                raise PredictError(
                    f"{path}: {ex.count} bands; EXTRA channels {missing} (bands "
                    f"{[c.band for c in extra if c.band >= ex.count]}) are missing"
                )
            channels[3:] = ex.read([c.band + 1 for c in extra]).astype(np.float32)
    return channels, alpha.astype(np.uint8), profile


def normalise(channels: np.ndarray, alpha: np.ndarray, stats: NormalizationStats) -> np.ndarray:
    """In place: alpha-0 pixels take each channel's training mean, then ``(x - mean) / std`` (training's order)."""
    mean = stats.mean.astype(np.float32)
    std = stats.std.astype(np.float32)
    nodata = alpha == 0
    for c in range(channels.shape[0]):
        plane = channels[c]
        if nodata.any():
            plane[nodata] = mean[c]
        plane -= mean[c]
        plane /= std[c]
    return channels


def predict_array(
    pkg: LoadedPackage,
    image: np.ndarray,
    *,
    stride: int | None = None,
    batch_size: int = 8,
    context: ContextWindows | None = None,
) -> tuple[np.ndarray, int]:
    """(H, W) float32 calibrated probabilities of a normalised (C, H, W) image, and the number of windows.

    ``context`` gives each window's 0.5x input (its 2x field of view from the surrounding raster); required
    when the package's scales hold 0.5."""
    import torch

    tile = pkg.tile_size
    step = tile // 2 if stride is None else stride
    if not 0 < step <= tile:
        raise PredictError(f"stride {step} must be in [1, tile size {tile}]")
    _, h, w = image.shape
    windows = [(y, x) for y in window_starts(h, tile, step) for x in window_starts(w, tile, step)]
    weight = window_weights(tile)
    acc = np.zeros((h, w), np.float64)
    norm = np.zeros((h, w), np.float64)
    dep = pkg.deployment
    assert dep.temperature is not None  # load_package reads a calibrated deployment config only
    temperature = float(dep.temperature)
    with torch.inference_mode():
        for i in range(0, len(windows), batch_size):
            chunk = windows[i : i + batch_size]
            batch = np.stack([image[:, y : y + tile, x : x + tile] for y, x in chunk])
            x_t = torch.from_numpy(batch).to(pkg.device)
            ctx = None if context is None else torch.from_numpy(context.batch(chunk)).to(pkg.device)
            z = (
                predict_logits(
                    pkg.model,
                    x_t,
                    tta=dep.tta,
                    scales=dep.scales,
                    fusion=dep.fusion,
                    precision=pkg.precision,
                    context=ctx,
                )
                / temperature
            )
            prob = torch.sigmoid(z.float()).cpu().numpy().astype(np.float64)
            for (y, x), p in zip(chunk, prob, strict=True):
                acc[y : y + tile, x : x + tile] += weight * p
                norm[y : y + tile, x : x + tile] += weight
    return (acc / norm).astype(np.float32), len(windows)


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
    device: str = "cpu",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
    batch_size: int = 8,
) -> PredictOutputs:
    """Probabilities and mask of one RGB(+alpha) raster; see the module docstring.

    ``package_dir`` may be an already loaded package (to run many rasters with one load). ``extra_tif``
    is the EXTRA raster when the package has extra channels (default: ``<stem>_extra.tif`` next to the input).
    """
    pkg = package_dir if isinstance(package_dir, LoadedPackage) else load_package(package_dir, device=device)
    src = Path(input_tif)
    if not src.is_file():
        raise PredictError(f"input raster not found: {src}")
    channels, alpha, profile = read_inputs(pkg, src, Path(extra_tif) if extra_tif is not None else None)
    context = None
    if needs_context(pkg.deployment.scales):  # 0.5x: each window's 2x field of view from the raw raster
        context = ContextWindows(channels.copy(), alpha, pkg.tile_size, lambda c, a: normalise(c, a, pkg.stats))
    image = normalise(channels, alpha, pkg.stats)
    prob, n_windows = predict_array(pkg, image, stride=stride, batch_size=batch_size, context=context)
    nodata = alpha == 0
    prob[nodata] = PROB_NODATA
    assert pkg.deployment.threshold is not None  # load_package reads a calibrated deployment config only
    threshold = float(pkg.deployment.threshold)
    mask = (prob >= threshold).astype(np.uint8)
    mask[nodata] = MASK_NODATA
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    prob_path = write_cog(out / f"{src.stem}_prob.tif", prob, profile, nodata=PROB_NODATA, resampling="average")
    mask_path = write_cog(out / f"{src.stem}_mask.tif", mask, profile, nodata=MASK_NODATA, resampling="nearest")
    return PredictOutputs(
        prob=prob_path,
        mask=mask_path,
        windows=n_windows,
        valid_pixels=int((~nodata).sum()),
        positive_pixels=int((mask == 1).sum()),
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
    device: str = "cpu",
    stride: int | None = None,
    extra_tif: str | Path | None = None,
) -> list[PredictOutputs]:
    """:func:`predict_raster` over several rasters with one package load."""
    pkg = load_package(package_dir, device=device)
    return [predict_raster(pkg, f, output_dir, stride=stride, extra_tif=extra_tif) for f in inputs]
