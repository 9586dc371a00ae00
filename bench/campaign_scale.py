"""The campaign coordinator at scale: each step's time and peak RSS against the number of quads N (issue 37).

A simulated campaign of N Planet basemap quads (4096 px, EPSG:3857 at 4.77 m, on a grid of ~sqrt(N) columns from
~70 N) is written directly, as ``map-chunk`` runs would leave it, with no model: the input (one small ``.tif``
object per quad under ``input/``: the listing reads names and generations only), each quad's parts file
(``scenes/<id>/<id>_parts.json``, ``rtscore.mapping.polygons.parts_json``: ``--parts`` parts per quad, irregular
polygons of 10-120 px across snapped to the pixel grid, two of them cut by the quad's right or bottom border and
continued in the neighbour, so the merge joins them across the seam) and the manifest-log (one ``done`` record per
quad, one log object per chunk of 50). Everything lives on the GCS emulator (gcp-storage-emulator, in memory, in
this process) behind an injected latency: every request waits ``--latency-ms`` (default 30 ms, what a real bucket
answers in) before it is served. The emulator itself serves one request at a time, so the latency is injected by
serving it from a threading HTTP server whose handler sleeps first, outside a lock, then runs the emulator's own
handler under the lock (:class:`LatentEmulator`): concurrent requests overlap their latency as on a real bucket,
the emulator's work stays serial. The latency is 0 while the campaign is written.

Steps, each in a fresh process (the emulator stays in this one): the imports and what the step needs first are done,
then the peak counter is reset (Linux ``VmHWM``, ``/proc/self/clear_refs`` 5, as bench/review_export_bench.py does)
and only the step is timed; printed: its wall seconds and its own peak RSS.

- ``list``: ``list_scenes`` of the input prefix (what ``map-region`` does first).
- ``plan``: the log read (``CampaignLog.read``) and ``campaign_log.plan`` over the listed scenes.
- ``chunk-ready``: one chunk run's work before its model runs, as ``flows/mapping.py`` ``map_chunk`` does it
  (:func:`chunk_ready`: the library's ``ready_chunk`` on the scenes handed over: its own chunk's log files, one
  identity check per scene): seconds per chunk.
- ``log-append``: 50 records appended by one chunk run's writer (``LogWriter.append``): seconds per record.
- ``finish``: ``write_campaign_outputs`` (log read, every done quad's parts file fetched, merge, objects layer,
  index and summary written and uploaded) with an empty local mirror; and its parts ``fetch``
  (``fetch_scene_parts``, concurrent), ``merge`` (``merge_incremental`` from no state: a full merge, its state
  written) and objects ``write`` (``write_objects``) timed one by one in another process.
- ``finish-1%``: ``write_campaign_outputs`` again after 1 % new quads were mapped (parts files and records added),
  with the local mirror the full finish left (a second ``rts map`` on the same machine).
- ``select``: the review export's selection: the objects layer read and a stratified sample of 100 chosen
  (``rtscore.review.select``).

``--prefect-chunks K``: K chunk runs through a real local Prefect server (``prefect server start`` in a temporary
PREFECT_HOME; the stub ``map-chunk`` flow of bench/campaign_scale_stub.py served with ``flow.serve``, which runs each
flow run in a process of its own, as a process worker does). A coordinator process fans them out with
``flows.fanout.fan_out`` (idempotency key per (parent run, chunk)); it is SIGKILLed once half the runs exist and
started again with the same parent run id; then the log must hold every scene exactly once and the server exactly
K chunk runs. Printed: the submission rate and the time to all runs completed. Each flow run is a Python process
(~3-6 s of CPU on this machine), so K = 1,000 takes roughly 1-2 h on 2 cores: run it alone.

Printed per step: median [min-max] over ``--repeats`` of seconds and peak RSS for each N, and the fitted log-log
exponent (least squares of log median seconds, and of log peak RSS, on log N); ``--plot`` writes both against N as
a PNG. ``--local`` runs the same steps on a local output directory instead (no latency).

    .venv/bin/python bench/campaign_scale.py --n 1000,10000,100000 --repeats 3 --plot scale.png   # hours at 1e5
    .venv/bin/python bench/campaign_scale.py --n 200,1000 --repeats 2 --prefect-chunks 20        # minutes
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from http import server as http_server
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PIXEL = 4.77  # m, EPSG:3857 at Web Mercator zoom 15 (a Planet basemap quad's pixel)
QUAD = 4096  # px
ORIGIN_X, ORIGIN_Y = 5_000_000.0, 11_050_000.0  # ~70 N
CHUNK = 50  # scenes per chunk (rtscore.mapping.DEFAULT_CHUNK_SIZE)
BUCKET = "rts-bench"
PROFILE_ENV = "CAMPAIGN_SCALE_PROFILE"  # --profile's directory, for the steps' processes
NEW_FRACTION = 0.01  # the incremental finish: 1 % new quads
STEPS = ("list", "plan", "chunk-ready", "log-append", "fetch", "merge", "write", "finish", "finish-1%", "select")
PER = {"chunk-ready": "per chunk", "log-append": "per record"}  # steps reported per unit, not in total


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------------------ the emulator
class LatentEmulator:
    """gcp-storage-emulator (in memory) behind a threading HTTP server whose every request first sleeps
    :attr:`latency_s` (outside the lock: concurrent requests overlap their latency), then is served by the emulator's
    own handler under one lock (its storage is not thread-safe). ``url`` goes into ``STORAGE_EMULATOR_HOST``."""

    def __init__(self, bucket: str = BUCKET) -> None:
        from gcp_storage_emulator import server as emu
        from gcp_storage_emulator.handlers import buckets
        from gcp_storage_emulator.storage import Storage

        self.latency_s = 0.0
        self.requests = 0
        storage = Storage(use_memory_fs=True)
        buckets.create_bucket(bucket, storage)
        _as_a_bucket(storage)
        lock = threading.Lock()
        outer = self

        class Handler(emu.RequestHandler):
            def _slow(self, method: str) -> None:
                outer.requests += 1
                if outer.latency_s > 0:
                    time.sleep(outer.latency_s)
                with lock:
                    emu.Router(self).handle(method)

            def do_GET(self) -> None:
                self._slow(emu.GET)

            def do_POST(self) -> None:
                self._slow(emu.POST)

            def do_PUT(self) -> None:
                self._slow(emu.PUT)

            def do_PATCH(self) -> None:
                self._slow(emu.PATCH)

            def do_DELETE(self) -> None:
                self._slow(emu.DELETE)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._storage, self._lock, self._bucket = storage, lock, bucket
        self._httpd = http_server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, storage))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def put(self, name: str, data: bytes, metadata: dict[str, str]) -> None:
        """Write an object straight into the emulator's storage, as its upload handler does (the object resource,
        its checksums and generation), without a request: how the simulated campaign is written (the writes are
        not what is measured, and 3 requests a quad through HTTP would take hours at 10^5)."""
        from gcp_storage_emulator.handlers import objects as emu_objects

        obj = emu_objects._make_object_resource(
            self.url, self._bucket, name, "application/octet-stream", str(len(data)), {"metadata": metadata}
        )
        obj = emu_objects._checksums(data, obj)
        with self._lock:
            self._storage.create_file(self._bucket, name, data, obj)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


PAGE = 1000  # objects a listing request returns at most (a bucket's default page)


def _as_a_bucket(storage: Any) -> None:
    """Make the in-memory emulator's costs those of a bucket, not of its own bookkeeping, which grows with N:

    - it re-serialises the metadata of every object it holds (JSON) on every write, to persist it: in memory
      there is nothing to persist, so that is skipped (without it writing the campaign is O(N^2), and each
      append to the log costs O(N) at the emulator);
    - it answers a listing with every object in one response, after scanning every object name: a bucket answers
      pages of up to 1,000 objects (one request each) from an index. The listing handler is replaced by one that
      pages (``pageToken``, ``maxResults``) over a sorted index of the names (rebuilt after a write added or
      removed a name), so a listing of n objects costs ceil(n / 1000) requests, each paying the latency.
    """
    import bisect

    from gcp_storage_emulator import server as emu
    from gcp_storage_emulator.handlers import objects as emu_objects

    storage._write_config_to_file = lambda: None
    index: dict[str, list[str]] = {}

    def names(bucket: str) -> list[str]:
        held = storage.objects.get(bucket, {})
        if bucket not in index or len(index[bucket]) != len(held):
            index[bucket] = sorted(held)
        return index[bucket]

    def invalidating(method: Any) -> Any:
        def wrapped(bucket: str, *a: Any, **kw: Any) -> Any:
            index.pop(bucket, None)
            return method(bucket, *a, **kw)

        return wrapped

    for name in ("create_file", "delete_file", "_hard_delete_file"):
        setattr(storage, name, invalidating(getattr(storage, name)))

    def paged_ls(request: Any, response: Any, storage_: Any, *args: Any, **kwargs: Any) -> None:
        q = request.query
        bucket = request.params["bucket_name"]
        if storage_ is not storage or q.get("delimiter") or q.get("matchGlob") or q.get("softDeleted"):
            emu_objects.ls(request, response, storage_, *args, **kwargs)  # another emulator's, or not asked here
            return
        if bucket not in storage.buckets:
            emu_objects.ls(request, response, storage_, *args, **kwargs)  # its 404
            return
        prefix = q["prefix"][0] if q.get("prefix") else ""
        after = q["pageToken"][0] if q.get("pageToken") else None
        size = min(PAGE, int(q["maxResults"][0])) if q.get("maxResults") else PAGE
        all_names = names(bucket)
        lo = bisect.bisect_right(all_names, after) if after is not None else bisect.bisect_left(all_names, prefix)
        page = [n for n in all_names[lo : lo + size] if n.startswith(prefix)]
        held = storage.objects[bucket]
        body: dict[str, Any] = {"kind": "storage#objects", "items": [held[n] for n in page]}
        nxt = lo + size
        if len(page) == size and nxt < len(all_names) and all_names[nxt].startswith(prefix):
            body["nextPageToken"] = page[-1]
        response.json(body)

    for _regex, handlers in emu.HANDLERS:  # the routes are module-wide: any other emulator keeps the old listing
        if handlers.get(emu.GET) is emu_objects.ls or getattr(handlers.get(emu.GET), "pages", False):
            handlers[emu.GET] = paged_ls
    paged_ls.pages = True  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------ the campaign
def grid(n: int) -> list[tuple[int, int]]:
    """(row, column) of the first ``n`` quads of a grid ~sqrt(n) wide (row by row)."""
    cols = max(1, round(math.sqrt(n)))
    return [(k // cols, k % cols) for k in range(n)]


def quad_id(row: int, col: int) -> str:
    return f"q{row:04d}-{col:04d}"


def quad_box(row: int, col: int) -> Any:
    from shapely.geometry import box

    side = QUAD * PIXEL
    x0, y1 = ORIGIN_X + col * side, ORIGIN_Y - row * side
    return box(x0, y1 - side, x0 + side, y1)


def blob(rng: np.random.Generator, cx: float, cy: float) -> Any:
    """An irregular polygon of 10-120 px across around (cx, cy) (metres), its vertices on the pixel grid."""
    import shapely

    r = float(rng.uniform(5, 60)) * PIXEL
    angles = np.sort(rng.uniform(0, 2 * math.pi, 24))
    radii = r * rng.uniform(0.6, 1.0, 24)
    origin = np.array([ORIGIN_X, ORIGIN_Y])
    xy = np.c_[cx + radii * np.cos(angles), cy + radii * np.sin(angles)]
    xy = origin + np.round((xy - origin) / PIXEL) * PIXEL  # on the quads' pixel grid (their borders are on it too)
    geom = shapely.make_valid(shapely.Polygon(xy))
    if geom.geom_type != "Polygon" or geom.is_empty:  # a pinched outline: its largest polygon
        polys = [g for g in getattr(geom, "geoms", [geom]) if g.geom_type == "Polygon" and g.area > 0]
        geom = max(polys, key=lambda g: g.area) if polys else shapely.box(cx - r, cy - r, cx + r, cy + r)
    return geom


def quad_parts(cells: AbstractSet[tuple[int, int]], row: int, col: int, n_parts: int) -> list[tuple[Any, bool]]:
    """The (geometry, cut by the border) parts of quad (row, col): ``n_parts - 2`` inside it, the halves of the blobs
    on its own right and bottom borders, and the halves of its left and upper neighbours' border blobs."""
    import shapely

    box = quad_box(row, col)
    side = QUAD * PIXEL
    out: list[tuple[Any, bool]] = []
    rng = np.random.default_rng(row * 100_003 + col)
    x0, y0, x1, y1 = box.bounds
    for _ in range(max(0, n_parts - 2)):
        margin = 80 * PIXEL
        out.append(
            (
                blob(rng, float(rng.uniform(x0 + margin, x1 - margin)), float(rng.uniform(y0 + margin, y1 - margin))),
                False,
            )
        )
    seams = [(row, col), (row, col - 1), (row - 1, col)]  # own right and bottom blobs; left's right, upper's bottom
    for k, (r, c) in enumerate(seams):
        if (r, c) not in cells:
            continue
        srng = np.random.default_rng(1_000_000 + r * 100_003 + c)
        bx0, by0, bx1, by1 = quad_box(r, c).bounds
        right = blob(srng, bx1, float(srng.uniform(by0 + 0.2 * side, by1 - 0.2 * side)))
        bottom = blob(srng, float(srng.uniform(bx0 + 0.2 * side, bx1 - 0.2 * side)), by0)
        wanted = [right, bottom] if k == 0 else [right] if k == 1 else [bottom]
        for g in wanted:
            piece = shapely.intersection(g, box)
            if not piece.is_empty and piece.area > 0:
                out.append((piece, True))
    return out


def scene_parts_text(sid: str, row: int, col: int, cells: AbstractSet[tuple[int, int]], n_parts: int) -> str:
    """The parts file of quad (row, col) (``parts_json``), probabilities seeded by the quad."""
    from rasterio.crs import CRS

    from rtscore.data.raster.ground import web_mercator_latitude
    from rtscore.mapping.polygons import ObjectPart, SceneParts, parts_json

    rng = np.random.default_rng(7 + row * 100_003 + col)
    parts = []
    for geom, cut in quad_parts(cells, row, col, n_parts):
        n = max(1, round(geom.area / PIXEL**2))
        mean, top = float(rng.uniform(0.5, 0.8)), float(rng.uniform(0.8, 1.0))
        parts.append(ObjectPart(sid, geom, n, mean * n, top, cut))
    box = quad_box(row, col)
    sp = SceneParts(sid, CRS.from_epsg(3857), PIXEL, box, parts)
    lat = web_mercator_latitude(box.centroid.y)
    return parts_json(sp, PIXEL**2 * math.cos(math.radians(lat)) ** 2)


def bench_identity() -> Any:
    from rtscore.mapping.campaign_log import MapIdentity, MapSettings

    return MapIdentity(package_sha256="b" * 64, code_sha256="c" * 64, settings=MapSettings(stride=256, batch_size=8))


class Campaign:
    """A simulated campaign's locations: ``root`` (gs:// or a directory) with ``input/`` and the campaign output."""

    def __init__(self, root: str, emulator: LatentEmulator | None = None) -> None:
        self.root = root.rstrip("/")
        self.emulator = emulator  # set: the campaign is written straight into it (LatentEmulator.put)
        self.input = f"{self.root}/input"
        self.output = f"{self.root}/out"


def _put(bucket: Any, name: str, data: bytes) -> None:
    from rtscore.storage.gcs import SHA_KEY

    b = bucket.blob(name)
    b.metadata = {SHA_KEY: hashlib.sha256(data).hexdigest()}
    b.upload_from_string(data)


def put_files(camp: Campaign, files: Sequence[tuple[str, bytes]]) -> None:
    """``files`` (path relative to the campaign root, content) written: uploaded 16 at a time, or into the directory."""
    if camp.emulator is not None:
        from rtscore.storage.gcs import SHA_KEY

        prefix = camp.root.removeprefix(f"gs://{BUCKET}/")
        for rel, data in files:
            camp.emulator.put(f"{prefix}/{rel}", data, {SHA_KEY: hashlib.sha256(data).hexdigest()})
        return
    if camp.root.startswith("gs://"):
        from rtscore.storage.gcs import make_client

        bucket_name, _, prefix = camp.root.removeprefix("gs://").partition("/")
        bucket = make_client().bucket(bucket_name)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda f: _put(bucket, f"{prefix}/{f[0]}", f[1]), files))
        return
    for rel, data in files:
        path = Path(camp.root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def write_quads(
    camp: Campaign, cells: list[tuple[int, int]], all_cells: set[tuple[int, int]], n_parts: int, first_chunk: int
) -> None:
    """The input objects, parts files and log records of the quads ``cells`` (chunks of :data:`CHUNK` numbered from
    ``first_chunk``), as the chunk runs that mapped them would have left them."""
    from rtscore.mapping.campaign_log import SceneRecord, writer_name
    from rtscore.mapping.scenes import list_scenes

    ids = [quad_id(r, c) for r, c in cells]
    put_files(camp, [(f"input/{sid}.tif", sid.encode()) for sid in ids])
    for k in range(0, len(ids), BATCH):  # in batches: the texts of 10^5 quads are ~1 GB
        texts = _parts_texts(ids[k : k + BATCH], cells[k : k + BATCH], all_cells, n_parts)
        put_files(
            camp, [(f"out/scenes/{sid}/{sid}_parts.json", t) for sid, t in zip(ids[k : k + BATCH], texts, strict=True)]
        )
    listed = {s.scene_id: s for s in list_scenes(camp.input)}
    identity = bench_identity()
    logs = []
    for k in range(0, len(ids), CHUNK):
        lines = [
            SceneRecord.now(listed[sid], identity, "done", windows=225, valid_pixels=QUAD * QUAD, seconds=0.5).line()
            for sid in ids[k : k + CHUNK]
        ]
        logs.append((f"out/log/{writer_name(first_chunk + k // CHUNK, 'bench')}", b"".join(lines)))
    put_files(camp, logs)


BATCH = 2000  # quads whose parts files are made and written together


def _parts_text(job: tuple[str, int, int, int]) -> bytes:
    sid, r, c, n_parts = job
    return scene_parts_text(sid, r, c, _CELLS, n_parts).encode()


_CELLS: frozenset[tuple[int, int]] = frozenset()


def _init_cells(cells: frozenset[tuple[int, int]]) -> None:
    global _CELLS
    _CELLS = cells


def _parts_texts(
    ids: Sequence[str], cells: Sequence[tuple[int, int]], all_cells: set[tuple[int, int]], n_parts: int
) -> list[bytes]:
    """The parts files of ``cells``, made on every core (the geometry is what takes the time: ~6 ms a quad)."""
    jobs = [(sid, r, c, n_parts) for sid, (r, c) in zip(ids, cells, strict=True)]
    if len(jobs) < 200 or (os.cpu_count() or 1) < 2:
        _init_cells(frozenset(all_cells))
        return [_parts_text(j) for j in jobs]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(os.cpu_count(), initializer=_init_cells, initargs=(frozenset(all_cells),)) as pool:
        return list(pool.map(_parts_text, jobs, chunksize=50))


def build_campaign(camp: Campaign, n: int, n_parts: int) -> list[tuple[int, int]]:
    """Write the campaign of ``n`` quads (and return the 1 % added later, not written yet)."""
    n_new = max(1, round(n * NEW_FRACTION))
    cells = grid(n + n_new)
    all_cells = set(cells)
    write_quads(camp, cells[:n], all_cells, n_parts, 0)
    return cells[n:]


# ------------------------------------------------------------------------------------------------ the steps
def chunk_ready(output: str, scenes: Sequence[Any], chunk: int) -> Any:
    """A chunk run's work before its model runs, as ``map_chunk`` does it: the library's
    :func:`rtscore.mapping.handover.ready_chunk` on the scenes the coordinator hands over (read only its own chunk's
    log files, check each scene against its planned identity: one metadata read of a gs:// object). The hand-over
    (``ChunkTodo``) is the coordinator's work, made before the timer starts."""
    from rtscore.mapping.campaign_log import CampaignLog
    from rtscore.mapping.handover import ChunkTodo, ready_chunk

    return ready_chunk(ChunkTodo(chunk, list(scenes), {}), CampaignLog(output), bench_identity(), extra=False)


def _vm(key: str) -> float:
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith(key)) / 1024


@contextlib.contextmanager
def measured(out: dict[str, Any], name: str) -> Iterator[None]:
    """Time the block and its own peak RSS (the counter reset first) into ``out[name]``."""
    Path("/proc/self/clear_refs").write_text("5")
    base = _vm("VmRSS:")
    where = os.environ.get(PROFILE_ENV)
    profile = cProfile.Profile() if where else None
    t0 = time.perf_counter()
    if profile is not None:
        profile.enable()
    yield
    seconds = time.perf_counter() - t0
    out[name] = {"seconds": seconds, "peak_mib": _vm("VmHWM:"), "base_mib": base}
    if profile is not None and where:
        profile.disable()  # its overhead counts in the seconds: a profiled run is for where the time goes only
        profile.dump_stats(Path(where) / f"{name.replace('%', 'pct')}-{os.getpid()}.prof")


def child(step: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run ``step`` in this fresh process (module docstring); the figures of each timed part by name."""
    from rtscore.mapping.campaign import write_campaign_outputs
    from rtscore.mapping.campaign_log import CampaignLog, latest, plan
    from rtscore.mapping.fetch import fetch_scene_parts, merge_state_path
    from rtscore.mapping.merge import merge_table
    from rtscore.mapping.objects_layer import write_object_table as write_layer
    from rtscore.mapping.outputs import CampaignRoot
    from rtscore.mapping.scenes import list_scenes

    camp, identity = Campaign(args["root"]), bench_identity()
    out: dict[str, Any] = {}
    if step == "list":
        with measured(out, "list"):
            list_scenes(camp.input)
        return out
    scenes = list_scenes(camp.input)
    if step == "plan":
        with measured(out, "plan"):
            plan(scenes, CampaignLog(camp.output).read(), identity)
    elif step == "chunk-ready":
        k = len(scenes) // 2 // CHUNK  # a chunk in the middle of the campaign, numbered as map-region numbers it
        with measured(out, "chunk-ready"):
            chunk_ready(camp.output, scenes[k * CHUNK : (k + 1) * CHUNK], k)
    elif step == "log-append":
        # a log of its own: the campaign's records stay as the chunk runs left them for the steps after this one
        writer = CampaignLog(f"{camp.root}/append-{os.getpid()}").writer(0, "bench")
        from rtscore.mapping.campaign_log import SceneRecord

        records = [SceneRecord.now(s, identity, "done", windows=225) for s in scenes[:CHUNK]]
        with measured(out, "log-append"):
            for r in records:
                writer.append(r)
        out["log-append"]["seconds"] /= len(records)
    elif step in ("finish", "finish-1%"):
        root = CampaignRoot(camp.output, cache_dir=args["cache"])
        with measured(out, step):
            write_campaign_outputs(scenes, root.log(), root, identity)
    elif step == "parts":
        root = CampaignRoot(camp.output, cache_dir=args["cache"])
        last = latest(root.log().read())
        done = [s for s in scenes if s.scene_id in last]
        with measured(out, "fetch"):
            fetched = fetch_scene_parts(root, done)
        with measured(out, "merge"):
            crs, table, _ = merge_table([f.parts for f in fetched], [f.sha256 for f in fetched], merge_state_path(root))
        with measured(out, "write"):
            write_layer(Path(args["cache"]) / "objects-alone.gpkg", table, crs)
        out["merge"]["objects"] = len(table)
    elif step == "select":  # as export_review chooses: the layer's columns, then the chosen objects read whole
        from rtscore.review.manifest import Selection
        from rtscore.review.objects_columns import read_columns, read_rows
        from rtscore.review.select import select_rows

        root = CampaignRoot(camp.output, cache_dir=args["cache"])
        with measured(out, "select"):
            layer = read_columns(root.fetch("objects.gpkg") or "")
            read_rows(layer, select_rows(layer.attrs, Selection(mode="stratified", n=100, seed=0)))
    else:
        raise SystemExit(f"unknown step {step!r}")
    return out


def run_child(step: str, args: dict[str, Any], env: dict[str, str], *, in_process: bool = False) -> dict[str, Any]:
    """``step`` in a fresh process (or, ``in_process``, in this one: the smoke test's way, peak RSS then the
    process's own since the counter's reset)."""
    if in_process:
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            return child(step, args)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    argv = [sys.executable, str(Path(__file__)), "--child", step, json.dumps(args)]
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"step {step} failed:\n{res.stderr[-4000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def child_env(emulator: LatentEmulator | None, work: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env["RTS_CACHE_DIR"] = str(work / "cache")
    if emulator is not None:
        env["STORAGE_EMULATOR_HOST"] = emulator.url
    return env


def measure_n(n: int, a: argparse.Namespace, work: Path) -> dict[str, list[dict[str, Any]]]:
    """Every step at ``n`` quads, ``a.repeats`` times: {step: [figures of each repeat]}."""
    emulator = None if a.local else LatentEmulator()
    before = os.environ.get("STORAGE_EMULATOR_HOST")  # restored after: the caller's emulator (a test session's) stays
    try:
        if emulator is not None:
            os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
        camp = Campaign(str(work / f"n{n}") if a.local else f"gs://{BUCKET}/n{n}", emulator)
        env = child_env(emulator, work)
        t0 = time.perf_counter()
        new = build_campaign(camp, n, a.parts)
        log(f"N = {n}: campaign written in {time.perf_counter() - t0:.1f} s ({a.parts} parts a quad)")
        if emulator is not None:
            emulator.latency_s = a.latency_ms / 1000
        rows: dict[str, list[dict[str, Any]]] = {s: [] for s in STEPS}
        wanted = set(STEPS) if not a.steps else {s.strip() for s in a.steps.split(",")}
        if wanted - set(STEPS):
            raise SystemExit(f"--steps: unknown {sorted(wanted - set(STEPS))}; the steps are {', '.join(STEPS)}")
        args: dict[str, Any] = {"root": camp.root}

        def step_of(step: str, args: dict[str, Any]) -> dict[str, Any]:
            got = run_child(step, args, env, in_process=a.in_process)
            log(f"  N = {n:,}, repeat {r + 1}: " + ", ".join(f"{k} {_fmt_s(v['seconds'])}" for k, v in got.items()))
            return got

        for r in range(a.repeats):
            for step in ("list", "plan", "chunk-ready", "log-append"):
                if step in wanted:
                    rows[step].append(step_of(step, args)[step])
            if a.coordinator_only:
                continue
            cache = work / f"cache-n{n}-r{r}"
            if wanted & {"fetch", "merge", "write"}:
                got = step_of("parts", {**args, "cache": str(work / f"parts-n{n}-r{r}")})
                for step in ("fetch", "merge", "write"):
                    rows[step].append(got[step])
                shutil.rmtree(work / f"parts-n{n}-r{r}", ignore_errors=True)
            if wanted & {"finish", "select", "finish-1%"}:  # the incremental finish starts from the full one's
                rows["finish"].append(step_of("finish", {**args, "cache": str(cache)})["finish"])
            if "select" in wanted:
                rows["select"].append(step_of("select", {**args, "cache": str(cache)})["select"])
        if not a.coordinator_only and "finish-1%" in wanted:
            incremental(camp, n, new, a, emulator, work, rows, env)
        return {k: v for k, v in rows.items() if v}
    finally:
        if emulator is not None:
            emulator.stop()
        if before is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = before


def incremental(
    camp: Campaign,
    n: int,
    new: list[tuple[int, int]],
    a: argparse.Namespace,
    emulator: LatentEmulator | None,
    work: Path,
    rows: dict[str, list[dict[str, Any]]],
    env: dict[str, str],
) -> None:
    """1 % new quads mapped, then the finish again from each full finish's mirror and finish state, where that
    finish left them (every repeat's full finish left its own). Not a copy: a copied file has another inode and
    change time, and the finish reads again every parts file whose stat it does not know (as after a user restores
    a mirror from a backup), which a campaign's next finish does not."""
    if emulator is not None:
        emulator.latency_s = 0.0
    cells = set(grid(n + len(new)))
    write_quads(camp, new, cells, a.parts, first_chunk=(n + CHUNK - 1) // CHUNK)
    if emulator is not None:
        emulator.latency_s = a.latency_ms / 1000
    for r in range(a.repeats):
        cache = work / f"cache-n{n}-r{r}"  # a gs:// campaign's mirror (a local campaign's state is in its output)
        got = run_child("finish-1%", {"root": camp.root, "cache": str(cache)}, env, in_process=a.in_process)
        rows["finish-1%"].append(got["finish-1%"])
        log(f"  N = {n:,}, repeat {r + 1}: finish-1% {_fmt_s(got['finish-1%']['seconds'])} ({len(new)} new quads)")
        shutil.rmtree(cache, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ report
def exponent(ns: Sequence[int], values: Sequence[float]) -> float | None:
    """Least-squares slope of log(value) on log(N) (None: fewer than two N, or a value not > 0)."""
    if len(ns) < 2 or any(v <= 0 for v in values):
        return None
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def summarize(ns: Sequence[int], by_n: dict[int, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per step and N: median [min, max] of seconds and of peak MiB; per step the two fitted exponents."""
    out: dict[str, Any] = {}
    for step in STEPS:
        if any(step not in by_n[n] for n in ns):
            continue  # not measured in this run (--coordinator-only)
        per_n = {}
        for n in ns:
            secs = [f["seconds"] for f in by_n[n][step]]
            mibs = [f["peak_mib"] for f in by_n[n][step]]
            grown = [f["peak_mib"] - f["base_mib"] for f in by_n[n][step]]
            per_n[n] = {
                "seconds": statistics.median(secs),
                "seconds_range": [min(secs), max(secs)],
                "peak_mib": statistics.median(mibs),
                "peak_mib_range": [min(mibs), max(mibs)],
                "grown_mib": statistics.median(grown),
            }
        out[step] = {
            "by_n": per_n,
            "time_exponent": exponent(ns, [per_n[n]["seconds"] for n in ns]),
            "rss_exponent": exponent(ns, [per_n[n]["peak_mib"] for n in ns]),
        }
    return out


def _fmt_s(v: float) -> str:
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"


def print_table(ns: Sequence[int], summary: dict[str, Any], repeats: int) -> None:
    log(
        f"\nseconds: median [min-max] over {repeats} repeat(s); peak RSS: median of the step's process while it "
        "ran (MiB; in brackets what the step added to the process after its imports)"
    )
    head = "| step | " + " | ".join(f"N = {n:,}" for n in ns) + " | exponent time | exponent RSS |"
    log(head)
    log("|" + " --- |" * (len(ns) + 3))
    for step in (s for s in STEPS if s in summary):
        s = summary[step]
        cells = []
        for n in ns:
            f = s["by_n"][n]
            lo, hi = f["seconds_range"]
            cells.append(
                f"{_fmt_s(f['seconds'])} [{_fmt_s(lo)}-{_fmt_s(hi)}], {f['peak_mib']:.0f} MiB (+{f['grown_mib']:.0f})"
            )
        te, re_ = s["time_exponent"], s["rss_exponent"]
        name = f"{step} ({PER[step]})" if step in PER else step
        log(
            f"| {name} | " + " | ".join(cells) + f" | {'n/a' if te is None else f'{te:.2f}'} | "
            f"{'n/a' if re_ is None else f'{re_:.2f}'} |"
        )


def plot(ns: Sequence[int], summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 5))
    for step in (s for s in STEPS if s in summary):
        s = summary[step]
        te = s["time_exponent"]
        label = f"{step} ({'n/a' if te is None else f'{te:.2f}'})"
        ax_t.plot(ns, [s["by_n"][n]["seconds"] for n in ns], marker="o", label=label)
        ax_m.plot(ns, [s["by_n"][n]["peak_mib"] for n in ns], marker="o", label=step)
    for ax, what in ((ax_t, "seconds (median)"), (ax_m, "peak RSS (MiB, median)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("quads N")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=7, title="step (time exponent)")
    fig.suptitle("Campaign coordinator steps against N (bench/campaign_scale.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"plot: {path}")


# ------------------------------------------------------------------------------------------------ Prefect
def prefect_fan_out(k: int, work: Path, timeout_s: float) -> dict[str, Any]:
    """K stub chunk runs through a real local Prefect server, the coordinator killed mid-fan-out and resumed
    (module docstring). Returns the figures and the exactly-once check."""
    from bench.campaign_scale_stub import STUB_DEPLOYMENT, STUB_FLOW
    from tests.flows.prefect_server import Server, free_port, server_env, wait_healthy

    port = free_port()
    (work / "prefect" / "logs").mkdir(parents=True, exist_ok=True)
    env = server_env(str(work / "prefect" / "home"), f"http://127.0.0.1:{port}/api")
    env.update(
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}",
        # SQLite takes one writer at a time: with 1,000 runs being created, marked late and run, a write may wait
        # longer than the default 10 s for the lock ("database is locked", a 503 to the client) on 2 busy cores
        PREFECT_SERVER_DATABASE_TIMEOUT="60",
    )
    srv = Server(url=env["PREFECT_API_URL"], env=env, logs=work / "prefect" / "logs")
    output = work / "prefect-campaign"
    deployment = f"{STUB_FLOW}/{STUB_DEPLOYMENT}"
    try:
        t0 = time.perf_counter()
        wait_healthy(srv, srv.start("server", "server", "start", "--host", "127.0.0.1", "--port", str(port)))
        serve = "from bench.campaign_scale_stub import map_chunk_stub as f; f.serve(name='bench', limit=4)"
        srv.procs.append(_popen([sys.executable, "-c", serve], env, srv.logs / "serve.log"))
        _wait_deployment(srv, deployment)
        log(f"prefect: server and the stub deployment up in {time.perf_counter() - t0:.1f} s")
        parent = f"bench-{os.getpid()}-{int(time.time())}"
        coord = [
            sys.executable,
            str(Path(__file__)),
            "--coordinator",
            json.dumps(
                {"k": k, "output": str(output), "parent": parent, "deployment": deployment, "timeout_s": timeout_s}
            ),
        ]
        t1 = time.perf_counter()
        first = _popen(coord, env, srv.logs / "coordinator-1.log")
        srv.procs.append(first)  # stopped with the server whatever happens
        created = _wait_runs(srv, max(1, k // 2), first, timeout_s)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        killed_at = time.perf_counter() - t1
        log(f"prefect: coordinator killed after {created} of {k} chunk runs were created ({killed_at:.1f} s)")
        t2 = time.perf_counter()
        second = _popen(coord, env, srv.logs / "coordinator-2.log")
        srv.procs.append(second)
        rc = second.wait(timeout=timeout_s + 120)
        done_s = time.perf_counter() - t2
        if rc != 0:
            raise SystemExit(f"resumed coordinator exited {rc}:\n{srv.log_tail()}")
        return {
            "k": k,
            "created_before_kill": created,
            "killed_after_s": killed_at,
            "resumed_to_done_s": done_s,
            **_exactly_once(srv, output, k),
        }
    finally:
        srv.stop()


def _popen(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    from tests.flows.prefect_server import default_sigint

    handle = log_path.open("ab")
    return subprocess.Popen(
        argv,
        env=env,
        cwd=ROOT,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=default_sigint,
    )


def _chunk_runs(srv: Any) -> list[Any]:
    from tests.flows.prefect_server import all_flow_runs

    with srv.client() as client:
        return [r for r in all_flow_runs(client) if r.name.startswith("map-chunk-")]


def _wait_deployment(srv: Any, name: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception), srv.client() as client:
            client.read_deployment_by_name(name)
            return
        time.sleep(1)
    raise SystemExit(f"deployment {name} not served after {timeout} s:\n{srv.log_tail()}")


def _wait_runs(srv: Any, n: int, proc: subprocess.Popen[bytes], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = len(_chunk_runs(srv))
        if got >= n:
            return got
        if proc.poll() is not None:
            raise SystemExit(f"coordinator exited {proc.returncode} before {n} runs existed:\n{srv.log_tail()}")
        time.sleep(2.0)  # each look reads every run so far: not more often, it loads the server
    raise SystemExit(f"fewer than {n} chunk runs after {timeout} s:\n{srv.log_tail()}")


def _exactly_once(srv: Any, output: Path, k: int) -> dict[str, Any]:
    from collections import Counter

    from rtscore.mapping.campaign_log import CampaignLog

    records = CampaignLog(output).read()
    per_scene = Counter(r.scene_id for r in records)
    want = {f"s{c:05d}-{i}" for c in range(k) for i in range(2)}
    runs = _chunk_runs(srv)
    states = Counter(r.state.type.value if r.state else "?" for r in runs)
    ok = set(per_scene) == want and set(per_scene.values()) == {1} and len(runs) == k
    return {
        "scenes": len(want),
        "records": len(records),
        "twice": sum(1 for v in per_scene.values() if v > 1),
        "missing": len(want - set(per_scene)),
        "chunk_runs": len(runs),
        "states": dict(states),
        "exactly_once": ok,
    }


def coordinator(spec: dict[str, Any]) -> None:
    """The fan-out of the K stub chunk runs (two scenes each), as map-region's: ``fan_out`` keyed by the parent id."""
    from bench.campaign_scale_stub import StubChunkParams
    from flows.fanout import Child, fan_out
    from flows.params.mapping import MapDistributedParams

    identity = bench_identity().model_dump_json()
    children = []
    for c in range(spec["k"]):
        params = StubChunkParams(
            output=spec["output"], chunk=c, scene_ids=[f"s{c:05d}-0", f"s{c:05d}-1"], identity=identity
        )
        children.append(Child(str(c), f"chunk {c}", f"map-chunk-{c}", params))
    dist = MapDistributedParams(deployment=spec["deployment"], poll_interval_s=1.0, timeout_s=spec["timeout_s"])
    fan_out("map-chunk", spec["deployment"], spec["parent"], children, dist)


# ------------------------------------------------------------------------------------------------ main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default="1000,10000,100000", help="comma-separated quad counts")
    p.add_argument("--repeats", type=int, default=3, help="repetitions of every step at every N")
    p.add_argument("--parts", type=int, default=8, help="parts a quad owns (2 of them cut by its borders)")
    p.add_argument("--latency-ms", type=float, default=30.0, help="injected delay per storage request (ms)")
    p.add_argument("--local", action="store_true", help="a local output directory instead of the emulator")
    p.add_argument(
        "--prefect-chunks", type=int, default=0, metavar="K", help="K chunk runs through a real Prefect server"
    )
    p.add_argument("--prefect-timeout-s", type=float, default=3600.0, help="wait this long for the K chunk runs")
    p.add_argument(
        "--coordinator-only",
        action="store_true",
        help="only the coordinator's steps (list, plan, chunk-ready, log-append): no finish, no selection",
    )
    p.add_argument(
        "--steps",
        default="",
        help=f"comma-separated steps to run (default all: {','.join(STEPS).replace('%', '%%')}); finish-1%% and "
        "select run the full finish first",
    )
    p.add_argument("--plot", type=Path, default=None, help="write the log-log plot here (PNG)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--in-process", action="store_true", help="steps in this process (a smoke run: no own RSS)")
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="write each step's cProfile statistics into DIR (<step>-<pid>.prof; the profiler slows the step)",
    )
    p.add_argument("--child", nargs=2, metavar=("STEP", "ARGS"), help=argparse.SUPPRESS)
    p.add_argument("--coordinator", metavar="SPEC", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], json.loads(a.child[1]))))
        return
    if a.coordinator:
        coordinator(json.loads(a.coordinator))
        return
    if a.profile is not None:
        a.profile.mkdir(parents=True, exist_ok=True)
        os.environ[PROFILE_ENV] = str(a.profile.resolve())  # the steps' processes inherit it
    work = Path(tempfile.mkdtemp(prefix="campaign-scale-"))
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the server and workers too
    try:
        figures = run(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json is not None:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


def run(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    ns = sorted({int(v) for v in str(a.n).split(",") if v.strip() and int(v) > 0})  # --n 0: the Prefect part only
    where = "a local directory" if a.local else f"the GCS emulator, {a.latency_ms:g} ms a request"
    log(f"campaign scale: N = {', '.join(f'{n:,}' for n in ns)}, {a.repeats} repeat(s), on {where}")
    figures: dict[str, Any] = {"n": ns, "repeats": a.repeats, "latency_ms": 0 if a.local else a.latency_ms}
    if ns:
        by_n = {n: measure_n(n, a, work) for n in ns}
        figures["steps"] = summary = summarize(ns, by_n)
        print_table(ns, summary, a.repeats)
        if a.plot is not None:
            plot(ns, summary, a.plot)
    if a.prefect_chunks:
        pf = prefect_fan_out(a.prefect_chunks, work, a.prefect_timeout_s)
        log(
            f"\nprefect: {pf['k']} chunk runs, coordinator killed after {pf['created_before_kill']} were created "
            f"({pf['killed_after_s']:.1f} s), resumed: all final {pf['resumed_to_done_s']:.1f} s later; states "
            f"{pf['states']}; {pf['records']} records for {pf['scenes']} scenes, {pf['twice']} twice, "
            f"{pf['missing']} missing: exactly once {'yes' if pf['exactly_once'] else 'NO'}"
        )
        figures["prefect"] = pf
    return figures


if __name__ == "__main__":
    main()
