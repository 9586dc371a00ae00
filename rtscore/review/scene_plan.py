"""The scenes a review's chips are read from: the campaign's ``index.geojson`` read by scene id, and the chosen
objects grouped by the scene each is read from (the one whose footprint holds most of it)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtscore.mapping.campaign import INDEX_FILE
from rtscore.mapping.polygons import RtsObject
from rtscore.review.manifest import ReviewError


@dataclass(frozen=True, eq=False)
class SceneRef:
    """A done scene of the campaign's index: its id, URI and footprint."""

    scene_id: str
    uri: str
    footprint: Any  # shapely, EPSG:4326


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A campaign's JSON file holding one object (``what`` it should be, for the refusal)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ReviewError(f"{path}: not readable as JSON ({err})") from None
    if not isinstance(data, dict):
        raise ReviewError(f"{path}: not {what}")
    return data


def read_index(path: Path) -> dict[str, SceneRef]:
    """The scenes of a campaign's index.geojson by id: each done scene's URI and footprint (EPSG:4326)."""
    from shapely.geometry import shape

    data = read_json_object(path, "a campaign index (a GeoJSON object)")
    out = {}
    for f in data.get("features") or []:
        props = f.get("properties") or {}
        sid, uri = props.get("scene_id"), props.get("uri")
        if isinstance(sid, str) and isinstance(uri, str):
            out[sid] = SceneRef(sid, uri, shape(f["geometry"]) if f.get("geometry") else None)
    return out


def plan_by_scene(
    chosen: Sequence[RtsObject], crs: Any, scenes: Mapping[str, SceneRef]
) -> dict[SceneRef, list[RtsObject]]:
    """Scene -> its objects (by object id), scenes by id: each object read from the scene of the index whose
    footprint holds most of it."""
    from rasterio.warp import transform_geom
    from shapely.geometry import mapping, shape

    plan: dict[str, list[RtsObject]] = {}
    for o in chosen:
        listed = [s for s in o.scene_ids if s in scenes]
        if not listed:
            raise ReviewError(
                f"object {o.object_id}: its scene {', '.join(o.scene_ids) or '(none)'} is not in the campaign's "
                f"{INDEX_FILE}; map the campaign again (rts map), then export"
            )
        best = listed[0]
        if len(listed) > 1:
            g = shape(transform_geom(crs, "EPSG:4326", mapping(o.geometry)))
            areas = [(-(g.intersection(scenes[s].footprint).area if scenes[s].footprint else 0.0), s) for s in listed]
            best = min(areas)[1]
        plan.setdefault(best, []).append(o)
    return {scenes[s]: sorted(plan[s], key=lambda o: o.object_id) for s in sorted(plan)}
