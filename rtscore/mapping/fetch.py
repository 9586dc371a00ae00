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
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rtscore.mapping.outputs import SCENES_DIR, CampaignRoot, read_scene_parts, scene_outputs
from rtscore.mapping.polygons import PARTS_SUFFIX, LazyParts, SceneParts, parts_from_json
from rtscore.mapping.scenes import CampaignError, Scene
from rtscore.storage.files import os_errors
from rtscore.storage.gcs import SHA_KEY, small_object_workers

if TYPE_CHECKING:
    from google.cloud.storage import Blob

FINISH_DIR = ".finish"  # <output's local root>/.finish/: the finish's own state (never published)
MERGE_STATE = "merge-state.npz"
BATCH = 16  # scenes a fetch task takes at most


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
    n = min(workers if workers is not None else small_object_workers(), max(1, len(done)))
    # a task per few scenes, not per scene: at 10^5 scenes a future each costs more than reading a mirrored file
    step = max(1, min(BATCH, len(done) // (4 * n)))
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="rts-finish-fetch") as pool:
        batches = [pool.submit(_fetch_batch, out, done[k : k + step], listed) for k in range(0, len(done), step)]
    got, errors = [], []
    for s, outcome in zip(done, (o for b in batches for o in b.result()), strict=True):
        if isinstance(outcome, FetchedParts):
            got.append(outcome)
        else:
            errors.append(f"scene {s.scene_id}: {outcome}")
    if errors:
        more = f" (and {len(errors) - 1} more scene(s))" if len(errors) > 1 else ""
        raise CampaignError(f"campaign finish: parts of {errors[0]}{more}")
    return got


def _listed_parts(out: CampaignRoot) -> dict[str, Blob]:
    """The parts objects under ``scenes/`` of a gs:// output, by path relative to the root (one listing)."""
    return {
        f"{SCENES_DIR}/{sub}": blob
        for sub, blob in out.store().list_under(SCENES_DIR).items()
        if sub.endswith(PARTS_SUFFIX)
    }


def _fetch_batch(
    out: CampaignRoot, scenes: Sequence[Scene], listed: dict[str, Blob] | None
) -> list[FetchedParts | Exception]:
    """Each scene's parts, or the error it met (every scene is tried)."""
    got: list[FetchedParts | Exception] = []
    for s in scenes:
        try:
            got.append(_fetch_one(out, s, listed))
        except Exception as err:
            got.append(err)
    return got


def _fetch_one(out: CampaignRoot, scene: Scene, listed: dict[str, Blob] | None) -> FetchedParts:
    rel = out.rel(scene_outputs(out, scene).parts)
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
    return FetchedParts(scene, parts, pixel_m2, sha, downloaded)


def _read(path: Path) -> bytes:
    with os_errors("read", path):
        return path.read_bytes()


def _holds(data: bytes, blob: Blob) -> bool:
    """Whether ``data`` (the mirror's file) is the object's content: its size, and the sha256 of its metadata."""
    want = (blob.metadata or {}).get(SHA_KEY)
    return want is not None and len(data) == blob.size and hashlib.sha256(data).hexdigest() == want
