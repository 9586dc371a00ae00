"""Per-tile logit histograms split by label: the streaming state behind every pixel metric and PR curve."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from rtscore.data.tiles import IGNORE_INDEX

ArrayLike = np.ndarray | torch.Tensor

# Largest count a uint32 bin holds; a bin counts pixels of one tile, so only a tile of > 4.29e9 valid pixels
# could overflow (a 512² tile has 262,144). The accumulator still checks per-tile totals and refuses.
_UINT32_MAX = np.iinfo(np.uint32).max
_INVALID_CODE = -(1 << 40)  # any label outside {0, 1, 255} maps here so bincount refuses it


@dataclass(frozen=True)
class LogitBins:
    """Uniform bins in logit space, with logit 0 (p = 0.5) on a bin edge.

    Uniform in logits means fine resolution in probability near p = 0 and p = 1, where the thresholds that
    reach high precision at 1:1000 live. Bin k holds logits in [edges[k], edges[k+1]); values below `lo`
    clamp into bin 0 and values at or above `hi` into the last bin. With the defaults the width is 1/64
    logit, a power of two, so `x * scale` is exact and every edge (not only 0) is an exact boundary.

    Attributes:
        n_bins: Number of bins; with lo == -hi it must be even so that 0 is an edge.
        lo: Lower end of the binned range (logits), < 0.
        hi: Upper end of the binned range (logits), > 0.
    """

    n_bins: int = 2048
    lo: float = -16.0
    hi: float = 16.0

    def __post_init__(self) -> None:
        if self.n_bins < 2:
            raise ValueError(f"LogitBins.n_bins must be >= 2; got {self.n_bins}")
        if not self.lo < 0.0 < self.hi:
            raise ValueError(
                f"LogitBins needs lo < 0 < hi so logit 0 is inside the range; got lo={self.lo}, hi={self.hi}"
            )
        k0 = -self.lo * self.scale
        if abs(k0 - round(k0)) > 1e-9 * self.n_bins:
            raise ValueError(
                f"LogitBins(n_bins={self.n_bins}, lo={self.lo}, hi={self.hi}) does not put logit 0 (p = 0.5) on a "
                "bin edge; hint: use lo == -hi with an even n_bins (metrics.pr_bins)"
            )

    @property
    def scale(self) -> float:
        """Bins per logit unit (1 / width)."""
        return self.n_bins / (self.hi - self.lo)

    @property
    def width(self) -> float:
        """Bin width in logits."""
        return (self.hi - self.lo) / self.n_bins

    @property
    def zero_index(self) -> int:
        """Index of the first bin at or above logit 0."""
        return round(-self.lo * self.scale)

    @property
    def edges(self) -> np.ndarray:
        """The n_bins + 1 bin edges in logits, ascending."""
        return (np.arange(self.n_bins + 1, dtype=np.float64) - self.zero_index) / self.scale

    @property
    def centres(self) -> np.ndarray:
        """The n_bins bin centres in logits."""
        return (np.arange(self.n_bins, dtype=np.float64) + 0.5 - self.zero_index) / self.scale

    @property
    def thresholds(self) -> np.ndarray:
        """Per bin, the logit threshold t such that `logit >= t` selects this bin and all above; -inf for bin 0."""
        t = self.edges[:-1].copy()
        t[0] = -np.inf  # bin 0 also holds everything clamped from below
        return t

    def index(self, logits: ArrayLike) -> np.ndarray:
        """Bin index of each logit (int64, same shape), by arithmetic: floor(x * scale) offset and clamped.

        Raises:
            ValueError: A NaN logit.
        """
        x = to_numpy(logits)
        buf = _floor_scaled(x.reshape(-1), self, _compute_dtype(x.dtype))
        if np.isnan(buf).any():
            raise ValueError("logits contain NaN; hint: check the model output for divergence")
        return (buf.astype(np.int64) + self.zero_index).reshape(x.shape)

    def threshold_index(self, logit_threshold: float) -> int:
        """Edge index k in [0, n_bins] such that bins k.. count as positive for `logit >= logit_threshold`.

        Exact when the threshold is a bin edge (logit 0, i.e. p = 0.5, always is); otherwise the nearest edge
        is used, so pixels within half a bin width (1/128 logit by default) of the threshold may fall on the
        wrong side. Thresholds outside [lo, hi] select all (k = 0) or none (k = n_bins) of the pixels.
        """
        if math.isnan(logit_threshold):
            raise ValueError("logit threshold is NaN")
        k = math.floor(logit_threshold * self.scale + 0.5) + self.zero_index
        return int(min(max(k, 0), self.n_bins))


def to_numpy(a: ArrayLike) -> np.ndarray:
    """A host numpy view/copy of an array or tensor (half floats widened exactly to float32)."""
    if isinstance(a, torch.Tensor):
        a = a.detach()
        if a.dtype in (torch.float16, torch.bfloat16):
            a = a.float()  # exact widening; numpy has no bfloat16
        return a.cpu().numpy()
    return np.asarray(a)


def _compute_dtype(dtype: np.dtype) -> type[np.floating]:
    # float64 logits stay float64 so x * scale does not round across an edge; narrower floats widen exactly.
    return np.float64 if dtype == np.float64 else np.float32


def _floor_scaled(
    x: np.ndarray, bins: LogitBins, dtype: type[np.floating], out: np.ndarray | None = None
) -> np.ndarray:
    """floor(x * scale) clamped to the bin range, relative to the zero edge (float, NaN preserved)."""
    out = np.multiply(x, dtype(bins.scale), out=out, dtype=dtype)
    np.floor(out, out=out)
    # Clamping in float before the integer cast also makes ±inf safe.
    return np.clip(out, -bins.zero_index, bins.n_bins - 1 - bins.zero_index, out=out)


def as_tile_batch(logits: ArrayLike, target: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
    """Accept (B,H,W) or (B,1,H,W) logits and targets; return both as (B,H,W).

    Raises:
        ValueError: Other ranks, a channel dimension other than 1, or shapes that differ.
    """

    def squeeze(a: ArrayLike, name: str) -> ArrayLike:
        if a.ndim == 4 and a.shape[1] == 1:
            return a[:, 0]
        if a.ndim != 3:
            raise ValueError(f"{name} must be (B,H,W) or (B,1,H,W); got shape {tuple(a.shape)}")
        return a

    lg, tg = squeeze(logits, "logits"), squeeze(target, "target")
    if tuple(lg.shape) != tuple(tg.shape):
        raise ValueError(f"logits {tuple(lg.shape)} and target {tuple(tg.shape)} must have the same (B,H,W) shape")
    return lg, tg


def _label_codes(bins: LogitBins) -> np.ndarray:
    """Per label value, the offset of its row in a (neg, pos, ignore) histogram of 3 × n_bins."""
    lut = np.full(256, _INVALID_CODE, np.int64)
    lut[0] = bins.zero_index
    lut[1] = bins.n_bins + bins.zero_index
    lut[IGNORE_INDEX] = 2 * bins.n_bins + bins.zero_index
    return lut


def _bad_input(x: np.ndarray, t: np.ndarray, tile_id: Hashable) -> ValueError:
    if np.isnan(x).any():
        return ValueError(f"tile {tile_id!r}: logits contain NaN; hint: check the model output for divergence")
    found = np.unique(t).tolist()
    return ValueError(f"tile {tile_id!r}: labels must be in {{0, 1, {IGNORE_INDEX}}}; found values {found}")


def _as_uint8_labels(t: np.ndarray, tile_id: Hashable) -> np.ndarray:
    if t.dtype == np.uint8:
        return t
    lo, hi = int(t.min(initial=0)), int(t.max(initial=0))
    if lo < 0 or hi > 255:
        raise ValueError(f"tile {tile_id!r}: labels must be in {{0, 1, {IGNORE_INDEX}}}; found range [{lo}, {hi}]")
    return t.astype(np.uint8)


def _tile_counts_numpy(
    logits: np.ndarray, target: np.ndarray, bins: LogitBins, tile_ids: Sequence[Hashable]
) -> np.ndarray:
    """(B, 3, n_bins) int64 counts (neg, pos, ignore) per tile; one tile at a time so buffers stay in cache."""
    b = logits.shape[0]
    n = bins.n_bins
    dtype = _compute_dtype(logits.dtype)
    flat_x, flat_t = logits.reshape(b, -1), target.reshape(b, -1)
    buf = np.empty(flat_x.shape[1], dtype)
    codes = np.empty(flat_x.shape[1], np.int64)
    lut = _label_codes(bins)
    out = np.empty((b, 3, n), np.int64)
    for i in range(b):
        t = _as_uint8_labels(flat_t[i], tile_ids[i])
        _floor_scaled(flat_x[i], bins, dtype, out=buf)
        try:
            with np.errstate(invalid="raise"):  # NaN -> int cast raises instead of a garbage bin
                codes[:] = buf
            codes += np.take(lut, t)
            out[i] = np.bincount(codes, minlength=3 * n).reshape(3, n)
        except (FloatingPointError, ValueError):  # NaN, or a label code went negative
            raise _bad_input(flat_x[i], t, tile_ids[i]) from None
    return out


def _tile_counts_torch(
    logits: torch.Tensor, target: torch.Tensor, bins: LogitBins, tile_ids: Sequence[Hashable]
) -> np.ndarray:
    """Device-side twin of `_tile_counts_numpy`: only the (B, 3, n_bins) counts leave the accelerator."""
    b, n = logits.shape[0], bins.n_bins
    dev = logits.device
    x = logits.detach().reshape(b, -1)
    x = x if x.dtype == torch.float64 else x.float()
    k = torch.floor(x * bins.scale).clamp_(-bins.zero_index, n - 1 - bins.zero_index)
    lut = torch.from_numpy(_label_codes(bins)).to(dev)
    t = target.detach().to(dev).reshape(b, -1).long()
    bad_label = (t < 0) | (t > 255)
    codes = k.long() + lut[t.clamp(0, 255)]
    bad = torch.isnan(k).any() | bad_label.any() | (codes < 0).any()
    if bool(bad):  # one host sync per batch
        x_cpu, t_cpu = x.cpu().numpy(), t.cpu().numpy()
        for i in range(b):
            if np.isnan(x_cpu[i]).any() or not np.isin(t_cpu[i], (0, 1, IGNORE_INDEX)).all():
                raise _bad_input(x_cpu[i], t_cpu[i], tile_ids[i])
    codes += (torch.arange(b, device=dev) * (3 * n)).unsqueeze(1)
    counts = torch.bincount(codes.reshape(-1), minlength=b * 3 * n)
    return counts.reshape(b, 3, n).cpu().numpy().astype(np.int64)


def tile_counts(
    logits: ArrayLike, target: ArrayLike, bins: LogitBins, tile_ids: Sequence[Hashable] | None = None
) -> np.ndarray:
    """(B, 3, n_bins) int64 pixel counts per tile and logit bin for labels (0, 1, 255), on the tensor's device.

    Raises:
        ValueError: Shape mismatch, NaN logits or labels outside {0, 1, 255} (naming the tile).
    """
    logits, target = as_tile_batch(logits, target)
    ids = list(tile_ids) if tile_ids is not None else list(range(logits.shape[0]))
    if isinstance(logits, torch.Tensor) and logits.device.type != "cpu":
        return _tile_counts_torch(logits, torch.as_tensor(target), bins, ids)
    return _tile_counts_numpy(to_numpy(logits), to_numpy(target), bins, ids)


@dataclass(frozen=True, eq=False)  # arrays: identity, not elementwise, equality
class TileHistograms:
    """Per-tile valid-pixel counts per logit bin, split by label (ignore pixels excluded).

    Attributes:
        bins: The binning.
        pos: (T, n_bins) uint32, label-1 pixels per bin.
        neg: (T, n_bins) uint32, label-0 pixels per bin.
        tile_ids: T tile ids, in first-seen order.
        is_positive: (T,) bool, the tile has at least one label-1 pixel.
        n_valid: (T,) int64, non-ignore pixels per tile.
    """

    bins: LogitBins
    pos: np.ndarray
    neg: np.ndarray
    tile_ids: tuple[Hashable, ...]
    is_positive: np.ndarray
    n_valid: np.ndarray = field(repr=False)

    @property
    def n_tiles(self) -> int:
        return int(self.pos.shape[0])

    @property
    def n_pos_tiles(self) -> int:
        return int(self.is_positive.sum())

    @property
    def n_neg_tiles(self) -> int:
        return self.n_tiles - self.n_pos_tiles

    @property
    def nbytes(self) -> int:
        """Bytes held by the two histogram arrays (T × n_bins × 2 × 4)."""
        return int(self.pos.nbytes + self.neg.nbytes)

    @cached_property
    def class_sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact int64 totals over tiles: (pos, neg on positive tiles, neg on negative tiles), each (n_bins,).

        Every prevalence ratio is a weighted sum of these three, so they are computed once.
        """
        m = self.is_positive
        pos = self.pos.sum(axis=0, dtype=np.int64)
        neg_on_pos = self.neg[m].sum(axis=0, dtype=np.int64)
        neg_on_neg = self.neg.sum(axis=0, dtype=np.int64) - neg_on_pos
        return pos, neg_on_pos, neg_on_neg

    def subset(self, index: np.ndarray | Sequence[int]) -> TileHistograms:
        """The histograms of a subset of tiles (by integer index or boolean mask)."""
        idx = np.arange(self.n_tiles)[np.asarray(index)]
        return TileHistograms(
            self.bins,
            self.pos[idx],
            self.neg[idx],
            tuple(self.tile_ids[i] for i in idx),
            self.is_positive[idx],
            self.n_valid[idx],
        )


class TileHistogramAccumulator:
    """Streams (logits, target) batches into one pair of uint32 histograms per tile.

    Memory is T × n_bins × 2 × 4 bytes, independent of tile size: 5,000 tiles × 2048 bins is 82 MB (164 MB
    at int64, which buys nothing since a bin cannot exceed a tile's pixel count). A smaller `n_bins` trades
    PR-AUC resolution for memory linearly. Tiles seen again (a tile processed in pieces) add to their row.
    """

    def __init__(self, bins: LogitBins | None = None) -> None:
        self.bins = bins or LogitBins()
        self._pos: list[np.ndarray] = []
        self._neg: list[np.ndarray] = []
        self._n_valid: list[int] = []
        self._row: dict[Hashable, int] = {}

    @property
    def n_tiles(self) -> int:
        return len(self._pos)

    @property
    def nbytes(self) -> int:
        """Bytes held by the per-tile histograms."""
        return 2 * self.n_tiles * self.bins.n_bins * np.dtype(np.uint32).itemsize

    def reset(self) -> None:
        """Forget every tile (start of a new validation pass)."""
        self._pos, self._neg, self._n_valid, self._row = [], [], [], {}

    def add_batch(self, logits: ArrayLike, target: ArrayLike, tile_ids: Sequence[Hashable] | ArrayLike) -> None:
        """Add a batch of tiles.

        Args:
            logits: (B,H,W) or (B,1,H,W) logits, numpy or torch (an accelerator tensor is binned on device).
            target: Same shape, labels in {0, 1, 255}; 255 (ignore) pixels are never counted.
            tile_ids: B tile ids or indices naming the row each tile accumulates into.

        Raises:
            ValueError: Shape mismatch, NaN logits, labels outside {0, 1, 255}, or a tile past uint32 range.
        """
        logits, target = as_tile_batch(logits, target)
        ids = tile_ids.tolist() if isinstance(tile_ids, np.ndarray | torch.Tensor) else list(tile_ids)
        if len(ids) != logits.shape[0]:
            raise ValueError(f"got {len(ids)} tile ids for a batch of {logits.shape[0]} tiles")
        counts = tile_counts(logits, target, self.bins, ids)
        for tid, c in zip(ids, counts, strict=True):
            self._add_tile(tid, c[1], c[0])

    def _add_tile(self, tile_id: Hashable, pos: np.ndarray, neg: np.ndarray) -> None:
        n_valid = int(pos.sum() + neg.sum())
        row = self._row.get(tile_id)
        total = n_valid + (self._n_valid[row] if row is not None else 0)
        if total > _UINT32_MAX:
            raise ValueError(f"tile {tile_id!r} has {total} valid pixels, past the uint32 bin range ({_UINT32_MAX})")
        if row is None:
            self._row[tile_id] = len(self._pos)
            self._pos.append(pos.astype(np.uint32))
            self._neg.append(neg.astype(np.uint32))
            self._n_valid.append(n_valid)
        else:
            self._pos[row] += pos.astype(np.uint32)
            self._neg[row] += neg.astype(np.uint32)
            self._n_valid[row] = total

    def result(self) -> TileHistograms:
        """The accumulated per-tile histograms (copies; the accumulator can keep streaming)."""
        n = self.bins.n_bins
        pos = np.stack(self._pos) if self._pos else np.zeros((0, n), np.uint32)
        neg = np.stack(self._neg) if self._neg else np.zeros((0, n), np.uint32)
        return TileHistograms(
            bins=self.bins,
            pos=pos,
            neg=neg,
            tile_ids=tuple(self._row),
            is_positive=np.asarray(pos.any(axis=1)),
            n_valid=np.asarray(self._n_valid, np.int64),
        )
