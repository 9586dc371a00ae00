from __future__ import annotations

import numpy as np
import pytest

from rtscore.config.pipeline import CurriculumStage, SamplingConfig
from rtscore.data.sampler import BalancedCurriculumSampler, curriculum_ratio, positives_per_batch

GUIDE = SamplingConfig().curriculum_schedule


@pytest.mark.parametrize(
    ("epoch", "ratio"),
    [(1, 1), (10, 1), (11, 5), (30, 5), (31, 10), (50, 10), (51, 15), (100, 15), (101, 20), (300, 20)],
)
def test_guide_curriculum_steps_at_epoch_boundaries(epoch: int, ratio: float) -> None:
    assert curriculum_ratio(GUIDE, epoch) == ratio


def test_positives_per_batch() -> None:
    # p = 0.5: share = 1 / (1 + ratio); at least one positive per batch.
    assert positives_per_batch(32, 0.5, 1) == 16
    assert positives_per_batch(32, 0.5, 5) == round(32 / 6)  # 5
    assert positives_per_batch(32, 0.5, 20) == round(32 / 21)  # 2
    assert positives_per_batch(8, 0.5, 1000) == 1


def _sampler(seed: int = 0, n_pos: int = 20, n_neg: int = 200, **kw: object) -> BalancedCurriculumSampler:
    flags = np.zeros(n_pos + n_neg, bool)
    flags[np.random.default_rng(9).choice(flags.size, n_pos, replace=False)] = True
    return BalancedCurriculumSampler(flags, batch_size=8, positive_fraction=0.5, schedule=GUIDE, seed=seed, **kw)  # type: ignore[arg-type]


def test_epoch_composition_follows_the_curriculum() -> None:
    s = _sampler()
    flags = np.zeros(220, bool)
    flags[s.pos] = True
    for epoch, k_pos in ((1, 4), (11, 1), (101, 1)):
        batches = s.batches(epoch)
        assert all(len(b) == 8 for b in batches)
        per_batch = [sum(flags[i] for i, _ in b) for b in batches]
        assert set(per_batch) == {k_pos}, epoch
        assert len(batches) == 20 // k_pos  # every positive once per epoch
        seen_pos = {i for b in batches for i, _ in b if flags[i]}
        assert seen_pos == set(s.pos.tolist())


def test_negatives_are_used_before_any_repeats() -> None:
    s = _sampler()
    batches = s.batches(11)  # 20 batches x 7 negatives = 140 < 200 negatives
    negs = [i for b in batches for i, _ in b if i not in set(s.pos.tolist())]
    assert len(negs) == len(set(negs)) == 140


def test_deterministic_given_seed_and_epoch() -> None:
    assert _sampler(seed=3).batches(5) == _sampler(seed=3).batches(5)
    assert _sampler(seed=3).batches(5) != _sampler(seed=4).batches(5)
    assert _sampler(seed=3).batches(5) != _sampler(seed=3).batches(6)


def test_iteration_uses_set_epoch_and_skip() -> None:
    s = _sampler()
    s.set_epoch(11)
    full = list(s)
    s.set_epoch(11, skip_batches=3)
    assert list(s) == full[3:] and len(s) == len(full) - 3


def test_no_positive_tile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least one positive tile"):
        BalancedCurriculumSampler(
            np.zeros(10, bool),
            batch_size=4,
            positive_fraction=0.5,
            schedule=[CurriculumStage(start_epoch=1, end_epoch=None, neg_per_pos=1)],
            seed=0,
        )


def test_unbalanced_mode_is_a_plain_shuffle() -> None:
    s = _sampler(balanced=False)
    batches = s.batches(1)
    assert len(batches) == 220 // 8 and len({i for b in batches for i, _ in b}) == 220 - 220 % 8
