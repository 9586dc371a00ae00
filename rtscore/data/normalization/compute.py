"""Per-channel normalization statistics of the train split (guide §4.1, §4.5), streamed in one pass over the store
(a second over the EXTRA channels only when clipping is asked for).

The same pass keeps each training region's moments apart (the store's per-tile ``region``): per region a histogram
of each RGB channel and the EXTRA channels' moments (or, when clipping, their histograms in the second pass), so the
regions' moments are those of the values the pooled ones describe (clipped to the pooled bounds), and the pooled
histograms are their sums. The drift gate shows a new scene against their spread (`rtscore.inference.drift`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from rtscore.config.binding import ExtraChannel, InputBinding, binding_conflicts
from rtscore.data.normalization.stats import NormalizationStats, NormalizationStatsError, RegionStats
from rtscore.data.store.attrs import StoreAttrs
from rtscore.data.store.format import read_array, read_store_attrs, zarr_group
from rtscore.data.store.reader import iter_pixel_blocks

EXTRA_HIST_BINS = 4096


@dataclass
class RunningMoments:
    """Mergeable count / mean / M2 per channel (Chan et al. parallel Welford)."""

    n: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, channels: int) -> RunningMoments:
        return cls(np.zeros(channels, np.float64), np.zeros(channels, np.float64), np.zeros(channels, np.float64))

    def add(self, values: np.ndarray) -> None:
        """Merge a (C, K) block of valid values."""
        if values.shape[1] == 0:
            return
        v = values.astype(np.float64)
        n_b = float(v.shape[1])
        mean_b = v.mean(axis=1)
        m2_b = ((v - mean_b[:, None]) ** 2).sum(axis=1)
        self.merge(RunningMoments(np.full_like(self.n, n_b), mean_b, m2_b))

    def merge(self, other: RunningMoments) -> None:
        n = self.n + other.n
        safe = np.where(n > 0, n, 1.0)
        delta = other.mean - self.mean
        self.mean = self.mean + delta * other.n / safe
        self.m2 = self.m2 + other.m2 + delta**2 * self.n * other.n / safe
        self.n = n

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / np.where(self.n > 0, self.n, 1.0))


def _shard_blocks(
    path: Path, limit: int | None, extra_idx: list[int]
) -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """Yield (rgb, extra, alpha) for runs of tiles, one shard at a time (sequential, bounded memory)."""
    return iter_pixel_blocks(path, limit, extra_idx)


def _valid_pixels(block: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(T, C, H, W) and a (T, H, W) mask -> (C, K) values of valid pixels, tile by tile."""
    c = block.shape[1]
    return np.moveaxis(block, 1, 0).reshape(c, -1)[:, valid.reshape(-1)]


def _pixel_regions(valid: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The region code of each of :func:`_valid_pixels`' K values, from the (T,) codes of the block's tiles."""
    return np.repeat(codes, valid.reshape(valid.shape[0], -1).sum(axis=1))


def _tile_regions(path: Path) -> tuple[list[str], np.ndarray] | None:
    """(region names, each tile's index into them) from the store's per-tile metadata; None when it has none."""
    import zarr

    meta = zarr_group(zarr.open_group(str(path), mode="r"), "meta")
    if "region" not in meta:
        return None
    names, codes = np.unique(np.array([str(r) for r in read_array(meta, "region")]), return_inverse=True)
    return [str(n) for n in names], codes.astype(np.int64).reshape(-1)


def store_binding(
    path: Path, attrs: StoreAttrs, extra_channels: Sequence[str] | Sequence[ExtraChannel] | None
) -> InputBinding:
    """The binding of the channels to read from a store: all it holds, the names given, or (given
    :class:`ExtraChannel` entries, e.g. ``channels.extra``) exactly those name -> band bindings, which the store
    must have been written with.

    Raises:
        NormalizationStatsError: a channel the store lacks, or bound there to another EXTRA band.
    """
    stored = attrs.binding()
    if extra_channels is None:
        return stored
    declared = [c for c in extra_channels if isinstance(c, ExtraChannel)]
    names = [c.name if isinstance(c, ExtraChannel) else c for c in extra_channels]
    missing = [n for n in names if n not in stored.extra_names]
    if missing:
        raise NormalizationStatsError(f"store {path} has no extra channels {missing} (has {stored.extra_names})")
    conflicts = binding_conflicts(declared, stored.bands_by_name())
    if conflicts:
        raise NormalizationStatsError(
            f"store {path} was written with another EXTRA band binding than channels.extra: {'; '.join(conflicts)} "
            "(regenerate the store with the config's binding)"
        )
    return stored.select(names)


def compute_normalization_stats(
    store: str | Path,
    *,
    extra_channels: Sequence[str] | Sequence[ExtraChannel] | None = None,
    clip_percentiles: tuple[float, float] | None = None,
    max_tiles: int | None = None,
    progress: bool = False,
) -> NormalizationStats:
    """Stream the train store once: exact RGB moments from 256-bin histograms, Welford for extras.

    NoData pixels (alpha 0) and full-NoData tiles never count; valid pitch-dark pixels do. ``extra_channels``
    selects the extra channels (all the store holds when None); given as ``channels.extra`` entries, the store's
    recorded band binding must agree (:func:`store_binding`). The stats record each extra channel's band, and each
    training region's moments (module docstring; none when the store records no regions).
    """
    path = Path(store)
    attrs = read_store_attrs(path)
    if attrs.split != "train":
        raise NormalizationStatsError(
            f"normalization stats must come from the train split only; {path} holds split {attrs.split!r}"
        )
    stored = list(attrs.extra_channel_names)
    binding = store_binding(path, attrs, extra_channels)
    names = ["R", "G", "B", *binding.extra_names]
    extra_idx = [stored.index(c) for c in binding.extra_names]
    blocks = _shard_blocks(path, max_tiles, extra_idx)
    if progress:
        from tqdm import tqdm

        blocks = tqdm(blocks, desc=f"stats {path.name}", unit="shard")
    regions = _tile_regions(path)
    region_names, codes = regions if regions is not None else ([""], np.zeros(0, np.int64))
    scan = _Scan(path, max_tiles, extra_idx, region_names, codes)
    first = _StatsPass.over(scan, blocks)
    if first.n_used == 0 or first.rgb_hist[0].sum() == 0:
        raise NormalizationStatsError(f"store {path}: no valid (alpha > 0) pixels; the train split is empty")
    moments = _channel_moments(first, scan, clip_percentiles)
    zero = [names[i] for i in np.flatnonzero(moments.std <= 0)]
    if zero:
        raise NormalizationStatsError(f"store {path}: channels {zero} are constant (std 0); cannot normalize")
    return NormalizationStats(
        channel_names=names,
        mean=moments.mean,
        std=moments.std,
        n_tiles_used=first.n_used,
        dataset_version=attrs.dataset_version,
        computed_date=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        clip_min=moments.clip_min,
        clip_max=moments.clip_max,
        source=str(path),
        extra_bands=binding.extra_bands,
        regions=None if regions is None else _region_stats(first, scan.region_names, moments),
    )


@dataclass(frozen=True)
class _Scan:
    """What every pass over the store reads: its tiles (the first ``max_tiles``, or all), the EXTRA channels
    wanted (their indices among the store's), and each tile's region (``codes`` into ``region_names``; no codes:
    the store records no regions, and every tile is in the one unnamed region)."""

    path: Path
    max_tiles: int | None
    extra_idx: list[int]
    region_names: list[str]
    codes: np.ndarray

    @property
    def n_extra(self) -> int:
        return len(self.extra_idx)

    @property
    def n_regions(self) -> int:
        return len(self.region_names)

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
        """A fresh pass: (rgb, extra, alpha) for runs of tiles (:func:`_shard_blocks`)."""
        return _shard_blocks(self.path, self.max_tiles, self.extra_idx)

    def tile_codes(self, offset: int, t: int) -> np.ndarray:
        """The regions of the ``t`` tiles from ``offset`` on (all 0 when the store records none)."""
        return self.codes[offset : offset + t] if self.codes.size else np.zeros(t, np.int64)


@dataclass
class _Moments:
    """Every channel's moments (RGB, then EXTRA): pooled (C,), with the clip bounds (None: not clipped), and each
    region's (R, C), NaN for a region without a valid pixel."""

    mean: np.ndarray
    std: np.ndarray
    clip_min: np.ndarray | None
    clip_max: np.ndarray | None
    region_mean: np.ndarray
    region_std: np.ndarray


def _channel_moments(first: _StatsPass, scan: _Scan, clip: tuple[float, float] | None) -> _Moments:
    """The moments the stats record, from the first pass: RGB from its histograms, EXTRA from its running moments
    or (clipping) from a second pass's histograms (:func:`_extra_moments`); the regions' clipped to the pooled
    bounds."""
    mean, std, clip_min, clip_max = _rgb_moments(first.rgb_hist, clip)
    r_mean, r_std = _region_rgb_moments(first.region_hist, clip_min, clip_max)
    if scan.n_extra:
        e = _extra_moments(first, scan, clip)
        if e.lo is not None and e.hi is not None:
            clip_min = np.concatenate([clip_min, e.lo]) if clip_min is not None else None
            clip_max = np.concatenate([clip_max, e.hi]) if clip_max is not None else None
        mean, std = np.concatenate([mean, e.mean]), np.concatenate([std, e.std])
        r_mean, r_std = np.concatenate([r_mean, e.region_mean], axis=1), np.concatenate([r_std, e.region_std], axis=1)
    return _Moments(mean, std, clip_min, clip_max, r_mean, r_std)


def _region_stats(first: _StatsPass, region_names: list[str], moments: _Moments) -> list[RegionStats]:
    """Each training region's tiles, valid pixels and moments; a region whose tiles hold no valid pixel has no
    moments, and is left out."""
    return [
        RegionStats(
            name,
            int(first.region_used[k]),
            int(first.region_hist[k, 0].sum()),
            moments.region_mean[k],
            moments.region_std[k],
        )
        for k, name in enumerate(region_names)
        if first.region_hist[k, 0].sum() > 0
    ]


@dataclass
class _StatsPass:
    """The first pass over a store's valid pixels: per region the RGB histograms, the EXTRA channels' moments and
    the tiles used; pooled, the EXTRA channels' moments and ranges."""

    region_hist: np.ndarray  # (R, 3, 256) int64
    region_extra: list[RunningMoments]  # one per region
    region_used: np.ndarray  # (R,) tiles with at least one valid pixel
    extra_mom: RunningMoments
    extra_lo: np.ndarray
    extra_hi: np.ndarray

    @property
    def rgb_hist(self) -> np.ndarray:
        """(3, 256) pooled histograms: the regions' summed."""
        return self.region_hist.sum(axis=0)

    @property
    def n_used(self) -> int:
        return int(self.region_used.sum())

    @classmethod
    def over(cls, scan: _Scan, blocks: Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]) -> _StatsPass:
        """The pass over ``blocks`` (``scan``'s, perhaps behind a progress bar)."""
        n_extra, n_regions = scan.n_extra, scan.n_regions
        acc = cls(
            np.zeros((n_regions, 3, 256), np.int64),
            [RunningMoments.empty(n_extra) for _ in range(n_regions)],
            np.zeros(n_regions, np.int64),
            RunningMoments.empty(n_extra),
            np.full(n_extra, np.inf),
            np.full(n_extra, -np.inf),
        )
        offset = 0
        for rgb, extra, alpha in blocks:
            t = rgb.shape[0]
            tile_codes = scan.tile_codes(offset, t)
            offset += t
            valid = alpha > 0
            np.add.at(acc.region_used, tile_codes, valid.reshape(t, -1).any(axis=1))
            pix = _pixel_regions(valid, tile_codes)
            vals = _valid_pixels(rgb, valid)
            for c in range(3):  # one bincount per channel for every region: index region * 256 + value
                flat = np.bincount(pix * 256 + vals[c], minlength=n_regions * 256)
                acc.region_hist[:, c] += flat.reshape(n_regions, 256)
            if extra is not None and n_extra:
                ev = _valid_pixels(extra, valid)
                if not np.isfinite(ev).all():
                    raise NormalizationStatsError(
                        f"store {scan.path}: extra channels hold non-finite values in valid pixels"
                    )
                acc.extra_mom.add(ev)
                for k in np.unique(tile_codes):
                    acc.region_extra[k].add(ev[:, pix == k])
                if ev.shape[1]:
                    acc.extra_lo = np.minimum(acc.extra_lo, ev.min(axis=1))
                    acc.extra_hi = np.maximum(acc.extra_hi, ev.max(axis=1))
        return acc


def _hist_percentile(hist: np.ndarray, centers: np.ndarray, q: float) -> float:
    cdf = np.cumsum(hist) / hist.sum()
    return float(centers[min(int(np.searchsorted(cdf, q / 100.0)), len(centers) - 1)])


def _hist_moments(hist: np.ndarray, centers: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    """Mean/std of values clipped to [lo, hi], from a histogram."""
    v = np.clip(centers, lo, hi)
    n = hist.sum()
    mean = float((hist * v).sum() / n)
    return mean, float(np.sqrt((hist * (v - mean) ** 2).sum() / n))


def _region_rgb_moments(
    hist: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """(R, 3) means and stds of each region's RGB histograms, clipped to the pooled bounds (none: 0 and 255); a
    region without a valid pixel gets NaN (it is left out of the stats)."""
    centers = np.arange(256, dtype=np.float64)
    lo_ = lo if lo is not None else np.zeros(3)
    hi_ = hi if hi is not None else np.full(3, 255.0)
    out = np.full((2, hist.shape[0], 3), np.nan)
    for k, c in np.ndindex(hist.shape[0], 3):
        if hist[k, c].sum():
            out[:, k, c] = _hist_moments(hist[k, c], centers, float(lo_[c]), float(hi_[c]))
    return out[0], out[1]


def _rgb_moments(
    hist: np.ndarray, clip: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    centers = np.arange(256, dtype=np.float64)
    lo = [_hist_percentile(h, centers, clip[0]) for h in hist] if clip else [0.0] * 3
    hi = [_hist_percentile(h, centers, clip[1]) for h in hist] if clip else [255.0] * 3
    moments = [_hist_moments(h, centers, a, b) for h, a, b in zip(hist, lo, hi, strict=True)]
    mean = np.array([m for m, _ in moments])
    std = np.array([s for _, s in moments])
    if clip is None:
        return mean, std, None, None
    return mean, std, np.array(lo), np.array(hi)


@dataclass
class _ExtraMoments:
    """The EXTRA channels' moments, pooled and (R, E) per region, and their clip bounds (None: not clipped)."""

    mean: np.ndarray
    std: np.ndarray
    lo: np.ndarray | None
    hi: np.ndarray | None
    region_mean: np.ndarray
    region_std: np.ndarray


def _extra_moments(first: _StatsPass, scan: _Scan, clip: tuple[float, float] | None) -> _ExtraMoments:
    """The EXTRA channels' moments: the first pass's running ones, or when clipping, those of the values clipped to
    the pooled percentiles, which need the second pass (:func:`_extra_clipped`)."""
    if clip is not None:
        return _extra_clipped(scan, first.extra_lo, first.extra_hi, clip)
    mom = first.extra_mom
    region_mean = np.stack([m.mean for m in first.region_extra])
    region_std = np.stack([m.std for m in first.region_extra])
    return _ExtraMoments(mom.mean, mom.std, None, None, region_mean, region_std)


def _extra_clipped(scan: _Scan, lo: np.ndarray, hi: np.ndarray, clip: tuple[float, float]) -> _ExtraMoments:
    """Second pass for float bands only when clipping is asked for: histograms over the observed range [lo, hi],
    per region (the pooled ones their sum)."""
    n, n_regions = lo.size, scan.n_regions
    hist = np.zeros((n_regions, n, EXTRA_HIST_BINS), np.int64)
    width = np.where(hi > lo, hi - lo, 1.0)
    offset = 0
    for _, extra, alpha in scan.blocks():
        t = alpha.shape[0]
        tile_codes = scan.tile_codes(offset, t)
        offset += t
        if extra is None:
            continue
        valid = alpha > 0
        pix = _pixel_regions(valid, tile_codes)
        ev = _valid_pixels(extra, valid).astype(np.float64)
        idx = np.clip(((ev - lo[:, None]) / width[:, None] * EXTRA_HIST_BINS).astype(np.int64), 0, EXTRA_HIST_BINS - 1)
        for c in range(n):
            flat = np.bincount(pix * EXTRA_HIST_BINS + idx[c], minlength=n_regions * EXTRA_HIST_BINS)
            hist[:, c] += flat.reshape(n_regions, EXTRA_HIST_BINS)
    pooled = hist.sum(axis=0)
    out = np.zeros((4, n))
    regional = np.full((2, n_regions, n), np.nan)
    for c in range(n):
        centers = lo[c] + (np.arange(EXTRA_HIST_BINS) + 0.5) * width[c] / EXTRA_HIST_BINS
        a = _hist_percentile(pooled[c], centers, clip[0])
        b = _hist_percentile(pooled[c], centers, clip[1])
        out[:, c] = (*_hist_moments(pooled[c], centers, a, b), a, b)
        for k in range(n_regions):
            if hist[k, c].sum():
                regional[:, k, c] = _hist_moments(hist[k, c], centers, a, b)
    return _ExtraMoments(out[0], out[1], out[2], out[3], regional[0], regional[1])
