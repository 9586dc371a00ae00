"""Balanced batch sampling with the step-wise negative-ratio curriculum (guide §7)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from fractions import Fraction

import numpy as np

from rtscore.config.pipeline import CurriculumStage
from rtscore.data.errors import DataValidationError


def curriculum_ratio(schedule: Sequence[CurriculumStage], epoch: int) -> float:
    """Negatives per positive at a 1-based epoch (step-wise, not interpolated)."""
    for stage in schedule:
        if stage.start_epoch <= epoch and (stage.end_epoch is None or epoch <= stage.end_epoch):
            return float(stage.neg_per_pos)
    return float(schedule[-1].neg_per_pos)  # past a closed last stage: keep its ratio


def positive_share(positive_fraction: float, ratio: float) -> float:
    """Share of positive tiles per batch in an epoch whose curriculum stage has ``ratio`` negatives per positive.

    The balanced phase, a 1:1 stage (the guide's epochs 1-10), holds ``positive_fraction`` positives per batch
    (guide §7.2 and §9.1: 0.5). Every other stage holds exactly the curriculum's odds, 1 / (1 + ratio): 1:20
    means one positive in 21 tiles whatever ``positive_fraction`` is, as the guide's "near-realistic ratio ...
    matches val prevalence" (§7.3) requires.
    """
    return positive_fraction if ratio == 1.0 else 1.0 / (1.0 + ratio)


def positives_per_batch(batch_size: int, positive_fraction: float, ratio: float) -> Fraction:
    """Positive tiles per batch of ``batch_size`` in an epoch at ``ratio``, exactly (:func:`positive_share` x the
    batch size, as a fraction): a whole number where the batch allows it (32 at 1:1, 42 at 1:20), otherwise the
    sampler carries the remainder from batch to batch (32 at 1:20: 32/21, one or two positives a batch)."""
    share = Fraction(positive_share(positive_fraction, ratio)).limit_denominator(1_000_000)
    return min(batch_size * share, Fraction(batch_size))


def positive_counts(per_batch: Fraction, n_batches: int) -> np.ndarray:
    """Positives in each of ``n_batches`` batches: ``floor((i + 1) q) - floor(i q)`` for ``q = per_batch``, so the
    first ``n`` batches hold ``floor(n q)`` positives together, the exact share rounded down once, never per batch.
    A whole ``q`` gives every batch ``q``."""
    cum = [math.floor(i * per_batch) for i in range(n_batches + 1)]
    return np.diff(np.asarray(cum, dtype=np.int64))


def batches_for(n_positives: int, per_batch: Fraction) -> int:
    """Batches of an epoch that takes each of ``n_positives`` positives once: the most batches whose positives,
    :func:`positive_counts`, do not exceed the pool (at least one)."""
    n = math.ceil((n_positives + 1) / per_batch) - 1 if per_batch > 0 else 1
    return max(n, 1)


def realised_ratio(batches: Sequence[Sequence[tuple[int, int]]], is_positive: np.ndarray) -> float:
    """Negatives per positive tile over ``batches`` (inf with no positive)."""
    n_pos = sum(int(is_positive[i]) for batch in batches for i, _ in batch)
    n_all = sum(len(batch) for batch in batches)
    return (n_all - n_pos) / n_pos if n_pos else math.inf


class BalancedCurriculumSampler:
    """Batch sampler yielding ``[(dataset_position, augmentation_seed), ...]`` per batch.

    Each epoch takes every positive tile once (shuffled) and fills the rest of each batch with negatives
    drawn from successive shuffles of the negative pool (every negative is used before any repeats). The
    positives per batch follow :func:`positive_counts`: over the epoch the negatives per positive are the
    curriculum's exactly wherever the batch allows it (1:20 at batch 42), and otherwise within the one tile the
    epoch's length leaves over (1:20 at batch 32: batches of one or two positives, the remainder carried from
    batch to batch; at batch 8 some batches hold no positive, as an exact 1:20 requires).
    The epoch's batches are a pure function of (seed, epoch), so a resumed run draws the same batches.

    ``drop_last`` (data.loader.drop_last) decides what happens to the positives that do not fill a last whole
    batch: dropped for this epoch (True, the guide's setting: every batch has the same size and composition),
    or sent in one smaller last batch with negatives in the epoch's proportion (False). Without balancing the
    same holds for the tiles left over by the shuffle. With ``steps_per_epoch`` set, every batch is whole.

    With ``world_size`` N ranks (one seed on several devices), ``batch_size`` is each rank's (guide §9.1: per
    GPU) and the plan is of effective batches of ``batch_size x N`` tiles (:attr:`effective_batch`), exactly as one
    device plans its batches at ``batch_size`` N x b; rank ``rank`` reads its contiguous slice of ``batch_size``
    tiles of each. The positive share, the curriculum's ratio and the carried remainder hold for the effective
    batch; a rank's slice holds whatever the shuffled effective batch puts there (on average its share), which
    changes nothing of the step: batch norm and every loss reduce over the effective batch
    (:mod:`rtscore.train.distributed`). An epoch takes each positive once whatever N is, so it has about 1/N the
    steps of one device at ``batch_size`` (each of N times the tiles); ``steps_per_epoch`` counts these steps. A
    smaller last batch (``drop_last`` False) is cut to a multiple of N (at most N - 1 tiles fewer).

    ``mapped_negative`` (per dataset position: the tile holds a mapped Negative polygon of the inventory,
    ``TileMetadata.mapped_negative``) splits the negative pool into :attr:`mapped_neg`, the inventory's hard
    negatives, and :attr:`plain_neg`, for whoever wants to see or weight them. The draw does not use it: every
    negative tile is drawn alike, so the batches are the same with or without it.
    """

    def __init__(
        self,
        is_positive: np.ndarray,
        *,
        batch_size: int,
        positive_fraction: float,
        schedule: Sequence[CurriculumStage],
        seed: int,
        balanced: bool = True,
        steps_per_epoch: int | None = None,
        drop_last: bool = True,
        rank: int = 0,
        world_size: int = 1,
        mapped_negative: np.ndarray | None = None,
    ) -> None:
        flags = np.asarray(is_positive, bool)
        self.pos = np.flatnonzero(flags)
        self.neg = np.flatnonzero(~flags)
        mapped = np.zeros(flags.size, bool) if mapped_negative is None else np.asarray(mapped_negative, bool)
        if mapped.shape != flags.shape:
            raise ValueError(f"mapped_negative has {mapped.size} flags for {flags.size} tiles")
        self.mapped_neg = self.neg[mapped[self.neg]]  # negatives holding a mapped Negative polygon (hard negatives)
        self.plain_neg = self.neg[~mapped[self.neg]]
        if balanced and self.pos.size == 0:
            raise DataValidationError("balanced sampling needs at least one positive tile in the train split")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not one of the {world_size} ranks (0 to {world_size - 1})")
        self.n = flags.size
        self.batch_size = batch_size
        self.effective_batch = batch_size * world_size  # what one optimizer step sees, every rank's slice together
        self.positive_fraction = positive_fraction
        self.schedule = list(schedule)
        self.seed = seed
        self.balanced = balanced
        self.steps_per_epoch = steps_per_epoch
        self.drop_last = drop_last
        self.rank, self.world_size = rank, world_size
        self.epoch = 1
        self.skip_batches = 0  # batches of the current epoch already consumed (mid-epoch resume)

    def set_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        self.epoch, self.skip_batches = epoch, skip_batches

    def ratio(self, epoch: int) -> float:
        """The curriculum's negatives per positive at ``epoch`` (0 when sampling is not balanced)."""
        return curriculum_ratio(self.schedule, epoch) if self.balanced else 0.0

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, 0x5A4D])

    def batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """The epoch's effective batches (every rank's slice), the batches of one device at their size."""
        rng = self._rng(epoch)
        rest: np.ndarray | None = None  # the smaller last batch (drop_last False)
        if not self.balanced:
            order = rng.permutation(self.n)
            if self.steps_per_epoch:
                order = np.resize(order, self.steps_per_epoch * self.effective_batch)
            n_whole = order.size // self.effective_batch
            whole = order[: n_whole * self.effective_batch].reshape(n_whole, self.effective_batch)
            if not self.drop_last and order.size > whole.size:
                rest = order[whole.size :]
        else:
            b = self.effective_batch
            q = positives_per_batch(b, self.positive_fraction, curriculum_ratio(self.schedule, epoch))
            if self.neg.size == 0:
                q = Fraction(b)
            n_whole = self.steps_per_epoch or batches_for(self.pos.size, q)
            k_pos = positive_counts(q, n_whole)
            n_pos, n_neg = int(k_pos.sum()), n_whole * b - int(k_pos.sum())
            rest_pos = 0 if self.steps_per_epoch or self.drop_last else max(self.pos.size - n_pos, 0)
            rest_neg = min(round(rest_pos * (b - q) / q), self.neg.size)
            pos = self._draw(self.pos, n_pos + rest_pos, rng)
            neg = self._draw(self.neg, n_neg + rest_neg, rng)
            cp = np.concatenate([[0], np.cumsum(k_pos)])
            cn = np.concatenate([[0], np.cumsum(b - k_pos)])
            rows = [np.concatenate([pos[cp[i] : cp[i + 1]], neg[cn[i] : cn[i + 1]]]) for i in range(n_whole)]
            whole = rng.permuted(np.stack(rows), axis=1)
            if rest_pos:
                rest = np.concatenate([pos[n_pos:], neg[n_neg:]])
        seeds = rng.integers(0, 2**31 - 1, size=whole.shape)
        out = [list(zip(g.tolist(), sd.tolist(), strict=True)) for g, sd in zip(whole, seeds, strict=True)]
        if rest is not None:  # drawn after the whole batches, which are thus the same as with drop_last
            rest = rng.permutation(rest)
            out.append(list(zip(rest.tolist(), rng.integers(0, 2**31 - 1, size=rest.size).tolist(), strict=True)))
        return out

    def shard(self, batch: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """This rank's contiguous slice of an effective batch: ``batch_size`` tiles of a whole one (a smaller last
        one: its share; empty when it has fewer tiles than ranks)."""
        per_rank = len(batch) // self.world_size
        return batch[self.rank * per_rank : (self.rank + 1) * per_rank]

    @staticmethod
    def _draw(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` items from successive independent shuffles of ``pool``."""
        if n == 0 or pool.size == 0:
            return pool[:0]
        reps = -(-n // pool.size)
        return np.concatenate([rng.permutation(pool) for _ in range(reps)])[:n]

    def _mine(self) -> list[list[tuple[int, int]]]:
        shards = (self.shard(batch) for batch in self.batches(self.epoch)[self.skip_batches :])
        return [s for s in shards if s]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        yield from self._mine()

    def __len__(self) -> int:
        return len(self._mine())
