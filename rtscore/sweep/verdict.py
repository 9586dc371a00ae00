"""The verdict of a sweep variant against the baseline over the same seeds (paired), within seed noise.

The rule (docs/experiments.md, "How a variant is judged"): the per-seed differences ``d_i = variant_i - baseline_i``
over the seeds both trained, their mean ``m``, sample std ``s`` and the paired t interval
``m ± t(n-1, 1-α/2)·s/√n`` at ``confidence = 1 - α``:

- **better** / **worse**: the interval lies entirely above / below 0 *and* ``|m| > margin``. For identical variants
  this happens with probability at most α/2 per direction (α two-sided) at any seed count: it is the paired t test.
- **within noise**: ``|m| <= margin`` (the estimate is inside the practical-equivalence margin, so more seeds at this
  spread would not make it count; when the interval itself lies inside ±margin it is equivalence), or the interval
  straddles 0 and even ``max_seeds`` paired seeds at the observed spread would not make it exclude 0.
- **undecided**: the interval straddles 0, ``|m| > margin`` and the half-width ``t(n'-1, 1-α/2)·s/√n'`` falls below
  ``|m|`` at some ``n' <= max_seeds``: ``seeds_to_decide`` is the smallest such ``n'`` (guide §13.1's conditional
  seed count; "add ``n' - n`` seeds to decide").
- One seed has no spread: **undecided** with ``seeds_to_decide = min(3, max_seeds)`` (guide §13.1's three seeds; at
  two seeds the 95 % t factor is 12.7), **within noise** when ``max_seeds < 2``.

:func:`verdict_codes` is the rule on many draws at once (the simulation test runs it); :func:`judge` runs it on one
and says why; :func:`power` is the probability of "better" for a true shift, from the noncentral t distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from rtscore.errors import PipelineError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

VerdictName = Literal["better", "worse", "within noise", "undecided"]

#: Seeds asked for after a single one (guide §13.1's three seeds), capped by ``max_seeds``.
FIRST_SEEDS = 3

# Codes of :func:`verdict_codes`, in the order of VERDICTS.
BETTER, WORSE, WITHIN_NOISE, UNDECIDED = 0, 1, 2, 3
VERDICTS: tuple[VerdictName, ...] = ("better", "worse", "within noise", "undecided")


class VerdictError(PipelineError, ValueError):
    """The per-seed values cannot be judged (not paired, not finite, no seed, or a bad rule parameter)."""


class Judgement(BaseModel):
    """A variant against the baseline, on the per-seed values of the deciding metric of the seeds both ran."""

    seeds: list[int] = Field(..., description="The paired seeds (both variants trained them).")
    mean_diff: float = Field(..., description="Mean of variant - baseline over the paired seeds.")
    std_diff: float | None = Field(..., description="Sample std of the paired differences (null: one seed).")
    ci_low: float | None = Field(..., description="Lower end of the paired interval at `confidence`.")
    ci_high: float | None = Field(..., description="Upper end of the paired interval at `confidence`.")
    confidence: float = Field(..., description="Confidence of the interval, e.g. 0.95.")
    margin: float = Field(..., description="Smallest difference that counts (the practical-equivalence margin).")
    verdict: VerdictName = Field(..., description="better, worse, within noise, or undecided (add seeds).")
    seeds_to_decide: int | None = Field(
        None, description="Undecided: total paired seeds the rule expects to need to decide (null otherwise)."
    )
    reason: str = Field(..., description="One sentence saying why, with the numbers.")
    resolvable: float | None = Field(
        None,
        description="Smallest |mean difference| the interval could separate from 0 at `max_seeds` paired seeds with "
        "the observed spread (the seed budget's resolution; null: one seed).",
    )


def _check_rule(confidence: float, margin: float, max_seeds: int) -> None:
    if not (isinstance(confidence, int | float) and 0.0 < confidence < 1.0):
        raise VerdictError(f"verdict confidence must lie strictly between 0 and 1 (e.g. 0.95), got {confidence!r}")
    if not (isinstance(margin, int | float) and math.isfinite(margin) and margin >= 0.0):
        raise VerdictError(
            f"verdict margin must be a finite number >= 0 (the baseline's validation noise floor), got {margin!r}"
        )
    if isinstance(max_seeds, bool) or not isinstance(max_seeds, int) or max_seeds < 1:
        raise VerdictError(f"verdict max_seeds must be an integer >= 1, got {max_seeds!r}")


def _half_width_factors(confidence: float, max_seeds: int) -> NDArray[np.float64]:
    """``f[n] = t(n-1, 1-α/2)/√n`` for ``n = 0..max(max_seeds, 1)`` (inf for n < 2): the half-width is ``f[n]·s``."""
    import numpy as np
    from scipy import stats

    top = max(max_seeds, 1)
    f = np.full(top + 1, np.inf)
    if top >= 2:
        n = np.arange(2, top + 1)
        f[2:] = stats.t.ppf(0.5 + confidence / 2.0, n - 1) / np.sqrt(n)
    return f


def verdict_codes(
    diffs: NDArray[np.float64], *, confidence: float = 0.95, margin: float = 0.0, max_seeds: int = 10
) -> tuple[NDArray[np.int8], NDArray[np.int64]]:
    """The rule on many draws at once: ``diffs`` is (draws, n) paired differences; returns the verdict code per draw
    (:data:`VERDICTS` order) and ``seeds_to_decide`` (0 where not undecided). :func:`judge` calls it on one draw."""
    import numpy as np

    _check_rule(confidence, margin, max_seeds)
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] < 1:
        raise VerdictError(f"verdict_codes wants a (draws, seeds) array with at least one seed, got shape {d.shape}")
    draws, n = d.shape
    m = d.mean(axis=1)
    codes = np.full(draws, WITHIN_NOISE, dtype=np.int8)
    to_decide = np.zeros(draws, dtype=np.int64)
    if n == 1:
        if max_seeds >= 2:
            codes[:] = UNDECIDED
            to_decide[:] = min(FIRST_SEEDS, max_seeds)
        return codes, to_decide

    f = _half_width_factors(confidence, max_seeds)
    s = d.std(axis=1, ddof=1)
    h = float(_half_width_factors(confidence, n)[n]) * s
    beyond = np.abs(m) > margin
    codes[(m - h > 0) & beyond] = BETTER
    codes[(m + h < 0) & beyond] = WORSE
    straddles = (m - h <= 0) & (m + h >= 0) & beyond
    # The half-width factor falls with n, so the seed counts that would resolve |m| at spread s are n' >= some n*;
    # n is not among them (the interval straddles 0), so n* > n.
    ns = np.arange(2, max_seeds + 1)
    if ns.size and straddles.any():
        resolves = f[2:][None, :] * s[straddles, None] < np.abs(m[straddles])[:, None]
        first = np.where(resolves.any(axis=1), ns[np.argmax(resolves, axis=1)], 0)
        idx = np.flatnonzero(straddles)
        codes[idx[first > 0]] = UNDECIDED
        to_decide[idx] = first
    return codes, to_decide


def _fmt_digits(*values: float) -> int:
    """Decimals that show every non-zero value with a significant digit (3 at least, 6 at most)."""
    smallest = min((abs(v) for v in values if v and math.isfinite(v)), default=1.0)
    return min(6, max(3, -math.floor(math.log10(smallest * (1 + 1e-9)))))


def _paired_seeds(baseline: Sequence[float], variant: Sequence[float], seeds: Sequence[int]) -> list[int]:
    """The seeds as ints, once the values pair up with them: :func:`judge` refuses what it cannot pair or read.

    Every refusal names what to fix (the seed, or which side's count differs) so the sweep's caller can drop or
    re-run exactly that seed instead of judging on a silently truncated or NaN-poisoned pairing.
    """
    import numpy as np

    seeds = [int(x) for x in seeds]
    if not seeds:
        raise VerdictError("cannot judge a variant on no seed: both the baseline and the variant must train one")
    if len(baseline) != len(seeds) or len(variant) != len(seeds):
        raise VerdictError(
            f"cannot pair the per-seed values: {len(seeds)} seeds {seeds}, {len(baseline)} baseline value(s), "
            f"{len(variant)} variant value(s); judge only the seeds both trained"
        )
    if len(set(seeds)) != len(seeds):
        dup = next(x for x in seeds if seeds.count(x) > 1)
        raise VerdictError(f"seed {dup} is listed twice: each seed pairs one baseline run with one variant run")
    for side, values in (("baseline", baseline), ("variant", variant)):
        for seed, v in zip(seeds, values, strict=True):
            if not isinstance(v, int | float | np.floating | np.integer) or not math.isfinite(float(v)):
                raise VerdictError(
                    f"the {side}'s value for seed {seed} is {v!r}, not a finite number: "
                    f"re-run or drop that seed's validation before judging"
                )
    return seeds


def _judge_one_seed(
    m: float, seeds: list[int], verdict: VerdictName, k: int, *, confidence: float, margin: float, max_seeds: int
) -> Judgement:
    """The judgement on a single paired seed: no spread, so no interval; the reason says how many seeds to train.

    Kept apart from the paired case because one difference has no std: std, interval and resolution stay null and
    the reason asks for seeds (or says ``max_seeds`` allows none) instead of describing an interval.
    """
    pct = f"{100 * confidence:g}%"
    nd = _fmt_digits(m, margin)
    if verdict == "undecided":
        reason = (
            f"{m:+.{nd}f} on one seed ({seeds[0]}) has no spread to judge it by: "
            f"train {k} paired seeds (add {k - 1}) for a {pct} paired interval"
        )
    else:
        reason = (
            f"{m:+.{nd}f} on one seed ({seeds[0]}) has no spread to judge it by and max_seeds={max_seeds} "
            f"allows no second seed, so no difference can be called beyond seed noise"
        )
    return Judgement(
        seeds=seeds,
        mean_diff=m,
        std_diff=None,
        ci_low=None,
        ci_high=None,
        confidence=confidence,
        margin=margin,
        verdict=verdict,
        seeds_to_decide=k if verdict == "undecided" else None,
        reason=reason,
    )


def _paired_reason(
    head: str,
    verdict: VerdictName,
    *,
    m: float,
    s: float,
    lo: float,
    hi: float,
    n: int,
    k: int,
    nd: int,
    margin: float,
    max_seeds: int,
    resolvable: float | None,
) -> str:
    """The one sentence saying why the paired interval ``head`` got ``verdict``.

    "within noise" has four distinct causes (identical runs, an interval inside the margin, a mean inside the
    margin, or an effect below the seed budget's resolution ``resolvable``), and the reason names the one that
    applies so the reader knows whether more seeds could ever help.
    """
    mg = f"{margin:.{nd}f}"
    if verdict == "better":
        return f"{head} lies above 0 and the mean is beyond the margin {mg}"
    if verdict == "worse":
        return f"{head} lies below 0 and the mean is beyond the margin -{mg}"
    if verdict == "undecided":
        return (
            f"{head} straddles 0, but at this spread {k} paired seeds would separate it from 0 "
            f"(add {k - n} seeds to decide)"
        )
    if s == 0.0 and m == 0.0:
        return f"{head}: the variant equals the baseline on every seed"
    if -margin < lo and hi < margin:
        return f"{head} lies within ±{mg}, the margin: no difference that counts"
    if abs(m) <= margin:
        return f"{head}: the mean difference is within the margin ±{mg}, so more seeds would not make it count"
    at = f"{resolvable:.{nd}f}" if resolvable is not None else "unbounded"
    return (
        f"{head} straddles 0 and even {max_seeds} seeds would not separate it from 0 at this spread "
        f"(|mean| would need to exceed {at}): any effect is below what this seed budget can see"
    )


def _judge_paired(
    d: NDArray[np.float64],
    seeds: list[int],
    verdict: VerdictName,
    k: int,
    *,
    confidence: float,
    margin: float,
    max_seeds: int,
) -> Judgement:
    """The judgement on two or more paired seeds: mean, std, the paired t interval and the budget's resolution.

    The interval and ``resolvable`` are recomputed here (not taken from :func:`verdict_codes`) because the reason
    and the record show them; the verdict itself comes from the shared rule so both can never disagree.
    """
    n = d.size
    m = float(d.mean())
    pct = f"{100 * confidence:g}%"
    s = float(d.std(ddof=1))
    f = _half_width_factors(confidence, max(n, max_seeds))
    h = float(f[n]) * s
    lo, hi = m - h, m + h
    resolvable = float(f[max_seeds]) * s if max_seeds >= 2 else None
    nd = _fmt_digits(m, s, margin)
    head = f"{m:+.{nd}f} ± {s:.{nd}f} ({pct} paired interval {lo:+.{nd}f} to {hi:+.{nd}f} over {n} seeds)"
    reason = _paired_reason(
        head,
        verdict,
        m=m,
        s=s,
        lo=lo,
        hi=hi,
        n=n,
        k=k,
        nd=nd,
        margin=margin,
        max_seeds=max_seeds,
        resolvable=resolvable,
    )
    return Judgement(
        seeds=seeds,
        mean_diff=m,
        std_diff=s,
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
        margin=margin,
        verdict=verdict,
        seeds_to_decide=k if verdict == "undecided" else None,
        reason=reason,
        resolvable=resolvable,
    )


def judge(
    baseline: Sequence[float],
    variant: Sequence[float],
    seeds: Sequence[int],
    *,
    confidence: float = 0.95,
    margin: float = 0.0,
    max_seeds: int = 10,
) -> Judgement:
    """The verdict of ``variant`` against ``baseline`` (per-seed values, paired by position, for ``seeds``).

    Higher values of the metric are better. Raises :class:`VerdictError` (naming the seed) on values that are not
    finite, on lengths that differ, on a seed listed twice, or on no seed at all.
    """
    import numpy as np

    _check_rule(confidence, margin, max_seeds)
    paired = _paired_seeds(baseline, variant, seeds)
    d = np.asarray(variant, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    codes, to_decide = verdict_codes(d[None, :], confidence=confidence, margin=margin, max_seeds=max_seeds)
    verdict = VERDICTS[int(codes[0])]
    k = int(to_decide[0])
    if d.size == 1:
        return _judge_one_seed(
            float(d.mean()), paired, verdict, k, confidence=confidence, margin=margin, max_seeds=max_seeds
        )
    return _judge_paired(d, paired, verdict, k, confidence=confidence, margin=margin, max_seeds=max_seeds)


def false_positive_rate(confidence: float = 0.95) -> float:
    """Probability that identical variants are called better or worse at any fixed seed count: ``1 - confidence``
    (half of it per direction). The margin only lowers it."""
    _check_rule(confidence, 0.0, 1)
    return 1.0 - confidence


def power(shift: float, sigma: float, n: int, *, confidence: float = 0.95, margin: float = 0.0) -> float:
    """Probability that the rule calls "better" with ``n`` paired seeds when the paired differences are
    ``N(shift, sigma²)`` (``sigma`` is the std of a seed's difference, not of one variant's values).

    Margin 0: the noncentral t tail ``P(T > t(n-1, 1-α/2))``, ``T ~ nct(n-1, shift·√n/sigma)``. Margin > 0: the
    rule also needs ``mean > margin``, so the probability is integrated over the sample std's chi-square law.
    """
    import numpy as np
    from scipy import integrate, stats

    _check_rule(confidence, margin, max(n, 2))
    if n < 2:
        return 0.0
    if not (sigma > 0.0 and math.isfinite(sigma) and math.isfinite(shift)):
        raise VerdictError(f"power needs a finite shift and a finite sigma > 0, got shift={shift!r}, sigma={sigma!r}")
    df = n - 1
    tq = float(stats.t.ppf(0.5 + confidence / 2.0, df))
    if margin == 0.0:
        return float(stats.nct.sf(tq, df, shift * math.sqrt(n) / sigma))
    se = sigma / math.sqrt(n)

    def given_chi2(q: float) -> float:
        # q = (n-1)·s²/σ²; "better" needs mean > max(margin, t·s/√n), mean ~ N(shift, σ²/n) independent of s.
        s = sigma * math.sqrt(q / df)
        bound = max(margin, tq * s / math.sqrt(n))
        return float(stats.norm.sf((bound - shift) / se) * stats.chi2.pdf(q, df))

    # Split at the q where t·s/√n = margin (the bound's kink).
    kink = float(df * (margin * math.sqrt(n) / (tq * sigma)) ** 2)
    hi = float(stats.chi2.ppf(1 - 1e-12, df))
    points = [p for p in (kink,) if 0.0 < p < hi]
    value, _ = integrate.quad(given_chi2, 0.0, hi, points=points or None, limit=200)
    return float(np.clip(value, 0.0, 1.0))
