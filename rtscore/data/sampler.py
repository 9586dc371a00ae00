"""Balanced batch sampling with the step-wise negative-ratio curriculum (guide §7)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from rtscore.config.pipeline import CurriculumStage
from rtscore.data.errors import DataValidationError


def curriculum_ratio(schedule: Sequence[CurriculumStage], epoch: int) -> float:
    """Negatives per positive at a 1-based epoch (step-wise, not interpolated)."""
    for stage in schedule:
        if stage.start_epoch <= epoch and (stage.end_epoch is None or epoch <= stage.end_epoch):
            return float(stage.neg_per_pos)
    return float(schedule[-1].neg_per_pos)  # past a closed last stage: keep its ratio


def positives_per_batch(batch_size: int, positive_fraction: float, ratio: float) -> int:
    """Positive tiles per batch: ``positive_fraction`` at 1:1, tilted by the curriculum's odds, at least one.

    share = p / (p + (1 - p) * ratio): at p = 0.5 this is exactly 1 / (1 + ratio), so a 1:5 epoch has
    ~1 positive in 6 tiles while every batch still sees a positive (guide §7.2).
    """
    share = positive_fraction / (positive_fraction + (1.0 - positive_fraction) * ratio)
    return int(min(max(round(batch_size * share), 1), batch_size))


class BalancedCurriculumSampler:
    """Batch sampler yielding ``[(dataset_position, augmentation_seed), ...]`` per batch.

    Each epoch takes every positive tile once (shuffled) and fills the rest of each batch with negatives
    drawn from successive shuffles of the negative pool (every negative is used before any repeats).
    The epoch's batches are a pure function of (seed, epoch), so a resumed run draws the same batches.
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
    ) -> None:
        flags = np.asarray(is_positive, bool)
        self.pos = np.flatnonzero(flags)
        self.neg = np.flatnonzero(~flags)
        if balanced and self.pos.size == 0:
            raise DataValidationError("balanced sampling needs at least one positive tile in the train split")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        self.n = flags.size
        self.batch_size = batch_size
        self.positive_fraction = positive_fraction
        self.schedule = list(schedule)
        self.seed = seed
        self.balanced = balanced
        self.steps_per_epoch = steps_per_epoch
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
        rng = self._rng(epoch)
        if not self.balanced:
            order = rng.permutation(self.n)
            n_batches = self.steps_per_epoch or self.n // self.batch_size
            order = np.resize(order, n_batches * self.batch_size)
            groups = order.reshape(n_batches, self.batch_size)
        else:
            k_pos = positives_per_batch(self.batch_size, self.positive_fraction, curriculum_ratio(self.schedule, epoch))
            if self.neg.size == 0:
                k_pos = self.batch_size
            k_neg = self.batch_size - k_pos
            n_batches = self.steps_per_epoch or max(self.pos.size // k_pos, 1)
            pos = self._draw(self.pos, n_batches * k_pos, rng)
            neg = self._draw(self.neg, n_batches * k_neg, rng)
            groups = np.concatenate([pos.reshape(n_batches, k_pos), neg.reshape(n_batches, k_neg)], axis=1)
            groups = rng.permuted(groups, axis=1)
        seeds = rng.integers(0, 2**31 - 1, size=groups.shape)
        return [[(int(i), int(s)) for i, s in zip(g, sd, strict=True)] for g, sd in zip(groups, seeds, strict=True)]

    @staticmethod
    def _draw(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` items from successive independent shuffles of ``pool``."""
        if n == 0 or pool.size == 0:
            return pool[:0]
        reps = -(-n // pool.size)
        return np.concatenate([rng.permutation(pool) for _ in range(reps)])[:n]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        yield from self.batches(self.epoch)[self.skip_batches :]

    def __len__(self) -> int:
        return len(self.batches(self.epoch)) - self.skip_batches
