"""The campaign's objects layer as GeoPackage or GeoParquet at 10^6 objects: write, read and file size (issue 37).

The issue asks for bounded memory in the finish and the review export at 10^6 objects, and whether GeoParquet
serves better than GPKG at that size. This GDAL has no Parquet driver (``pyogrio.list_drivers(write=True)``), so
``write_objects(..., fmt="parquet")`` is refused here: the GeoParquet side is written and read with pyarrow
directly, as the project would have to do it.

Input, made once per run and not timed (:func:`generate`): N objects as a campaign's merge leaves them, in EPSG:3857
at 4.77 m: 8 objects per basemap quad of 4096 px, the quads row by row in a band around the pole from ~70 N
southwards (2,048 a row at most, a full circle of longitude: 10^6 objects are 62 rows, 70-66 N), their objects in
that order (a campaign's objects come out of the merge in that spatial order), each an irregular polygon of 10-120 px
across with its vertices on the pixel grid (``bench.campaign_scale.blob``, ~25 vertices); 5 % are MultiPolygons of
two such blobs 130 px apart; 10 % lie on their quad's right border and name two scenes (``scene_ids`` of that quad
and its right neighbour), the others one; 3 % are partial. n_pixels, areas (projected and ground, ``cos²`` of the
centroid's latitude), bbox and size bin are the geometry's; prob_mean in [0.5, 0.8], prob_max in [0.8, 1]. Saved as
the geometries' WKB (one file and its offsets) and the attribute columns (``.npz``) in a temporary directory; each
writer's process loads them as the :class:`~rtscore.mapping.objects_layer.ObjectTable` the finish hands to the layer
writer (WKB and scene-id texts in one buffer each, figures as arrays: :func:`load_table`) before its timer starts.

Measured, each in a fresh process (``--child``): the imports (pyogrio, pyarrow, shapely, the objects layer with the
torch the mapping modules pull in), PROJ's database and, for a write, the object table are done first, then the
peak counter is reset (Linux ``VmHWM``, ``/proc/self/clear_refs`` 5, ``bench.campaign_scale.measured``) and only the
step is timed; printed: its wall seconds, its CPU seconds (user + system of every thread: what it cost on a shared
machine whatever else ran), its process's peak RSS and what the step added to the process (peak - RSS at the reset).

- ``write``: (gpkg) the project's ``objects_layer.write_object_table``, what the finish writes the layer with
  (batches of ``WRITE_BATCH`` = 50,000 appended through pyogrio); (parquet) :func:`write_parquet`: pyarrow's
  ``ParquetWriter`` fed the same batches (:func:`table_batch`: the columns of ``FIELDS`` and the MultiPolygon WKB
  that ``write_object_table`` makes), one row group of ``--row-group`` (50,000) objects at a time, a binary column
  ``geometry``, zstd, the GeoParquet 1.1 ``geo`` metadata (encoding WKB, the geometry types written, the CRS as
  PROJJSON, the bbox) added to the footer at the end; both under a temporary name renamed into place. Plus the
  file's size.
- ``read``: the whole file back into ``RtsObject`` s: (gpkg) ``objects_layer.read_objects``; (parquet)
  :func:`read_parquet_objects`, a row group at a time, each object built as ``read_objects`` builds it.
- ``attrs``: the attribute columns only (``FIELDS``, no geometry), what a review's selection chooses from, as numpy
  columns: (gpkg) ``pyogrio.raw.read(read_geometry=False)``; (parquet) ``pq.read_table(columns=FIELDS)``.
- ``rows``: the 100 objects of a review's sample (seeded, spread over the layer) with their geometries, as
  ``RtsObject`` s, what the chips need after the selection: (gpkg) by feature id (``pyogrio.raw.read(fids=...)``);
  (parquet) the row groups that hold them, one at a time (a Parquet file has no row index: a row group is the
  smallest read).

After the first repeat's writes both files are checked (:func:`check_files`, not timed): GDAL cannot open the
parquet file (no driver: recorded), so it is read back with pyarrow: row count, row groups, the ``geo`` metadata
(version, primary column, encoding, types, CRS equal to the campaign's, bbox equal to the objects' bounds), and the
first and last 100 objects' attributes and geometry against the input made into a layer as ``write_objects`` makes
one from ``RtsObject`` s (WKB byte for byte as shapely writes it); the GeoPackage's count and the same objects
through pyogrio (GDAL keeps the WKB it is given: byte for byte too).

Printed: per format, median [min-max] over ``--repeats`` of each figure, and the ratios parquet / gpkg of the
medians. ``--json`` writes them all.

    .venv/bin/python bench/objects_format.py --n 1000000 --repeats 3 --json objects-format.json   # ~1 h on 2 cores
    .venv/bin/python bench/objects_format.py --n 2000 --repeats 1                                 # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.campaign_scale import ORIGIN_X, ORIGIN_Y, PIXEL, QUAD, _fmt_s, blob, measured, quad_id  # noqa: E402

CRS_EPSG = 3857
QUADS_AROUND = 2048  # basemap quads (4096 px at zoom 15) around a circle of latitude
MERCATOR_WEST = -20_037_508.34  # EPSG:3857's western edge (180 W)
# the quads' western edge: a whole number of quads west of campaign_scale's origin (its pixel grid), inside 180 W
WEST = ORIGIN_X - math.floor((ORIGIN_X - MERCATOR_WEST) / (QUAD * PIXEL)) * QUAD * PIXEL
PER_QUAD = 8  # objects per basemap quad
MULTI_FRACTION = 0.05  # MultiPolygons (two blobs)
SEAM_FRACTION = 0.10  # objects on a quad border, named by two scenes
PARTIAL_FRACTION = 0.03
MULTI_GAP_PX = 130  # centre to centre of a MultiPolygon's blobs: more than two blobs' radii (60 px), disjoint
ROW_GROUP = 50_000  # objects per parquet row group (as WRITE_BATCH for the GeoPackage)
GEN_BATCH = 50_000  # objects generated and saved at a time
SAMPLE = 100  # objects checked at each end of the files
FORMATS = ("gpkg", "parquet")
SUFFIX = {"gpkg": ".gpkg", "parquet": ".parquet"}
KINDS = ("write", "read", "attrs", "rows")
CHOSEN = 100  # objects of a review's sample read with their geometries (the rows step)
FIGURES = ("prob_mean", "prob_max", "area_m2", "ground_area_m2", "bbox_minx", "bbox_miny", "bbox_maxx", "bbox_maxy")
WKB_TYPES = {1: "Point", 2: "LineString", 3: "Polygon", 4: "MultiPoint", 5: "MultiLineString", 6: "MultiPolygon"}


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------------------ the input
def generate(n: int, out: Path, seed: int = 0) -> dict[str, Any]:
    """Write the input of ``n`` objects into ``out`` (module docstring): ``geometry.wkb`` (the geometries' WKB one
    after the other), ``columns.npz`` (their offsets and the attribute columns). Returns what it holds."""
    import shapely

    from rtscore.config.post_training import EvaluationConfig
    from rtscore.data.raster.ground import WEB_MERCATOR_RADIUS_M
    from rtscore.mapping.polygons import size_bin

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    edges = list(EvaluationConfig().size_bins_m2)
    # a band of quads from ~70 N southwards, around the pole: rows of a full circle of longitude (a pan-Arctic
    # campaign's 117,000 quads are ~57 rows of 2,048), fewer quads in one row
    cols = min(QUADS_AROUND, max(1, math.ceil(n / PER_QUAD)))
    side = QUAD * PIXEL
    margin = 80 * PIXEL
    offsets = [0]
    parts: dict[str, list[np.ndarray]] = {}
    kinds = {"multi": 0, "two_scenes": 0, "partial": 0, "vertices": 0}
    with (out / "geometry.wkb").open("wb") as wkb_file:
        for k0 in range(0, n, GEN_BATCH):
            geoms, scene_ids = [], []
            for i in range(k0, min(n, k0 + GEN_BATCH)):
                row, col = divmod(i // PER_QUAD, cols)
                x0, y1 = WEST + col * side, ORIGIN_Y - row * side
                seam = rng.random() < SEAM_FRACTION
                cy = float(rng.uniform(y1 - side + margin, y1 - margin))
                cx = x0 + side if seam else float(rng.uniform(x0 + margin, x0 + side - margin))
                g = blob(rng, cx, cy)
                if rng.random() < MULTI_FRACTION:
                    g = shapely.MultiPolygon([g, blob(rng, cx - MULTI_GAP_PX * PIXEL, cy)])
                geoms.append(g)
                ids = (quad_id(row, col), quad_id(row, col + 1)) if seam else (quad_id(row, col),)
                scene_ids.append(json.dumps(list(ids)))
            arr = np.asarray(geoms, dtype=object)
            m = len(arr)
            area = shapely.area(arr)
            lat = np.degrees(2.0 * np.arctan(np.exp(shapely.get_y(shapely.centroid(arr)) / WEB_MERCATOR_RADIUS_M)))
            ground = area * np.cos(np.radians(lat - 90.0)) ** 2  # lat - 90: the formula's 2 atan(e^(y/R)) - pi/2
            bounds = shapely.bounds(arr)
            wkb = shapely.to_wkb(arr)
            for w in wkb:
                wkb_file.write(w)
            offsets.extend((offsets[-1] + np.cumsum([len(w) for w in wkb])).tolist())
            partial = rng.random(m) < PARTIAL_FRACTION
            batch = {
                "object_id": np.arange(k0 + 1, k0 + m + 1, dtype=np.int64),
                "scene_ids": np.asarray(scene_ids, dtype=str),
                "n_pixels": np.maximum(1, np.round(area / PIXEL**2)).astype(np.int64),
                "prob_mean": rng.uniform(0.5, 0.8, m),
                "prob_max": rng.uniform(0.8, 1.0, m),
                "area_m2": area,
                "ground_area_m2": ground,
                "bbox_minx": bounds[:, 0],
                "bbox_miny": bounds[:, 1],
                "bbox_maxx": bounds[:, 2],
                "bbox_maxy": bounds[:, 3],
                "size_bin": np.asarray([size_bin(float(a), edges) for a in ground], dtype=str),
                "partial": partial,
            }
            for key, values in batch.items():
                parts.setdefault(key, []).append(values)
            kinds["multi"] += int(np.sum(shapely.get_type_id(arr) == 6))
            kinds["two_scenes"] += sum(1 for s in scene_ids if "," in s)
            kinds["partial"] += int(partial.sum())
            kinds["vertices"] += int(shapely.get_num_coordinates(arr).sum())
    columns = {k: np.concatenate(v) for k, v in parts.items()}
    np.savez(out / "columns.npz", offsets=np.asarray(offsets, dtype=np.int64), **columns)
    return {"objects": n, **kinds, "input_mib": _mib(out / "geometry.wkb") + _mib(out / "columns.npz")}


def load_table(path: Path) -> tuple[Any, Any]:
    """The campaign CRS and the input as the finish hands it to the layer writer: an
    :class:`~rtscore.mapping.objects_layer.ObjectTable` (the geometries' WKB and the scene-id texts in one buffer
    each, the figures as arrays; object ``k`` has id ``k + 1``)."""
    from rasterio.crs import CRS

    from rtscore.mapping.objects_layer import ObjectTable

    with np.load(path / "columns.npz") as z:
        c = {k: z[k] for k in z.files}
    off = c["offsets"]
    texts = [str(s).encode() for s in c["scene_ids"]]
    tends = np.cumsum([len(t) for t in texts], dtype=np.int64)
    labels = tuple(sorted({str(b) for b in c["size_bin"]} - {""}))
    index = {b: i for i, b in enumerate(labels)} | {"": -1}
    table = ObjectTable(
        wkb=(path / "geometry.wkb").read_bytes(),
        starts=off[:-1],
        ends=off[1:],
        text=b"".join(texts),
        tstarts=tends - np.asarray([len(t) for t in texts], dtype=np.int64),
        tends=tends,
        n_pixels=c["n_pixels"],
        figures=np.column_stack([c[f] for f in FIGURES]),
        size_bins=labels,
        size_bin=np.asarray([index[str(b)] for b in c["size_bin"]], dtype=np.int64),
        partial=c["partial"],
    )
    return CRS.from_epsg(CRS_EPSG), table


def table_batch(table: Any, k0: int, k1: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Objects ``k0``..``k1`` of ``table`` as the layer holds them: MultiPolygon WKB and the :data:`FIELDS` columns,
    made as ``objects_layer.write_object_table`` makes them for the GeoPackage (the test checks both files agree)."""
    from rtscore.mapping.objects_layer import layer_wkb

    f = table.figures[k0:k1]
    labels = [*table.size_bins, ""]
    columns = {
        "object_id": np.arange(k0 + 1, k1 + 1, dtype=np.int64),
        "scene_ids": np.asarray(table.scene_ids_text(k0, k1), dtype=object),
        "n_pixels": np.asarray(table.n_pixels[k0:k1], np.int64),
        **{name: np.ascontiguousarray(f[:, j]) for j, name in enumerate(FIGURES)},
        "size_bin": np.asarray([labels[i] for i in table.size_bin[k0:k1].tolist()], dtype=object),
        "partial": np.asarray(table.partial[k0:k1], np.bool_),
    }
    return layer_wkb(table.geometry_wkb(k0, k1)), columns


# ------------------------------------------------------------------------------------------------ GeoParquet
def _arrow_schema() -> Any:
    import pyarrow as pa

    from rtscore.mapping.objects_layer import FIELDS

    types = {"object_id": pa.int64(), "n_pixels": pa.int64(), "scene_ids": pa.string(), "size_bin": pa.string()}
    types["partial"] = pa.bool_()
    fields = [pa.field(f, types.get(f, pa.float64()), nullable=False) for f in FIELDS]
    return pa.schema([*fields, pa.field("geometry", pa.binary(), nullable=False)])


def _wkb_type(w: bytes) -> str:
    code = int.from_bytes(w[1:5], "little" if w[0] == 1 else "big")
    return WKB_TYPES.get(code % 1000, str(code))


def write_parquet(path: str | Path, table: Any, crs: Any, row_group: int = ROW_GROUP) -> Path:
    """``table`` (an ``ObjectTable``) as GeoParquet 1.1 (module docstring), one row group of ``row_group`` objects at a
    time: what it adds to memory is one row group's columns, not the layer's. The bbox is that of the objects' bbox
    columns (their geometries' bounds: no geometry is decoded). Under a temporary name renamed into place."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rasterio.crs import CRS

    from rtscore.mapping.objects_layer import FIELDS

    final = Path(path)
    tmp = final.with_name(f".{final.stem}.{uuid.uuid4().hex[:8]}.partial{final.suffix}")
    schema = _arrow_schema()
    n = len(table)
    types: set[str] = set()
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for k in range(0, n, row_group):
                wkb, columns = table_batch(table, k, min(n, k + row_group))
                types |= {_wkb_type(w) for w in {bytes(w[:5]) for w in wkb}}
                arrays = [pa.array(columns[f], type=schema.field(f).type) for f in FIELDS]
                writer.write_table(
                    pa.Table.from_arrays([*arrays, pa.array(wkb, type=pa.binary())], schema=schema),
                    row_group_size=row_group,
                )
            column: dict[str, Any] = {
                "encoding": "WKB",
                "geometry_types": sorted(types),
                "crs": CRS.from_user_input(crs).to_dict(projjson=True),
                "edges": "planar",
            }
            if n:
                box = table.figures[:, 4:8]
                column["bbox"] = [float(box[:, 0].min()), float(box[:, 1].min())]
                column["bbox"] += [float(box[:, 2].max()), float(box[:, 3].max())]
            geo = {"version": "1.1.0", "primary_column": "geometry", "columns": {"geometry": column}}
            writer.add_key_value_metadata({"geo": json.dumps(geo)})
        tmp.replace(final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def geo_metadata(path: str | Path) -> dict[str, Any]:
    """The ``geo`` metadata of a GeoParquet file (its footer's key-value metadata)."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path).metadata or {}
    if b"geo" not in meta:
        raise SystemExit(f"{path}: no 'geo' metadata: not GeoParquet")
    return dict(json.loads(meta[b"geo"]))


def _objects(c: dict[str, np.ndarray], geoms: Sequence[Any]) -> list[Any]:
    """The rows of columns ``c`` and WKB ``geoms`` as RtsObjects, field by field as ``read_objects`` makes them."""

    from rtscore.mapping.objects_layer import row_object

    return [row_object(geoms[i], c, i) for i in range(len(geoms))]


def _arrow_objects(batch: Any, primary: str) -> list[Any]:
    from rtscore.mapping.objects_layer import FIELDS

    c = {f: batch.column(f).to_numpy(zero_copy_only=False) for f in FIELDS}
    return _objects(c, batch.column(primary).to_numpy(zero_copy_only=False))


def read_parquet_objects(path: str | Path) -> tuple[Any, list[Any]]:
    """The objects of a file :func:`write_parquet` wrote: (its CRS, its objects), a row group at a time, each
    object built as ``objects_layer.read_objects`` builds it."""
    import pyarrow.parquet as pq
    from rasterio.crs import CRS

    from rtscore.mapping.objects_layer import FIELDS

    geo = geo_metadata(path)
    primary = geo["primary_column"]
    crs = CRS.from_user_input(json.dumps(geo["columns"][primary]["crs"]))
    objects = []
    for batch in pq.ParquetFile(path).iter_batches(batch_size=ROW_GROUP, columns=[*FIELDS, primary]):
        objects += _arrow_objects(batch, primary)
    return crs, objects


# ------------------------------------------------------------------------------------------------ the steps
def read_attributes(path: Path, fmt: str) -> dict[str, np.ndarray]:
    """The attribute columns (``FIELDS``) of the objects file, no geometry, as numpy columns."""
    from rtscore.mapping.objects_layer import FIELDS, OBJECTS_LAYER

    if fmt == "gpkg":
        import pyogrio.raw

        meta, _, _, values = pyogrio.raw.read(path, layer=OBJECTS_LAYER, read_geometry=False, columns=list(FIELDS))
        names = [str(f) for f in meta["fields"]]
        return {f: values[names.index(f)] for f in FIELDS}
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=list(FIELDS))
    return {f: table.column(f).to_numpy() for f in FIELDS}


def chosen_rows(n: int, k: int = CHOSEN, seed: int = 0) -> list[int]:
    """``k`` row positions of ``n`` (a review's sample: spread over the layer), ascending."""
    return sorted(np.random.default_rng(seed).choice(n, size=min(k, n), replace=False).tolist())


def read_rows(path: Path, fmt: str, rows: Sequence[int]) -> list[Any]:
    """The objects at row positions ``rows`` (ascending), with their geometries, as RtsObjects: (gpkg) by feature id,
    which in a GeoPackage pyogrio wrote is the row's position + 1 (``pyogrio.raw.read(fids=...)``); (parquet) the row
    groups holding them, one at a time, the rows taken from each."""
    from rtscore.mapping.objects_layer import FIELDS, OBJECTS_LAYER

    if fmt == "gpkg":
        import pyogrio.raw

        meta, _, geoms, values = pyogrio.raw.read(path, layer=OBJECTS_LAYER, fids=np.asarray(rows, np.int64) + 1)
        names = [str(f) for f in meta["fields"]]
        return _objects({f: values[names.index(f)] for f in FIELDS}, geoms)
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    primary = geo_metadata(path)["primary_column"]
    sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    out: list[Any] = []
    for g in sorted({int(np.searchsorted(starts, r, side="right")) - 1 for r in rows}):
        want = [r - int(starts[g]) for r in rows if starts[g] <= r < starts[g + 1]]
        group = pf.read_row_group(g, columns=[*FIELDS, primary]).take(want)
        out += _arrow_objects(group, primary)
    return out


@contextlib.contextmanager
def timed(out: dict[str, Any], name: str) -> Iterator[None]:
    """``bench.campaign_scale.measured`` (wall seconds, peak RSS with the counter reset first) and the CPU seconds
    of the process (user + system, every thread) over the block: the machine is shared, CPU time is what the step
    cost whatever else ran."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    with measured(out, name):
        yield
    after = resource.getrusage(resource.RUSAGE_SELF)
    out[name]["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def warm_up() -> None:
    """What every step needs before its own work, done before the timer: the libraries imported (the project's
    objects layer imports pyogrio and shapely when first called) and PROJ's database opened."""
    import importlib

    from rasterio.crs import CRS

    for name in ("pyarrow.parquet", "pyogrio.raw", "shapely", "rtscore.mapping.objects_layer"):
        importlib.import_module(name)
    CRS.from_epsg(CRS_EPSG).to_wkt()


def child(step: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run ``step`` (``<kind>-<format>``) in this process: its figures (module docstring)."""
    from rtscore.mapping.objects_layer import read_objects, write_object_table

    warm_up()
    kind, fmt = step.split("-")
    path = Path(args["path"])
    out: dict[str, Any] = {}
    if kind == "write":
        crs, table = load_table(Path(args["input"]))
        with timed(out, step):
            if fmt == "gpkg":
                write_object_table(path, table, crs)
            else:
                write_parquet(path, table, crs, int(args["row_group"]))
        out[step]["file_mib"] = _mib(path)
    elif kind == "read":
        with timed(out, step):
            _, objects = read_objects(path) if fmt == "gpkg" else read_parquet_objects(path)
        out[step]["objects"] = len(objects)
    elif kind == "attrs":
        with timed(out, step):
            columns = read_attributes(path, fmt)
        out[step]["objects"] = len(columns["object_id"])
    elif kind == "rows":
        rows = chosen_rows(int(args["n"]))
        with timed(out, step):
            objects = read_rows(path, fmt, rows)
        if [o.object_id for o in objects] != [r + 1 for r in rows]:
            raise SystemExit(f"{step}: read other objects than the rows chosen")
        out[step]["objects"] = len(objects)
    else:
        raise SystemExit(f"unknown step {step!r}")
    return dict(out[step])


def run_child(step: str, args: dict[str, Any], *, in_process: bool = False) -> dict[str, Any]:
    """``step`` in a fresh process (``in_process``: in this one, the test's way; its peak RSS then the process's
    own since the counter's reset)."""
    if in_process:
        return child(step, args)
    argv = [sys.executable, str(Path(__file__)), "--child", step, json.dumps(args)]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"step {step} failed:\n{res.stderr[-4000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def _mib(path: Path) -> float:
    return path.stat().st_size / 2**20


# ------------------------------------------------------------------------------------------------ the check
def check_files(input_dir: Path, gpkg: Path, parquet: Path, n: int, row_group: int) -> dict[str, Any]:
    """Both files hold the input (module docstring); raises SystemExit naming what differs."""
    import pyarrow.parquet as pq
    import pyogrio
    import pyogrio.raw
    from rasterio.crs import CRS

    from rtscore.mapping.objects_layer import FIELDS, OBJECTS_LAYER, _columns, _multi_wkb, _polygonal

    problems: list[str] = []
    try:
        pyogrio.read_info(parquet)
        gdal_reads = True
    except Exception:  # this GDAL has no Parquet driver: it does not recognise the file
        gdal_reads = False
    head = list(range(min(n, SAMPLE)))
    tail = list(range(max(len(head), n - SAMPLE), n))
    crs, table = load_table(input_dir)
    # expected as write_objects makes a layer of RtsObjects: not through table_batch, which the writers share
    expected = table.objects(0, len(head)) + (table.objects(tail[0], n) if tail else [])
    want = _columns(expected)
    want_wkb = _multi_wkb(_polygonal(expected))
    del table

    meta = pq.read_metadata(parquet)
    geo = geo_metadata(parquet)
    col = geo["columns"].get(geo.get("primary_column", ""), {})
    if meta.num_rows != n:
        problems.append(f"parquet: {meta.num_rows} rows, expected {n}")
    if meta.num_row_groups != max(1, math.ceil(n / row_group)):
        problems.append(f"parquet: {meta.num_row_groups} row groups for {n} rows of {row_group}")
    if geo.get("version") != "1.1.0" or geo.get("primary_column") != "geometry" or col.get("encoding") != "WKB":
        problems.append(f"parquet: geo metadata {geo.get('version')}, {geo.get('primary_column')}, {col}")
    if not col.get("geometry_types") or not set(col["geometry_types"]) <= {"Polygon", "MultiPolygon"}:
        problems.append(f"parquet: geometry types {col.get('geometry_types')}")
    if CRS.from_user_input(json.dumps(col.get("crs"))) != crs:
        problems.append("parquet: its CRS is not the campaign's")
    with np.load(input_dir / "columns.npz") as z:
        bbox = [float(z[k].min()) for k in ("bbox_minx", "bbox_miny")]
        bbox += [float(z[k].max()) for k in ("bbox_maxx", "bbox_maxy")]
    if col.get("bbox") != bbox:
        problems.append(f"parquet: bbox {col.get('bbox')}, the objects' {bbox}")
    # the row groups holding the sample (each of row_group rows: checked above), read whole
    groups = sorted({i // row_group for i in head + tail})
    starts = dict(zip(groups, np.cumsum([0] + [meta.row_group(g).num_rows for g in groups[:-1]]), strict=True))
    got = pq.ParquetFile(parquet).read_row_groups(groups).to_pydict()
    at = [int(starts[i // row_group]) + i % row_group for i in head + tail]
    problems += _compare("parquet", want, want_wkb, {f: [got[f][j] for j in at] for f in [*FIELDS, "geometry"]})

    info = pyogrio.read_info(gpkg, layer=OBJECTS_LAYER)
    if info["features"] != n:
        problems.append(f"gpkg: {info['features']} features, expected {n}")
    gp: dict[str, list[Any]] = {f: [] for f in [*FIELDS, "geometry"]}
    for skip, count in ((0, len(head)), (tail[0] if tail else n, len(tail))):
        if not count:
            continue
        m, _, geoms, values = pyogrio.raw.read(gpkg, layer=OBJECTS_LAYER, skip_features=skip, max_features=count)
        names = [str(f) for f in m["fields"]]
        for f in FIELDS:
            gp[f] += list(values[names.index(f)])
        gp["geometry"] += list(geoms)
    problems += _compare("gpkg", want, want_wkb, gp)  # GDAL keeps the WKB it is given: byte for byte too
    if problems:
        raise SystemExit("the objects files do not hold the input:\n  " + "\n  ".join(problems[:20]))
    return {
        "gdal_reads_parquet": gdal_reads,
        "rows": n,
        "row_groups": meta.num_row_groups,
        "geo": {k: v for k, v in col.items() if k != "crs"} | {"crs": crs.to_string()},
        "objects_compared": len(head) + len(tail),
    }


def _compare(what: str, want: dict[str, np.ndarray], want_wkb: np.ndarray, got: dict[str, list[Any]]) -> list[str]:
    """What differs between the expected columns and WKB (byte for byte) and those read."""

    def value(f: str, v: Any) -> Any:
        if f == "scene_ids":
            return tuple(json.loads(v))
        return {"object_id": int, "n_pixels": int, "partial": bool, "size_bin": str}.get(f, float)(v)

    problems = []
    for f, values in want.items():
        if len(got[f]) != len(values) or [value(f, v) for v in values] != [value(f, v) for v in got[f]]:
            problems.append(f"{what}: column {f} differs")
    wkb = [bytes(w) for w in got["geometry"]]
    expected = [bytes(w) for w in want_wkb]
    bad = [i for i, (a, b) in enumerate(zip(expected, wkb, strict=True)) if a != b]
    if bad or len(wkb) != len(expected):
        problems.append(f"{what}: {len(bad)} of {len(wkb)} geometries differ (first at sample {bad[:1]})")
    return problems


# ------------------------------------------------------------------------------------------------ report
def summarize(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per step: median [min, max] of seconds, peak MiB, added MiB (and file MiB for a write)."""
    out: dict[str, Any] = {}
    for step, runs in rows.items():
        s: dict[str, Any] = {}
        for key in ("seconds", "cpu_s", "peak_mib", "grown_mib", "file_mib"):
            vals = [r["peak_mib"] - r["base_mib"] if key == "grown_mib" else r.get(key) for r in runs]
            vals = [v for v in vals if v is not None]
            if vals:
                s[key] = statistics.median(vals)
                s[f"{key}_range"] = [min(vals), max(vals)]
        out[step] = s
    return out


def ratios(summary: dict[str, Any]) -> dict[str, float]:
    """parquet / gpkg of each median."""
    out = {}
    for kind in KINDS:
        g, p = summary[f"{kind}-gpkg"], summary[f"{kind}-parquet"]
        for key in ("seconds", "cpu_s", "peak_mib", "grown_mib", "file_mib"):
            if key in g and g[key] > 0:
                out[f"{kind}_{key}"] = p[key] / g[key]
    return out


def _cell(s: dict[str, Any], key: str) -> str:
    lo, hi = s[f"{key}_range"]
    if key in ("seconds", "cpu_s"):
        return f"{_fmt_s(s[key])} [{_fmt_s(lo)}-{_fmt_s(hi)}]"
    digits = 0 if s[key] >= 10 else 2  # a smoke run's files are under a MiB
    text = f"{s[key]:,.{digits}f} [{lo:,.{digits}f}-{hi:,.{digits}f}]"
    return f"{text} (+{s['grown_mib']:,.0f})" if key == "peak_mib" else text


COLUMNS = (  # (step kind, figure, heading) of the printed table
    ("write", "seconds", "write s"),
    ("write", "peak_mib", "write peak MiB"),
    ("write", "file_mib", "file MiB"),
    ("read", "seconds", "read-all s"),
    ("read", "peak_mib", "read-all peak MiB"),
    ("attrs", "seconds", "read-attributes s"),
    ("attrs", "peak_mib", "read-attributes peak MiB"),
    ("rows", "seconds", f"read {CHOSEN} rows s"),
    ("rows", "peak_mib", f"read {CHOSEN} rows peak MiB"),
)


def print_table(summary: dict[str, Any], rat: dict[str, float], n: int, repeats: int) -> None:
    log(
        f"\nN = {n:,} objects; median [min-max] over {repeats} repeat(s); seconds: wall; peak: the step's process "
        "(MiB; in brackets what the step added to it: after the imports and, for a write, the object table it was "
        "given)"
    )
    log("| format | " + " | ".join(head for _, _, head in COLUMNS) + " |")
    log("|" + " --- |" * (len(COLUMNS) + 1))
    for fmt in FORMATS:
        log(f"| {fmt} | " + " | ".join(_cell(summary[f"{k}-{fmt}"], key) for k, key, _ in COLUMNS) + " |")
    cells = [f"{rat[f'{k}_{key}']:.2f}" if f"{k}_{key}" in rat else "n/a" for k, key, _ in COLUMNS]
    log("| parquet / gpkg | " + " | ".join(cells) + " |")
    log("\nCPU seconds (user + system, all threads) of the same steps: what each cost whatever else ran")
    log("| format | " + " | ".join(head for _, key, head in COLUMNS if key == "seconds").replace(" s", " CPU s") + " |")
    log("|" + " --- |" * (len(KINDS) + 1))
    for fmt in FORMATS:
        log(f"| {fmt} | " + " | ".join(_cell(summary[f"{k}-{fmt}"], "cpu_s") for k in KINDS) + " |")
    cells = [f"{rat[f'{k}_cpu_s']:.2f}" if f"{k}_cpu_s" in rat else "n/a" for k in KINDS]
    log("| parquet / gpkg | " + " | ".join(cells) + " |")


# ------------------------------------------------------------------------------------------------ main
def run(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Generate the input into ``work``, measure every step ``a.repeats`` times, print and return the figures. The
    last repeat's files stay in ``work/r<last>/`` (``objects.gpkg``, ``objects.parquet``)."""
    log(f"objects format: N = {a.n:,}, {a.repeats} repeat(s), row groups of {a.row_group:,}")
    t0 = time.perf_counter()
    made = generate(a.n, work / "input", a.seed)
    log(
        f"input: {made['objects']:,} objects ({made['multi']:,} MultiPolygons, {made['two_scenes']:,} of two scenes, "
        f"{made['partial']:,} partial, {made['vertices'] / max(1, a.n):.1f} vertices each) made in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    rows: dict[str, list[dict[str, Any]]] = {f"{k}-{f}": [] for k in KINDS for f in FORMATS}
    check: dict[str, Any] = {}
    for r in range(a.repeats):
        d = work / f"r{r}"
        d.mkdir(parents=True, exist_ok=True)
        order = FORMATS if r % 2 == 0 else FORMATS[::-1]  # which format goes first alternates
        for kind in KINDS:
            for fmt in order:
                step = f"{kind}-{fmt}"
                args = {
                    "input": str(work / "input"),
                    "path": str(d / f"objects{SUFFIX[fmt]}"),
                    "row_group": a.row_group,
                    "n": a.n,
                }
                got = run_child(step, args, in_process=a.in_process)
                rows[step].append(got)
                extra = f", {got['file_mib']:.1f} MiB" if "file_mib" in got else ""
                log(
                    f"  repeat {r + 1}: {step} {_fmt_s(got['seconds'])} (CPU {_fmt_s(got['cpu_s'])}), "
                    f"peak {got['peak_mib']:.0f} MiB "
                    f"(+{got['peak_mib'] - got['base_mib']:.0f}){extra}"
                )
            if kind == "write" and r == 0:
                check = check_files(work / "input", d / "objects.gpkg", d / "objects.parquet", a.n, a.row_group)
                log(
                    f"  check: both files hold the input ({check['objects_compared']} objects compared, parquet "
                    f"{check['row_groups']} row groups, geo {check['geo']}); GDAL reads the parquet file: "
                    f"{'yes' if check['gdal_reads_parquet'] else 'no (no Parquet driver)'}"
                )
        if r < a.repeats - 1:
            shutil.rmtree(d, ignore_errors=True)
    summary = summarize(rows)
    rat = ratios(summary)
    print_table(summary, rat, a.n, a.repeats)
    return {
        "n": a.n,
        "repeats": a.repeats,
        "row_group": a.row_group,
        "input": made,
        "check": check,
        "steps": summary,
        "ratios": rat,
        "runs": rows,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000, help="objects in the layer")
    p.add_argument("--repeats", type=int, default=3, help="repetitions of every step")
    p.add_argument("--row-group", type=int, default=ROW_GROUP, help="objects per parquet row group")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated objects")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--keep", type=Path, default=None, help="work here and keep the input and last files")
    p.add_argument("--in-process", action="store_true", help="steps in this process (a smoke run: no own RSS)")
    p.add_argument("--child", nargs=2, metavar=("STEP", "ARGS"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], json.loads(a.child[1]))))
        return
    if a.n < 1 or a.repeats < 1 or a.row_group < 1:
        p.error("--n, --repeats and --row-group must be >= 1")
    work = a.keep if a.keep is not None else Path(tempfile.mkdtemp(prefix="objects-format-"))
    try:
        figures = run(a, work)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if a.json is not None:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
