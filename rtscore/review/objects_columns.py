"""The campaign's objects layer read for a review: the attribute columns a selection needs first, then the
geometries of the chosen objects only (docs/review.md, "Large campaigns").

``read_objects`` (rtscore.mapping.objects_layer) makes a shapely geometry and an
:class:`~rtscore.mapping.polygons.RtsObject` of every object; at ~10^6 objects that is gigabytes, though a
selection reads four attributes and the chips need the geometries of the objects chosen. Here:

- :func:`read_columns`: the layer's CRS, each row's feature id and the attributes a selection reads
  (:class:`~rtscore.review.select.Attributes`: object id, ``prob_mean``, ``prob_max``, size bin), no geometry;
- :func:`centroids`: every row's centroid, the geometries read :data:`GEOMETRY_BATCH` at a time and dropped (the
  regions of a stratified sample with a tiling config);
- :func:`read_rows`: the :class:`RtsObject` s of the rows chosen, built as ``read_objects`` builds them, read by
  feature id :data:`GEOMETRY_BATCH` at a time (a window of rows mostly chosen is read in sequence instead).

Rows are in the layer's order, as ``read_objects`` lists the objects; a row is read back by its feature id (fid),
which in a GeoPackage is the row's key, not its object id. Measured at 10^6 objects (bench/review_export_bench.py
``--select-only 1000000``): the stratified selection of 100 takes 1.9 s and 187 MiB above the interpreter's imports,
where ``read_objects`` and ``select`` took 18.9 s and 1,750 MiB; with a tiling config's regions 15 s and 183 MiB, where
they took 52 s and 1,750 MiB.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.mapping.objects_layer import FIELDS, OBJECTS_LAYER, row_object
from rtscore.mapping.polygons import PolygonsError, RtsObject, current_size_bin
from rtscore.review.select import Attributes

GEOMETRY_BATCH = 50_000  # geometries read at a time
DENSE = 4  # a window of rows of which more than 1 in DENSE is chosen is read in sequence, not by feature id
CHOICE_COLUMNS = ("object_id", "prob_mean", "prob_max", "size_bin")


@dataclass(frozen=True, eq=False)
class ObjectColumns:
    """An objects layer's rows as a selection reads them: the file, its CRS (rasterio), each row's feature id and
    attributes."""

    path: Path
    crs: Any
    fids: np.ndarray  # int64
    attrs: Attributes

    def __len__(self) -> int:
        return len(self.fids)


def _unreadable(p: Path, err: Exception) -> PolygonsError:
    return PolygonsError(f"{p}: not a readable objects file ({type(err).__name__}: {err})")


def read_columns(path: str | Path) -> ObjectColumns:
    """The attributes of every object of the layer :func:`~rtscore.mapping.objects_layer.write_objects` wrote,
    with each row's feature id, without a geometry.

    Raises:
        PolygonsError: not a readable vector file, or not an objects layer (fields missing), as ``read_objects``.
    """
    import pyogrio
    from rasterio.crs import CRS

    p = Path(path)
    try:
        info = pyogrio.read_info(p, layer=OBJECTS_LAYER)
    except Exception as err:  # pyogrio's DataSourceError/DataLayerError, GDAL's reasons inside
        raise _unreadable(p, err) from None
    names = [str(f) for f in info["fields"]]
    missing = [f for f in FIELDS if f not in names]
    if missing or info.get("crs") is None:
        raise PolygonsError(f"{p}: not an objects layer (missing fields {missing}, CRS {info.get('crs')})")
    try:
        meta, fids, _, values = pyogrio.raw.read(
            p, layer=OBJECTS_LAYER, read_geometry=False, columns=list(CHOICE_COLUMNS), return_fids=True
        )
    except Exception as err:
        raise _unreadable(p, err) from None
    c = dict(zip([str(f) for f in meta["fields"]], values, strict=True))
    labels = {v: current_size_bin(v) for v in {str(s) for s in c["size_bin"]}}  # a few labels, shared
    attrs = Attributes(
        object_id=np.asarray(c["object_id"], dtype=np.int64),
        prob_mean=np.asarray(c["prob_mean"], dtype=np.float64),
        prob_max=np.asarray(c["prob_max"], dtype=np.float64),
        size_bin=np.array([labels[str(s)] for s in c["size_bin"]], dtype=object),
    )
    return ObjectColumns(p, CRS.from_user_input(meta["crs"]), np.asarray(fids, dtype=np.int64), attrs)


def _read(layer: ObjectColumns, k0: int, k1: int, columns: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(WKB, columns) of rows ``k0``..``k1``, read in sequence; by feature id where the sequence is not the rows'."""
    import pyogrio

    want = layer.fids[k0:k1]
    try:
        _, fids, geoms, values = pyogrio.raw.read(
            layer.path,
            layer=OBJECTS_LAYER,
            columns=columns,
            skip_features=k0,
            max_features=k1 - k0,
            return_fids=True,
        )
    except Exception as err:
        raise _unreadable(layer.path, err) from None
    if not np.array_equal(fids, want):
        return _read_fids(layer, want, columns)
    return geoms, values


def _read_fids(layer: ObjectColumns, fids: np.ndarray, columns: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(WKB, columns) of the features ``fids``, in that order."""
    import pyogrio

    try:
        _, got, geoms, values = pyogrio.raw.read(
            layer.path, layer=OBJECTS_LAYER, columns=columns, fids=fids, return_fids=True
        )
    except Exception as err:
        raise _unreadable(layer.path, err) from None
    if not np.array_equal(got, fids):
        raise PolygonsError(f"{layer.path}: features {fids[:10].tolist()} were not read back by their ids")
    return geoms, values


def centroids(layer: ObjectColumns, batch: int = GEOMETRY_BATCH) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(x, y) of the centroid of every row's geometry (the layer's CRS), ``batch`` rows at a time in row order;
    each batch's geometries are dropped once its centroids are taken."""
    import shapely

    for k0 in range(0, len(layer), batch):
        wkb, _ = _read(layer, k0, min(k0 + batch, len(layer)), [])
        cents = shapely.centroid(shapely.from_wkb(wkb))
        yield shapely.get_x(cents), shapely.get_y(cents)


def read_rows(layer: ObjectColumns, rows: np.ndarray, batch: int = GEOMETRY_BATCH) -> list[RtsObject]:
    """The objects of ``rows`` (row positions), in that order, as ``read_objects`` builds them.

    Read window by window of ``batch`` rows: a window's chosen rows by feature id, or the whole window in sequence
    where more than 1 in :data:`DENSE` of its rows is chosen (reading by id costs ~3x a row read in sequence).
    """
    rows = np.asarray(rows, dtype=np.int64)
    got: dict[int, RtsObject] = {}
    todo = np.unique(rows)
    for k0 in range(0, len(layer), batch):
        k1 = min(k0 + batch, len(layer))
        here = todo[(todo >= k0) & (todo < k1)]
        if not len(here):
            continue
        if len(here) * DENSE > k1 - k0:
            wkb, values = _read(layer, k0, k1, list(FIELDS))
            at = (here - k0).tolist()
        else:
            wkb, values = _read_fids(layer, layer.fids[here], list(FIELDS))
            at = list(range(len(here)))
        c = dict(zip(FIELDS, values, strict=True))
        for row, i in zip(here.tolist(), at, strict=True):
            got[row] = _object(wkb[i], c, i)
    return [got[r] for r in rows.tolist()]


def _object(wkb: bytes, c: dict[str, np.ndarray], i: int) -> RtsObject:
    """Row ``i`` of the columns ``c`` as an :class:`RtsObject`, field by field as ``read_objects`` makes it."""
    return row_object(wkb, c, i)
