"""RTS label polygons (GeoJSON in EPSG:3857) rasterised onto a tile's grid, instead of label rasters.

Rules (DATA_LAYOUT.md): pixels inside an RTS polygon are 1, elsewhere 0; an RTS cut by the tile edge (its
headwall or floor lies outside) is a partial object and its pixels are 255 (ignore), as are pixels of a
polygon whose `ignore` property is true. Rasterisation follows rasterio's rule: a pixel belongs to a polygon
when its centre does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.data.tiles import IGNORE_INDEX
from rtscore.errors import PipelineError

CRS_NAMES = {"EPSG:3857", "urn:ogc:def:crs:EPSG::3857", "urn:ogc:def:crs:EPSG:6.18:3:3857"}


class LabelPolygonError(PipelineError, ValueError):
    """A GeoJSON label file that cannot be used (names the file and the problem)."""


def read_label_polygons(path: str | Path) -> list[dict[str, Any]]:
    """The features of a GeoJSON FeatureCollection in EPSG:3857 (a missing `crs` member means EPSG:3857).

    Raises:
        LabelPolygonError: Not JSON, not a FeatureCollection, another CRS, or a non-polygon geometry.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as err:
        raise LabelPolygonError(f"{p}: not a readable GeoJSON file ({err})") from None
    if doc.get("type") != "FeatureCollection":
        raise LabelPolygonError(f"{p}: expected a GeoJSON FeatureCollection, got {doc.get('type')!r}")
    crs = ((doc.get("crs") or {}).get("properties") or {}).get("name")
    if crs is not None and crs not in CRS_NAMES:
        raise LabelPolygonError(f"{p}: label polygons must be in EPSG:3857; the file declares {crs!r}")
    features = doc.get("features") or []
    for i, f in enumerate(features):
        kind = (f.get("geometry") or {}).get("type")
        if kind not in ("Polygon", "MultiPolygon"):
            raise LabelPolygonError(f"{p}: feature {i} has geometry {kind!r}; RTS labels must be (Multi)Polygons")
    return features


def _vertices(geometry: dict[str, Any]) -> np.ndarray:
    rings = (
        geometry["coordinates"] if geometry["type"] == "Polygon" else [r for p in geometry["coordinates"] for r in p]
    )
    return np.asarray([xy[:2] for ring in rings for xy in ring], np.float64)


def rasterize_labels(features: list[dict[str, Any]], transform: Any, size: int) -> np.ndarray:
    """(size, size) uint8 labels in {0, 1, 255} of `features` on the grid of `transform` (an affine.Affine).

    A polygon with a vertex outside the tile's bounds is a partial object (the tile is a box, so a polygon
    with every vertex inside lies wholly inside).
    """
    from rasterio.features import geometry_mask

    xs = (transform.c, transform.c + transform.a * size)
    ys = (transform.f, transform.f + transform.e * size)
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    out = np.zeros((size, size), np.uint8)
    partial = np.zeros((size, size), bool)
    for f in features:
        inside = geometry_mask([f["geometry"]], out_shape=(size, size), transform=transform, invert=True)
        if not inside.any():
            continue
        v = _vertices(f["geometry"])
        whole = bool(((v[:, 0] >= x0) & (v[:, 0] <= x1) & (v[:, 1] >= y0) & (v[:, 1] <= y1)).all())
        if bool((f.get("properties") or {}).get("ignore", False)) or not whole:
            partial |= inside
        else:
            out[inside] = 1
    out[partial] = IGNORE_INDEX
    return out
