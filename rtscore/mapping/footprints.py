"""The done scenes' footprints in lon/lat (EPSG:4326) for the campaign's index.geojson, reprojected once per parts
file content (docs/mapping.md, "The finish: fetching and merging").

A footprint comes from its scene's parts file, so the file's sha256 identifies it. The lon/lat geometries of the
last finish are kept in ``<local root>/.finish/index-lonlat.json`` (scene id -> parts sha256 and geometry, with the
versions of rasterio, GDAL and PROJ that made them): the next finish reprojects only the scenes whose parts file is
new or changed, in one ``transform_geom`` call per CRS (a call per scene costs ~0.3 ms: half a minute at 10^5
quads). The cache is thrown away when the versions differ; one that cannot be read is ignored with a warning.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rtscore.mapping.area import group_by_crs
from rtscore.mapping.fetch import FINISH_DIR, FetchedParts
from rtscore.mapping.outputs import CampaignRoot
from rtscore.storage.files import atomic_write_text

LONLAT_CACHE = "index-lonlat.json"

_log = logging.getLogger(__name__)


def lonlat_cache_path(out: CampaignRoot) -> Path:
    return out.local / FINISH_DIR / LONLAT_CACHE


def lonlat_footprints(fetched: Sequence[FetchedParts], cache: Path | None) -> list[dict[str, Any]]:
    """Each scene's footprint as a GeoJSON geometry in EPSG:4326 (:func:`lonlat_footprint_texts`, parsed)."""
    return [json.loads(t) for t in lonlat_footprint_texts(fetched, cache)]


def lonlat_footprint_texts(fetched: Sequence[FetchedParts], cache: Path | None) -> list[str]:
    """Each scene's footprint as the JSON text of a GeoJSON geometry in EPSG:4326 (``transform_geom``'s, antimeridian
    cut), in the order of ``fetched``; from ``cache`` where the scene's parts sha256 is the one it holds (module
    docstring). Text, not parsed: the index is assembled from it, and at 10^5 scenes parsing and serialising the
    coordinates again would cost seconds. ``cache`` None: every footprint reprojected, nothing kept."""
    from rasterio.warp import transform_geom
    from shapely.geometry import mapping

    held = _read(cache) if cache is not None else {}
    out: list[str] = [""] * len(fetched)
    todo = []
    for i, f in enumerate(fetched):
        hit = held.get(f.scene.scene_id)
        if hit is not None and hit[0] == f.sha256:
            out[i] = hit[1]
        else:
            todo.append(i)
    parts = [fetched[i].parts for i in todo]
    for crs, at in group_by_crs(parts):
        moved = transform_geom(crs, "EPSG:4326", [mapping(parts[j].footprint) for j in at])
        for j, g in zip(at, moved, strict=True):
            out[todo[j]] = json.dumps(g)
    if cache is not None and (todo or len(held) != len(fetched)):
        body = {
            "versions": _versions(),
            "scenes": {f.scene.scene_id: [f.sha256, g] for f, g in zip(fetched, out, strict=True)},
        }
        atomic_write_text(cache, json.dumps(body) + "\n")
    return out


def _versions() -> str:
    import rasterio

    return f"rasterio {rasterio.__version__} GDAL {rasterio.__gdal_version__} PROJ {rasterio.__proj_version__}"


def _read(path: Path) -> dict[str, tuple[str, str]]:
    if not path.is_file():
        return {}
    try:
        body = json.loads(path.read_text())
        if body.get("versions") != _versions():
            return {}
        # each geometry as its JSON text (a cache written before held the parsed geometry: reprojected again)
        return {str(s): (str(v[0]), v[1]) for s, v in body["scenes"].items() if isinstance(v[1], str)}
    except Exception as err:  # a cache: reprojected again
        _log.warning("index footprint cache %s unreadable (%s: %s): reprojecting", path, type(err).__name__, err)
        return {}
