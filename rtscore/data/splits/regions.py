"""Spatial blocking (docs/geotiff.md): whole regions go to one split, derived when `splits.yaml` is absent.

The rules, in priority order (the thresholds are the pipeline config's `splits.min_test_positives`,
`splits.min_val_regions` and `splits.min_val_positives`, defaults 100, 2 and 20):
    1. test holds at least `min_test_positives` positive tiles, else fail;
    2. val spans at least `min_val_regions` regions, else fail;
    3. train holds at least 70% of the positive tiles, else warn;
    4. val holds at least `min_val_positives` positive tiles, else warn (val PR-AUC and early stopping on it
       mean little on fewer);
    5. the tile shares are within `tolerance` (absolute, default 0.10) of 80/10/10, else fail.

Regions are indivisible, so the derivation searches assignments: a seeded set of region orders, each filled
greedily (test until it has enough positives, then val until it has `min_val_regions` regions and about its
share, the rest train); among the orders whose split satisfies the failing rules, the one closest to 80/10/10
and without a warning wins (ties: first found). The same metadata and seed always give the same split.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from rtscore.config.splits import SplitError, region_splits
from rtscore.report import md_table

TARGET = {"train": 0.8, "val": 0.1, "test": 0.1}


@dataclass(frozen=True)
class RegionCounts:
    """Tiles and positive tiles of one region."""

    tiles: int
    positives: int


class SplitResult(BaseModel):
    """The derived split and how it measures against the rules (written as the run's ``splits_summary.json``)."""

    splits: dict[str, list[str]] = Field(..., description="split -> its regions.")
    tiles: dict[str, int] = Field(..., description="split -> tiles.")
    positives: dict[str, int] = Field(..., description="split -> positive tiles (TrainClass positive).")
    shares: dict[str, float] = Field(..., description="split -> share of all tiles.")
    warnings: list[str] = Field(default_factory=list, description="Rules met only with a warning (e.g. the 70 %).")
    derived_from: str | None = Field(None, description="The data root whose metadata.csv the split was derived from.")

    def summary(self) -> str:
        rows = [
            [s, len(self.splits[s]), self.tiles[s], f"{self.shares[s]:.1%}", self.positives[s]]
            for s in ("train", "val", "test")
        ]
        return "\n".join(md_table(["split", "regions", "tiles", "share", "positive tiles"], rows)) + "\n"


def region_counts(rows: Sequence[Mapping[str, str]]) -> dict[str, RegionCounts]:
    """Per `RegionName`, tiles and positive tiles (`TrainClass == positive`) of metadata.csv rows."""
    tiles: dict[str, int] = {}
    pos: dict[str, int] = {}
    for i, row in enumerate(rows):
        region = (row.get("RegionName") or "").strip()
        if not region:
            raise SplitError(f"metadata.csv row {i + 2} (Tile_id {row.get('Tile_id')!r}): empty RegionName")
        tiles[region] = tiles.get(region, 0) + 1
        pos[region] = pos.get(region, 0) + int((row.get("TrainClass") or "").strip().lower() == "positive")
    return {r: RegionCounts(tiles[r], pos[r]) for r in sorted(tiles)}


def evaluate_split(
    splits: Mapping[str, Sequence[str]],
    counts: Mapping[str, RegionCounts],
    *,
    min_test_positives: int = 100,
    min_val_regions: int = 2,
    min_val_positives: int = 20,
    tolerance: float = 0.10,
) -> SplitResult:
    """Check a split (given or derived) against the rules; SplitError names the first failing rule, the rules met
    only with a warning are in the result's ``warnings``."""
    seen = region_splits(splits)
    missing = sorted(set(counts) - set(seen))
    if missing:
        raise SplitError(f"regions {missing} of metadata.csv are in no split")
    total = sum(c.tiles for c in counts.values()) or 1
    all_pos = sum(c.positives for c in counts.values())
    tiles = {s: sum(counts[r].tiles for r in splits.get(s, ()) if r in counts) for s in TARGET}
    positives = {s: sum(counts[r].positives for r in splits.get(s, ()) if r in counts) for s in TARGET}
    shares = {s: tiles[s] / total for s in TARGET}
    result = SplitResult(
        splits={s: sorted(splits.get(s, ())) for s in TARGET}, tiles=tiles, positives=positives, shares=shares
    )
    if positives["test"] < min_test_positives:
        raise SplitError(
            f"test holds {positives['test']} positive tiles; at least {min_test_positives} are needed "
            "(splits.min_test_positives)"
        )
    if len(splits.get("val", ())) < min_val_regions:
        raise SplitError(
            f"val spans {len(splits.get('val', ()))} region(s); at least {min_val_regions} are needed "
            "(splits.min_val_regions)"
        )
    if all_pos and positives["train"] < 0.7 * all_pos:
        result.warnings.append(
            f"train holds {positives['train']} of {all_pos} positive tiles ({positives['train'] / all_pos:.0%} < 70%)"
        )
    if positives["val"] < min_val_positives:
        result.warnings.append(val_positives_warning(positives["val"], min_val_positives))
    off = {s: shares[s] - TARGET[s] for s in TARGET if abs(shares[s] - TARGET[s]) > tolerance + 1e-9}
    if off:
        detail = ", ".join(f"{s} {shares[s]:.1%} (target {TARGET[s]:.0%})" for s in off)
        raise SplitError(f"tile shares off 80/10/10 by more than {tolerance:.0%}: {detail}")
    return result


def derive_splits(
    rows: Sequence[Mapping[str, str]],
    *,
    min_test_positives: int = 100,
    min_val_regions: int = 2,
    min_val_positives: int = 20,
    tolerance: float = 0.10,
    seed: int = 0,
    tries: int = 2000,
) -> SplitResult:
    """A region-level train/val/test split of metadata.csv rows satisfying the rules (see module doc).

    Raises:
        SplitError: No order of the regions gives a valid split; the message gives the closest attempt's failure.
    """
    counts = region_counts(rows)
    regions = list(counts)
    if len(regions) < min_val_regions + 2:
        raise SplitError(
            f"{len(regions)} regions: spatial blocking needs at least {min_val_regions + 2} (test, "
            f"{min_val_regions} for val (splits.min_val_regions), train)"
        )
    _check_test_positives_reachable(counts, min_test_positives, min_val_regions)
    total = sum(c.tiles for c in counts.values())
    rng = np.random.default_rng(seed)
    best: tuple[float, SplitResult] | None = None
    last_error = "no attempt"
    for _ in range(tries):
        order = [regions[i] for i in rng.permutation(len(regions))]
        splits = _fill_in_order(
            order,
            counts,
            total,
            min_test_positives=min_test_positives,
            min_val_regions=min_val_regions,
            tolerance=tolerance,
        )
        try:
            result = evaluate_split(
                splits,
                counts,
                min_test_positives=min_test_positives,
                min_val_regions=min_val_regions,
                min_val_positives=min_val_positives,
                tolerance=tolerance,
            )
        except SplitError as err:
            last_error = str(err)
            continue
        cost = _cost(result)
        if best is None or cost < best[0]:
            best = (cost, result)
    if best is None:
        raise SplitError(f"no region-level split satisfies the rules after {tries} orders; e.g.: {last_error}")
    return best[1]


def _fill_in_order(
    order: Sequence[str],
    counts: Mapping[str, RegionCounts],
    total: int,
    *,
    min_test_positives: int,
    min_val_regions: int,
    tolerance: float,
) -> dict[str, list[str]]:
    """One order of the regions filled greedily, the candidate split the search scores: test takes regions until it
    holds ``min_test_positives`` positive tiles, then val until it spans ``min_val_regions`` regions and about its
    share of the ``total`` tiles (past that, never beyond its share plus ``tolerance``, and leaving train at least
    one region), train the rest."""
    test: list[str] = []
    val: list[str] = []
    pos = 0
    k = 0
    while k < len(order) and pos < min_test_positives:
        test.append(order[k])
        pos += counts[order[k]].positives
        k += 1
    val_tiles = 0
    while k < len(order) - 1 and (len(val) < min_val_regions or val_tiles < TARGET["val"] * total):
        if len(val) >= min_val_regions and val_tiles + counts[order[k]].tiles > (TARGET["val"] + tolerance) * total:
            break
        val.append(order[k])
        val_tiles += counts[order[k]].tiles
        k += 1
    return {"train": list(order[k:]), "val": val, "test": test}


def _cost(result: SplitResult) -> float:
    """How far a valid split is from the target: its shares' distance from 80/10/10, plus 1 when a rule is met only
    with a warning (so a split without one always wins)."""
    return sum(abs(result.shares[s] - TARGET[s]) for s in TARGET) + (1.0 if result.warnings else 0.0)


def val_positives_warning(n: int, floor: int) -> str:
    """The warning for a val split of ``n`` positive tiles under ``splits.min_val_positives`` = ``floor``."""
    return (
        f"val holds {n} positive tile(s), fewer than splits.min_val_positives={floor}: val PR-AUC, and early "
        "stopping and checkpoint selection on it, rest on too few positives to mean much; move a region with "
        "positives into val (splits.yaml) or add labelled tiles"
    )


def _check_test_positives_reachable(
    counts: Mapping[str, RegionCounts], min_test_positives: int, min_val_regions: int
) -> None:
    """Refuse, blaming ``splits.min_test_positives``, when test cannot reach it and leave val and train a region
    each: otherwise every order fails further down and the last failure ("val spans 1 region") hides the cause."""
    by_positives = sorted((c.positives for c in counts.values()), reverse=True)
    total = sum(by_positives)
    if total < min_test_positives:
        raise SplitError(
            f"no region-level split satisfies the rules: metadata.csv holds {total} positive tiles in all, and test "
            f"alone needs splits.min_test_positives={min_test_positives}; lower it (a small test set gives noisy "
            "metrics) or give splits.yaml"
        )
    need = int(np.searchsorted(np.cumsum(by_positives), min_test_positives)) + 1
    if need > len(by_positives) - min_val_regions - 1:
        raise SplitError(
            f"no region-level split satisfies the rules: test needs splits.min_test_positives={min_test_positives} "
            f"positive tiles, which takes at least {need} of the {len(by_positives)} regions, leaving fewer than "
            f"{min_val_regions} for val (splits.min_val_regions) and one for train; lower splits.min_test_positives "
            "or give splits.yaml"
        )


def unassigned_regions(splits: Mapping[str, Sequence[str]], regions: Iterable[str]) -> list[str]:
    """Each region of ``regions`` (metadata.csv's RegionName) in no split of ``splits``, with a hint when a split
    lists it under another case or spacing ("'Noatak' (splits.yaml has 'noatak' in val)")."""
    listed = {r: s for s, rs in splits.items() for r in rs}
    folded = {_fold(r): (r, s) for r, s in listed.items()}
    out = []
    for region in sorted(set(regions) - set(listed)):
        near = folded.get(_fold(region))
        out.append(f"{region!r}" + (f" (splits.yaml has {near[0]!r} in {near[1]})" if near else ""))
    return out


def _fold(region: str) -> str:
    return " ".join(region.split()).casefold()


def read_split_result(path: Path) -> SplitResult | None:
    """A derived split's summary (a run's ``splits_summary.json``); None when there is none (splits.yaml given)."""
    if not path.is_file():
        return None
    try:
        return SplitResult.model_validate_json(path.read_text())
    except ValueError as err:
        raise SplitError(f"{path}: not a derived split summary ({err}); regenerate the datasets") from None
