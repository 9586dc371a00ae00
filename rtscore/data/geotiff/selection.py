"""The tiles of one split of a data root: its regions in splits.yaml x the RegionName of metadata.csv."""

from __future__ import annotations

import math
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
from rtscore.data.inventory.object_pixels import ObjectPixelsError, parse_object_pixels, split_ids
from rtscore.data.splits.regions import unassigned_regions
from rtscore.data.tiles import TileInventory


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
    selected = [(i, r) for i, r in enumerate(rows) if r["RegionName"] in regions]
    inventories = [tile_inventory(r) for _, r in selected]
    problems = [p for p in inventories if isinstance(p, str)]
    if problems:
        raise GeotiffError(
            f"{root / METADATA_CSV}: {len(problems)} tile(s) with a bad inventory column:\n  "
            + "\n  ".join(problems[:MAX_LISTED])
        )
    entries = [
        TileEntry(
            tile_id=r["Tile_id"],
            region=r["RegionName"],
            positive=r["TrainClass"] == "positive",
            n_uids=len(split_ids(r["UIDs"])),
            row=i,
            inventory=inv,
        )
        for (i, r), inv in zip(selected, inventories, strict=True)
        if isinstance(inv, TileInventory)
    ]
    if not entries:
        raise GeotiffError(f"no tile of {root / METADATA_CSV} is in a region of split {split!r}: {sorted(regions)}")
    return entries


def tile_inventory(row: dict[str, str]) -> TileInventory | str:
    """The inventory ids and latitude of one metadata.csv row, or the problem naming its tile and column:
    ``centroid_lat`` a number of degrees in [-90, 90] (empty: unknown, NaN), ``ObjectPixels`` entries
    ``<uid>@<row>,<col>`` each naming an id of the row's ``UIDs``. The id lists are kept as written."""
    tile = row["Tile_id"]
    text = row["centroid_lat"]
    try:
        latitude = float(text) if text else math.nan
    except ValueError:
        return f"tile {tile}: centroid_lat {text!r} is not a number (degrees north, or empty when unknown)"
    if not (math.isnan(latitude) or -90.0 <= latitude <= 90.0):
        return f"tile {tile}: centroid_lat {text!r} is not a latitude in [-90, 90] degrees"
    try:
        pixels = parse_object_pixels(row["ObjectPixels"])
    except ObjectPixelsError as err:
        return f"tile {tile}: ObjectPixels {err}"
    strays = sorted({p.uid for p in pixels} - set(split_ids(row["UIDs"])))
    if strays:
        return f"tile {tile}: ObjectPixels names {strays}, which are not in its UIDs ({row['UIDs']!r})"
    return TileInventory(
        uids=row["UIDs"], negative_uids=row["NegativeUIDs"], object_pixels=row["ObjectPixels"], latitude=latitude
    )
