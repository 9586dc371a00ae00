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

The bins and their arithmetic are :mod:`rtscore.metrics.bins`, a batch's counts per tile
:mod:`rtscore.metrics.counts`; this module holds the per-tile histograms and the pools they add up to.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from rtscore.metrics.bins import ArrayLike, LogitBins, to_numpy
from rtscore.metrics.counts import as_tile_batch, tile_counts

# The bins and a batch's counts live in rtscore.metrics.bins and rtscore.metrics.counts; the rest of the code
# imports them from here, with the histograms they make.
__all__ = [
    "ArrayLike",
    "ClassSumAccumulator",
    "ClassSums",
    "HistogramPool",
    "LogitBins",
    "TileHistogramAccumulator",
    "TileHistograms",
    "as_tile_batch",
    "tile_counts",
    "to_numpy",
]

# Largest count a uint32 bin holds; a bin counts pixels of one tile, so only a tile of > 4.29e9 valid pixels
# could overflow (a 512² tile has 262,144). The accumulator still checks per-tile totals and refuses.
_UINT32_MAX = np.iinfo(np.uint32).max


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
