"""The verdict of a sweep variant against the baseline over the same seeds (paired), within seed noise.

STUB: the rule, its parameters and its reasoning are filled in by the verdict work (see docs/experiments.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

VerdictName = Literal["better", "worse", "within noise", "undecided"]


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


def judge(
    baseline: Sequence[float],
    variant: Sequence[float],
    seeds: Sequence[int],
    *,
    confidence: float = 0.95,
    margin: float = 0.0,
    max_seeds: int = 10,
) -> Judgement:
    """The verdict of ``variant`` against ``baseline`` (per-seed values, paired by position, for ``seeds``)."""
    raise NotImplementedError
