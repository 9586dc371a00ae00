"""The chunk hand-over (docs/mapping.md, "How a chunk run finds its scenes"): what a campaign's plan hands each chunk
run, and a chunk run's work on its worker before its model, O(its scenes) whatever the campaign's size.

The coordinator reads the log once (:func:`~rtscore.mapping.campaign.prepare_campaign`) and cuts what is left into
:class:`ChunkTodo` items (:func:`todo_chunks`). A chunk run (:func:`run_planned_chunk`) reads only its own chunk's
log files newer than the plan, checks each of its scenes against the identity it was planned with, gives a changed
scene a ``failed`` record and maps the others (:func:`~rtscore.mapping.chunk.run_chunk`). No chunk run lists the
input or reads another chunk's log file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rtscore.errors import PipelineError
from rtscore.inference.predict import LoadedPackage
from rtscore.mapping.campaign_log import CampaignLog, LogWriter, MapIdentity, SceneRecord, is_complete, latest
from rtscore.mapping.campaign_log import plan as plan_scenes
from rtscore.mapping.chunk import run_chunk
from rtscore.mapping.outputs import CampaignRoot
from rtscore.mapping.scenes import CampaignError, Scene, identity_change, scene_now
from rtscore.storage.gcs import transfer_workers

_log = logging.getLogger(__name__)


def chunk_of(scenes: Sequence[Scene], scene_ids: Sequence[str], *, what: str) -> list[Scene]:
    """The scenes of ``scenes`` named by ``scene_ids``, in that order (a ``map-chunk`` run's scenes, re-listed on
    its worker). Raises CampaignError naming the ids the input does not list (a changed input since planning)."""
    by_id = {s.scene_id: s for s in scenes}
    missing = [i for i in scene_ids if i not in by_id]
    if missing:
        raise CampaignError(
            f"{what}: scene(s) {', '.join(missing)} not in the campaign input (changed since planning?)"
        )
    return [by_id[i] for i in scene_ids]


@dataclass(frozen=True)
class ChunkTodo:
    """What a campaign hands one chunk run (docs/mapping.md, "How a chunk run finds its scenes"): the chunk's index,
    its scenes left to map as planned (URI, identity, companions), and for each scene the time of its latest log
    record the plan was made from (absent: none). The run resumes only from its own chunk's records newer than that:
    what an earlier run of this chunk logged since the plan."""

    index: int
    scenes: list[Scene]
    logged: dict[str, datetime]


def todo_chunks(
    chunks: Sequence[Sequence[Scene]], records: Sequence[SceneRecord], identity: MapIdentity
) -> list[ChunkTodo]:
    """The chunks with scenes left to map (:func:`~rtscore.mapping.campaign_log.plan` of each chunk against
    ``records``, the log read once when planning), each with the scenes to map and their latest records' times; a
    chunk whose scenes are all complete is left out. One pass over the campaign's scenes: O(scenes)."""
    last = latest(records)
    out = []
    for k, chunk in enumerate(chunks):
        todo = sorted(
            (s for s in chunk if not is_complete(last.get(s.scene_id), s, identity)), key=lambda s: s.scene_id
        )
        if todo:
            logged = {s.scene_id: r.time for s in todo if (r := last.get(s.scene_id)) is not None}
            out.append(ChunkTodo(k, todo, logged))
    return out


def run_planned_chunk(
    pkg: LoadedPackage, todo: ChunkTodo, output: str | Path | CampaignRoot, log: LogWriter, identity: MapIdentity
) -> list[SceneRecord]:
    """A ``map-chunk`` run's work on a worker, O(its scenes) whatever the campaign's size: :func:`ready_chunk` (what
    is left, checked against the plan), a ``failed`` record for each scene changed since the plan (never mapped from a
    stale identity), the others mapped (:func:`run_chunk`). Returns the records appended. No listing of the input, no
    other chunk's log."""
    ready = ready_chunk(todo, log.log, identity, extra=bool(pkg.binding.extra_bands))
    out = []
    for scene, reason in ready.refused:
        _log.warning("scene %s: %s", scene.scene_id, reason)
        record = SceneRecord.now(scene, identity, "failed", reason=reason)
        log.append(record)
        out.append(record)
    return out + run_chunk(pkg, ready.fresh, output, log, identity=identity, log_records=ready.records)


@dataclass(frozen=True)
class ReadyChunk:
    """A chunk run's scenes once it is ready to map: its own chunk's records newer than the plan's, the scenes to map
    (as planned) and those refused with the reason of their ``failed`` record."""

    records: list[SceneRecord]
    fresh: list[Scene]
    refused: list[tuple[Scene, str]]


def ready_chunk(todo: ChunkTodo, log: CampaignLog, identity: MapIdentity, *, extra: bool) -> ReadyChunk:
    """Everything a chunk run does before its model (``bench/campaign_scale.py`` times it as ``chunk-ready``): the
    records of its own chunk's log files newer than the plan's (an earlier run of this chunk: a crashed one
    re-submitted, a retry), the scenes they leave to map, each of those checked against the identity it was planned
    with (:func:`~rtscore.mapping.scenes.scene_now`: one metadata read of a gs:// object, the sha256 of a local
    file). O(the chunk's scenes)."""
    mine = {s.scene_id for s in todo.scenes}
    records = [
        r
        for r in log.read(todo.index)
        if r.scene_id in mine and ((t := todo.logged.get(r.scene_id)) is None or r.time > t)
    ]
    left = plan_scenes(todo.scenes, records, identity)
    fresh, refused = _check_planned(left, extra=extra)
    return ReadyChunk(records, fresh, refused)


def _check_planned(scenes: Sequence[Scene], *, extra: bool) -> tuple[list[Scene], list[tuple[Scene, str]]]:
    """``scenes`` split into those whose files are as planned and those changed since or unreadable (with the reason
    of their ``failed`` record), each identified anew on its own (:func:`~rtscore.mapping.scenes.scene_now`), a few
    at a time (gs:// metadata reads and local hashing overlap)."""
    if not scenes:
        return [], []

    def change(scene: Scene) -> str | None:
        try:
            why = identity_change(scene, scene_now(scene, extra=extra))
        except Exception as err:  # a scene whose files cannot be read is its failure, as in run_chunk
            text = str(err) if isinstance(err, PipelineError) else f"{type(err).__name__}: {err}"
            return f"{scene.uri}: could not be checked against the identity the campaign planned it with: {text}"
        if why is None:
            return None
        return f"changed since the campaign was planned: {why} (not mapped; the next campaign run maps it anew)"

    with ThreadPoolExecutor(max_workers=min(len(scenes), transfer_workers())) as pool:
        changes = list(pool.map(change, scenes))
    fresh = [s for s, why in zip(scenes, changes, strict=True) if why is None]
    refused = [(s, why) for s, why in zip(scenes, changes, strict=True) if why is not None]
    return fresh, refused
