"""The verdict rule: each branch on hand-computed numbers, the refusals, and the simulation the issue asks for
(identical variants called better/worse at the stated rate; a known shift called better at the computed power)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtscore.errors import PipelineError
from rtscore.sweep.verdict import (
    BETTER,
    UNDECIDED,
    VERDICTS,
    WORSE,
    VerdictError,
    false_positive_rate,
    judge,
    power,
    verdict_codes,
)

SEEDS3 = [42, 43, 44]
# t quantiles at 0.975 from a printed table (df = 2, 3, 4): the half-width is t·s/√n.
T2, T3, T4 = 4.3027, 3.1824, 2.7764


def pair(diffs: list[float], base: list[float] | None = None) -> tuple[list[float], list[float]]:
    """Baseline values with large seed-to-seed spread, and the variant = baseline + the given paired differences."""
    base = base or [0.50, 0.62, 0.41, 0.55, 0.47][: len(diffs)]
    return base, [b + x for b, x in zip(base, diffs, strict=True)]


# --- each branch, by hand --------------------------------------------------------------------------------------------


def test_better_when_interval_above_zero_and_mean_beyond_margin() -> None:
    # d = 0.03, 0.04, 0.05: mean 0.04, std 0.01, half-width 4.3027·0.01/√3 = 0.02484.
    b, v = pair([0.03, 0.04, 0.05])
    j = judge(b, v, SEEDS3, margin=0.01)
    assert j.verdict == "better"
    assert j.mean_diff == pytest.approx(0.04, abs=1e-12)
    assert j.std_diff == pytest.approx(0.01, abs=1e-12)
    assert j.ci_low == pytest.approx(0.04 - T2 * 0.01 / math.sqrt(3), abs=1e-4)
    assert j.ci_high == pytest.approx(0.04 + T2 * 0.01 / math.sqrt(3), abs=1e-4)
    assert j.seeds_to_decide is None
    assert "+0.040 ± 0.010" in j.reason and "over 3 seeds" in j.reason and "margin 0.010" in j.reason
    assert "95% paired interval +0.015 to +0.065" in j.reason


def test_worse_is_the_mirror_image() -> None:
    b, v = pair([-0.03, -0.04, -0.05])
    j = judge(b, v, SEEDS3, margin=0.01)
    assert j.verdict == "worse"
    assert j.ci_high == pytest.approx(-0.04 + T2 * 0.01 / math.sqrt(3), abs=1e-4)
    assert "lies below 0" in j.reason


def test_interval_beyond_zero_but_mean_within_margin_is_within_noise() -> None:
    # Same differences, margin 0.05 > |mean| 0.04: consistent, but not a difference that counts.
    b, v = pair([0.03, 0.04, 0.05])
    j = judge(b, v, SEEDS3, margin=0.05)
    assert j.verdict == "within noise"
    assert j.seeds_to_decide is None
    assert "within the margin ±0.050" in j.reason


def test_interval_inside_the_margin_is_within_noise() -> None:
    # d = ±0.001, ±0.0005, 0: mean 0, std 0.000791, half-width 2.7764·0.000791/√5 = 0.000982 < margin 0.01.
    b, v = pair([0.001, -0.001, 0.0005, -0.0005, 0.0])
    j = judge(b, v, [1, 2, 3, 4, 5], margin=0.01)
    assert j.verdict == "within noise"
    assert j.ci_high == pytest.approx(T4 * math.sqrt(2.5e-6 / 4) / math.sqrt(5), abs=1e-5)
    assert "lies within ±0.010" in j.reason


def test_straddling_interval_that_more_seeds_would_resolve_is_undecided() -> None:
    # d = 0.05, 0.01, 0.06: mean 0.04, std √(7e-4) = 0.026458. Half-width factor t/√n: n=4 3.1824/2 = 1.591 (·s =
    # 0.0421 > 0.04), n=5 2.7764/√5 = 1.2416 (·s = 0.0329 < 0.04): 5 seeds decide, add 2.
    b, v = pair([0.05, 0.01, 0.06])
    j = judge(b, v, SEEDS3, margin=0.01)
    assert j.verdict == "undecided"
    assert j.ci_low is not None and j.ci_low < 0 < (j.ci_high or 0)
    assert j.seeds_to_decide == 5
    assert "add 2 seeds to decide" in j.reason
    assert j.resolvable == pytest.approx(2.2622 / math.sqrt(10) * math.sqrt(7e-4), abs=1e-4)


def test_straddling_interval_beyond_the_seed_budget_is_within_noise() -> None:
    # As above with max_seeds=4: at 4 seeds the half-width 1.591·0.026458 = 0.0421 still exceeds 0.04.
    b, v = pair([0.05, 0.01, 0.06])
    j = judge(b, v, SEEDS3, margin=0.01, max_seeds=4)
    assert j.verdict == "within noise"
    assert j.seeds_to_decide is None
    assert j.resolvable == pytest.approx(T3 / 2 * math.sqrt(7e-4), abs=1e-4)
    assert "even 4 seeds" in j.reason and "0.042" in j.reason and "below what this seed budget can see" in j.reason


def test_already_at_the_budget_is_within_noise() -> None:
    b, v = pair([0.05, 0.01, 0.06])
    assert judge(b, v, SEEDS3, max_seeds=3).verdict == "within noise"


def test_one_seed_is_undecided_with_three_seeds_asked() -> None:
    j = judge([0.50], [0.53], [42])
    assert (j.verdict, j.seeds_to_decide, j.std_diff, j.ci_low, j.ci_high) == ("undecided", 3, None, None, None)
    assert j.mean_diff == pytest.approx(0.03)
    assert "one seed (42)" in j.reason and "add 2" in j.reason
    assert judge([0.50], [0.53], [42], max_seeds=2).seeds_to_decide == 2
    alone = judge([0.50], [0.53], [42], max_seeds=1)
    assert alone.verdict == "within noise" and alone.seeds_to_decide is None


def test_identical_variant_is_within_noise() -> None:
    b = [0.31, 0.52, 0.47]
    j = judge(b, list(b), SEEDS3)
    assert (j.verdict, j.mean_diff, j.std_diff) == ("within noise", 0.0, 0.0)
    assert "equals the baseline on every seed" in j.reason


def test_pairing_removes_seed_effects() -> None:
    # Seeds differ by up to 0.5 between themselves; the variant is 0.02 ± 0.001 above the baseline on each: better.
    b = [0.30, 0.60, 0.45, 0.80]
    v = [0.32, 0.621, 0.469, 0.82]
    j = judge(b, v, [1, 2, 3, 4], margin=0.005)
    assert j.verdict == "better"
    assert j.std_diff is not None and j.std_diff < 0.001


def test_judgement_round_trips_as_json() -> None:
    b, v = pair([0.05, 0.01, 0.06])
    j = judge(b, v, SEEDS3)
    assert type(j).model_validate_json(j.model_dump_json()) == j


# --- refusals --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("baseline", "variant", "seeds", "match"),
    [
        ([0.5, math.nan, 0.4], [0.5, 0.5, 0.5], SEEDS3, "baseline's value for seed 43"),
        ([0.5, 0.5, 0.4], [0.5, 0.5, math.inf], SEEDS3, "variant's value for seed 44"),
        ([0.5, 0.5], [0.5, 0.5, 0.5], SEEDS3, "cannot pair"),
        ([], [], [], "no seed"),
        ([0.5, 0.5], [0.5, 0.6], [42, 42], "seed 42 is listed twice"),
    ],
)
def test_bad_values_are_refused_naming_the_seed(
    baseline: list[float], variant: list[float], seeds: list[int], match: str
) -> None:
    with pytest.raises(VerdictError, match=match) as err:
        judge(baseline, variant, seeds)
    assert isinstance(err.value, PipelineError) and isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": 0.0}, "confidence"),
        ({"margin": -0.01}, "margin"),
        ({"margin": math.nan}, "margin"),
        ({"max_seeds": 0}, "max_seeds"),
    ],
)
def test_bad_rule_parameters_are_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(VerdictError, match=match):
        judge([0.5, 0.6], [0.5, 0.7], [1, 2], **kwargs)  # type: ignore[arg-type]


# --- the analytic rates ---------------------------------------------------------------------------------------------


def test_power_matches_published_paired_t_figures() -> None:
    # Paired t test, two-sided 5 %, effect 1 std of the difference: 10 pairs give 80 % power (standard tables).
    assert power(1.0, 1.0, 10) == pytest.approx(0.803, abs=0.002)
    assert power(0.0, 1.0, 5) == pytest.approx(0.025, abs=1e-9)  # one direction of α
    assert false_positive_rate(0.95) == pytest.approx(0.05)
    # A margin only removes calls: continuous in the margin, lower as it grows.
    assert power(2.0, 1.0, 3, margin=1e-9) == pytest.approx(power(2.0, 1.0, 3), abs=1e-6)
    assert power(2.0, 1.0, 3, margin=1.0) < power(2.0, 1.0, 3)


def test_seeds_for_80_percent_power_are_the_documented_table() -> None:
    # docs/experiments.md, "How a variant is judged": seeds needed at 95 % for shifts of 1, 2, 3 σ of the difference.
    def needed(k: float) -> int:
        return next(n for n in range(2, 100) if power(k, 1.0, n) >= 0.8)

    assert [needed(1.0), needed(2.0), needed(3.0)] == [10, 5, 4]


# --- the simulation ---------------------------------------------------------------------------------------------------

DRAWS = 20_000
SEED_SD, NOISE_SD = 0.05, 0.01  # seed effects shared by both variants are 5x the run-to-run noise
SIGMA_D = math.sqrt(2) * NOISE_SD  # std of a paired difference: the seed effect cancels


def draw(rng: np.random.Generator, n: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed metric values: baseline_i = base + seed_i + noise, variant_i = base + shift + seed_i + noise'."""
    seed_effect = rng.normal(0.0, SEED_SD, (DRAWS, n))
    baseline = 0.40 + seed_effect + rng.normal(0.0, NOISE_SD, (DRAWS, n))
    variant = 0.40 + shift + seed_effect + rng.normal(0.0, NOISE_SD, (DRAWS, n))
    return baseline, variant


def binomial_se(p: float) -> float:
    return math.sqrt(p * (1 - p) / DRAWS)


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_identical_variants_are_called_better_or_worse_at_the_stated_rate(n: int, confidence: float) -> None:
    rng = np.random.default_rng([24, n, int(confidence * 100)])
    baseline, variant = draw(rng, n, shift=0.0)
    codes, _ = verdict_codes(variant - baseline, confidence=confidence, margin=0.0)
    alpha = false_positive_rate(confidence)
    called = np.isin(codes, [BETTER, WORSE]).mean()
    assert abs(called - alpha) <= 3 * binomial_se(alpha)
    for direction in (BETTER, WORSE):  # α/2 each way
        assert abs((codes == direction).mean() - alpha / 2) <= 3 * binomial_se(alpha / 2)
    # A margin only lowers the rate (here the noise floor at 2 x a tenth of the paired std).
    with_margin, _ = verdict_codes(variant - baseline, confidence=confidence, margin=0.2 * SIGMA_D)
    assert np.isin(with_margin, [BETTER, WORSE]).mean() <= alpha + 3 * binomial_se(alpha)


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("k", [2.0, 3.0])
@pytest.mark.parametrize("margin_sd", [0.0, 0.5])
def test_a_known_shift_is_called_better_at_the_computed_power(n: int, k: float, margin_sd: float) -> None:
    rng = np.random.default_rng([24, n, int(k), int(margin_sd * 10)])
    baseline, variant = draw(rng, n, shift=k * SIGMA_D)
    margin = margin_sd * SIGMA_D
    codes, _ = verdict_codes(variant - baseline, margin=margin)
    expected = power(k * SIGMA_D, SIGMA_D, n, margin=margin)
    observed = (codes == BETTER).mean()
    assert abs(observed - expected) <= 3 * binomial_se(expected), (observed, expected)
    assert (codes == WORSE).mean() < 0.005


def test_unpaired_values_would_hide_the_shift() -> None:
    # Why pairing: a 2σ_d shift is found at its power (~0.91 at 5 seeds) when paired; with the pairing broken the
    # seed effects stay in the differences (std √2·√(0.05² + 0.01²) = 0.072) and the power drops to ~0.10.
    rng = np.random.default_rng(7)
    shift = 2 * SIGMA_D
    baseline, variant = draw(rng, 5, shift=shift)
    paired, _ = verdict_codes(variant - baseline)
    unpaired, _ = verdict_codes(variant - np.roll(baseline, 1, axis=0))  # another draw's seeds: pairing broken
    assert (paired == BETTER).mean() > 0.85
    unpaired_power = power(shift, math.sqrt(2 * (SEED_SD**2 + NOISE_SD**2)), 5)
    assert unpaired_power < 0.15
    assert abs((unpaired == BETTER).mean() - unpaired_power) <= 3 * binomial_se(unpaired_power)


def test_judge_and_the_vectorized_rule_agree() -> None:
    rng = np.random.default_rng(11)
    for n, shift in [(3, 0.0), (3, 2 * SIGMA_D), (5, SIGMA_D), (2, 3 * SIGMA_D)]:
        seed_effect = rng.normal(0.0, SEED_SD, (150, n))
        baseline = 0.4 + seed_effect + rng.normal(0.0, NOISE_SD, (150, n))
        variant = 0.4 + shift + seed_effect + rng.normal(0.0, NOISE_SD, (150, n))
        codes, to_decide = verdict_codes(variant - baseline, margin=0.3 * SIGMA_D, max_seeds=8)
        for i in range(150):
            j = judge(list(baseline[i]), list(variant[i]), list(range(n)), margin=0.3 * SIGMA_D, max_seeds=8)
            assert j.verdict == VERDICTS[codes[i]]
            assert (j.seeds_to_decide or 0) == (to_decide[i] if codes[i] == UNDECIDED else 0)
            if j.verdict == "undecided":
                assert j.seeds_to_decide is not None and n < j.seeds_to_decide <= 8


def until_decided(diffs: np.ndarray, start: int, confidence: float) -> np.ndarray:
    """Judge at ``start`` seeds, then re-judge at seeds_to_decide while undecided (what --until-decided does)."""
    codes, k = verdict_codes(diffs[:, :start], confidence=confidence)
    while (codes == UNDECIDED).any():
        pending = np.flatnonzero(codes == UNDECIDED)
        for total in np.unique(k[pending]):
            rows = pending[k[pending] == total]
            codes[rows], k[rows] = verdict_codes(diffs[rows, :total], confidence=confidence)
    return codes


def test_adding_seeds_until_decided_raises_the_false_positive_rate_as_documented() -> None:
    # docs/experiments.md: from 3 seeds (cap 10) the sequential rate is about 11 % at 95 %, about 6 % at 97.5 %.
    rng = np.random.default_rng(3)
    diffs = rng.normal(0.0, 1.0, (DRAWS, 10))
    at95 = np.isin(until_decided(diffs, 3, 0.95), [BETTER, WORSE]).mean()
    at975 = np.isin(until_decided(diffs, 3, 0.975), [BETTER, WORSE]).mean()
    assert 0.09 <= at95 <= 0.125
    assert 0.045 <= at975 <= 0.07
