"""The label-age check of `rts tile` (docs/inventories.md, "Dates"): each dated label against the acquisition date of
its scene, the first scene in config priority order whose footprint it intersects (the scene whose pixels a tile
over it shows first, where it is valid).

A scene's date: config ``scene_dates`` (scene file name or glob -> date; the first key matching wins), else its
GeoTIFF date tag (`rtscore.data.raster.scene_date`). A label further than ``polygons.max_label_age_days`` from it
(0 inside a date range) is stale: ``stale_labels: ignore`` sets it to 255 (a Negative: no longer a hard negative,
plain background) and counts it; ``refuse`` stops the run before any tile, naming the labels. A scene without a
date: one warning for all of them, counted; its labels are not checked. Labels without a date are not checked.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtscore.config.tiling import TilingConfig
from rtscore.data.inventory.reader import listed
from rtscore.data.raster.scene_date import SceneDateError, date_from_tags
from rtscore.data.tiling.inventory import Inventory
from rtscore.data.tiling.pixels import Datasets, Scene, TilingError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelAges:
    """What the check found: the stale labels (inventory indexes), the scenes without a date, its warnings."""

    stale: frozenset[int] = frozenset()
    undated_scenes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def scene_dates(cfg: TilingConfig, scenes: Sequence[Scene], datasets: Datasets) -> dict[Path, dt.date | None]:
    """Each scene's acquisition date (module docstring); None: neither a ``scene_dates`` key nor a date tag.

    Raises:
        TilingError: a ``scene_dates`` key that matches no scene, a date tag that is not a date.
    """
    given = cfg.scene_dates or {}
    used: set[str] = set()
    out: dict[Path, dt.date | None] = {}
    for scene in scenes:
        key = next((k for k in given if fnmatch.fnmatchcase(scene.path.name, k)), None)
        if key is not None:
            used.add(key)
            out[scene.path] = dt.date.fromisoformat(given[key])
            continue
        try:
            out[scene.path] = date_from_tags(datasets.get(scene.path).tags(), str(scene.path))[0]
        except SceneDateError as err:
            raise TilingError(f"{err}; give the scene's date in scene_dates") from None
    unused = [k for k in given if k not in used]
    if unused:
        names = [s.path.name for s in scenes]
        raise TilingError(f"scene_dates: {unused} match(es) no scene file name; the scenes are {names}")
    return out


def check_label_ages(
    cfg: TilingConfig, scenes: Sequence[Scene], outlines: Sequence[Any], inventory: Inventory, datasets: Datasets
) -> LabelAges:
    """The dated labels against their scenes' dates (``outlines``: each scene's footprint on the grid CRS, in
    priority order).

    Raises:
        TilingError: with ``stale_labels: refuse``, labels older than ``max_label_age_days`` (every one named, with
            its date and its scene's); a bad ``scene_dates`` key or date tag (:func:`scene_dates`).
    """
    import shapely

    dated = [i for i, f in enumerate(inventory.labels) if f.dates is not None]
    if not dated and not cfg.scene_dates:
        return LabelAges()
    dates = scene_dates(cfg, scenes, datasets)  # scene_dates' keys checked even when no label has a date
    if not dated:
        return LabelAges()
    undated = [str(s.path) for s in scenes if dates[s.path] is None]
    warnings = []
    if undated:
        warnings.append(
            f"{len(undated)} scene(s) carry no acquisition date (no scene_dates key, no date tag), so the labels on "
            f"them are not age-checked: {listed(undated)}"
        )
    tree = shapely.STRtree(list(outlines))
    limit = cfg.polygons.max_label_age_days
    stale, notes = [], []
    for i in dated:
        hits = tree.query(inventory.geoms[i], predicate="intersects")
        if not len(hits):
            continue  # on no scene: never in a tile
        scene = scenes[int(min(hits))]
        day = dates[scene.path]
        label = inventory.labels[i]
        assert label.dates is not None
        if day is not None and label.dates.age_days(day) > limit:
            stale.append(i)
            notes.append(f"{label.uid} ({label.dates.text()}; {scene.path.name} {day}: {label.dates.age_days(day)} d)")
    if stale and cfg.polygons.stale_labels == "refuse":
        raise TilingError(
            f"{cfg.polygons.path}: {len(stale)} label(s) are more than polygons.max_label_age_days={limit} days from "
            f"their scene's acquisition (stale_labels: refuse): {listed(notes)}; give scenes of the labels' time, "
            "raise max_label_age_days, or set stale_labels: ignore (their pixels 255)"
        )
    if stale:
        warnings.append(
            f"{len(stale)} label(s) more than polygons.max_label_age_days={limit} days from their scene's acquisition "
            f"are ignored (255; a Negative: plain background): {listed(notes)}"
        )
    for w in warnings:
        log.warning("rts tile: %s", w)
    return LabelAges(frozenset(stale), undated, warnings)
