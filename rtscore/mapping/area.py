"""The ground area a campaign mapped: the union of its done scenes' valid-data footprints, each piece of ground
counted once however many scenes cover it (the campaign summary's headline area, docs/mapping.md).

Each done scene's footprint is the outline of its valid pixels, pixel for pixel, in the scene's CRS (its parts
file, :mod:`rtscore.mapping.polygons`). The footprints are densified (vertices at most
:data:`DENSIFY_M` apart along their edges, so that a straight edge in the scene's CRS stays close to its image),
reprojected into one Lambert azimuthal equal-area projection on the WGS 84 ellipsoid centred on the campaign, and
united; the union's planar area there is the ground area on the ellipsoid. Accuracy: the projection preserves area
everywhere, so the error is that of the densified edges (a chord of 1 km bends by well under a millimetre between
these projections) and of borders between scenes in different CRSs that do not meet exactly after reprojection
(slivers far below a pixel): within 0.01 % of the footprints' area; the footprints themselves are exact to the pixel.
Memory: the footprints only (the parts files hold them already; no raster is read).

This module is outside the mapping's code identity (:mod:`rtscore.mapping.chunk`): it changes no scene's outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rtscore.data.raster.ground import GroundScale
from rtscore.mapping.polygons import SceneParts

DENSIFY_M = 1000.0  # longest edge, in metres along the footprint, before reprojection


def equal_area_crs(scenes: Sequence[SceneParts]) -> Any:
    """A Lambert azimuthal equal-area CRS (WGS 84 ellipsoid, metres) centred on the scenes' footprints: the mean of
    their centres as unit vectors on the sphere (right across the antimeridian too)."""
    import shapely
    from rasterio.crs import CRS
    from rasterio.warp import transform

    vectors = []
    for crs, at in group_by_crs(scenes):  # one transform call per CRS
        c = shapely.centroid([scenes[i].footprint for i in at])
        lon, lat = transform(crs, "EPSG:4326", shapely.get_x(c).tolist(), shapely.get_y(c).tolist())
        for phi, lam in zip(np.radians(lat), np.radians(lon), strict=True):
            vectors.append((math.cos(phi) * math.cos(lam), math.cos(phi) * math.sin(lam), math.sin(phi)))
    x, y, z = np.mean(np.asarray(vectors), axis=0)
    lat0 = math.degrees(math.atan2(z, math.hypot(x, y)))
    lon0 = math.degrees(math.atan2(y, x)) if math.hypot(x, y) > 1e-12 else 0.0
    return CRS.from_proj4(
        f"+proj=laea +lat_0={lat0:.9f} +lon_0={lon0:.9f} +x_0=0 +y_0=0 +ellps=WGS84 +units=m +no_defs"
    )


def union_ground_m2(scenes: Sequence[SceneParts]) -> float:
    """Ground m² of the union of the scenes' footprints (module docstring); 0 for no scene."""
    import shapely
    from rasterio.warp import transform

    shown = [sc for sc in scenes if not shapely.is_empty(sc.footprint)]
    if not shown:
        return 0.0
    dst = equal_area_crs(shown)
    pieces: list[Any] = [None] * len(shown)  # in the scenes' order, as before the batching
    for crs, at in group_by_crs(shown):  # point by point as scene by scene, in one transform call per CRS
        unit_m = GroundScale.of(crs, f"scene {shown[at[0]].scene_id}").unit_m  # metres per CRS unit
        dense = shapely.segmentize(np.array([shown[i].footprint for i in at], dtype=object), DENSIFY_M / unit_m)

        def move(xy: np.ndarray, src: Any = crs) -> np.ndarray:
            xs, ys = transform(src, dst, xy[:, 0], xy[:, 1])
            return np.column_stack([xs, ys])

        moved = shapely.transform(dense, move)
        valid = shapely.is_valid(moved)
        for i, g, ok in zip(at, moved, valid, strict=True):
            pieces[i] = g if ok else shapely.make_valid(g)
    return float(shapely.union_all(pieces).area)


def group_by_crs(scenes: Sequence[SceneParts]) -> list[tuple[Any, list[int]]]:
    """(CRS, indices of the scenes in it), in order of first appearance: per-scene transforms batched by CRS."""
    groups: dict[Any, list[int]] = {}
    for i, sc in enumerate(scenes):
        groups.setdefault(sc.crs, []).append(i)
    return list(groups.items())
