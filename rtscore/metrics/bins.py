"""Where a logit falls: :class:`LogitBins` (a uniform core, geometric tails, overflow bins) and the binning of
arrays of logits, arithmetic in the core and float bit patterns in the tails, the same on every float width.

Why the bins are these: :mod:`rtscore.metrics.histograms`, whose per-tile histograms count pixels in them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


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
