"""The rule every listing of splits meets (spatial blocking): whole regions go to one split.

One check for splits.yaml, tiling configs and derived splits (`rtscore.data.splits.regions` derives and evaluates them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rtscore.errors import PipelineError


class SplitError(PipelineError, ValueError):
    """No region-level split satisfies the rules, or a given split breaks them (the message says which)."""


def region_splits(splits: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Region -> its split; a region listed in two splits is a :class:`SplitError` (spatial blocking: whole regions
    go to one split). The one check of this rule for splits.yaml, tiling configs and derived splits."""
    seen: dict[str, str] = {}
    for split, regions in splits.items():
        for r in regions:
            if r in seen and seen[r] != split:
                raise SplitError(
                    f"region {r!r} is in two splits ({seen[r]} and {split}); whole regions go to one split"
                )
            seen[str(r)] = str(split)
    return seen
