"""A mapping campaign's manifest-log: what was mapped, from which input, with which package.

The log is JSON Lines under ``<output>/log/``, one file (or object) per chunk run,
``chunk-<k>-<run id>.jsonl``, one line per scene outcome; the campaign's log is the union of those files. One
layout for a local and a ``gs://`` output:

- Local: each record is one ``os.write`` of the whole line to the file opened with ``O_APPEND``, then ``fsync``.
  ``O_APPEND`` makes "seek to the end and write" one step, and Linux local file systems (ext4, xfs, btrfs, tmpfs)
  hold the file's inode lock for the whole ``write`` of a regular file, so lines of concurrent writers never
  interleave. Limits: a write may still be short (disk full: refused here, not retried), NFS emulates
  ``O_APPEND`` on the client (not atomic between hosts), and ``kill -9`` or a power cut mid-write can leave a
  torn last line: readers skip it with a warning, and a writer that reopens a file ending without a newline
  first ends that line, so its own records stay whole. Lines are capped at :data:`MAX_LINE_BYTES`.
- ``gs://``: an object cannot be appended to, so a chunk run rewrites its own object whole after each scene,
  with ``if_generation_match`` on the generation it last wrote (0 for "must not exist"), through
  :class:`~rtscore.storage.gcs.GcsStore` (shared client, retry policy). One object per chunk run keeps writers
  from contending; a chunk of N scenes costs O(N²) bytes uploaded, small for lines of a few hundred bytes.

The run id is the Prefect flow run (``RTS_FLOW_RUN_ID``, see :mod:`rtscore.tracking`) when there is one, so a
retry of the same flow run continues its file; otherwise a fresh id. Records are ordered by their UTC ``time``
(then file, then line); the latest record of a scene wins.

The scenes themselves and their identities are listed by :mod:`rtscore.mapping.scenes`. The log is a resume
point keyed by identity: a record means "done" only for the same scene identity (its raster
and every companion file mapping reads with it, :class:`Scene`) and the same :class:`MapIdentity` (package,
mapping code, settings). Records of another identity stay in the log as history and are not resumed.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rtscore.identity import digest
from rtscore.mapping.scenes import CampaignError, CompanionInput, InputIdentity, Scene
from rtscore.storage.files import os_errors
from rtscore.storage.gcs import GS, GcsStore, RetryPolicy, parse_gs_uri, small_object_workers, transfer_workers
from rtscore.tracking import FLOW_RUN_ENV

if TYPE_CHECKING:
    from google.cloud.storage import Blob

_log = logging.getLogger(__name__)

LOG_DIR = "log"  # under the campaign's output root
LOG_SUFFIX = ".jsonl"
MAX_LINE_BYTES = 4096  # one log line; a failure reason is cut to keep under it
MAX_REASON_CHARS = 1000

Status = Literal["done", "skipped-full-nodata", "failed"]
RECORD_SCHEMA = 2  # 2: records carry the scene's companions, the mapping code and the settings
OLDER_RECORD = "older log format (no EXTRA, code or settings identity)"
COMPLETE: frozenset[str] = frozenset({"done", "skipped-full-nodata"})  # statuses a re-run does not redo


# --------------------------------------------------------------------------------------------- identity
class MapSettings(BaseModel):
    """The campaign settings a scene's outputs depend on, bit for bit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stride: int = Field(..., ge=1, description="Window stride in pixels (resolved: half a tile unless set).")
    batch_size: int = Field(
        ..., ge=1, description="Windows per model call (a scene's outputs are the same bits only at one batch shape)."
    )


class MapIdentity(BaseModel):
    """What a campaign maps with besides the scenes' own files: package, mapping code and settings. A log record is a
    resume point ("done") only under the same identity (and for the same scene identity)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package_sha256: str = Field(..., description="The deployment package's identity (sha256 over its files).")
    code_sha256: str = Field(..., description="Code identity of the mapping: closure hash of the chunk's module.")
    settings: MapSettings = Field(..., description="Settings that change the outputs.")

    def digest(self) -> str:
        """One sha256 over the whole identity (compared between a campaign and its chunk runs' workers)."""
        return digest(self.model_dump(mode="json"))

    def short(self) -> str:
        """For messages: ``package <12 hex>, code <12 hex>, stride <s>, batch <b>``."""
        return (
            f"package {self.package_sha256[:12]}, code {self.code_sha256[:12]}, stride {self.settings.stride}, "
            f"batch {self.settings.batch_size}"
        )


# --------------------------------------------------------------------------------------------- records
class SceneRecord(BaseModel):
    """One scene outcome, one line of the manifest-log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(
        RECORD_SCHEMA, description="Version of this record's fields (1: before companions, code and settings)."
    )
    scene_id: str = Field(..., description="The scene's stable id (file stem unless a scene list names it).")
    uri: str = Field(..., description="Where the scene was read from.")
    input: InputIdentity = Field(..., description="The scene raster's content when it was mapped.")
    companions: tuple[CompanionInput, ...] | None = Field(
        None,
        description="The other files read for the scene (its EXTRA raster when the package reads EXTRA bands); "
        "None in records of schema 1, which did not record them.",
    )
    package_sha256: str = Field(..., description="sha256 of the deployment package that mapped it.")
    code_sha256: str | None = Field(None, description="Code identity of the mapping (None: schema 1).")
    settings: MapSettings | None = Field(None, description="Settings that change the outputs (None: schema 1).")
    status: Status = Field(..., description="done, skipped-full-nodata (no valid pixel) or failed.")
    reason: str | None = Field(None, description="Why the scene failed (failed only).")
    windows: int = Field(0, ge=0, description="Inference windows run over the scene.")
    valid_pixels: int = Field(0, ge=0, description="Pixels with data (alpha band > 0).")
    positive_pixels: int = Field(0, ge=0, description="Valid pixels mapped as RTS.")
    seconds: float = Field(0.0, ge=0, description="Wall time spent on the scene.")
    host: str = Field(..., description="The worker that mapped it.")
    flow_run_id: str | None = Field(None, description="The Prefect flow run that mapped it, when there was one.")
    time: datetime = Field(..., description="UTC time the outcome was recorded.")

    @model_validator(mode="after")
    def _reason_iff_failed(self) -> SceneRecord:
        if (self.status == "failed") != bool(self.reason):
            raise ValueError("a failed scene needs a reason, and only a failed one has one")
        return self

    def differs(self, scene: Scene, identity: MapIdentity) -> str | None:
        """What differs between what this record was made from and ``scene`` mapped under ``identity``, in words
        (None: the same scene identity and mapping identity, the record stands for them)."""
        if self.companions is None or self.code_sha256 is None or self.settings is None:
            return OLDER_RECORD
        if self.input != scene.identity:
            return "scene raster changed"
        if self.companions != scene.companions:
            return "EXTRA raster changed"
        if self.package_sha256 != identity.package_sha256:
            return "another package"
        if self.code_sha256 != identity.code_sha256:
            return "other mapping code"
        if self.settings != identity.settings:
            return "other settings"
        return None

    @classmethod
    def now(
        cls,
        scene: Scene,
        identity: MapIdentity,
        status: Status,
        *,
        reason: str | None = None,
        windows: int = 0,
        valid_pixels: int = 0,
        positive_pixels: int = 0,
        seconds: float = 0.0,
    ) -> SceneRecord:
        """A record of ``scene``'s outcome now, on this host, in this flow run (``RTS_FLOW_RUN_ID``); a long reason
        is cut to :data:`MAX_REASON_CHARS`."""
        if reason is not None and len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 1] + "…"
        return cls(
            scene_id=scene.scene_id,
            uri=scene.uri,
            input=scene.identity,
            companions=scene.companions,
            package_sha256=identity.package_sha256,
            code_sha256=identity.code_sha256,
            settings=identity.settings,
            status=status,
            reason=reason,
            windows=windows,
            valid_pixels=valid_pixels,
            positive_pixels=positive_pixels,
            seconds=seconds,
            host=socket.gethostname(),
            flow_run_id=os.environ.get(FLOW_RUN_ENV) or None,
            time=datetime.now(UTC),
        )

    def line(self) -> bytes:
        """The record as one JSON line (with its newline)."""
        data = (self.model_dump_json() + "\n").encode()
        if len(data) > MAX_LINE_BYTES:
            raise CampaignError(
                f"log record of scene {self.scene_id} is {len(data)} bytes; a log line is at most {MAX_LINE_BYTES}"
            )
        return data


# --------------------------------------------------------------------------------------------- the log
def chunk_prefix(chunk: int) -> str:
    """The start of the names of chunk ``chunk``'s log files, ``chunk-<k>-`` (k: 5 digits; the dash ends it, so
    chunk 1's prefix is not chunk 10000's)."""
    if chunk < 0:
        raise CampaignError(f"chunk index must be >= 0; got {chunk}")
    return f"chunk-{chunk:05d}-"


def writer_name(chunk: int, run_id: str | None = None) -> str:
    """The log file of one chunk run: ``chunk-<k>-<run id>.jsonl`` (run id: ``RTS_FLOW_RUN_ID``, else fresh)."""
    run = run_id or os.environ.get(FLOW_RUN_ENV) or uuid.uuid4().hex[:12]
    if not re.fullmatch(r"[A-Za-z0-9_-]+", run):
        raise CampaignError(f"run id {run!r} is not usable in a log file name (letters, digits, _ and - only)")
    return f"{chunk_prefix(chunk)}{run}{LOG_SUFFIX}"


@dataclass
class LogWriter:
    """Appends the records of one chunk run to its own log file (local) or object (gs://)."""

    log: CampaignLog
    name: str
    _content: bytes = field(default=b"", init=False, repr=False)  # gs://: the object as last written
    _generation: int = field(default=0, init=False, repr=False)
    _opened: bool = field(default=False, init=False, repr=False)

    @property
    def uri(self) -> str:
        return self.log.uri(self.name)

    def append(self, record: SceneRecord) -> None:
        """Add ``record`` atomically: the line is in the log whole, or not at all (a torn tail aside, see the
        module docstring)."""
        line = record.line()
        if self.log.gs is not None:
            self._append_gs(line)
        else:
            self._append_local(line)

    def _append_local(self, line: bytes) -> None:
        path = self.log.local_dir() / self.name
        with os_errors("append to", path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if not self._opened:  # a torn line left by a killed earlier attempt: end it, keep ours whole
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        line = b"\n" + line
                    _fsync_dir(path.parent)  # the file's name survives a power cut too
                    self._opened = True
                written = os.write(fd, line)
                if written != len(line):
                    raise CampaignError(f"cannot append to {path}: short write ({written} of {len(line)} bytes)")
                os.fsync(fd)
            finally:
                os.close(fd)

    def _append_gs(self, line: bytes) -> None:
        store = self.log.store()
        rel = f"{LOG_DIR}/{self.name}"
        if not self._opened:  # a retry of the same flow run continues its object
            got = store.read(rel)
            if got is not None:
                self._content, self._generation = got
                if self._content and not self._content.endswith(b"\n"):
                    self._content += b"\n"
            self._opened = True
        content = self._content + line
        store.write(rel, content, if_generation_match=self._generation, content_type="application/x-ndjson")
        blob = store.get(rel)  # the new generation (the object is this run's alone: nobody wrote in between)
        self._content, self._generation = content, int(blob.generation or 0) if blob is not None else 0


class _LogMirror:
    """A local copy of a gs:// campaign's log objects (the finish's own, never published): one file per object
    generation, ``<name>@<generation>``. A finish downloads only the objects written since the last one (2,000 at
    10^5 scenes would otherwise be downloaded again each time). A kept file counts only with the listed object's
    size and CRC32C, so a torn or changed file is downloaded again; a copy, it is rebuilt whenever unreadable."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, name: str, generation: int) -> Path:
        return self.root / f"{name}@{generation}"

    def get(self, name: str, generation: int, blob: Blob) -> bytes | None:
        """The kept copy of the object ``blob`` (listed at ``generation``), if whole."""
        import base64

        import google_crc32c

        path = self._path(name, generation)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        crc = base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
        return data if blob.crc32c is not None and len(data) == blob.size and crc == blob.crc32c else None

    def put(self, name: str, generation: int, data: bytes) -> None:
        path = self._path(name, generation)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        except OSError as err:  # a copy: the next finish downloads the object again
            _log.warning("log mirror %s not written (%s)", path, err)

    def keep_only(self, listed: dict[str, int]) -> None:
        """Remove the files of generations no longer listed (objects rewritten or deleted since)."""
        try:
            held = list(self.root.iterdir()) if self.root.is_dir() else []
        except OSError:
            return
        for path in held:
            name, _, generation = path.name.rpartition("@")
            if path.name.startswith(".") or (generation.isdigit() and listed.get(name) == int(generation)):
                continue  # a kept generation, or another finish's file being written
            path.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CampaignLog:
    """The manifest-log of a campaign whose outputs live under ``root`` (a directory or ``gs://bucket/prefix``)."""

    def __init__(self, root: str | Path, *, retry: RetryPolicy | None = None, mirror: str | Path | None = None) -> None:
        self.root = str(root)
        self.gs = parse_gs_uri(self.root) if self.root.startswith(GS) else None
        self._retry = retry
        self._store: GcsStore | None = None
        # gs://: a local copy of the log objects read, one file per object generation (:class:`_LogMirror`)
        self.mirror = _LogMirror(Path(mirror)) if mirror is not None and self.gs is not None else None

    def __repr__(self) -> str:
        return f"CampaignLog({self.root!r})"

    def __getstate__(self) -> dict[str, object]:  # picklable (a Prefect task argument): the client is made anew
        return {**self.__dict__, "_store": None}

    def uri(self, name: str = "") -> str:
        if self.gs is not None:
            return self.store().uri(f"{LOG_DIR}/{name}" if name else LOG_DIR)
        return str(self.local_dir() / name) if name else str(self.local_dir())

    def local_dir(self) -> Path:
        return Path(self.root).expanduser().absolute() / LOG_DIR

    def store(self) -> GcsStore:
        if self.gs is None:
            raise CampaignError(f"{self.root} is a local campaign output, not gs://")
        if self._store is None:
            retry = self._retry if self._retry is not None else RetryPolicy.from_env()
            self._store = GcsStore(*self.gs, retry, workers=transfer_workers())
        return self._store

    def writer(self, chunk: int, run_id: str | None = None) -> LogWriter:
        """The writer of chunk ``chunk``'s run ``run_id`` (default: ``RTS_FLOW_RUN_ID``, else a fresh id)."""
        return LogWriter(self, writer_name(chunk, run_id))

    def files(self, chunk: int | None = None) -> list[tuple[str, bytes]]:
        """(URI, content) of every log file of the campaign, by name; with ``chunk``, only the files of that chunk's
        runs (``chunk-<k>-*.jsonl``: one prefix listing for gs://, the other chunks' files are neither listed nor
        read)."""
        start = "" if chunk is None else chunk_prefix(chunk)
        if self.gs is not None:
            store = self.store()
            listed = self._gs_blobs(store, start)
            names = sorted(listed)
            generations = {name: int(blob.generation or 0) for name, blob in listed.items()}  # a download resets them
            if len(names) <= 1:
                got = [self._read_gs(store, name, listed[name], generations[name]) for name in names]
            else:  # a campaign of 10^5 scenes has 2,000 log objects: read on a bounded pool, in name order
                n = min(small_object_workers(), len(names))
                with ThreadPoolExecutor(n, thread_name_prefix="rts-log-read") as pool:
                    got = list(pool.map(lambda k: self._read_gs(store, k, listed[k], generations[k]), names))
            if self.mirror is not None and chunk is None:
                self.mirror.keep_only(generations)
            return [(store.uri(f"{LOG_DIR}/{name}"), g) for name, g in zip(names, got, strict=True) if g is not None]
        d = self.local_dir()
        if not d.is_dir():
            return []
        paths = sorted(p for p in d.glob(f"{start}*{LOG_SUFFIX}") if p.is_file())
        out = []
        for p in paths:
            with os_errors("read", p):
                out.append((str(p), p.read_bytes()))
        return out

    @staticmethod
    def _gs_blobs(store: GcsStore, start: str) -> dict[str, Blob]:
        """The log objects whose name (under ``log/``) starts with ``start``, by name: one listing of that prefix
        (each with its generation, size and CRC32C)."""
        base = store.name(LOG_DIR) + "/"

        def listing() -> list[Blob]:
            return list(store.bucket.list_blobs(prefix=base + start, retry=store.idempotent))

        blobs = store.call("listing of", f"{LOG_DIR}/{start}", listing)
        named = ((b.name[len(base) :], b) for b in blobs)
        return {n: b for n, b in named if n.endswith(LOG_SUFFIX) and "/" not in n}

    def _read_gs(self, store: GcsStore, name: str, blob: Blob, generation: int) -> bytes | None:
        """A log object's content at its listed ``generation``: from the mirror when it holds that generation whole,
        else downloaded (and kept there). An object rewritten or deleted since the listing is read afresh (None:
        it is gone)."""
        from google.api_core import exceptions as gexc

        if self.mirror is not None and (kept := self.mirror.get(name, generation, blob)) is not None:
            return kept
        rel = f"{LOG_DIR}/{name}"

        def download() -> bytes | None:
            try:
                return blob.download_as_bytes(if_generation_match=generation, retry=store.idempotent)
            except (gexc.NotFound, gexc.PreconditionFailed):
                return None

        data = store.call("download of", rel, download)
        if data is None:  # rewritten (a chunk run appending) or deleted since the listing
            got = store.read(rel)
            if got is None:
                return None
            data, generation = got
        if self.mirror is not None:
            self.mirror.put(name, generation, data)
        return data

    def read(self, chunk: int | None = None) -> list[SceneRecord]:
        """Every record of the campaign (with ``chunk``: of that chunk's runs' files only), oldest first (by time, then
        file, then line). A line that is not a whole record (a torn write of a killed worker) is skipped with a
        warning naming the file and line."""
        keyed = []
        for uri, content in self.files(chunk):
            for number, raw in enumerate(content.split(b"\n"), start=1):
                if not raw.strip():
                    continue
                try:
                    record = SceneRecord.model_validate_json(raw)
                except ValidationError as err:
                    first = err.errors()[0]["msg"] if err.errors() else str(err)
                    _log.warning(f"{uri}: line {number} is not a whole log record ({first}): ignored")
                    continue
                keyed.append(((record.time, uri, number), record))
        keyed.sort(key=lambda kr: kr[0])
        return [r for _, r in keyed]


# --------------------------------------------------------------------------------------------- planning
def latest(records: Iterable[SceneRecord]) -> dict[str, SceneRecord]:
    """The latest record of each scene (``records`` oldest first, as :meth:`CampaignLog.read` returns them)."""
    out: dict[str, SceneRecord] = {}
    for r in records:
        out[r.scene_id] = r
    return out


def is_current(record: SceneRecord | None, scene: Scene, identity: MapIdentity) -> bool:
    """Whether ``record`` was made from ``scene`` as it is now (raster and companions) under ``identity``."""
    return record is not None and record.differs(scene, identity) is None


def is_complete(record: SceneRecord | None, scene: Scene, identity: MapIdentity) -> bool:
    """Whether ``record`` (a scene's latest) means ``scene`` need not be mapped again under ``identity``."""
    return record is not None and record.status in COMPLETE and is_current(record, scene, identity)


def plan(scenes: Sequence[Scene], records: Iterable[SceneRecord], identity: MapIdentity) -> list[Scene]:
    """The scenes a (re-)run must map, sorted by id: those without a record, whose latest record failed, or whose
    latest record was made from other content (raster or EXTRA raster) or under another identity (package, mapping
    code, settings, or an older record format). A scene counts once: its latest record wins (an older ``done`` does
    not hide a newer ``failed``, nor a newer run of another identity whose outputs replaced this one's)."""
    last = latest(records)
    todo = [s for s in scenes if not is_complete(last.get(s.scene_id), s, identity)]
    return sorted(todo, key=lambda s: s.scene_id)


def other_identity(scenes: Sequence[Scene], records: Iterable[SceneRecord], identity: MapIdentity) -> Counter[str]:
    """The latest records of ``scenes`` that were made from other content or under another identity, counted by
    what differs (:meth:`SceneRecord.differs`): the log keeps them as history, nothing resumes from them."""
    last = latest(records)
    return Counter(
        why for s in scenes if (r := last.get(s.scene_id)) is not None and (why := r.differs(s, identity)) is not None
    )


class CampaignSummary(BaseModel):
    """What a campaign's log says about its scenes, each counted once (its latest record)."""

    model_config = ConfigDict(extra="forbid")

    package_sha256: str = Field(..., description="The package the summary is for.")
    scenes: int = Field(..., ge=0, description="Scenes of the campaign.")
    done: int = Field(..., ge=0, description="Scenes mapped.")
    skipped_full_nodata: int = Field(..., ge=0, description="Scenes without a valid pixel.")
    failed: int = Field(..., ge=0, description="Scenes whose latest attempt failed.")
    pending: int = Field(..., ge=0, description="Scenes not (or not for this input and package) mapped yet.")
    failures: dict[str, str] = Field(default_factory=dict, description="Reason of each failed scene, by id.")
    windows: int = Field(..., ge=0, description="Windows of the done scenes.")
    valid_pixels: int = Field(..., ge=0, description="Valid pixels of the done scenes.")
    positive_pixels: int = Field(..., ge=0, description="RTS pixels of the done scenes.")
    seconds: float = Field(..., ge=0, description="Wall time of the scenes' latest attempts.")
    seconds_all_attempts: float = Field(..., ge=0, description="Wall time of every attempt with this package.")
    threshold_source: str | None = Field(
        None,
        description="The package's deployment_config.yaml threshold_source: 'target_precision', or "
        "'max_f1_fallback' (the calibration target precision was not reachable; the max-F1 threshold maps). "
        "None: not given.",
    )


def summarize(
    scenes: Sequence[Scene],
    records: Sequence[SceneRecord],
    identity: MapIdentity,
    *,
    threshold_source: str | None = None,
) -> CampaignSummary:
    """The campaign's summary under ``identity``: each scene by its latest record when that record is of this
    identity and this scene content; records of other identities or content are kept in the log but count as
    pending here. ``threshold_source`` is the package's (a max-F1 fallback is recorded)."""
    package_sha256 = identity.package_sha256
    last = latest(records)
    counted = {s.scene_id: r for s in scenes if is_current(r := last.get(s.scene_id), s, identity) and r is not None}
    status = Counter(r.status for r in counted.values())
    done = [r for r in counted.values() if r.status == "done"]
    ids = {s.scene_id for s in scenes}
    return CampaignSummary(
        package_sha256=package_sha256,
        scenes=len(scenes),
        done=status["done"],
        skipped_full_nodata=status["skipped-full-nodata"],
        failed=status["failed"],
        pending=len(scenes) - len(counted),
        failures={k: r.reason or "" for k, r in sorted(counted.items()) if r.status == "failed"},
        windows=sum(r.windows for r in done),
        valid_pixels=sum(r.valid_pixels for r in done),
        positive_pixels=sum(r.positive_pixels for r in done),
        seconds=sum(r.seconds for r in counted.values()),
        seconds_all_attempts=sum(
            r.seconds for r in records if r.scene_id in ids and r.package_sha256 == package_sha256
        ),
        threshold_source=threshold_source,
    )
