"""The campaign's objects layer on disk: :class:`~rtscore.mapping.polygons.RtsObject` s written as one vector layer
(GeoPackage, or GeoParquet where GDAL has the driver) and read back (docs/mapping.md, "Objects").

One layer, ``rts_objects``, with the fields of :data:`FIELDS` and MultiPolygon geometries in the campaign CRS. A
layer is written under a temporary name and renamed into place (never half a file), in one write of a stream of
batches of :data:`WRITE_BATCH` objects, so a campaign of ~10^6 objects adds a batch at a time to memory, not the
whole layer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


WRITE_BATCH = 50_000  # objects in a batch of the stream written
POLYGON_TYPE = 3  # shapely.get_type_id of a Polygon


@dataclass(frozen=True)
class ObjectTable:
    """A campaign's objects as columns, in layer order (object ``k`` has id ``k + 1``): what the incremental merge
    hands to the layer writer without making a shapely geometry or an :class:`RtsObject` per object (~10^6 at
    10^5 quads). ``wkb``/``text``: one buffer each, the geometries' WKB (campaign CRS, as merged: a Polygon,
    MultiPolygon or, rarely, a GeometryCollection) and the scene-id lists as the layer's JSON text; object ``k``'s
    bytes are ``[starts[k], ends[k])`` and ``[tstarts[k], tends[k])``. ``figures``: prob_mean, prob_max, area_m2,
    ground_area_m2 and the bbox; ``size_bin``: an index into ``size_bins``, -1 for none."""

    wkb: bytes | np.ndarray  # an ndarray: uint8, not copied into bytes (~300 MB at 10^6 objects)
    starts: np.ndarray
    ends: np.ndarray
    text: bytes | np.ndarray
    tstarts: np.ndarray
    tends: np.ndarray
    n_pixels: np.ndarray
    figures: np.ndarray
    size_bins: tuple[str, ...]
    size_bin: np.ndarray
    partial: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    @classmethod
    def empty(cls) -> ObjectTable:
        none = np.zeros(0, np.int64)
        return cls(b"", none, none, b"", none, none, none, np.zeros((0, 8)), (), none, np.zeros(0, np.bool_))

    def take(self, keep: np.ndarray) -> ObjectTable:
        """The objects where ``keep`` (a boolean mask) holds, in the same order (renumbered 1..)."""
        return ObjectTable(
            self.wkb,
            self.starts[keep],
            self.ends[keep],
            self.text,
            self.tstarts[keep],
            self.tends[keep],
            self.n_pixels[keep],
            self.figures[keep],
            self.size_bins,
            self.size_bin[keep],
            self.partial[keep],
        )

    def geometry_wkb(self, k0: int, k1: int) -> list[bytes]:
        w, s, e = _view(self.wkb), self.starts[k0:k1].tolist(), self.ends[k0:k1].tolist()
        return [w[a:b].tobytes() for a, b in zip(s, e, strict=True)]

    def scene_ids_text(self, k0: int, k1: int) -> list[str]:
        t, s, e = _view(self.text), self.tstarts[k0:k1].tolist(), self.tends[k0:k1].tolist()
        return [t[a:b].tobytes().decode() for a, b in zip(s, e, strict=True)]

    def size_bin_labels(self) -> list[str]:
        labels = [*self.size_bins, ""]  # index -1: no bin
        return [labels[i] for i in self.size_bin.tolist()]

    def objects(self, k0: int = 0, k1: int | None = None) -> list[RtsObject]:
        """Objects ``k0``..``k1`` as :class:`RtsObject` s (ids ``k0 + 1``..)."""
        import shapely

        k1 = len(self) if k1 is None else k1
        geoms = shapely.from_wkb(np.array(self.geometry_wkb(k0, k1), dtype=object)) if k1 > k0 else []
        labels = [*self.size_bins, ""]
        out = []
        for i, (g, sids) in enumerate(zip(geoms, self.scene_ids_text(k0, k1), strict=True)):
            k = k0 + i
            f = self.figures[k].tolist()
            out.append(
                RtsObject(
                    object_id=k + 1,
                    geometry=g,
                    scene_ids=tuple(json.loads(sids)),
                    n_pixels=int(self.n_pixels[k]),
                    prob_mean=f[0],
                    prob_max=f[1],
                    area_m2=f[2],
                    ground_area_m2=f[3],
                    bbox=(f[4], f[5], f[6], f[7]),
                    size_bin=labels[int(self.size_bin[k])],
                    partial=bool(self.partial[k]),
                )
            )
        return out


def _view(buf: bytes | np.ndarray) -> memoryview:
    return memoryview(buf) if isinstance(buf, bytes) else buf.data


def write_objects(path: str | Path, objects: Sequence[RtsObject], crs: Any, fmt: str = "gpkg") -> Path:
    """Write ``objects`` (geometry in ``crs``) as one layer, GeoPackage (``gpkg``) or GeoParquet (``parquet``,
    when GDAL has its Parquet driver), under a temporary name renamed into place: never half a file.

    Raises:
        PolygonsError: an unknown format, or GeoParquet without GDAL's Parquet driver.
        StorageError: the file cannot be written.
    """

    def batch(k0: int, k1: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        b = objects[k0:k1]
        return _multi_wkb(_polygonal(b)), _columns(b)

    return _write_layer(path, crs, fmt, len(objects), batch)


def write_object_table(path: str | Path, table: ObjectTable, crs: Any, fmt: str = "gpkg") -> Path:
    """Write ``table`` as :func:`write_objects` writes its objects (the same layer, field for field), from its
    columns: a geometry is decoded only when it is not a Polygon or MultiPolygon (:func:`layer_wkb`)."""

    def batch(k0: int, k1: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        f = table.figures[k0:k1]
        labels = [*table.size_bins, ""]
        columns = {
            "object_id": np.arange(k0 + 1, k1 + 1, dtype=np.int64),
            "scene_ids": np.asarray(table.scene_ids_text(k0, k1), dtype=object),
            "n_pixels": np.asarray(table.n_pixels[k0:k1], np.int64),
            "prob_mean": np.ascontiguousarray(f[:, 0]),
            "prob_max": np.ascontiguousarray(f[:, 1]),
            "area_m2": np.ascontiguousarray(f[:, 2]),
            "ground_area_m2": np.ascontiguousarray(f[:, 3]),
            "bbox_minx": np.ascontiguousarray(f[:, 4]),
            "bbox_miny": np.ascontiguousarray(f[:, 5]),
            "bbox_maxx": np.ascontiguousarray(f[:, 6]),
            "bbox_maxy": np.ascontiguousarray(f[:, 7]),
            "size_bin": np.asarray([labels[i] for i in table.size_bin[k0:k1].tolist()], dtype=object),
            "partial": np.asarray(table.partial[k0:k1], np.bool_),
        }
        return layer_wkb(table.geometry_wkb(k0, k1)), columns

    return _write_layer(path, crs, fmt, len(table), batch)


Batch = Callable[[int, int], tuple[np.ndarray, dict[str, np.ndarray]]]


def _write_layer(path: str | Path, crs: Any, fmt: str, n: int, batch: Batch) -> Path:
    """The layer of ``n`` objects, ``batch(k0, k1)`` giving objects k0..k1's geometries (MultiPolygon WKB) and
    columns (:data:`FIELDS`), written under a temporary name, renamed into place. One write of a stream of Arrow
    batches of :data:`WRITE_BATCH` objects: what a batch adds to memory is bounded (a campaign has ~10^6 objects),
    and GDAL builds the GeoPackage's spatial index once at the end (appending batch by batch kept it up to date
    row by row: 3 times slower)."""
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
    with os_errors("write", final):
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            pyogrio.raw.write_arrow(
                _arrow_stream(n, batch),
                tmp,
                driver=driver,
                layer=OBJECTS_LAYER,
                geometry_name=GEOMETRY,
                geometry_type="MultiPolygon",
                crs=wkt,
                encoding="UTF-8",
            )
            tmp.replace(final)
        finally:
            tmp.unlink(missing_ok=True)
    return final


GEOMETRY = "geometry"  # the stream's geometry column (a GeoPackage names its own "geom")


def _arrow_stream(n: int, batch: Batch) -> Any:
    """The layer's rows as a stream of Arrow record batches of :data:`WRITE_BATCH` objects, made as read."""
    import pyarrow as pa

    def record(k0: int, k1: int) -> Any:
        geometry, columns = batch(k0, k1)
        arrays = [pa.array(geometry, pa.binary())]
        arrays += [pa.array(v, pa.string()) if v.dtype == object else pa.array(v) for v in columns.values()]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    types = {"object_id": pa.int64(), "scene_ids": pa.string(), "n_pixels": pa.int64(), "size_bin": pa.string()}
    types["partial"] = pa.bool_()
    wkb = pa.field(GEOMETRY, pa.binary(), metadata={"ARROW:extension:name": "geoarrow.wkb"})
    schema = pa.schema([wkb, *(pa.field(f, types.get(f, pa.float64())) for f in FIELDS)])
    chunks = ((k, min(n, k + WRITE_BATCH)) for k in range(0, max(1, n), WRITE_BATCH))
    return pa.RecordBatchReader.from_batches(schema, (record(k0, k1) for k0, k1 in chunks))


_MULTI_OF_ONE = b"\x01" + (6).to_bytes(4, "little") + (1).to_bytes(4, "little")  # MultiPolygon of 1, little-endian


def layer_wkb(wkbs: list[bytes]) -> np.ndarray:
    """The layer's MultiPolygon WKB of geometries given as WKB, as :func:`_multi_wkb` of :func:`_polygonal` makes
    it: a MultiPolygon's bytes as they are, a Polygon's (2D, little-endian: shapely's) prefixed as a MultiPolygon
    of one, anything else decoded and made polygonal."""
    out = np.empty(len(wkbs), dtype=object)
    other = []
    for i, w in enumerate(wkbs):
        kind = w[:5]
        if kind == b"\x01\x06\x00\x00\x00":
            out[i] = w
        elif kind == b"\x01\x03\x00\x00\x00":
            out[i] = _MULTI_OF_ONE + w
        else:
            other.append(i)
    if other:
        import shapely

        geoms = shapely.from_wkb(np.array([wkbs[i] for i in other], dtype=object))
        fixed = _multi_wkb(_polygonal_geoms(list(geoms)))
        for i, w in zip(other, fixed, strict=True):
            out[i] = w
    return out


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
    return _polygonal_geoms([o.geometry for o in objects])


def _polygonal_geoms(geoms: list[Any]) -> list[Any]:
    import shapely

    out = []
    for g in geoms:
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
    objects = [row_object(geoms[i], c, i) for i in range(len(geoms))]
    return CRS.from_user_input(meta["crs"]), objects


def row_object(wkb: bytes, c: dict[str, Any], i: int) -> RtsObject:
    """Row ``i`` of the layer's columns ``c`` (by field name, as pyogrio reads them) with its geometry's WKB, as an
    :class:`RtsObject`: how every reader of the layer builds one."""
    import shapely

    return RtsObject(
        object_id=int(c["object_id"][i]),
        geometry=shapely.from_wkb(wkb),
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
