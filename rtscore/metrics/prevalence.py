"""Prevalence ratios 1:N as expected-value tile weights, ratio metric names, and the geometric mean across ratios."""

from __future__ import annotations

import math
from collections.abc import Iterable


def negative_weight(ratio: float | None, n_pos: int, n_neg: int) -> float:
    """Weight of each negative tile so that the pool holds `ratio` negatives per positive tile in expectation.

    Replaces random subsampling of negatives (guide §10.3) by its expected value: every negative tile's
    statistics count `w = ratio × n_pos / n_neg` times, so the weighted negative mass is `ratio × n_pos`.
    `w > 1` means the pool holds fewer negatives than the ratio asks for and each one is up-weighted.

    Args:
        ratio: N of 1:N, or None for the natural pool (weight 1).
        n_pos: Positive tiles in the pool.
        n_neg: Negative tiles in the pool.

    Returns:
        The weight; 0.0 when there are no positive tiles (every metric is then undefined anyway).

    Raises:
        ValueError: A non-positive ratio, or a ratio asked of a pool without negative tiles.
    """
    if ratio is None:
        return 1.0
    if not ratio > 0:
        raise ValueError(f"prevalence ratio 1:N needs N > 0; got {ratio}")
    if n_pos < 0 or n_neg < 0:
        raise ValueError(f"tile counts must be >= 0; got n_pos={n_pos}, n_neg={n_neg}")
    if n_neg == 0:
        raise ValueError(
            f"ratio 1:{ratio:g} needs negative tiles but the pool has none (n_pos={n_pos}); "
            "hint: the validation pool must include the negative tiles"
        )
    return float(ratio) * n_pos / n_neg


def ratio_tag(ratio: float) -> str:
    """Name fragment of a ratio as the guide writes it: 200 -> '1_200', 2.5 -> '1_2.5'."""
    return f"1_{int(ratio)}" if float(ratio).is_integer() else f"1_{ratio:g}"


def geometric_mean(values: Iterable[float]) -> float:
    """Geometric mean of non-negative metrics (the early-stopping geomean of PR-AUC across ratios).

    An empty input or any nan gives nan (an undefined ratio makes the summary undefined); any 0 gives 0.0,
    the limit of the product, instead of log(0) = -inf.

    Raises:
        ValueError: A negative value.
    """
    vals = [float(v) for v in values]
    if not vals or any(math.isnan(v) for v in vals):
        return math.nan
    if any(v < 0 for v in vals):
        raise ValueError(f"geometric mean needs non-negative values; got {vals}")
    if any(v == 0 for v in vals):
        return 0.0
    return math.exp(math.fsum(math.log(v) for v in vals) / len(vals))


def ratio_pools(ratios: Iterable[float], balanced: bool = True) -> list[tuple[str, str, float]]:
    """(pool name, key suffix, ratio) for Val-Balanced 1:1 (when ``balanced``) and each Val-Realistic 1:N."""
    pools: list[tuple[str, str, float]] = [("balanced", "", 1.0)] if balanced else []
    return pools + [("realistic", f"_{ratio_tag(r)}", r) for r in ratios]
