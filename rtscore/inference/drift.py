"""Input drift of new imagery against the package's training normalization stats (deployment gate).

Per channel, the mean and standard deviation of the new imagery's valid pixels (alpha > 0; streamed over
files and raster blocks, merged with parallel Welford) are compared with the training stats the package
normalises with. A channel is a deployment blocker when

* ``|mean_new - mean_train| > 0.5 * std_train`` (a brightness/offset shift), or
* ``|std_new / std_train - 1| > 0.25`` (a contrast change),

because a model fed inputs normalised with the wrong moments is outside what it was trained and calibrated
on (guide §4.1, §4.6): its threshold and temperature no longer mean what they did. Every raster (and its EXTRA
raster: ``EXTRA/<name>`` of a data root, else ``<stem>_extra.tif``) is first checked against the package's raster
contract, as ``rts predict`` checks it (`rtscore.data.raster.bands.open_checked`: a uint16 scene is refused as "uint16,
trained on uint8", not reported as a shift of many σ; undeclared NaN in EXTRA is refused, declared NoData is not
counted). The channels are then read block by block through the package's input binding, with the contract's
NoData rule, and clipped to the training percentiles when the stats carry them (the package's input transform:
the training moments are those of clipped values), so both sides of the comparison describe what the model is
fed. A measure that is not a finite number (a channel with no valid pixel, a training std of 0) is an error,
never a verdict: the report holds numbers only. The package itself is used only once it passed the checks of
``rts package verify`` that need no forward pass, as ``rts predict`` loads it.

The verdict is a dataset-level one (guide §4.1): it is decided on the pooled valid pixels of all rasters read. The
report explains it. Beside each channel's pooled training moments it shows the training regions' own (recorded with
the stats, ``regions`` of ``normalization_stats.json``), and says of a blocked channel whether the new imagery lies
outside what the training regions covered (beyond every region's mean, or std) or only differs from the pooled
moments (inside the regions' range: training saw such imagery, in one region). Each raster's own moments and shifts
are listed too, and the rasters whose own shift exceeds a limit on a blocked channel are named: the ones that drive
the block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.binding import InputBinding, RasterBandMap, RasterContract
from rtscore.data.normalization.compute import RunningMoments
from rtscore.data.normalization.input_transform import InputTransform
from rtscore.data.normalization.stats import NormalizationStats
from rtscore.data.raster.bands import PREDICT_FIXES, CheckedRaster, RasterFixes, open_checked
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
from rtscore.package.format import PackageError, refuse_output_in_package
from rtscore.package.verify import audited_package, warn_if_fallback_threshold
from rtscore.report import md_table
from rtscore.storage import atomic_write_json, atomic_write_text

MAX_MEAN_SHIFT_SIGMA = 0.5
MAX_STD_RATIO_DEVIATION = 0.25
REPORT_JSON = "drift_report.json"
REPORT_MD = "drift_report.md"


class DriftError(PipelineError):
    """The drift report cannot be computed (no rasters, wrong band count, missing EXTRA raster, no valid pixel)."""


class RegionSpread(BaseModel):
    """One channel's moments in each training region (recorded with the stats), and where the new imagery's lie."""

    model_config = ConfigDict(extra="forbid")

    means: dict[str, float] = Field(..., description="Each training region's mean of the channel.")
    stds: dict[str, float] = Field(..., description="Each training region's std of the channel.")
    mean_min: float = Field(..., description="The lowest training region mean.")
    mean_max: float = Field(..., description="The highest training region mean.")
    std_min: float = Field(..., description="The lowest training region std.")
    std_max: float = Field(..., description="The highest training region std.")
    mean_inside: bool = Field(..., description="The new mean lies within [mean_min, mean_max].")
    std_inside: bool = Field(..., description="The new std lies within [std_min, std_max].")


class TrainingRegion(BaseModel):
    """A training region the stats record moments of."""

    model_config = ConfigDict(extra="forbid")

    region: str
    n_tiles: int = Field(..., ge=0, description="Train tiles of the region with a valid pixel.")
    n_pixels: int = Field(..., ge=0, description="Valid pixels of the region's train tiles.")


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
    regions: RegionSpread | None = Field(
        None, description="The training regions' moments of the channel (None: the stats record none)."
    )
    coverage: str | None = Field(
        None,
        description="For a blocked channel: whether the new imagery lies outside what the training regions covered "
        "or only differs from the pooled moments (None when it does not block).",
    )


class FileDrift(BaseModel):
    """One raster's own moments and drift measures, channel by channel (in the report's channel order)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="The raster (a campaign's scene id).")
    valid_pixels: int = Field(..., ge=0, description="Its valid pixels (0: every list below is empty).")
    new_mean: list[float] = Field(..., description="Mean of its valid pixels, per channel.")
    new_std: list[float] = Field(..., description="Std of its valid pixels, per channel.")
    mean_shift_sigma: list[float] = Field(..., description="(its mean - train mean) / train std, per channel.")
    std_ratio: list[float] = Field(..., description="its std / train std, per channel.")
    exceeds: list[str] = Field(..., description="The channels on which it alone exceeds a blocker limit.")


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
    blockers: list[str] = Field(..., description="The channels that block deployment (pooled over all rasters).")
    ok: bool = Field(..., description="No channel blocks deployment.")
    training_regions: list[TrainingRegion] | None = Field(
        None, description="The training regions the stats record moments of (None: stats written before they were)."
    )
    per_file: list[FileDrift] = Field(default_factory=list, description="Each raster's own moments, in read order.")
    blocking_files: list[str] = Field(
        default_factory=list,
        description="The rasters whose own shift exceeds a limit on a blocked channel: the ones that drive the block.",
    )


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
    names: Sequence[str] | None = None,
    fixes: RasterFixes = PREDICT_FIXES,
) -> DriftReport:
    """Compare the new imagery's per-channel moments with the package's stats; write JSON + Markdown reports.

    Every raster is checked against the package's raster contract (``rgb_bands`` replaces its band map) before
    any is read; nothing is written unless the report is complete. ``package_dir`` may be a package
    :func:`~rtscore.inference.predict.load_package` loaded (a campaign's drift check); ``names`` says what to call
    each raster in the report (a campaign's scene ids; default: its path). ``fixes``: how a refused raster is fixed
    where the user is (default: ``rts drift``'s command line; a campaign passes
    :data:`~rtscore.data.raster.bands.MAP_FIXES`)."""
    pkg = package_dir.path if isinstance(package_dir, LoadedPackage) else Path(package_dir)
    refuse_output_in_package(output_dir, pkg)
    binding, stats, transform, contract = _package_inputs(package_dir)
    contract = input_contract(contract, rgb_bands)
    channel_names = binding.names
    files = _input_files(input_dir_or_files)
    labels = [str(f) for f in files] if names is None else [str(n) for n in names]
    if len(labels) != len(files):
        raise DriftError(f"{len(labels)} names for {len(files)} rasters: one name per raster")
    moments, per_file_moments = _imagery_moments(contract, binding, files, transform, fixes)
    n_valid = int(moments.n[0])
    if n_valid == 0:
        raise DriftError(f"no valid pixel (by the NoData rule: alpha, mask or RGB nodata) in {len(files)} raster(s)")
    channels = _channels_drift(stats, channel_names, moments, n_valid)
    blockers = [ch.channel for ch in channels if ch.blocker]
    per_file = [_file_drift(label, m, stats, channel_names) for label, m in zip(labels, per_file_moments, strict=True)]
    report = DriftReport(
        package=str(pkg),
        stats_source=stats.source,
        files=[str(f) for f in files],
        valid_pixels=n_valid,
        clipped_to_training_percentiles=transform.clip_min is not None,
        channels=channels,
        blockers=blockers,
        ok=not blockers,
        training_regions=None
        if stats.regions is None
        else [TrainingRegion(region=r.region, n_tiles=r.n_tiles, n_pixels=r.n_pixels) for r in stats.regions],
        per_file=per_file,
        blocking_files=[f.name for f in per_file if set(f.exceeds) & set(blockers)],
    )
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / REPORT_JSON, report.model_dump(mode="json"))
    atomic_write_text(out / REPORT_MD, render_markdown(report))
    return report


def _imagery_moments(
    contract: RasterContract,
    binding: InputBinding,
    files: Sequence[Path],
    transform: InputTransform,
    fixes: RasterFixes,
) -> tuple[RunningMoments, list[RunningMoments]]:
    """The new imagery's moments, pooled over all rasters and each raster's own (in ``files``' order). Every raster
    is checked (headers, EXTRA grid, undeclared NaN/inf) before any pixel counts: a bad one fails the report before
    a long read, not after."""
    n_channels = len(binding.names)
    moments = RunningMoments.empty(n_channels)
    per_file: list[RunningMoments] = []
    with gdal_env():
        for f in files:
            with open_checked(contract, binding, f, extra_input(binding, f, None), fixes=fixes):
                pass
        for f in files:
            own = RunningMoments.empty(n_channels)
            _accumulate_file(contract, binding, f, transform, own)
            moments.merge(own)
            per_file.append(own)
    return moments, per_file


def _channels_drift(
    stats: NormalizationStats, channel_names: Sequence[str], moments: RunningMoments, n_valid: int
) -> list[ChannelDrift]:
    """Each channel's pooled drift against the training stats, with where it lies among the training regions'."""
    new_std = moments.std
    return [
        _channel_drift(
            name,
            float(stats.mean[c]),
            float(stats.std[c]),
            float(moments.mean[c]),
            float(new_std[c]),
            n_valid,
            _region_spread(stats, c, float(moments.mean[c]), float(new_std[c])),
        )
        for c, name in enumerate(channel_names)
    ]


def _channels_table(report: DriftReport) -> list[str]:
    """The report's main table: one row per channel, its moments against training's, the drift measures, the verdict."""
    rows = []
    for ch in report.channels:
        verdict = "BLOCKER: " + "; ".join(ch.reasons) if ch.blocker else "ok"
        spread = "n/a" if ch.regions is None else f"{ch.regions.mean_min:.3f} – {ch.regions.mean_max:.3f}"
        rows.append(
            [
                ch.channel,
                f"{ch.train_mean:.3f}",
                f"{ch.train_std:.3f}",
                spread,
                f"{ch.new_mean:.3f}",
                f"{ch.new_std:.3f}",
                f"{ch.mean_shift_sigma:+.3f}",
                f"{ch.std_ratio:.3f}",
                verdict,
            ]
        )
    return md_table(
        [
            "channel",
            "train mean",
            "train std",
            "training regions' means",
            "new mean",
            "new std",
            "Δmean / σ_train",
            "σ_new / σ_train",
            "verdict",
        ],
        rows,
    )


def render_markdown(report: DriftReport, *, console: bool = False) -> str:
    """`drift_report.md`: one row per channel with the moments, the training regions' range of means, the drift
    measures and the verdict; what a blocked channel's shift means; then each training region's moments and each
    raster's own shifts. ``console``: without those two lists (their counts instead; ``rts drift`` prints it)."""
    lines = [
        "# Input drift report",
        "",
        f"Package `{report.package}`; {len(report.files)} raster(s), {report.valid_pixels:,} valid pixels.",
        f"Blocker when |Δmean| > {MAX_MEAN_SHIFT_SIGMA} σ_train or |σ_new/σ_train − 1| > {MAX_STD_RATIO_DEVIATION}, "
        "decided on the valid pixels of all rasters pooled (a dataset-level report, guide §4.1).",
        "",
    ]
    lines += _channels_table(report)
    verdict = "OK: no drift blocker" if report.ok else f"BLOCKED: drift on {', '.join(report.blockers)}"
    lines += ["", f"**Verdict: {verdict}**"]
    blocked = [ch for ch in report.channels if ch.blocker]
    if blocked:
        lines += ["", *(f"- {ch.channel}: {ch.coverage}" for ch in blocked)]
    lines += ["", *_drivers_lines(report, console)]
    if report.training_regions is None:
        lines += [
            "",
            "The stats record no training regions (computed before they were): recompute them (`rts stats`, or the "
            "normalization-stats stage) to see the spread training covered.",
        ]
    elif console:
        lines += ["", f"{len(report.training_regions)} training region(s): their moments in {REPORT_MD}."]
    else:
        lines += ["", *_regions_table(report)]
    if not console:
        lines += ["", *_files_table(report)]
    return "\n".join(lines) + "\n"


def _drivers_lines(report: DriftReport, console: bool) -> list[str]:
    """The rasters that drive a block (or the count on the console)."""
    n = len(report.per_file)
    if report.ok:
        return [f"{n} raster(s) read; each one's own shifts in {REPORT_MD} and {REPORT_JSON}."]
    drivers = report.blocking_files
    if not drivers:
        return [
            f"No raster of the {n} exceeds a limit on a blocked channel on its own: the spread between rasters "
            "drives the pooled verdict."
        ]
    if console:
        return [
            f"{len(drivers)} of {n} raster(s) exceed a limit on a blocked channel on their own: named in {REPORT_MD}."
        ]
    return [
        f"Rasters exceeding a limit on a blocked channel on their own ({len(drivers)} of {n}): "
        + ", ".join(f"`{d}`" for d in drivers)
        + "."
    ]


def _regions_table(report: DriftReport) -> list[str]:
    """Each training region's tiles, pixels and per-channel mean ± std."""
    assert report.training_regions is not None
    names = [ch.channel for ch in report.channels]
    rows = []
    for r in report.training_regions:
        cells = [
            f"{ch.regions.means[r.region]:.3f} ± {ch.regions.stds[r.region]:.3f}" if ch.regions is not None else "n/a"
            for ch in report.channels
        ]
        rows.append([r.region, f"{r.n_tiles:,}", f"{r.n_pixels:,}", *cells])
    header = ["region", "tiles", "valid pixels", *(f"{n} mean ± std" for n in names)]
    return ["## Training regions", "", *md_table(header, rows)]


def _files_table(report: DriftReport) -> list[str]:
    """Each raster's own valid pixels, shifts and the channels it alone exceeds a limit on."""
    names = [ch.channel for ch in report.channels]
    rows = []
    for f in report.per_file:
        cells = (
            [f"{d:+.3f}, {r:.3f}" for d, r in zip(f.mean_shift_sigma, f.std_ratio, strict=True)]
            if f.valid_pixels
            else ["no valid pixel"] * len(names)
        )
        rows.append([f"`{f.name}`", f"{f.valid_pixels:,}", *cells, ", ".join(f.exceeds) or "–"])
    header = ["raster", "valid pixels", *(f"{n} Δmean / σ, σ ratio" for n in names), "exceeds alone"]
    return ["## Rasters", "", *md_table(header, rows)]


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


def _region_spread(stats: NormalizationStats, c: int, m_new: float, s_new: float) -> RegionSpread | None:
    """Channel ``c``'s moments in each training region the stats record, and whether the new ones lie among them."""
    if not stats.regions:
        return None
    means = {r.region: float(r.mean[c]) for r in stats.regions}
    stds = {r.region: float(r.std[c]) for r in stats.regions}
    lo, hi = min(means.values()), max(means.values())
    s_lo, s_hi = min(stds.values()), max(stds.values())
    return RegionSpread(
        means=means,
        stds=stds,
        mean_min=lo,
        mean_max=hi,
        std_min=s_lo,
        std_max=s_hi,
        mean_inside=lo <= m_new <= hi,
        std_inside=s_lo <= s_new <= s_hi,
    )


def _exceeds(shift: float, ratio: float) -> list[str]:
    """Why one set of moments exceeds the blocker limits (empty when it does not)."""
    reasons = []
    if abs(shift) > MAX_MEAN_SHIFT_SIGMA:
        reasons.append(f"mean shift {shift:+.2f} σ_train exceeds ±{MAX_MEAN_SHIFT_SIGMA} σ")
    if abs(ratio - 1.0) > MAX_STD_RATIO_DEVIATION:
        reasons.append(f"std ratio {ratio:.2f} outside 1 ± {MAX_STD_RATIO_DEVIATION}")
    return reasons


def _coverage(shift: float, ratio: float, m_new: float, s_new: float, spread: RegionSpread | None) -> str:
    """Of a blocked channel: whether the new moments lie outside what the training regions covered, or only differ
    from the pooled ones."""
    if spread is None:
        return (
            "the stats record no training regions, so it is not known whether training covered such imagery "
            "(recompute the stats to see)"
        )

    def span(values: dict[str, float], lo: float, hi: float) -> str:
        if lo == hi:
            return f"{lo:.3f} (every region)"
        named = {pick: next(k for k, v in values.items() if v == pick) for pick in (lo, hi)}
        return f"{lo:.3f} ({named[lo]}) … {hi:.3f} ({named[hi]})"

    def place(what: str, new: float, inside: bool, values: dict[str, float], lo: float, hi: float) -> str:
        rng = span(values, lo, hi)
        if inside:
            return (
                f"the new {what} {new:.3f} lies inside the training regions' {what}s {rng}: it differs from the pooled "
                f"training {what} only (training covered such imagery, in some regions)"
            )
        side = "above every" if new > hi else "below every"
        return f"the new {what} {new:.3f} lies {side} training region's {what} ({rng}): outside what training covered"

    said = []
    if abs(shift) > MAX_MEAN_SHIFT_SIGMA:
        said.append(place("mean", m_new, spread.mean_inside, spread.means, spread.mean_min, spread.mean_max))
    if abs(ratio - 1.0) > MAX_STD_RATIO_DEVIATION:
        said.append(place("std", s_new, spread.std_inside, spread.stds, spread.std_min, spread.std_max))
    return "; ".join(said)


def _channel_drift(
    name: str, m_train: float, s_train: float, m_new: float, s_new: float, n_valid: int, spread: RegionSpread | None
) -> ChannelDrift:
    """One channel's drift: mean shift in training sigmas and std ratio, a blocker past either limit, and where the
    new moments lie against the training regions' (``spread``)."""
    if not (s_train > 0 and all(math.isfinite(v) for v in (m_train, s_train, m_new, s_new))):
        raise DriftError(
            f"channel {name}: no drift measure (training mean {m_train:g}, std {s_train:g}; new imagery mean "
            f"{m_new:g}, std {s_new:g}): a channel needs a positive training std and finite values in the new "
            f"imagery's {n_valid:,} valid pixels"
        )
    shift = (m_new - m_train) / s_train
    ratio = s_new / s_train
    reasons = _exceeds(shift, ratio)
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
        regions=spread,
        coverage=_coverage(shift, ratio, m_new, s_new, spread) if reasons else None,
    )


def _file_drift(label: str, m: RunningMoments, stats: NormalizationStats, names: Sequence[str]) -> FileDrift:
    """One raster's own moments and shifts against the training stats."""
    n = int(m.n[0]) if m.n.size else 0
    if n == 0:
        return FileDrift(
            name=label, valid_pixels=0, new_mean=[], new_std=[], mean_shift_sigma=[], std_ratio=[], exceeds=[]
        )
    shift = (m.mean - stats.mean) / stats.std
    ratio = m.std / stats.std
    return FileDrift(
        name=label,
        valid_pixels=n,
        new_mean=[float(v) for v in m.mean],
        new_std=[float(v) for v in m.std],
        mean_shift_sigma=[float(v) for v in shift],
        std_ratio=[float(v) for v in ratio],
        exceeds=[c for c, d, r in zip(names, shift, ratio, strict=True) if _exceeds(float(d), float(r))],
    )
