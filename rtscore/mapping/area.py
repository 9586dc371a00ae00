"""The ground area a campaign mapped: the union of its done scenes' valid-data footprints, each piece of ground
counted once however many scenes cover it (the campaign summary's headline area, docs/mapping.md).

Each done scene's footprint is the outline of its valid pixels, pixel for pixel, in the scene's CRS (its parts
file, :mod:`rtscore.mapping.polygons`). The ground is cut into blocks, the squares of
:data:`~rtscore.mapping.merge_store.BLOCK_M` metres of one projected CRS (the first scene's, as the merge takes
it), and the area is the sum over blocks of the area of the union of the footprints' pieces in the block. A block's
pieces are densified (vertices at most :data:`DENSIFY_M` apart along their edges, so that a straight edge stays
close to its image), reprojected into a Lambert azimuthal equal-area projection on the WGS 84 ellipsoid centred on
the block, and united; the union's planar area there is the ground area on the ellipsoid. A footprint in another
CRS is densified in its own CRS before it is moved into the block CRS.

Accuracy: the projection preserves area everywhere, so the error is that of the densified edges (a chord of 1 km
bends by well under a millimetre between these projections), of borders between scenes or blocks that do not meet
exactly after reprojection (slivers far below a pixel): within 0.01 % of the footprints' area; the footprints
themselves are exact to the pixel.

Incremental: each block's area is kept with the sha256 of what it was computed from (its footprints' WKB in order,
the block CRS) in a cache file; a finish recomputes only the blocks whose footprints changed (new, re-mapped or no
longer done scenes), and sums the blocks in a fixed order, so the figure is the one a computation from scratch
gives, to the last bit. Memory: the footprints only (no raster is read).

This module is outside the mapping's code identity (:mod:`rtscore.mapping.chunk`): it changes no scene's outputs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.data.raster.ground import GroundScale, projected_crs
from rtscore.mapping.merge_store import block_size
from rtscore.mapping.polygons import SceneParts
from rtscore.storage.files import atomic_write_text

DENSIFY_M = 1000.0  # longest edge, in metres along the footprint, before reprojection
AREA_CACHE = "area-blocks.json"

_log = logging.getLogger(__name__)


def laea_at(lon: float, lat: float) -> Any:
    """A Lambert azimuthal equal-area CRS (WGS 84 ellipsoid, metres) centred on (lon, lat)."""
    from rasterio.crs import CRS

    return CRS.from_proj4(f"+proj=laea +lat_0={lat:.9f} +lon_0={lon:.9f} +x_0=0 +y_0=0 +ellps=WGS84 +units=m +no_defs")


def union_ground_m2(scenes: Sequence[SceneParts], cache: Path | None = None) -> float:
    """Ground m² of the union of the scenes' footprints (module docstring); 0 for no scene. ``cache``: the file of
    the blocks' areas (read, and written when a block changed); None: every block computed, nothing kept."""
    import shapely

    shown = [sc for sc in scenes if not shapely.is_empty(sc.footprint)]
    if not shown:
        return 0.0
    crs = projected_crs(shown[0].crs, "campaign CRS")
    unit_m, size = GroundScale.of(crs, "campaign CRS").unit_m, block_size(crs)
    fps = _in_crs(shown, crs)
    wkbs = shapely.to_wkb(np.asarray(fps, dtype=object))
    bounds = shapely.bounds(np.asarray(fps, dtype=object))
    members: dict[tuple[int, int], list[int]] = {}
    x0, y0 = np.floor(bounds[:, 0] / size).astype(np.int64), np.floor(bounds[:, 1] / size).astype(np.int64)
    x1, y1 = np.floor(bounds[:, 2] / size).astype(np.int64), np.floor(bounds[:, 3] / size).astype(np.int64)
    for i, (a, b, c, d) in enumerate(zip(x0.tolist(), y0.tolist(), x1.tolist(), y1.tolist(), strict=True)):
        for bx in range(a, c + 1):
            for by in range(b, d + 1):
                members.setdefault((bx, by), []).append(i)
    wkt = crs.to_wkt()
    head = f"{_versions()}\n{wkt}\n{size!r}\n"
    keys = {b: _key(head, [wkbs[i] for i in m]) for b, m in members.items()}
    held = _read(cache, head) if cache is not None else {}
    areas: dict[str, tuple[str, float]] = {}
    computed = 0
    for b in sorted(members):
        name = f"{b[0]}_{b[1]}"
        hit = held.get(name)
        if hit is None or hit[0] != keys[b]:
            hit = (keys[b], _block_m2(b, [fps[i] for i in members[b]], crs, size, unit_m))
            computed += 1
        areas[name] = hit
    if cache is not None and (computed or len(areas) != len(held)):
        atomic_write_text(cache, json.dumps({"head": head, "blocks": areas}) + "\n")
    return math.fsum(a for _, a in areas.values())


def _key(head: str, wkbs: list[bytes]) -> str:
    h = hashlib.sha256(head.encode())
    for w in wkbs:
        h.update(len(w).to_bytes(8, "little"))
        h.update(w)
    return h.hexdigest()


def _in_crs(scenes: Sequence[SceneParts], crs: Any) -> list[Any]:
    """The scenes' footprints in ``crs``: as they are where the scene is in it, else densified in the scene's CRS
    (:data:`DENSIFY_M`) and moved, in one transform call per CRS."""
    import shapely
    from rasterio.crs import CRS
    from rasterio.warp import transform

    out: list[Any] = [None] * len(scenes)
    for src, at in group_by_crs(scenes):
        if CRS.from_user_input(src) == crs:
            for i in at:
                out[i] = scenes[i].footprint
            continue
        unit_m = GroundScale.of(src, f"scene {scenes[at[0]].scene_id}").unit_m
        dense = shapely.segmentize(np.array([scenes[i].footprint for i in at], dtype=object), DENSIFY_M / unit_m)

        def move(xy: np.ndarray, s: Any = src) -> np.ndarray:
            xs, ys = transform(s, crs, xy[:, 0], xy[:, 1])
            return np.column_stack([xs, ys])

        moved = shapely.transform(dense, move)
        for i, g, ok in zip(at, moved, shapely.is_valid(moved), strict=True):
            out[i] = g if ok else shapely.make_valid(g)
    return out


def _block_m2(block: tuple[int, int], fps: list[Any], crs: Any, size: float, unit_m: float) -> float:
    """Ground m² of the union of ``fps`` (in ``crs``) within block ``block``: its pieces densified, moved into an
    equal-area projection centred on the block, united."""
    import shapely
    from rasterio.warp import transform

    bx, by = block
    square = shapely.box(bx * size, by * size, (bx + 1) * size, (by + 1) * size)
    pieces = shapely.intersection(np.asarray(fps, dtype=object), square)
    pieces = pieces[~shapely.is_empty(pieces)]
    if len(pieces) == 0:
        return 0.0
    (lon,), (lat,) = transform(crs, "EPSG:4326", [(bx + 0.5) * size], [(by + 0.5) * size])
    dst = laea_at(lon, lat)

    def move(xy: np.ndarray) -> np.ndarray:
        xs, ys = transform(crs, dst, xy[:, 0], xy[:, 1])
        return np.column_stack([xs, ys])

    moved = shapely.transform(shapely.segmentize(pieces, DENSIFY_M / unit_m), move)
    valid = shapely.is_valid(moved)
    moved[~valid] = shapely.make_valid(moved[~valid])
    return float(shapely.area(shapely.union_all(moved)))


def _versions() -> str:
    import rasterio
    import shapely

    return (
        f"area 1 shapely {shapely.__version__} GEOS {shapely.geos_version_string} rasterio {rasterio.__version__} "
        f"PROJ {rasterio.__proj_version__} densify {DENSIFY_M!r}"
    )


def _read(path: Path, head: str) -> dict[str, tuple[str, float]]:
    if not path.is_file():
        return {}
    try:
        body = json.loads(path.read_text())
        if body.get("head") != head:
            return {}
        return {str(n): (str(v[0]), float(v[1])) for n, v in body["blocks"].items()}
    except Exception as err:  # a cache: computed again
        _log.warning("ground area cache %s unreadable (%s: %s): computing every block", path, type(err).__name__, err)
        return {}


def group_by_crs(scenes: Sequence[SceneParts]) -> list[tuple[Any, list[int]]]:
    """(CRS, indices of the scenes in it), in order of first appearance: per-scene transforms batched by CRS. Keyed
    by the CRS object's identity first (hashing a CRS renders its WKT: seconds at 10^5 scenes), then by equality."""
    groups: dict[int, tuple[Any, list[int]]] = {}
    for i, sc in enumerate(scenes):
        g = groups.get(id(sc.crs))
        if g is None:
            g = groups[id(sc.crs)] = (sc.crs, [])
        g[1].append(i)
    merged: dict[Any, list[int]] = {}
    for crs, at in groups.values():
        merged.setdefault(crs, []).extend(at)
    return [(crs, sorted(at)) for crs, at in merged.items()]
