"""The tiles of one split of a data root: its regions in splits.yaml x the RegionName of metadata.csv."""

from __future__ import annotations

from pathlib import Path

from rtscore.config.pipeline import SplitsConfig
from rtscore.data.geotiff.root import (
    MAX_LISTED,
    METADATA_CSV,
    SPLITS_YAML,
    GeotiffError,
    TileEntry,
    read_metadata,
    tile_files,
)
from rtscore.data.geotiff.root_splits import ensure_splits
from rtscore.data.splits.regions import unassigned_regions


def select_tiles(
    root: Path,
    split: str,
    *,
    with_extra: bool,
    rules: SplitsConfig | None = None,
    splits: dict[str, list[str]] | None = None,
) -> list[TileEntry]:
    """The tiles of ``split`` (its regions in splits.yaml x RegionName), after checking that every region of
    metadata.csv is in a split and every tile has its files.

    ``splits``: the root's splits when the caller has them already; else :func:`ensure_splits` (with ``rules``).
    """
    splits = ensure_splits(root, rules=rules) if splits is None else splits
    if split not in splits:
        raise GeotiffError(f"{root / SPLITS_YAML}: no split {split!r} (has {sorted(splits)})")
    rows = read_metadata(root)
    strays = unassigned_regions(splits, (r["RegionName"] for r in rows))
    if strays:
        raise GeotiffError(
            f"{root / METADATA_CSV}: {len(strays)} RegionName(s) in no split of {root / SPLITS_YAML}: "
            f"{', '.join(strays[:MAX_LISTED])}; every region goes to exactly one split (names match exactly)"
        )
    missing = [str(p) for r in rows for p in tile_files(root, r["Tile_id"], with_extra).values() if not p.is_file()]
    if missing:
        more = f" (and {len(missing) - MAX_LISTED} more)" if len(missing) > MAX_LISTED else ""
        raise GeotiffError(f"{len(missing)} tile files of {METADATA_CSV} are missing: {missing[:MAX_LISTED]}{more}")
    regions = set(splits[split])
    entries = [
        TileEntry(
            tile_id=r["Tile_id"],
            region=r["RegionName"],
            positive=r["TrainClass"] == "positive",
            n_uids=len([u for u in r["UIDs"].split(";") if u.strip()]),
            row=i,
        )
        for i, r in enumerate(rows)
        if r["RegionName"] in regions
    ]
    if not entries:
        raise GeotiffError(f"no tile of {root / METADATA_CSV} is in a region of split {split!r}: {sorted(regions)}")
    return entries
