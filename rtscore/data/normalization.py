"""Per-channel normalization statistics of the train split (guide §4.1, §4.5), streamed in one pass."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.binding import RGB_NAMES, ExtraChannel, InputBinding, binding_conflicts
from rtscore.data.store import iter_pixel_blocks, read_store_attrs
from rtscore.errors import PipelineError
from rtscore.storage import atomic_write_json

EXTRA_HIST_BINS = 4096


class NormalizationStatsError(PipelineError, ValueError):
    """A stats file is missing, malformed, or bound to other channels than the config's."""


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


@dataclass
class NormalizationStats:
    """The loaded `normalization_stats.json`: channel names bound to mean/std (raw units)."""

    channel_names: list[str]
    mean: np.ndarray
    std: np.ndarray
    n_tiles_used: int
    dataset_version: str
    computed_date: str
    clip_min: np.ndarray | None = None
    clip_max: np.ndarray | None = None
    source: str = field(default="<memory>", repr=False)
    extra_bands: list[int] | None = None  # 0-based EXTRA band of each extra channel (None: not recorded)

    def to_json(self) -> dict[str, Any]:
        """The guide §4.5 schema; clip bounds appear only when clipping was configured, ``extra.bands`` (the
        EXTRA band each extra channel was read from) when known."""

        def block(sl: slice) -> dict[str, Any]:
            out: dict[str, Any] = {
                "channel_names": self.channel_names[sl],
                "mean": [float(x) for x in self.mean[sl]],
                "std": [float(x) for x in self.std[sl]],
            }
            if self.clip_min is not None and self.clip_max is not None:
                out["clip_min"] = [float(x) for x in self.clip_min[sl]]
                out["clip_max"] = [float(x) for x in self.clip_max[sl]]
            if sl.start == 3 and self.extra_bands is not None:
                out["bands"] = list(self.extra_bands)
            return out

        doc: dict[str, Any] = {
            "dataset_version": self.dataset_version,
            "computed_date": self.computed_date,
            "n_tiles_used": self.n_tiles_used,
            "rgb": block(slice(0, 3)),
        }
        if len(self.channel_names) > 3:
            doc["extra"] = block(slice(3, None))
        return doc


# --------------------------------------------------------------------------- the input transform
def fill_where(channels: np.ndarray, where: np.ndarray, fill_values: Sequence[float], axis: int) -> None:
    """In place: channel c at ``where`` becomes ``fill_values[c]`` (rounded/clipped for integer dtypes)."""
    planes = np.moveaxis(channels, axis, 0)  # a view: writes land in ``channels``
    if len(fill_values) != planes.shape[0]:
        raise ValueError(f"{len(fill_values)} fill values for {planes.shape[0]} channels")
    fill = np.asarray(fill_values, dtype=np.float64)
    if np.issubdtype(channels.dtype, np.integer):
        info = np.iinfo(channels.dtype)
        fill = np.clip(np.rint(fill), info.min, info.max)
    for plane, value in zip(planes, fill.astype(channels.dtype), strict=True):
        plane[where] = value


def normalize_in_place(
    out: np.ndarray, mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray, axis: int
) -> None:
    """float32 ``out`` becomes ``(out - mean) / std``; in place, so no full-size temporaries."""
    shape = [1] * out.ndim
    shape[axis] = -1
    m = np.asarray(mean, dtype=np.float32).reshape(shape)
    s = np.asarray(std, dtype=np.float32).reshape(shape)
    if m.size != out.shape[axis] or s.size != m.size:
        raise ValueError(f"mean/std of length {m.size}/{s.size} for {out.shape[axis]} channels")
    out -= m
    out /= s


@dataclass(frozen=True)
class InputTransform:
    """Raw bound channels -> model input: the one deterministic transform of training, evaluation, calibration,
    ``predict`` and (its clipping) ``drift`` (guide §4.1, §4.4). Its parameters travel in the package:
    mean, std and clip bounds in ``normalization_stats.json``, the NoData fill in ``model_config.yaml``.

    1. :meth:`clip`: every channel clipped to the training percentiles ``[clip_min, clip_max]`` when the stats
       carry them (``normalization.clip_percentiles``); RGB stays uint8 (its bounds are whole numbers).
    2. :meth:`normalise`: the (C, H, W) float32 stack; with ``nodata_fill`` (``data.nodata_handling``) alpha-0
       pixels take each channel's raw training mean; then ``(x - mean) / std``.

    Training runs colour augmentation on the clipped uint8 RGB between the two steps; every other pass calls
    the transform itself (:meth:`__call__`).
    """

    mean: np.ndarray
    std: np.ndarray
    clip_min: np.ndarray | None = None
    clip_max: np.ndarray | None = None
    nodata_fill: bool = True

    @classmethod
    def from_stats(cls, stats: NormalizationStats, *, nodata_fill: bool = True) -> InputTransform:
        return cls(
            mean=np.asarray(stats.mean, np.float32),
            std=np.asarray(stats.std, np.float32),
            clip_min=None if stats.clip_min is None else np.asarray(stats.clip_min, np.float64),
            clip_max=None if stats.clip_max is None else np.asarray(stats.clip_max, np.float64),
            nodata_fill=nodata_fill,
        )

    def clip(self, rgb: np.ndarray, extra: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Step 1 on (3, H, W) uint8 RGB and (E, H, W) float32 extras (new arrays; the inputs are untouched)."""
        if self.clip_min is None or self.clip_max is None:
            return rgb, extra
        lo, hi = self.clip_min[:, None, None], self.clip_max[:, None, None]
        rgb = np.clip(rgb, lo[:3], hi[:3]).astype(np.uint8)
        if extra is not None:
            extra = np.clip(extra, lo[3:], hi[3:]).astype(np.float32)
        return rgb, extra

    def normalise(self, rgb: np.ndarray, extra: np.ndarray | None, alpha: np.ndarray) -> np.ndarray:
        """Step 2: the normalised (C, H, W) float32 stack of RGB + extras (alpha-0 pixels exactly 0 with the fill).

        CHW because per-channel arithmetic on contiguous planes is several times faster than on HWC pixels.
        """
        stack = np.empty((self.mean.size, *rgb.shape[1:]), dtype=np.float32)
        stack[:3] = rgb
        if extra is not None:
            stack[3:] = extra
        nodata = alpha == 0
        if self.nodata_fill and nodata.any():
            fill_where(stack, nodata, self.mean.tolist(), axis=0)
        normalize_in_place(stack, self.mean, self.std, axis=0)
        return stack

    def __call__(self, rgb: np.ndarray, extra: np.ndarray | None, alpha: np.ndarray) -> np.ndarray:
        """Steps 1 and 2: the model input of a tile or raster window."""
        return self.normalise(*self.clip(rgb, extra), alpha)


# --------------------------------------------------------------------------- computing the stats
_Block = tuple[np.ndarray, np.ndarray | None, np.ndarray]  # (rgb, extra, alpha) of a run of tiles


def _shard_blocks(
    path: Path, limit: int | None, extra_idx: list[int]
) -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """Yield (rgb, extra, alpha) for runs of tiles, one shard at a time (sequential, bounded memory)."""
    return iter_pixel_blocks(path, limit, extra_idx)


def _valid_pixels(block: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(T, C, H, W) and a (T, H, W) mask -> (C, K) values of valid pixels."""
    c = block.shape[1]
    return np.moveaxis(block, 1, 0).reshape(c, -1)[:, valid.reshape(-1)]


def store_binding(
    path: Path, attrs: dict[str, Any], extra_channels: Sequence[str] | Sequence[ExtraChannel] | None
) -> InputBinding:
    """The binding of the channels to read from a store: all it holds, the names given, or (given
    :class:`ExtraChannel` entries, e.g. ``channels.extra``) exactly those name -> band bindings, which the store
    must have been written with.

    Raises:
        NormalizationStatsError: a channel the store lacks, or bound there to another EXTRA band.
    """
    stored = InputBinding.of_store_attrs(attrs)
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
    recorded band binding must agree (:func:`store_binding`). The stats record each extra channel's band.
    """
    path = Path(store)
    attrs = read_store_attrs(path)
    if attrs["split"] != "train":
        raise NormalizationStatsError(
            f"normalization stats must come from the train split only; {path} holds split {attrs['split']!r}"
        )
    stored = list(attrs["extra_channel_names"])
    binding = store_binding(path, attrs, extra_channels)
    wanted = binding.extra_names
    extra_idx = [stored.index(c) for c in wanted]
    names = ["R", "G", "B", *wanted]
    blocks = _shard_blocks(path, max_tiles, extra_idx)
    if progress:
        from tqdm import tqdm

        blocks = tqdm(blocks, desc=f"stats {path.name}", unit="shard")
    first = _StatsPass.over(path, blocks, len(wanted))
    if first.n_used == 0 or first.rgb_hist[0].sum() == 0:
        raise NormalizationStatsError(f"store {path}: no valid (alpha > 0) pixels; the train split is empty")
    mean, std, clip_min, clip_max = _rgb_moments(first.rgb_hist, clip_percentiles)
    if wanted:
        e_mean, e_std = first.extra_mom.mean, first.extra_mom.std
        if clip_percentiles is not None:
            e_mean, e_std, e_lo, e_hi = _extra_clipped(
                path, max_tiles, extra_idx, first.extra_lo, first.extra_hi, clip_percentiles
            )
            clip_min = np.concatenate([clip_min, e_lo]) if clip_min is not None else None
            clip_max = np.concatenate([clip_max, e_hi]) if clip_max is not None else None
        mean, std = np.concatenate([mean, e_mean]), np.concatenate([std, e_std])
    zero = [names[i] for i in np.flatnonzero(std <= 0)]
    if zero:
        raise NormalizationStatsError(f"store {path}: channels {zero} are constant (std 0); cannot normalize")
    return NormalizationStats(
        channel_names=names,
        mean=mean,
        std=std,
        n_tiles_used=first.n_used,
        dataset_version=str(attrs["dataset_version"]),
        computed_date=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        clip_min=clip_min,
        clip_max=clip_max,
        source=str(path),
        extra_bands=binding.extra_bands,
    )


@dataclass
class _StatsPass:
    """The first pass over a store's valid pixels: RGB histograms, the EXTRA channels' moments and ranges."""

    rgb_hist: np.ndarray  # (3, 256) int64
    extra_mom: RunningMoments
    extra_lo: np.ndarray
    extra_hi: np.ndarray
    n_used: int  # tiles with at least one valid pixel

    @classmethod
    def over(
        cls, path: Path, blocks: Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]], n_extra: int
    ) -> _StatsPass:
        acc = cls(
            np.zeros((3, 256), np.int64),
            RunningMoments.empty(n_extra),
            np.full(n_extra, np.inf),
            np.full(n_extra, -np.inf),
            0,
        )
        for rgb, extra, alpha in blocks:
            valid = alpha > 0
            acc.n_used += int(valid.reshape(valid.shape[0], -1).any(axis=1).sum())
            vals = _valid_pixels(rgb, valid)
            for c in range(3):
                acc.rgb_hist[c] += np.bincount(vals[c], minlength=256)
            if extra is not None and n_extra:
                ev = _valid_pixels(extra, valid)
                if not np.isfinite(ev).all():
                    raise NormalizationStatsError(
                        f"store {path}: extra channels hold non-finite values in valid pixels"
                    )
                acc.extra_mom.add(ev)
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


def _extra_clipped(
    path: Path, max_tiles: int | None, extra_idx: list[int], lo: np.ndarray, hi: np.ndarray, clip: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Second pass for float bands only when clipping is asked for: histograms over the observed range."""
    n = lo.size
    hist = np.zeros((n, EXTRA_HIST_BINS), np.int64)
    width = np.where(hi > lo, hi - lo, 1.0)
    for _, extra, alpha in _shard_blocks(path, max_tiles, extra_idx):
        if extra is None:
            continue
        ev = _valid_pixels(extra, alpha > 0).astype(np.float64)
        idx = np.clip(((ev - lo[:, None]) / width[:, None] * EXTRA_HIST_BINS).astype(np.int64), 0, EXTRA_HIST_BINS - 1)
        for c in range(n):
            hist[c] += np.bincount(idx[c], minlength=EXTRA_HIST_BINS)
    out = []
    for c in range(n):
        centers = lo[c] + (np.arange(EXTRA_HIST_BINS) + 0.5) * width[c] / EXTRA_HIST_BINS
        a = _hist_percentile(hist[c], centers, clip[0])
        b = _hist_percentile(hist[c], centers, clip[1])
        out.append((*_hist_moments(hist[c], centers, a, b), a, b))
    arr = np.array(out)
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]


def write_normalization_stats(stats: NormalizationStats, path: str | Path) -> Path:
    p = Path(path)
    atomic_write_json(p, stats.to_json())
    return p


def _block(doc: dict[str, Any], key: str, source: str) -> tuple[list[str], list[float], list[float]]:
    blk = doc.get(key)
    if not isinstance(blk, dict):
        raise NormalizationStatsError(f"{source}: missing '{key}' block")
    try:
        names, mean, std = list(blk["channel_names"]), list(blk["mean"]), list(blk["std"])
    except KeyError as err:
        raise NormalizationStatsError(f"{source}: '{key}' block lacks {err}") from None
    if not len(names) == len(mean) == len(std):
        raise NormalizationStatsError(
            f"{source}: '{key}' has {len(names)} channel_names, {len(mean)} mean and {len(std)} std values"
        )
    return names, mean, std


def load_normalization_stats(
    path: str | Path, extra_channels: Sequence[str] | Sequence[ExtraChannel] = ()
) -> NormalizationStats:
    """Load stats and assert the channel-name binding against the config (guide §4.5).

    ``extra_channels`` are the configured extra channels: names, or ``{name, band}`` entries whose bands must
    equal the bands the stats record (stats written before bands were recorded are checked by name only).
    """
    p = Path(path)
    source = str(p)
    if not p.is_file():
        raise NormalizationStatsError(f"normalization stats file not found: {p}")
    try:
        doc = json.loads(p.read_text())
    except ValueError as err:
        raise NormalizationStatsError(f"{source} is not valid JSON: {err}") from None
    names, mean, std = _block(doc, "rgb", source)
    if names != list(RGB_NAMES):
        raise NormalizationStatsError(f"{source}: rgb.channel_names must be {list(RGB_NAMES)}; got {names}")
    want = [c.name if isinstance(c, ExtraChannel) else c for c in extra_channels]
    has_extra = "extra" in doc
    if want or has_extra:
        e_names, e_mean, e_std = _block(doc, "extra", source) if has_extra else ([], [], [])
        if e_names != want:
            raise NormalizationStatsError(
                f"{source}: extra.channel_names {e_names} do not match the config's channels.extra {want} "
                "(stats of one band must never be applied to another; recompute the stats)"
            )
        names, mean, std = names + e_names, mean + e_mean, std + e_std
    bands = _recorded_bands(doc, source, len(want))
    declared = [c for c in extra_channels if isinstance(c, ExtraChannel)]
    conflicts = binding_conflicts(declared, dict(zip(want, bands, strict=True))) if bands is not None else []
    if conflicts:
        raise NormalizationStatsError(
            f"{source}: the stats were computed from other EXTRA bands than the configured binding: "
            f"{'; '.join(conflicts)} (stats of one band must never be applied to another; recompute the stats)"
        )
    std_arr = np.asarray(std, np.float64)
    if not np.isfinite(std_arr).all() or (std_arr <= 0).any() or not np.isfinite(mean).all():
        raise NormalizationStatsError(f"{source}: mean/std must be finite and std > 0; got std {std}")
    clip_min = clip_max = None
    if "clip_min" in doc["rgb"]:
        clip_min = np.array(doc["rgb"]["clip_min"] + (doc.get("extra", {}).get("clip_min", []) if want else []))
        clip_max = np.array(doc["rgb"]["clip_max"] + (doc.get("extra", {}).get("clip_max", []) if want else []))
    return NormalizationStats(
        channel_names=names,
        mean=np.asarray(mean, np.float64),
        std=std_arr,
        n_tiles_used=int(doc.get("n_tiles_used", 0)),
        dataset_version=str(doc.get("dataset_version", "")),
        computed_date=str(doc.get("computed_date", "")),
        clip_min=clip_min,
        clip_max=clip_max,
        source=source,
        extra_bands=bands,
    )


def _recorded_bands(doc: dict[str, Any], source: str, n_extra: int) -> list[int] | None:
    """``extra.bands`` of a stats file (None when it records none)."""
    if not n_extra:
        return []
    bands = doc.get("extra", {}).get("bands")
    if bands is None:
        return None
    if not isinstance(bands, list) or len(bands) != n_extra or not all(isinstance(b, int) and b >= 0 for b in bands):
        raise NormalizationStatsError(f"{source}: extra.bands must hold {n_extra} band indices >= 0; got {bands}")
    return [int(b) for b in bands]
