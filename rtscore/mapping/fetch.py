"""The done scenes' parts files for the campaign's finish, fetched concurrently and only when they changed
(docs/mapping.md, "The finish: fetching and merging").

For a gs:// output the parts objects are listed once (``scenes/``, a page of up to 1,000 objects a request), then
each done scene's file is taken from the local mirror when the mirror's bytes have the sha256 and size the object
carries (every published file has its sha256 in its metadata), else downloaded at the listed generation into the
mirror: a finish after k new or re-mapped scenes downloads k files. The downloads and reads run on a bounded pool
(4 x ``RTS_GCS_WORKERS`` threads, 32 by default: :func:`~rtscore.storage.gcs.small_object_workers`), each call
under the GCS client's retry policy; the results come back in the done scenes' order, whatever order they complete
in. A local output's parts files are read in place. Each scene's parts come with the sha256 of its file: the key of
the incremental merge (:mod:`rtscore.mapping.merge`), so a file changed under the same scene id is never taken for
the old one.

Only each file's header is read here (the scene's CRS, pixel and footprint); its parts are read from the same
local file when the merge first needs them (:class:`~rtscore.mapping.polygons.LazyParts`, the sha256 checked
again), so an incremental merge reads the parts of the scenes near a change only.

A scene without a parts file (mapped by an older version) gets it made from its rasters, as
:func:`~rtscore.mapping.outputs.read_scene_parts` does. An error names the scene and the object or file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtscore.mapping.outputs import FINISH_DIR, SCENES_DIR, CampaignRoot, parts_rel, read_scene_parts
from rtscore.mapping.polygons import PARTS_SUFFIX, LazyParts, SceneParts, _crs_of_wkt, parts_from_json
from rtscore.mapping.scenes import CampaignError, Scene
from rtscore.storage.files import atomic_write_text, os_errors
from rtscore.storage.gcs import SHA_KEY, small_object_workers

if TYPE_CHECKING:
    from google.cloud.storage import Blob

HEADERS = "parts-headers.json"
HEADERS_SCHEMA = 1
MERGE_STATE = "merge-state"  # its blocks in merge-state.blocks/ (rtscore.mapping.merge_store)
BATCH = 16  # scenes a fetch task takes at most

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchedParts:
    """A done scene's parts, the ground m² of one of its pixels, the sha256 of its parts file and whether this
    finish downloaded it."""

    scene: Scene
    parts: SceneParts
    pixel_m2: float
    sha256: str
    downloaded: bool


def merge_state_path(out: CampaignRoot) -> Path:
    """Where the campaign's merge state is kept: under its local root (for gs:// the mirror in the cache dir)."""
    return out.local / FINISH_DIR / MERGE_STATE


def fetch_scene_parts(out: CampaignRoot, done: Sequence[Scene], *, workers: int | None = None) -> list[FetchedParts]:
    """Every done scene's parts (module docstring), in the order of ``done``; ``workers`` threads (default
    :func:`~rtscore.storage.gcs.small_object_workers`: 4 x ``RTS_GCS_WORKERS``). All scenes are tried before an
    error is raised.

    Raises:
        CampaignError: naming the first scene that failed, its object or file and why, and how many others failed.
    """
    listed = _listed_parts(out) if out.remote and done else None
    headers = _Headers(out.local / FINISH_DIR / HEADERS)
    outcomes: list[FetchedParts | Exception | None] = [None] * len(done)
    base = str(out.local)  # a path as a string: pathlib's joins cost more than the stat at 10^5 scenes
    for i, s in enumerate(done):  # files read before and unchanged: no I/O but a stat, so no thread either
        rel = parts_rel(s)
        outcomes[i] = headers.known(s, f"{base}/{rel}", listed.get(rel) if listed is not None else None, out.remote)
    todo = [s for s, o in zip(done, outcomes, strict=True) if o is None]
    n = min(workers if workers is not None else small_object_workers(), max(1, len(todo)))
    # a task per few scenes, not per scene: at 10^5 scenes a future each costs more than reading a mirrored file
    step = max(1, min(BATCH, len(todo) // (4 * n)))
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="rts-finish-fetch") as pool:
        batches = [
            pool.submit(_fetch_batch, out, todo[k : k + step], listed, headers) for k in range(0, len(todo), step)
        ]
    fetched = iter([o for b in batches for o in b.result()])
    got, errors = [], []
    for s, outcome in zip(done, (o if o is not None else next(fetched) for o in outcomes), strict=True):
        if isinstance(outcome, FetchedParts):
            got.append(outcome)
        else:
            errors.append(f"scene {s.scene_id}: {outcome}")
    if errors:
        more = f" (and {len(errors) - 1} more scene(s))" if len(errors) > 1 else ""
        raise CampaignError(f"campaign finish: parts of {errors[0]}{more}")
    headers.save({f.scene.scene_id for f in got})
    return got


def _listed_parts(out: CampaignRoot) -> dict[str, Blob]:
    """The parts objects under ``scenes/`` of a gs:// output, by path relative to the root (one listing)."""
    return {
        f"{SCENES_DIR}/{sub}": blob
        for sub, blob in out.store().list_under(SCENES_DIR, ending=PARTS_SUFFIX).items()
        if sub.endswith(PARTS_SUFFIX)
    }


def _fetch_batch(
    out: CampaignRoot, scenes: Sequence[Scene], listed: dict[str, Blob] | None, headers: _Headers
) -> list[FetchedParts | Exception]:
    """Each scene's parts, or the error it met (every scene is tried)."""
    got: list[FetchedParts | Exception] = []
    for s in scenes:
        try:
            got.append(_fetch_one(out, s, listed, headers))
        except Exception as err:
            got.append(err)
    return got


def _fetch_one(out: CampaignRoot, scene: Scene, listed: dict[str, Blob] | None, headers: _Headers) -> FetchedParts:
    rel = parts_rel(scene)
    local, downloaded = out.path(rel), False
    blob = listed.get(rel) if listed is not None else None
    if (listed is not None and blob is None) or (listed is None and not local.is_file()):
        read_scene_parts(out, scene)  # no parts file: made from the rasters (or an error naming them)
    data = _read(local) if local.is_file() else None
    if blob is not None and (data is None or not _holds(data, blob)):
        tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.download")
        try:
            out.store().download_file(blob, rel, tmp)  # at the listed generation
            tmp.replace(local)
        finally:
            tmp.unlink(missing_ok=True)
        data, downloaded = _read(local), True
    if data is None:
        data = _read(local)  # not there: the error names the file
    sha = hashlib.sha256(data).hexdigest()
    what = out.uri_of(rel) if out.remote else str(local)
    # the header now, the parts when the merge first needs them (from the same bytes: their sha256 is checked)
    parts, pixel_m2 = parts_from_json(data.decode(errors="replace"), what, lazy=LazyParts(local, sha))
    headers.remember(scene, local, sha, parts, pixel_m2)
    return FetchedParts(scene, parts, pixel_m2, sha, downloaded)


class _Headers:
    """The headers of the parts files the last finish read (module docstring), by scene id: the file's size,
    modification and change times and inode when read, its sha256, and the header (CRS, pixel, ground m² of a
    pixel, footprint). A file whose stat is the one recorded (and, for gs://, whose object carries the recorded
    sha256 and size) is taken from here unread; any other is read and recorded again. Its parts are read, and their
    sha256 checked, when the merge first needs them (:class:`~rtscore.mapping.polygons.LazyParts`), so a file
    changed behind an unchanged stat still fails loudly there. A cache: unreadable, it is ignored with a warning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.held: dict[str, list[Any]] = {}
        self.fresh: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self._wkt: dict[int, str] = {}
        if path.is_file():
            try:
                body = json.loads(path.read_text())
                if body.get("schema") == HEADERS_SCHEMA:
                    self.held = {str(k): list(v) for k, v in body["scenes"].items()}
            except Exception as err:  # a cache: the files are read again
                _log.warning(
                    "parts header cache %s unreadable (%s: %s): reading every file", path, type(err).__name__, err
                )

    @staticmethod
    def _stat(local: Path | str) -> list[int] | None:
        try:
            st = os.stat(local)
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]

    def known(self, scene: Scene, local: str, blob: Blob | None, remote: bool) -> FetchedParts | None:
        """The scene's fetched header from the cache, if its file at ``local`` is as recorded (None: read it)."""
        import shapely

        hit = self.held.get(scene.scene_id)
        if hit is None or hit[0] != local or hit[1] != self._stat(local):
            return None
        sha = str(hit[2])
        if remote and (blob is None or (blob.metadata or {}).get(SHA_KEY) != sha or blob.size != hit[1][0]):
            return None
        wkt, pixel, pixel_m2, footprint = hit[3]
        parts = SceneParts(
            scene.scene_id, _crs_of_wkt(wkt), float(pixel), shapely.from_wkb(footprint), LazyParts(local, sha)
        )
        with self._lock:
            self.fresh[scene.scene_id] = hit
        return FetchedParts(scene, parts, float(pixel_m2), sha, False)

    def remember(self, scene: Scene, local: Path, sha: str, parts: SceneParts, pixel_m2: float) -> None:
        import shapely
        from rasterio.crs import CRS

        stat = self._stat(local)
        if stat is None:
            return
        wkt = self._wkt.get(id(parts.crs))
        if wkt is None:  # a campaign's scenes share a few CRS objects (parts_from_json): rendered once each
            wkt = self._wkt[id(parts.crs)] = CRS.from_user_input(parts.crs).to_wkt()
        header = [
            wkt,
            parts.pixel_size,
            pixel_m2,
            shapely.to_wkb(parts.footprint, hex=True),
        ]
        with self._lock:
            self.fresh[scene.scene_id] = [str(local), stat, sha, header]

    def save(self, done: set[str]) -> None:
        """Keep the headers of ``done`` (written only when they differ from those read)."""
        kept = {k: v for k, v in self.fresh.items() if k in done}
        if kept == self.held:
            return
        try:
            atomic_write_text(self.path, json.dumps({"schema": HEADERS_SCHEMA, "scenes": kept}) + "\n")
        except Exception as err:  # a cache: the next finish reads the files
            _log.warning("parts header cache %s not written (%s: %s)", self.path, type(err).__name__, err)


def _read(path: Path) -> bytes:
    with os_errors("read", path):
        return path.read_bytes()


def _holds(data: bytes, blob: Blob) -> bool:
    """Whether ``data`` (the mirror's file) is the object's content: its size, and the sha256 of its metadata."""
    want = (blob.metadata or {}).get(SHA_KEY)
    return want is not None and len(data) == blob.size and hashlib.sha256(data).hexdigest() == want
