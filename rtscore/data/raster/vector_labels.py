"""RTS label polygons (any vector format GDAL reads: GeoJSON, GeoPackage, shapefile, FlatGeobuf) rasterised onto
a tile's grid, instead of label rasters.

Reading (:func:`read_polygons`, the one reader of polygon files for ingestion and ``rts tile``): files are read with
pyogrio (GDAL/OGR); a GeoJSON file without a ``crs`` member is WGS84 lon/lat (RFC 7946) unless the caller gives
another default (an ARTS inventory: EPSG:3413), a file of another format must declare its CRS (a shapefile needs
its .prj) or be given a default; polygons are reprojected to the CRS of the tile they label.

Rules (docs/geotiff.md): pixels inside an RTS polygon are 1, elsewhere 0; an RTS cut by the tile edge (its
headwall or floor lies outside) is a partial object and its pixels are 255 (ignore), as are pixels of a
polygon whose `ignore` property is true. Rasterisation follows rasterio's rule: a pixel belongs to a polygon
when its centre does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rtscore.data.tiles import IGNORE_INDEX
from rtscore.errors import PipelineError

LABEL_CRS = "EPSG:3857"


class LabelPolygonError(PipelineError, ValueError):
    """A polygon file that cannot be used (names the file and the problem)."""


def read_polygons(
    path: str | Path,
    dst_crs: Any,
    *,
    columns: list[str] | None = None,
    default_crs: str | None = None,
    keep_empty: bool = False,
) -> list[dict[str, Any]]:
    """The polygon features of a vector file, reprojected to ``dst_crs``, as GeoJSON-like dicts
    ``{"type": "Feature", "geometry": {...}, "properties": {...}}`` (``columns``: properties to keep; None: all).

    ``default_crs``: the CRS of a file that declares none, a GeoJSON without a ``crs`` member included (an ARTS file
    is EPSG:3413, not RFC 7946's lon/lat); None: such a GeoJSON is lon/lat and another format is refused.
    ``keep_empty``: a feature without geometry, or with an empty one, is returned with ``geometry`` None (the
    caller names it); else it is refused here.

    Raises:
        LabelPolygonError: unreadable file, no CRS (formats other than GeoJSON), a non-polygon geometry.
    """
    import pyogrio
    import shapely
    from rasterio.crs import CRS

    p = Path(path)
    if not p.is_file():
        raise LabelPolygonError(f"{p}: polygon file not found")
    try:
        meta, _, geoms, fields = pyogrio.raw.read(p, columns=columns)
    except Exception as err:  # pyogrio raises DataSourceError/DataLayerError/FieldError, GDAL's reasons inside
        raise LabelPolygonError(f"{p}: not a readable vector file ({type(err).__name__}: {err})") from None
    declared = meta.get("crs")
    if default_crs is not None and p.suffix.lower() in (".geojson", ".json") and not _declares_crs(p):
        declared = None  # GDAL reports RFC 7946's lon/lat for a GeoJSON without a crs member
    src_crs = declared if declared is not None else default_crs
    if src_crs is None:
        if p.suffix.lower() in (".geojson", ".json"):
            src_crs = "EPSG:4326"  # RFC 7946: GeoJSON without a crs member is WGS84 lon/lat
        else:
            raise LabelPolygonError(f"{p}: declares no CRS (a shapefile needs its .prj); polygons cannot be placed")
    src, dst = CRS.from_user_input(src_crs), CRS.from_user_input(dst_crs)
    names = list(meta.get("fields", []))
    implied = " (GeoJSON without a crs member is lon/lat, RFC 7946)" if meta.get("crs") is None else ""
    features = []
    all_lonlat = declared is None and default_crs is not None and src.is_projected
    for i, wkb in enumerate(geoms):
        props = {n: _plain(fields[k][i]) for k, n in enumerate(names)}
        geom = _geometry(p, i, wkb, src, dst, implied, keep_empty)
        if all_lonlat and geom is not None:  # a default CRS taken: do its coordinates look like degrees?
            x0, y0, x1, y1 = shapely.from_wkb(wkb).bounds
            all_lonlat = max(abs(x0), abs(x1)) <= 180 and max(abs(y0), abs(y1)) <= 90
        features.append({"type": "Feature", "geometry": geom, "properties": props})
    if all_lonlat and any(f["geometry"] is not None for f in features):
        raise LabelPolygonError(
            f"{p}: declares no CRS and is read as {src_crs}, but every coordinate lies within ±180/±90: they look "
            "like lon/lat degrees; declare the file's CRS (a GeoJSON crs member, a shapefile .prj)"
        )
    return features


def _geometry(p: Path, i: int, wkb: Any, src: Any, dst: Any, implied: str, keep_empty: bool) -> dict[str, Any] | None:
    """Feature ``i``'s (Multi)Polygon (WKB) reprojected from ``src`` to ``dst``; None when empty and ``keep_empty``.

    Raises:
        LabelPolygonError: no or an empty geometry (without ``keep_empty``), another geometry type, coordinates
            beyond lon/lat in a geographic ``src``, a reprojection PROJ refuses.
    """
    import shapely
    from rasterio.warp import transform_geom

    shape = None if wkb is None else shapely.from_wkb(wkb)
    if shape is None or shape.is_empty:
        if keep_empty:
            return None
        raise LabelPolygonError(f"{p}: feature {i} has no geometry")
    geom: dict[str, Any] = shapely.geometry.mapping(shape)
    if geom["type"] not in ("Polygon", "MultiPolygon"):
        raise LabelPolygonError(f"{p}: feature {i} has geometry {geom['type']!r}; RTS labels must be (Multi)Polygons")
    if src.is_geographic and _beyond_lonlat(geom):
        raise LabelPolygonError(
            f"{p}: feature {i} has coordinates beyond ±180°/±90° in {src.to_string()}{implied}: they look like "
            "projected metres; declare the file's CRS"
        )
    if src == dst:
        return geom
    try:
        out: dict[str, Any] = transform_geom(src, dst, geom)
    except Exception as err:  # PROJ errors come as CPLE_* from rasterio
        raise LabelPolygonError(
            f"{p}: feature {i} cannot be reprojected from {src.to_string()} to {dst.to_string()}: {err}"
        ) from None
    return out


def _declares_crs(path: Path) -> bool:
    """Whether a GeoJSON file has a top-level ``crs`` member (GDAL reports lon/lat for one without)."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as err:
        raise LabelPolygonError(f"{path}: not a readable GeoJSON file ({err})") from None
    return isinstance(doc, dict) and doc.get("crs") is not None


def _beyond_lonlat(geom: dict[str, Any]) -> bool:
    v = _vertices(geom)
    return bool((np.abs(v[:, 0]) > 180).any() or (np.abs(v[:, 1]) > 90).any())


def _plain(value: Any) -> Any:
    """A field value as a plain Python value; a missing value (pyogrio's NaN in numeric columns) as None."""
    value = value.item() if isinstance(value, np.generic) else value
    return None if isinstance(value, float) and value != value else value


def read_label_polygons(path: str | Path, dst_crs: Any = LABEL_CRS) -> list[dict[str, Any]]:
    """The RTS polygons of a tile's label file (``labels/<id>.geojson``) in the tile's CRS (default EPSG:3857)."""
    return read_polygons(path, dst_crs)


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
