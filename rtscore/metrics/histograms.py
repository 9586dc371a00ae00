"""Per-tile logit histograms split by label: the streaming state behind every pixel metric and PR curve.

The bins (`LogitBins`) are fixed in advance, so histograms of tiles, batches, passes and seeds merge by plain
addition (associative and commutative, in any order), and memory is tiles x bins whatever the tile size.
The binning is chosen so that a PR curve, the PR-AUC at any prevalence ratio and a temperature fit from these
counts match the same quantities computed on every pixel, for any logit range a model produces: a uniform
core of `metrics.pr_bins` bins over [-16, 16), geometric tails of constant *relative* width out to ±512 (PR-AUC
depends only on the ranking, so saturated logits need relative, not absolute, resolution), and an overflow
bin on each side. Why not the alternatives: a range fitted to the data needs the data before the first bin
(the validation pass is a single stream) and would make histograms of two passes unmergeable; a wider
uniform range costs bins linearly (±64 at 1/64 logit is 8192 bins) and still ties everything past its end;
per-bin logit sums fix a temperature fit but not the ties that bias PR-AUC. The tails add 5 x 128 + 1 bins
per side to the default 2048 (3330 in all, 1.6x the memory), and keep PR-AUC within 0.005 of
scikit-learn's at 1:1 to 1:1000 for logits up to ±50 (tests/metrics/test_saturated.py).
"""

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
    """Logit bins: a uniform core around logit 0, geometric tails out to ±`top`, and two overflow bins.

    Ranking is all a PR curve needs, and a binned PR curve is exact up to the pixels of both labels that share
    a bin (they count as tied scores). Three zones keep ties rare wherever a model puts its logits:

    * **Core** [lo, hi) = [-16, 16): `core_bins` uniform bins (1/64 logit at the defaults, a power of two, so
      `x * scale` is exact and logit 0, p = 0.5, is an edge). Fine resolution in probability near 0 and 1.
    * **Tails** [hi, top) and [-top, lo): `tail_octaves` octaves (16 -> 512 by default) of `tail_per_octave`
      bins each (2048 / 16 = 128), so a tail bin is 0.4-0.8 % of its logit wide: 0.125 logit at 16, 2 at 256.
      The bins are the float's exponent and top mantissa bits, so a tail index is integer arithmetic on the
      float bit pattern: exact at every edge, identical in numpy and on an accelerator, any float width.
      Relative (scale-free) resolution is what a confident model needs: PR-AUC is invariant to any monotone
      rescaling of the logits, and saturated logits of ±20-50 are as finely ordered as ±2-5.
    * **Overflow**: one bin each for logits >= top and < -top (±inf included). At ±512 the probability is
      within 1e-222 of 0 or 1; a network emitting more has diverged. `TileHistograms.n_overflow` counts them.

    Before the tails existed, every logit beyond ±16 fell into the core's end bins, so a saturated model's
    PR-AUC at 1:200 came out 2-5x low and temperature fits were biased low (issue 11, point 5).

    Bin k holds logits in [edges[k], edges[k+1]); `edges[0]` and `edges[-1]` (±2 top) are nominal outer edges
    of the overflow bins (their centres are ±1.5 top). With `tail_octaves=0` the core's end bins absorb
    everything beyond [lo, hi) instead (the pre-tail binning, kept for comparisons).

    Attributes:
        core_bins: Bins of the uniform core (`metrics.pr_bins`); even, so that 0 is an edge.
        lo: Lower end of the core (logits), == -hi when there are tails.
        hi: Upper end of the core (logits), > 0; a power of two when there are tails.
        tail_octaves: Octaves of geometric tail bins beyond ±hi (0: no tails, no overflow bins).
    """

    core_bins: int = 2048
    lo: float = -16.0
    hi: float = 16.0
    tail_octaves: int = 5

    def __post_init__(self) -> None:
        if self.core_bins < 2:
            raise ValueError(f"LogitBins.core_bins must be >= 2; got {self.core_bins}")
        if not self.lo < 0.0 < self.hi:
            raise ValueError(
                f"LogitBins needs lo < 0 < hi so logit 0 is inside the range; got lo={self.lo}, hi={self.hi}"
            )
        k0 = -self.lo * self.scale
        if abs(k0 - round(k0)) > 1e-9 * self.core_bins:
            raise ValueError(
                f"LogitBins(core_bins={self.core_bins}, lo={self.lo}, hi={self.hi}) does not put logit 0 (p = 0.5) "
                "on a bin edge; hint: use lo == -hi with an even core_bins (metrics.pr_bins)"
            )
        if self.tail_octaves < 0:
            raise ValueError(f"LogitBins.tail_octaves must be >= 0; got {self.tail_octaves}")
        if self.tail_octaves and (self.lo != -self.hi or math.frexp(self.hi)[0] != 0.5):
            raise ValueError(
                f"LogitBins tails need lo == -hi and hi a power of two (their edges are float bit patterns); "
                f"got lo={self.lo}, hi={self.hi}"
            )

    @property
    def scale(self) -> float:
        """Core bins per logit unit (1 / width)."""
        return self.core_bins / (self.hi - self.lo)

    @property
    def width(self) -> float:
        """Core bin width in logits."""
        return (self.hi - self.lo) / self.core_bins

    @property
    def tail_bits(self) -> int:
        """Mantissa bits a tail bin keeps: log2 of the bins per octave, the largest power of two <= core_bins / 16."""
        return max(0, (self.core_bins // 16).bit_length() - 1)

    @property
    def tail_per_octave(self) -> int:
        """Tail bins per octave of |logit|."""
        return 1 << self.tail_bits

    @property
    def n_tail(self) -> int:
        """Bins on each side beyond the core: the geometric tail plus its overflow bin (0 without tails)."""
        return self.tail_octaves * self.tail_per_octave + 1 if self.tail_octaves else 0

    @property
    def top(self) -> float:
        """Where the tails end and the overflow bins begin (hi x 2^tail_octaves; hi without tails)."""
        return self.hi * 2.0**self.tail_octaves

    @property
    def n_bins(self) -> int:
        """Total number of bins (the histograms' length): core plus both tails and overflow bins."""
        return self.core_bins + 2 * self.n_tail

    @property
    def zero_index(self) -> int:
        """Index of the first bin at or above logit 0."""
        return self.n_tail + round(-self.lo * self.scale)

    @cached_property
    def edges(self) -> np.ndarray:
        """The n_bins + 1 bin edges in logits, ascending; with tails the outer two (±2 top) are nominal."""
        core = (np.arange(self.core_bins + 1, dtype=np.float64) - round(-self.lo * self.scale)) / self.scale
        if not self.tail_octaves:
            return core
        j = np.arange(1, self.n_tail, dtype=np.int64)  # tail edge j: hi * 2^(j >> bits) * (1 + mantissa / 2^bits)
        per = self.tail_per_octave
        tail = self.hi * np.exp2(j >> self.tail_bits) * (1.0 + (j & (per - 1)) / per)
        outer = np.array([2.0 * self.top])
        return np.concatenate([-outer, -tail[::-1], core, tail, outer])

    @property
    def centres(self) -> np.ndarray:
        """The n_bins bin centres in logits (midpoints; ±1.5 top for the overflow bins)."""
        e = self.edges
        return (e[:-1] + e[1:]) / 2.0

    @property
    def thresholds(self) -> np.ndarray:
        """Per bin, the logit threshold t such that `logit >= t` selects this bin and all above; -inf for bin 0."""
        t = self.edges[:-1].copy()
        t[0] = -np.inf  # bin 0 also holds everything clamped from below
        return t

    def index(self, logits: ArrayLike) -> np.ndarray:
        """Bin index of each logit (int64, same shape): arithmetic in the core, float bits in the tails.

        Raises:
            ValueError: A NaN logit.
        """
        x = to_numpy(logits)
        flat = x.reshape(-1)
        dtype = _compute_dtype(flat.dtype)
        try:
            codes = _bin_codes(flat, self, dtype, np.empty(flat.shape, dtype))
        except FloatingPointError:
            raise ValueError("logits contain NaN; hint: check the model output for divergence") from None
        return codes.reshape(x.shape)

    def threshold_index(self, logit_threshold: float) -> int:
        """Edge index k in [0, n_bins] such that bins k.. count as positive for `logit >= logit_threshold`.

        Exact when the threshold is a bin edge (logit 0, i.e. p = 0.5, always is); otherwise the nearest edge
        is used, so pixels within half a bin width (1/128 logit in the default core, 0.2-0.4 % of the logit
        in the tails) of the threshold may fall on the wrong side. Thresholds below the lowest or above the
        highest edge select all (k = 0) or none (k = n_bins) of the pixels.
        """
        if math.isnan(logit_threshold):
            raise ValueError("logit threshold is NaN")
        e = self.edges
        i = int(np.searchsorted(e, logit_threshold))  # e[i - 1] < t <= e[i]
        if i == 0:
            return 0
        if i > self.n_bins:
            return self.n_bins
        return i if e[i] - logit_threshold <= logit_threshold - e[i - 1] else i - 1


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
    """floor(x * scale) clamped to the core, relative to the zero edge (float, NaN preserved)."""
    out = np.multiply(x, dtype(bins.scale), out=out, dtype=dtype)
    np.floor(out, out=out)
    z = round(-bins.lo * bins.scale)
    # Clamping in float before the integer cast also makes ±inf safe.
    return np.clip(out, -z, bins.core_bins - 1 - z, out=out)


def _float_layout(dtype: type[np.floating] | np.dtype) -> tuple[type[np.signedinteger], int]:
    """The same-width integer type of a float32/float64 and its mantissa bits."""
    return (np.int64, 52) if np.dtype(dtype) == np.float64 else (np.int32, 23)


def _tail_codes(x: np.ndarray, bins: LogitBins, up: bool) -> np.ndarray:
    """Global bin index of logits >= hi (`up`) or < -hi (not `up`), from the bit pattern of |x|.

    For a positive float the bit pattern is monotone in the value, so `bits >> (mantissa - tail_bits)` counts
    tail bins (exponent and top mantissa bits) exactly. Below zero the bins are [-e_{j+1}, -e_j): |x| > e_j
    there, i.e. the float just below |x| (bits - 1) is >= e_j.
    """
    itype, mantissa = _float_layout(x.dtype)
    shift = mantissa - bins.tail_bits
    base = int(np.array(bins.hi, x.dtype).view(itype)) >> shift
    bits = np.abs(x).view(itype)
    if not up:
        bits = bits - 1
    j = np.minimum((bits >> shift).astype(np.int64) - base, bins.n_tail - 1)
    return bins.n_tail + bins.core_bins + j if up else bins.n_tail - 1 - j


def _bin_codes(x: np.ndarray, bins: LogitBins, dtype: type[np.floating], buf: np.ndarray) -> np.ndarray:
    """int64 bin index of each logit of a flat array; `buf` is a float scratch of x's length.

    Raises:
        FloatingPointError: A NaN logit (the float -> int cast refuses it).
    """
    core = _floor_scaled(x, bins, dtype, out=buf)
    with np.errstate(invalid="raise"):  # NaN -> int cast raises instead of a garbage bin
        codes = core.astype(np.int64)
    codes += bins.zero_index
    if bins.tail_octaves:
        for up in (True, False):
            at = np.flatnonzero(x >= bins.hi) if up else np.flatnonzero(x < bins.lo)
            if at.size:
                codes[at] = _tail_codes(x[at].astype(dtype, copy=False), bins, up)
    return codes


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
    lut[0] = 0
    lut[1] = bins.n_bins
    lut[IGNORE_INDEX] = 2 * bins.n_bins
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
    lut = _label_codes(bins)
    out = np.empty((b, 3, n), np.int64)
    for i in range(b):
        t = _as_uint8_labels(flat_t[i], tile_ids[i])
        try:
            codes = _bin_codes(flat_x[i], bins, dtype, buf)
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
    z = round(-bins.lo * bins.scale)
    k = torch.floor(x * bins.scale).clamp_(-z, bins.core_bins - 1 - z)
    bins_of = k.long() + bins.zero_index
    if bins.tail_octaves:  # the numpy kernel's `_tail_codes`, on every pixel (cheap on an accelerator)
        itype, mantissa = _float_layout(np.float64 if x.dtype == torch.float64 else np.float32)
        shift = mantissa - bins.tail_bits
        base = int(np.array(bins.hi, np.float64 if x.dtype == torch.float64 else np.float32).view(itype)) >> shift
        bits = x.abs().contiguous().view(torch.int64 if itype is np.int64 else torch.int32).long()
        up = ((bits >> shift) - base).clamp_(0, bins.n_tail - 1) + (bins.n_tail + bins.core_bins)
        down = (bins.n_tail - 1) - (((bits - 1) >> shift) - base).clamp_(0, bins.n_tail - 1)
        bins_of = torch.where(x >= bins.hi, up, torch.where(x < bins.lo, down, bins_of))
    lut = torch.from_numpy(_label_codes(bins)).to(dev)
    t = target.detach().to(dev).reshape(b, -1).long()
    bad_label = (t < 0) | (t > 255)
    codes = bins_of + lut[t.clamp(0, 255)]
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

    @property
    def n_overflow(self) -> int:
        """Pixels in the overflow bins (|logit| beyond `bins.top`, or ±inf), tied with one another; 0 without tails."""
        if not self.bins.tail_octaves:
            return 0
        return int(sum(a[:, i].sum(dtype=np.int64) for a in (self.pos, self.neg) for i in (0, -1)))

    @cached_property
    def pooled(self) -> ClassSums:
        """The pool's class sums (what every ratio-weighted pool statistic needs), computed once."""
        acc = ClassSumAccumulator(self.bins)
        acc.add(self.pos, self.neg, self.is_positive)
        return acc.result()

    @property
    def class_sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact int64 totals over tiles: (pos, neg on positive tiles, neg on negative tiles), each (n_bins,).

        Every prevalence ratio is a weighted sum of these three, so they are computed once.
        """
        return self.pooled.class_sums

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


@dataclass(frozen=True, eq=False)  # arrays: identity, not elementwise, equality
class ClassSums:
    """A pool of tiles reduced to its class sums: all that PR-AUC, PR curves, thresholds, confusion counts and a
    temperature fit at any prevalence ratio need (`weighted_hist`), in memory flat in the number of tiles.

    Per-tile questions (bootstrap intervals, subsets) need `TileHistograms`; the sums of a `TileHistograms` are
    its `pooled`, and `ClassSumAccumulator` builds them from blocks of tiles without holding the tiles.

    Attributes:
        bins: The binning.
        pos: (n_bins,) int64, label-1 pixels per bin over all tiles.
        neg_on_pos: (n_bins,) int64, label-0 pixels per bin over the positive tiles.
        neg_on_neg: (n_bins,) int64, label-0 pixels per bin over the negative tiles.
        n_pos_tiles: Tiles with at least one label-1 pixel.
        n_neg_tiles: The other tiles.
    """

    bins: LogitBins
    pos: np.ndarray
    neg_on_pos: np.ndarray
    neg_on_neg: np.ndarray
    n_pos_tiles: int
    n_neg_tiles: int

    @property
    def n_tiles(self) -> int:
        return self.n_pos_tiles + self.n_neg_tiles

    @property
    def class_sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pos, neg on positive tiles, neg on negative tiles), each (n_bins,) int64."""
        return self.pos, self.neg_on_pos, self.neg_on_neg


# Either form of a pool: every pool-level statistic (`weighted_hist` and what is built on it) takes both.
HistogramPool = TileHistograms | ClassSums


class ClassSumAccumulator:
    """Adds blocks of per-tile histograms into a pool's `ClassSums` (exact int64; blocks in any order).

    Memory is 3 x n_bins int64 whatever the number of tiles: a reader streams a store block by block into it.
    """

    def __init__(self, bins: LogitBins) -> None:
        self.bins = bins
        self._pos = np.zeros(bins.n_bins, np.int64)
        self._neg_on_pos = np.zeros(bins.n_bins, np.int64)
        self._neg_on_neg = np.zeros(bins.n_bins, np.int64)
        self._n_pos = self._n_neg = 0

    def add(self, pos: np.ndarray, neg: np.ndarray, is_positive: np.ndarray) -> None:
        """Add a block of tiles: (B, n_bins) label-1 and label-0 counts and the (B,) positive-tile flags.

        Raises:
            ValueError: Blocks whose shapes do not match each other or the binning.
        """
        m = np.asarray(is_positive, bool)
        if pos.shape != neg.shape or pos.ndim != 2 or pos.shape[1] != self.bins.n_bins or m.shape != pos.shape[:1]:
            raise ValueError(
                f"a block of tile histograms needs pos and neg of shape (B, {self.bins.n_bins}) and (B,) flags; "
                f"got {pos.shape}, {neg.shape} and {m.shape}"
            )
        self._pos += pos.sum(axis=0, dtype=np.int64)
        on_pos = neg[m].sum(axis=0, dtype=np.int64)
        self._neg_on_pos += on_pos
        self._neg_on_neg += neg.sum(axis=0, dtype=np.int64) - on_pos
        n_pos = int(m.sum())
        self._n_pos += n_pos
        self._n_neg += int(m.size) - n_pos

    def result(self) -> ClassSums:
        """The sums so far (copies: the accumulator can keep adding)."""
        return ClassSums(
            self.bins, self._pos.copy(), self._neg_on_pos.copy(), self._neg_on_neg.copy(), self._n_pos, self._n_neg
        )


class TileHistogramAccumulator:
    """Streams (logits, target) batches into one pair of uint32 histograms per tile.

    Memory is T × n_bins × 2 × 4 bytes, independent of tile size: 5,000 tiles × 3330 bins (the default core
    of 2048 plus tails) is 133 MB (twice that at int64, which buys nothing since a bin cannot exceed a tile's
    pixel count). A smaller `metrics.pr_bins` trades PR-AUC resolution for memory linearly (the tails scale
    with it). Tiles seen again (a tile processed in pieces) add to their row.
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
