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


def positive_share(positive_fraction: float, ratio: float) -> float:
    """Share of positive tiles per batch in an epoch whose curriculum stage has ``ratio`` negatives per positive.

    The balanced phase, a 1:1 stage (the guide's epochs 1-10), holds ``positive_fraction`` positives per batch
    (guide §7.2 and §9.1: 0.5). Every other stage holds exactly the curriculum's odds, 1 / (1 + ratio): 1:20
    means one positive in 21 tiles whatever ``positive_fraction`` is, as the guide's "near-realistic ratio ...
    matches val prevalence" (§7.3) requires.
    """
    return positive_fraction if ratio == 1.0 else 1.0 / (1.0 + ratio)


def positives_per_batch(batch_size: int, positive_fraction: float, ratio: float) -> int:
    """Positive tiles in a batch of ``batch_size`` (:func:`positive_share`, rounded, at least one)."""
    return int(min(max(round(batch_size * positive_share(positive_fraction, ratio)), 1), batch_size))


class BalancedCurriculumSampler:
    """Batch sampler yielding ``[(dataset_position, augmentation_seed), ...]`` per batch.

    Each epoch takes every positive tile once (shuffled) and fills the rest of each batch with negatives
    drawn from successive shuffles of the negative pool (every negative is used before any repeats).
    The epoch's batches are a pure function of (seed, epoch), so a resumed run draws the same batches.

    ``drop_last`` (data.loader.drop_last) decides what happens to the positives that do not fill a last whole
    batch: dropped for this epoch (True, the guide's setting: every batch has the same size and composition),
    or sent in one smaller last batch with negatives in the epoch's proportion (False). Without balancing the
    same holds for the tiles left over by the shuffle. With ``steps_per_epoch`` set, every batch is whole.
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
        self.drop_last = drop_last
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
        rest: np.ndarray | None = None  # the smaller last batch (drop_last False)
        if not self.balanced:
            order = rng.permutation(self.n)
            if self.steps_per_epoch:
                order = np.resize(order, self.steps_per_epoch * self.batch_size)
            n_whole = order.size // self.batch_size
            whole = order[: n_whole * self.batch_size].reshape(n_whole, self.batch_size)
            if not self.drop_last and order.size > whole.size:
                rest = order[whole.size :]
        else:
            k_pos = positives_per_batch(self.batch_size, self.positive_fraction, curriculum_ratio(self.schedule, epoch))
            if self.neg.size == 0:
                k_pos = self.batch_size
            k_neg = self.batch_size - k_pos
            n_whole = self.steps_per_epoch or max(self.pos.size // k_pos, 1)
            rest_pos = 0 if self.steps_per_epoch or self.drop_last else max(self.pos.size - n_whole * k_pos, 0)
            rest_neg = min(round(rest_pos * k_neg / k_pos), self.neg.size)
            pos = self._draw(self.pos, n_whole * k_pos + rest_pos, rng)
            neg = self._draw(self.neg, n_whole * k_neg + rest_neg, rng)
            whole = np.concatenate(
                [pos[: n_whole * k_pos].reshape(n_whole, k_pos), neg[: n_whole * k_neg].reshape(n_whole, k_neg)], axis=1
            )
            whole = rng.permuted(whole, axis=1)
            if rest_pos:
                rest = np.concatenate([pos[n_whole * k_pos :], neg[n_whole * k_neg :]])
        seeds = rng.integers(0, 2**31 - 1, size=whole.shape)
        out = [list(zip(g.tolist(), sd.tolist(), strict=True)) for g, sd in zip(whole, seeds, strict=True)]
        if rest is not None:  # drawn after the whole batches, which are thus the same as with drop_last
            rest = rng.permutation(rest)
            out.append(list(zip(rest.tolist(), rng.integers(0, 2**31 - 1, size=rest.size).tolist(), strict=True)))
        return out

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
