"""Input drift of new imagery against the package's training normalization stats (deployment gate).

Per channel, the mean and standard deviation of the new imagery's valid pixels (alpha > 0; streamed over
files and raster blocks, merged with parallel Welford) are compared with the training stats the package
normalises with. A channel is a deployment blocker when

* ``|mean_new - mean_train| > 0.5 * std_train`` (a brightness/offset shift), or
* ``|std_new / std_train - 1| > 0.25`` (a contrast change),

because a model fed inputs normalised with the wrong moments is outside what it was trained and calibrated
on (guide §4.1, §4.6): its threshold and temperature no longer mean what they did. Every raster (and its EXTRA
raster: ``EXTRA/<name>`` of a data root, else ``<stem>_extra.tif``) is first checked against the package's raster
contract, as ``rts predict`` checks it (`rtscore.data.bands.open_checked`: a uint16 scene is refused as "uint16,
trained on uint8", not reported as a shift of many σ; undeclared NaN in EXTRA is refused, declared NoData is not
counted). The channels are then read block by block through the package's input binding, with the contract's
NoData rule, and clipped to the training percentiles when the stats carry them (the package's input transform:
the training moments are those of clipped values), so both sides of the comparison describe what the model is
fed. A measure that is not a finite number (a channel with no valid pixel, a training std of 0) is an error,
never a verdict: the report holds numbers only. The package itself is used only once it passed the checks of
``rts package verify`` that need no forward pass, as ``rts predict`` loads it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.binding import InputBinding, RasterBandMap, RasterContract
from rtscore.data.bands import CheckedRaster, open_checked
from rtscore.data.input_transform import InputTransform
from rtscore.data.normalization import NormalizationStats
from rtscore.data.normalization_pass import RunningMoments
from rtscore.errors import PipelineError
from rtscore.inference.predict import (
    LoadedPackage,
    PredictError,
    extra_input,
    gdal_env,
    input_contract,
    input_rasters,
    warn_if_no_contract,
)
from rtscore.package.format import PackageError
from rtscore.package.verify import audited_package, warn_if_fallback_threshold
from rtscore.storage import atomic_write_json, atomic_write_text

MAX_MEAN_SHIFT_SIGMA = 0.5
MAX_STD_RATIO_DEVIATION = 0.25
REPORT_JSON = "drift_report.json"
REPORT_MD = "drift_report.md"


class DriftError(PipelineError):
    """The drift report cannot be computed (no rasters, wrong band count, missing EXTRA raster, no valid pixel)."""


class ChannelDrift(BaseModel):
    """One channel's moments on both sides, the drift measures and the verdict."""

    model_config = ConfigDict(extra="forbid")

    channel: str = Field(..., description="Model channel name (R, G, B, then the EXTRA channels).")
    train_mean: float = Field(..., description="Mean the package normalises with (training stats).")
    train_std: float = Field(..., description="Std the package normalises with (training stats).")
    new_mean: float = Field(..., description="Mean of the new imagery's valid pixels (clipped as the model sees them).")
    new_std: float = Field(..., description="Std of the new imagery's valid pixels.")
    mean_shift_sigma: float = Field(..., description="(new mean - train mean) / train std.")
    std_ratio: float = Field(..., description="new std / train std.")
    blocker: bool = Field(..., description="Whether the channel blocks deployment.")
    reasons: list[str] = Field(default_factory=list, description="Why it blocks (empty when it does not).")


class DriftThresholds(BaseModel):
    """The limits a channel is judged by."""

    model_config = ConfigDict(extra="forbid")

    max_mean_shift_sigma: float = MAX_MEAN_SHIFT_SIGMA
    max_std_ratio_deviation: float = MAX_STD_RATIO_DEVIATION


class DriftReport(BaseModel):
    """``drift_report.json``: the new imagery against the package's training stats, channel by channel."""

    model_config = ConfigDict(extra="forbid")

    package: str = Field(..., description="The package directory.")
    stats_source: str = Field(..., description="Where the package's normalization stats came from.")
    files: list[str] = Field(..., description="The rasters read.")
    valid_pixels: int = Field(..., ge=0, description="Valid pixels read over all rasters.")
    clipped_to_training_percentiles: bool = Field(..., description="Whether values were clipped as in training.")
    thresholds: DriftThresholds = Field(default_factory=DriftThresholds, description="The blocker limits.")
    channels: list[ChannelDrift] = Field(..., description="One entry per model channel, in order.")
    blockers: list[str] = Field(..., description="The channels that block deployment.")
    ok: bool = Field(..., description="No channel blocks deployment.")


def _package_inputs(
    package: str | Path | LoadedPackage,
) -> tuple[InputBinding, NormalizationStats, InputTransform, RasterContract]:
    """(input binding, stats, input transform, raster contract) of a package, which passes the checks of
    ``rts package verify`` that need no forward pass first (:func:`~rtscore.package.verify.audited_package`, as
    ``rts predict`` loads it); the stats are bound to the model's channels. An already loaded package is used as
    it is (it was checked when loaded)."""
    if isinstance(package, LoadedPackage):
        return package.binding, package.stats, package.input_transform, package.contract
    package = Path(package)
    if not package.is_dir():
        raise DriftError(f"package directory not found: {package}")
    try:
        audited = audited_package(package)
    except PackageError as err:
        raise DriftError(str(err)) from None
    mc, stats = audited.model_config, audited.stats
    warn_if_no_contract(mc, package)
    warn_if_fallback_threshold(audited)
    transform = InputTransform.from_stats(stats, nodata_fill=mc.nodata_handling)
    return mc.channels.binding, stats, transform, mc.contract


def _accumulate(raster: CheckedRaster, transform: InputTransform, moments: RunningMoments) -> int:
    """Add one checked raster's valid pixels (block by block, clipped as the model sees them) to ``moments``;
    the number of valid pixels."""
    n_valid = 0
    for _, window in raster.src.block_windows(1):
        rgb, extra, valid = raster.read(window)
        if not valid.any():
            continue
        rgb, extra = transform.clip(rgb, extra)
        block = rgb[:, valid].astype(np.float64)
        if extra is not None:
            block = np.concatenate([block, extra[:, valid].astype(np.float64)])
        moments.add(block)
        n_valid += int(valid.sum())
    return n_valid


def drift_report(
    package_dir: str | Path | LoadedPackage,
    input_dir_or_files: str | Path | Sequence[str | Path],
    output_dir: str | Path,
    *,
    rgb_bands: RasterBandMap | None = None,
) -> DriftReport:
    """Compare the new imagery's per-channel moments with the package's stats; write JSON + Markdown reports.

    Every raster is checked against the package's raster contract (``rgb_bands`` replaces its band map) before
    any is read; nothing is written unless the report is complete. ``package_dir`` may be a package
    :func:`~rtscore.inference.predict.load_package` loaded (a campaign's drift check)."""
    pkg = package_dir.path if isinstance(package_dir, LoadedPackage) else Path(package_dir)
    binding, stats, transform, contract = _package_inputs(package_dir)
    contract = input_contract(contract, rgb_bands)
    names = binding.names
    files = _input_files(input_dir_or_files)
    moments = RunningMoments.empty(len(names))
    with gdal_env():
        for f in files:  # every file checked (headers, EXTRA grid, undeclared NaN/inf) before any pixel counts
            with open_checked(contract, binding, f, extra_input(binding, f, None)):
                pass
        n_valid = sum(_accumulate_file(contract, binding, f, transform, moments) for f in files)
    if n_valid == 0:
        raise DriftError(f"no valid pixel (by the NoData rule: alpha, mask or RGB nodata) in {len(files)} raster(s)")
    new_std = moments.std
    channels = [
        _channel_drift(
            name, float(stats.mean[c]), float(stats.std[c]), float(moments.mean[c]), float(new_std[c]), n_valid
        )
        for c, name in enumerate(names)
    ]
    blockers = [ch.channel for ch in channels if ch.blocker]
    report = DriftReport(
        package=str(pkg),
        stats_source=stats.source,
        files=[str(f) for f in files],
        valid_pixels=n_valid,
        clipped_to_training_percentiles=transform.clip_min is not None,
        channels=channels,
        blockers=blockers,
        ok=not blockers,
    )
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / REPORT_JSON, report.model_dump(mode="json"))
    atomic_write_text(out / REPORT_MD, render_markdown(report))
    return report


def render_markdown(report: DriftReport) -> str:
    """`drift_report.md`: one row per channel with the moments, the drift measures and the verdict."""
    lines = [
        "# Input drift report",
        "",
        f"Package `{report.package}`; {len(report.files)} raster(s), {report.valid_pixels:,} valid pixels.",
        f"Blocker when |Δmean| > {MAX_MEAN_SHIFT_SIGMA} σ_train or |σ_new/σ_train − 1| > {MAX_STD_RATIO_DEVIATION}.",
        "",
        "| channel | train mean | train std | new mean | new std | Δmean / σ_train | σ_new / σ_train | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ch in report.channels:
        verdict = "BLOCKER: " + "; ".join(ch.reasons) if ch.blocker else "ok"
        lines.append(
            f"| {ch.channel} | {ch.train_mean:.3f} | {ch.train_std:.3f} | {ch.new_mean:.3f} | "
            f"{ch.new_std:.3f} | {ch.mean_shift_sigma:+.3f} | {ch.std_ratio:.3f} | {verdict} |"
        )
    verdict = "OK: no drift blocker" if report.ok else f"BLOCKED: drift on {', '.join(report.blockers)}"
    lines += ["", f"**Verdict: {verdict}**"]
    return "\n".join(lines) + "\n"


def _input_files(input_dir_or_files: str | Path | Sequence[str | Path]) -> list[Path]:
    """The rasters to compare: a .tif, a directory of them or a data root, or the files given."""
    if isinstance(input_dir_or_files, (str, Path)):
        try:
            files = input_rasters(input_dir_or_files)
        except PredictError as err:
            raise DriftError(str(err)) from None
    else:
        files = [Path(f) for f in input_dir_or_files]
    if not files:
        raise DriftError("no input rasters given")
    return files


def _accumulate_file(
    contract: RasterContract, binding: InputBinding, f: Path, transform: InputTransform, moments: RunningMoments
) -> int:
    """One checked raster's valid pixels added to ``moments``; returns how many."""
    with open_checked(contract, binding, f, extra_input(binding, f, None), check_finite=False) as raster:
        return _accumulate(raster, transform, moments)


def _channel_drift(name: str, m_train: float, s_train: float, m_new: float, s_new: float, n_valid: int) -> ChannelDrift:
    """One channel's drift: mean shift in training sigmas and std ratio, a blocker past either limit."""
    if not (s_train > 0 and all(math.isfinite(v) for v in (m_train, s_train, m_new, s_new))):
        raise DriftError(
            f"channel {name}: no drift measure (training mean {m_train:g}, std {s_train:g}; new imagery mean "
            f"{m_new:g}, std {s_new:g}): a channel needs a positive training std and finite values in the new "
            f"imagery's {n_valid:,} valid pixels"
        )
    shift = (m_new - m_train) / s_train
    ratio = s_new / s_train
    reasons = []
    if abs(shift) > MAX_MEAN_SHIFT_SIGMA:
        reasons.append(f"mean shift {shift:+.2f} σ_train exceeds ±{MAX_MEAN_SHIFT_SIGMA} σ")
    if abs(ratio - 1.0) > MAX_STD_RATIO_DEVIATION:
        reasons.append(f"std ratio {ratio:.2f} outside 1 ± {MAX_STD_RATIO_DEVIATION}")
    return ChannelDrift(
        channel=name,
        train_mean=m_train,
        train_std=s_train,
        new_mean=m_new,
        new_std=s_new,
        mean_shift_sigma=shift,
        std_ratio=ratio,
        blocker=bool(reasons),
        reasons=reasons,
    )
