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
    # 1:1 (the balanced phase): positive_fraction; later stages: the curriculum's 1 / (1 + ratio), at least one.
    assert positives_per_batch(32, 0.5, 1) == 16
    assert positives_per_batch(32, 0.5, 5) == round(32 / 6)  # 5
    assert positives_per_batch(32, 0.5, 20) == round(32 / 21)  # 2
    assert positives_per_batch(8, 0.5, 1000) == 1
    assert positives_per_batch(32, 0.25, 1) == 8
    assert positives_per_batch(32, 0.75, 1) == 24


def _count_positives(s: BalancedCurriculumSampler, epoch: int) -> list[int]:
    flags = np.zeros(s.n, bool)
    flags[s.pos] = True
    return [int(sum(flags[i] for i, _ in b)) for b in s.batches(epoch)]


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_positive_fraction_is_the_share_of_positives_per_batch_in_the_balanced_phase(fraction: float) -> None:
    """Counted per batch: positive_fraction in the 1:1 stage, the curriculum's own odds in every later stage."""
    flags = np.zeros(600, bool)
    flags[np.random.default_rng(1).choice(600, 120, replace=False)] = True
    s = BalancedCurriculumSampler(flags, batch_size=24, positive_fraction=fraction, schedule=GUIDE, seed=0)
    assert set(_count_positives(s, 1)) == {round(24 * fraction)}  # balanced phase (epochs 1-10)
    assert set(_count_positives(s, 11)) == {4}  # 1:5 -> 24 / 6, whatever positive_fraction is
    assert set(_count_positives(s, 31)) == {2}  # 1:10 -> 24 / 11 rounded
    wide = BalancedCurriculumSampler(flags, batch_size=42, positive_fraction=fraction, schedule=GUIDE, seed=0)
    assert set(_count_positives(wide, 101)) == {2}  # 1:20 -> 42 / 21: near-realistic, as the guide says


def test_drop_last_false_sends_the_leftover_positives_in_a_smaller_last_batch() -> None:
    flags = np.zeros(230, bool)
    flags[np.random.default_rng(9).choice(230, 22, replace=False)] = True  # 22 = 5 x 4 + 2 at 1:1, batch 8
    kw = {"batch_size": 8, "positive_fraction": 0.5, "schedule": GUIDE, "seed": 0}
    dropped = BalancedCurriculumSampler(flags, **kw)  # type: ignore[arg-type]
    kept = BalancedCurriculumSampler(flags, drop_last=False, **kw)  # type: ignore[arg-type]
    assert [len(b) for b in dropped.batches(1)] == [8] * 5
    assert [len(b) for b in kept.batches(1)] == [8] * 5 + [4]
    assert _count_positives(kept, 1) == [4] * 5 + [2]  # the epoch's 1:1 proportion in the last batch too
    assert {i for b in kept.batches(1) for i, _ in b if flags[i]} == set(np.flatnonzero(flags).tolist())
    assert kept.batches(1)[:5] == dropped.batches(1)  # the whole batches are the same draw
    assert _count_positives(kept, 11)[-1] == 22 - 21  # 1:5, batch 8: 1 positive per batch, none left over


def test_drop_last_false_without_balancing_keeps_every_tile() -> None:
    s = _sampler(balanced=False, drop_last=False)
    batches = s.batches(1)
    assert [len(b) for b in batches] == [8] * (220 // 8) + [220 % 8]
    assert sorted(i for b in batches for i, _ in b) == list(range(220))


def test_drop_last_has_nothing_to_drop_with_a_fixed_step_count() -> None:
    assert [len(b) for b in _sampler(drop_last=False, steps_per_epoch=7).batches(1)] == [8] * 7


def test_the_training_loader_takes_drop_last_from_the_config() -> None:
    from types import SimpleNamespace

    from rtscore.config import parse_pipeline_config
    from rtscore.data.loader import train_loader
    from tests.helpers import tiny_pipeline_config

    data = tiny_pipeline_config()
    flags = np.zeros(30, bool)
    flags[:9] = True
    ds = SimpleNamespace(source=SimpleNamespace(metadata=SimpleNamespace(is_positive=flags)), indices=np.arange(30))
    for drop_last, sizes in ((True, [4, 4, 4, 4]), (False, [4, 4, 4, 4, 2])):
        data["data"]["loader"]["drop_last"] = drop_last
        _, sampler = train_loader(parse_pipeline_config(data), ds, seed=0)  # type: ignore[arg-type]
        assert [len(b) for b in sampler.batches(1)] == sizes


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
