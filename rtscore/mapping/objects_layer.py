"""The campaign's objects layer on disk: :class:`~rtscore.mapping.polygons.RtsObject` s written as one vector layer
(GeoPackage, or GeoParquet where GDAL has the driver) and read back (docs/mapping.md, "Objects").

One layer, ``rts_objects``, with the fields of :data:`FIELDS` and MultiPolygon geometries in the campaign CRS. A
layer is written under a temporary name and renamed into place (never half a file), in batches of
:data:`WRITE_BATCH` objects where the driver can append, so a campaign of ~10^6 objects adds a batch at a time to
memory, not the whole layer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.mapping.polygons import PolygonsError, RtsObject, current_size_bin
from rtscore.storage.files import os_errors

OBJECTS_LAYER = "rts_objects"
FORMATS = {"gpkg": "GPKG", "parquet": "Parquet"}  # --format -> OGR driver

FIELDS = (
    "object_id",
    "scene_ids",
    "n_pixels",
    "prob_mean",
    "prob_max",
    "area_m2",
    "ground_area_m2",
    "bbox_minx",
    "bbox_miny",
    "bbox_maxx",
    "bbox_maxy",
    "size_bin",
    "partial",
)


WRITE_BATCH = 50_000  # objects written to a GeoPackage at a time
POLYGON_TYPE = 3  # shapely.get_type_id of a Polygon


def write_objects(path: str | Path, objects: Sequence[RtsObject], crs: Any, fmt: str = "gpkg") -> Path:
    """Write ``objects`` (geometry in ``crs``) as one layer, GeoPackage (``gpkg``) or GeoParquet (``parquet``,
    when GDAL has its Parquet driver), under a temporary name renamed into place: never half a file.

    Raises:
        PolygonsError: an unknown format, or GeoParquet without GDAL's Parquet driver.
        StorageError: the file cannot be written.
    """
    import pyogrio
    from rasterio.crs import CRS

    if fmt not in FORMATS:
        raise PolygonsError(f"objects format {fmt!r}: expected one of {sorted(FORMATS)}")
    driver = FORMATS[fmt]
    if driver not in pyogrio.list_drivers(write=True):
        raise PolygonsError(
            f"{path}: this GDAL ({pyogrio.__gdal_version_string__}) has no {driver} driver; write gpkg instead"
        )
    final = Path(path)
    tmp = final.with_name(f".{final.stem}.{uuid.uuid4().hex[:8]}.partial{final.suffix}")  # drivers read the suffix
    wkt = CRS.from_user_input(crs).to_wkt()
    # in batches appended to the layer: what a batch adds to memory is bounded (a campaign has ~10^6 objects);
    # a driver that cannot append (Parquet) gets the layer in one write
    step = WRITE_BATCH if driver == FORMATS["gpkg"] else max(1, len(objects))
    with os_errors("write", final):
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            for k in range(0, max(1, len(objects)), step):
                batch = objects[k : k + step]
                columns = _columns(batch)
                pyogrio.raw.write(
                    tmp,
                    geometry=_multi_wkb(_polygonal(batch)),
                    field_data=list(columns.values()),
                    fields=list(columns),
                    crs=wkt,
                    driver=driver,
                    layer=OBJECTS_LAYER,
                    geometry_type="MultiPolygon",
                    encoding="UTF-8",
                    append=k > 0,
                )
            tmp.replace(final)
        finally:
            tmp.unlink(missing_ok=True)
    return final


def _multi_wkb(geoms: list[Any]) -> np.ndarray:
    """The geometries as MultiPolygon WKB (a Polygon wrapped as a MultiPolygon of one), an object array."""
    import shapely

    if not geoms:
        return np.empty(0, dtype=object)
    arr = np.asarray(geoms, dtype=object)
    single = shapely.get_type_id(arr) == POLYGON_TYPE
    arr[single] = shapely.multipolygons(arr[single][:, np.newaxis])  # each its own MultiPolygon
    return np.asarray(shapely.to_wkb(arr), dtype=object)


def _polygonal(objects: Sequence[RtsObject]) -> list[Any]:
    """The objects' polygons (a made-valid outline may carry stray lines or points: dropped)."""
    import shapely

    out = []
    for o in objects:
        g = o.geometry
        if g.geom_type == "GeometryCollection":
            g = shapely.union_all([p for p in g.geoms if p.geom_type in ("Polygon", "MultiPolygon")])
        out.append(g)
    return out


def _columns(objects: Sequence[RtsObject]) -> dict[str, np.ndarray]:
    """The attribute columns of ``objects``, in :data:`FIELDS` order."""

    def col(values: list[Any], dtype: Any) -> np.ndarray:
        return np.asarray(values, dtype=dtype)

    return {
        "object_id": col([o.object_id for o in objects], np.int64),
        "scene_ids": col([json.dumps(list(o.scene_ids)) for o in objects], object),
        "n_pixels": col([o.n_pixels for o in objects], np.int64),
        "prob_mean": col([o.prob_mean for o in objects], np.float64),
        "prob_max": col([o.prob_max for o in objects], np.float64),
        "area_m2": col([o.area_m2 for o in objects], np.float64),
        "ground_area_m2": col([o.ground_area_m2 for o in objects], np.float64),
        "bbox_minx": col([o.bbox[0] for o in objects], np.float64),
        "bbox_miny": col([o.bbox[1] for o in objects], np.float64),
        "bbox_maxx": col([o.bbox[2] for o in objects], np.float64),
        "bbox_maxy": col([o.bbox[3] for o in objects], np.float64),
        "size_bin": col([o.size_bin for o in objects], object),
        "partial": col([o.partial for o in objects], np.bool_),
    }


def read_objects(path: str | Path) -> tuple[Any, list[RtsObject]]:
    """The objects layer written by :func:`write_objects`: (its CRS as a rasterio CRS, its objects).

    Raises:
        PolygonsError: not a readable vector file, or not an objects layer (fields missing).
    """
    import pyogrio
    import shapely
    from rasterio.crs import CRS

    p = Path(path)
    try:
        meta, _, geoms, values = pyogrio.raw.read(p, layer=OBJECTS_LAYER)
    except Exception as err:  # pyogrio's DataSourceError/DataLayerError, GDAL's reasons inside
        raise PolygonsError(f"{p}: not a readable objects file ({type(err).__name__}: {err})") from None
    names = [str(f) for f in meta["fields"]]
    missing = [f for f in FIELDS if f not in names]
    if missing or meta.get("crs") is None:
        raise PolygonsError(f"{p}: not an objects layer (missing fields {missing}, CRS {meta.get('crs')})")
    c = {f: values[names.index(f)] for f in FIELDS}
    objects = [
        RtsObject(
            object_id=int(c["object_id"][i]),
            geometry=shapely.from_wkb(geoms[i]),
            scene_ids=tuple(json.loads(c["scene_ids"][i])),
            n_pixels=int(c["n_pixels"][i]),
            prob_mean=float(c["prob_mean"][i]),
            prob_max=float(c["prob_max"][i]),
            area_m2=float(c["area_m2"][i]),
            ground_area_m2=float(c["ground_area_m2"][i]),
            bbox=(
                float(c["bbox_minx"][i]),
                float(c["bbox_miny"][i]),
                float(c["bbox_maxx"][i]),
                float(c["bbox_maxy"][i]),
            ),
            size_bin=current_size_bin(str(c["size_bin"][i])),
            partial=bool(c["partial"][i]),
        )
        for i in range(len(geoms))
    ]
    return CRS.from_user_input(meta["crs"]), objects
