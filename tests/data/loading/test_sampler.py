from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rtscore.config.pipeline import CurriculumStage, SamplingConfig
from rtscore.data.loading.sampler import (
    BalancedCurriculumSampler,
    curriculum_ratio,
    positive_counts,
    positive_share,
    positives_per_batch,
    realised_ratio,
)

GUIDE = SamplingConfig().curriculum_schedule


@pytest.mark.parametrize(
    ("epoch", "ratio"),
    [(1, 1), (10, 1), (11, 5), (30, 5), (31, 10), (50, 10), (51, 15), (100, 15), (101, 20), (300, 20)],
)
def test_guide_curriculum_steps_at_epoch_boundaries(epoch: int, ratio: float) -> None:
    assert curriculum_ratio(GUIDE, epoch) == ratio


def test_positives_per_batch_is_exact_not_rounded() -> None:
    # 1:1 (the balanced phase): positive_fraction; later stages: the curriculum's 1 / (1 + ratio), as a fraction.
    assert positives_per_batch(32, 0.5, 1) == 16
    assert positives_per_batch(32, 0.5, 5) == Fraction(32, 6)
    assert positives_per_batch(32, 0.5, 20) == Fraction(32, 21)  # issue 25: was round(32 / 21) = 2, i.e. 1:15
    assert positives_per_batch(42, 0.5, 20) == 2
    assert positives_per_batch(8, 0.5, 1000) == Fraction(8, 1001)
    assert positives_per_batch(32, 0.25, 1) == 8
    assert positives_per_batch(32, 0.75, 1) == 24


def test_positive_counts_carry_the_remainder_from_batch_to_batch() -> None:
    counts = positive_counts(Fraction(32, 21), 21)
    assert set(counts.tolist()) == {1, 2} and counts.sum() == 32  # 21 batches of 32 tiles: exactly 1:20
    assert positive_counts(Fraction(4), 5).tolist() == [4] * 5
    assert all(np.cumsum(positive_counts(Fraction(8, 21), 50)) == [int(n * 8 / 21) for n in range(1, 51)])


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
    assert set(_count_positives(s, 31)) == {2, 3}  # 1:10 -> 24 / 11: the remainder carried, not rounded away
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
    from rtscore.data.loading.loader import train_loader
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
    for epoch, k_pos, n_batches in ((1, {4}, 5), (11, {1, 2}, 15), (101, {0, 1}, 55)):
        batches = s.batches(epoch)
        assert all(len(b) == 8 for b in batches)
        per_batch = [sum(flags[i] for i, _ in b) for b in batches]
        assert set(per_batch) == k_pos, epoch
        assert len(batches) == n_batches and sum(per_batch) == 20  # every positive once per epoch
        seen_pos = {i for b in batches for i, _ in b if flags[i]}
        assert seen_pos == set(s.pos.tolist())


def test_negatives_are_used_before_any_repeats() -> None:
    s = _sampler()
    batches = s.batches(11)  # 15 batches x 8 tiles - 20 positives = 100 < 200 negatives
    negs = [i for b in batches for i, _ in b if i not in set(s.pos.tolist())]
    assert len(negs) == len(set(negs)) == 100


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


GUIDE_STAGES = [1, 11, 31, 51, 101]  # 1:1, 1:5, 1:10, 1:15, 1:20


@pytest.mark.parametrize("batch_size", [8, 16, 32, 42])
@pytest.mark.parametrize("world_size", [1, 2])
def test_every_curriculum_stage_realises_its_ratio_over_an_epoch(batch_size: int, world_size: int) -> None:
    """Issue 25: at batch 32 the 1:20 stage trained at 1:15 (round(32/21) = 2 positives a batch). Now the epoch's
    positives are its tiles x 1/(1 + ratio) rounded down once: the ratio is exact where the epoch's tile count
    allows and otherwise within one tile, for the tiles the ranks read together (each batch_size / world_size
    tiles a step: an effective batch of batch_size) as for one device."""
    flags = np.zeros(3000, bool)
    flags[np.random.default_rng(2).choice(flags.size, 150, replace=False)] = True
    kw = {"positive_fraction": 0.5, "schedule": GUIDE, "seed": 11}
    one = BalancedCurriculumSampler(flags, batch_size=batch_size, **kw)  # type: ignore[arg-type]
    per_rank = batch_size // world_size
    ranks = [
        BalancedCurriculumSampler(flags, batch_size=per_rank, rank=r, world_size=world_size, **kw)  # type: ignore[arg-type]
        for r in range(world_size)
    ]
    for epoch in GUIDE_STAGES:
        ratio = curriculum_ratio(GUIDE, epoch)
        for r in ranks:
            r.set_epoch(epoch)
        read = [[t for shard in step for t in shard] for step in zip(*(list(r) for r in ranks), strict=True)]
        assert read == one.batches(epoch), (epoch, "the ranks read exactly the one-device batches")
        n_tiles = sum(len(b) for b in read)
        n_pos = sum(int(flags[i]) for b in read for i, _ in b)
        exact = n_tiles * Fraction(positive_share(0.5, ratio)).limit_denominator(10**6)
        assert exact - 1 < n_pos <= exact, (epoch, n_pos, float(exact))
        if exact.denominator == 1:
            assert realised_ratio(read, flags) == ratio
        assert abs(realised_ratio(read, flags) - ratio) <= (1 + ratio) / n_pos
        if batch_size * positive_share(0.5, ratio) >= 1:  # a positive in every batch wherever the share allows
            assert min(sum(int(flags[i]) for i, _ in b) for b in read) >= 1


def test_the_1_to_20_stage_is_exact_at_batch_42_and_no_longer_1_to_15_at_32() -> None:
    flags = np.zeros(5000, bool)
    flags[np.random.default_rng(3).choice(flags.size, 210, replace=False)] = True
    kw = {"positive_fraction": 0.5, "schedule": GUIDE, "seed": 0}
    at42 = BalancedCurriculumSampler(flags, batch_size=42, **kw).batches(101)  # type: ignore[arg-type]
    assert realised_ratio(at42, flags) == 20.0
    at32 = BalancedCurriculumSampler(flags, batch_size=32, **kw).batches(101)  # type: ignore[arg-type]
    assert 19.8 < realised_ratio(at32, flags) < 20.3  # before issue 25: 15.0


# sha256 (first 16 hex) of json.dumps(batches) before issue 25, where the batch holds the ratio exactly
PINNED = {
    (42, 1, True): "4225eb6984c3e078",
    (42, 11, True): "43159402ebba0bb1",
    (42, 101, True): "6aa8bf12acd164da",
    (16, 1, False): "63bef2ab130a2d4b",
    (12, 1, True): "3e60e61f34b9af27",
    (12, 11, True): "79ada2200049d63e",
}


@pytest.mark.parametrize(("batch_size", "epoch", "drop_last"), list(PINNED))
def test_a_plan_whose_ratio_divides_the_batch_is_unchanged_by_the_fix(
    batch_size: int, epoch: int, drop_last: bool
) -> None:
    import hashlib
    import json

    flags = np.zeros(700, bool)
    flags[np.random.default_rng(5).choice(700, 90, replace=False)] = True
    s = BalancedCurriculumSampler(
        flags, batch_size=batch_size, positive_fraction=0.5, schedule=GUIDE, seed=7, drop_last=drop_last
    )
    digest = hashlib.sha256(json.dumps(s.batches(epoch)).encode()).hexdigest()[:16]
    assert digest == PINNED[(batch_size, epoch, drop_last)]


def test_n_ranks_read_slices_of_batch_size_that_cover_the_effective_batch() -> None:
    """batch_size is per rank (guide §9.1: per GPU): 3 ranks of 4 read the one-device batches of 12, each rank its
    contiguous 4, together every tile of each exactly once (before issue 35 batch_size was the global batch and 3
    ranks of a batch of 4 were refused)."""
    flags = np.zeros(220, bool)
    flags[:30] = True
    kw = {"positive_fraction": 0.5, "schedule": GUIDE, "seed": 1}
    one = BalancedCurriculumSampler(flags, batch_size=12, **kw).batches(1)  # type: ignore[arg-type]
    ranks = [BalancedCurriculumSampler(flags, batch_size=4, rank=r, world_size=3, **kw) for r in range(3)]  # type: ignore[arg-type]
    slices = [list(r) for r in ranks]
    # an epoch takes each positive once: 5 steps of 3 x 4 tiles (6 positives each), a third of one device's at 4
    assert len(one) == 5 and len(BalancedCurriculumSampler(flags, batch_size=4, **kw).batches(1)) == 15  # type: ignore[arg-type]
    assert all(r.effective_batch == 12 and len(r) == len(one) for r in ranks)
    assert all(len(b) == 4 for sl in slices for b in sl)
    for k, batch in enumerate(one):
        assert [t for sl in slices for t in sl[k]] == batch  # in rank order: the effective batch, tile for tile
    # drop_last False: 30 positives at 4 a batch of 8 give 7 whole batches and a last one of 2 + 2 tiles
    kept = BalancedCurriculumSampler(flags, batch_size=2, rank=0, world_size=4, drop_last=False, **kw)  # type: ignore[arg-type]
    assert kept.effective_batch == 8 and [len(b) for b in kept] == [2] * 7 + [1]
    cut = BalancedCurriculumSampler(flags, batch_size=1, rank=7, world_size=8, drop_last=False, **kw)  # type: ignore[arg-type]
    assert [len(b) for b in cut] == [1] * 7  # 4 tiles for 8 ranks: the last batch is cut away


def test_the_negative_pool_tells_mapped_negatives_apart_and_draws_as_without_them() -> None:
    """Issue 36 (2): tiles holding a mapped Negative polygon are visible in the pool; the draw is unchanged."""
    plain = _sampler()
    mapped = np.zeros(220, bool)
    mapped[plain.neg[::7]] = True
    mapped[plain.pos[0]] = True  # a positive tile with a mapped Negative polygon is still a positive
    s = _sampler(mapped_negative=mapped)
    assert s.mapped_neg.tolist() == plain.neg[::7].tolist()
    assert sorted([*s.mapped_neg, *s.plain_neg]) == plain.neg.tolist()
    assert plain.mapped_neg.size == 0 and plain.plain_neg.tolist() == plain.neg.tolist()
    assert s.batches(11) == plain.batches(11)
    with pytest.raises(ValueError, match="3 flags for 220 tiles"):
        _sampler(mapped_negative=np.zeros(3, bool))
