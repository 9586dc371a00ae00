"""URI-addressed run directory: atomic artifact writes and the run's `manifest.json`.

A run directory is a local path or ``gs://bucket/prefix``. Stages always read and write local paths
(``RunDir.path``); for a gs:// root those lie in a local mirror (``$RTS_CACHE_DIR/gcs/<bucket>/<prefix>``),
``record`` uploads an artifact before adding it to the bucket's manifest, and ``require`` stages a verified
copy of an input into the mirror (see ``rtscore.storage.gcs``).
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rtscore.storage.errors import StorageError
from rtscore.storage.files import (
    EMPTY_TREE,
    atomic_write_text,
    fingerprint,
    publish_dir,
    tree_digests,
    tree_fingerprint,
)
from rtscore.storage.gcs import SHA_KEY, GcsStore, ManifestConflict, RetryPolicy, parse_gs_uri, transfer_workers
from rtscore.storage.layout import Entry
from rtscore.storage.manifest import MANIFEST_NAME, ArtifactEntry, Manifest
from rtscore.storage.verified import check as verified_check
from rtscore.storage.verified import save as verified_save
from rtscore.storage.verified import snapshot

CACHE_ENV = "RTS_CACHE_DIR"  # base of the local mirrors of gs:// run directories


class _ManifestCache:
    """The parsed bucket manifests this process has read, by (endpoint, bucket, object) with their
    generation: a manifest whose generation is unchanged is neither downloaded nor parsed again, and any
    rewrite of the object (a new generation) is read. Thread-safe; a forked child starts empty."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parsed: dict[tuple[object, ...], tuple[int, Manifest]] = {}

    def get(self, key: tuple[object, ...]) -> tuple[int, Manifest] | None:
        with self._lock:
            return self._parsed.get(key)

    def put(self, key: tuple[object, ...], generation: int, manifest: Manifest) -> None:
        with self._lock:
            self._parsed[key] = (generation, manifest)

    def reset(self) -> None:
        self._lock, self._parsed = threading.Lock(), {}


_manifests = _ManifestCache()
os.register_at_fork(after_in_child=_manifests.reset)


def forget_parsed_manifests() -> None:
    """Forget the bucket manifests this process parsed: the next read downloads them (benchmarks measure a
    new process's first read this way; correctness never needs it, a rewrite has a new generation)."""
    _manifests.reset()


def default_cache_dir() -> Path:
    """Base of the local mirrors of gs:// run directories: ``$RTS_CACHE_DIR``, else ``~/.cache/rts``."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache").expanduser().resolve() / "rts"


def _replace(src: Path, dst: Path) -> None:
    """Move a verified download (file or directory) into place, replacing whatever ``dst`` is."""
    if src.is_dir():
        if dst.is_file() or dst.is_symlink():
            dst.unlink()
        publish_dir(src, dst)
        return
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    src.replace(dst)


def absolute_location(location: str) -> str:
    """A local path made absolute (workers may run in another directory); a URI (gs://...) unchanged."""
    if "://" in location:
        return location
    return str(Path(location).expanduser().resolve())


class RunDir:
    """A run's directory (`<root>/<run_name>/`) and its manifest: a local path or ``gs://bucket/prefix``.

    For a gs:// run, ``uri`` is the gs:// URI, ``root`` a local working mirror under ``cache_dir`` (default
    :func:`default_cache_dir`) where stages read and write as they do locally, and the manifest lives in the
    bucket. ``retry`` overrides the backoff of GCS calls (default ``RetryPolicy.from_env()``). Picklable: the
    GCS client is created lazily and never pickled.
    """

    def __init__(
        self, uri: str | Path, *, cache_dir: str | Path | None = None, retry: RetryPolicy | None = None
    ) -> None:
        s = str(uri)
        self._gs: tuple[str, str] | None = None
        self._retry = retry
        self._store: GcsStore | None = None
        if s.startswith("gs://"):
            bucket, prefix = parse_gs_uri(s)
            self._gs = (bucket, prefix)
            base = Path(cache_dir).expanduser().resolve() if cache_dir is not None else default_cache_dir()
            self.root = base / "gcs" / bucket / prefix if prefix else base / "gcs" / bucket
        else:
            self.root = Path(s.removeprefix("file://")).expanduser().resolve()

    def __repr__(self) -> str:
        return f"RunDir({self.uri!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None  # a client (and its credentials) never travels in pickled state
        return state

    @property
    def remote(self) -> bool:
        """Whether the run lives in a bucket (gs://) rather than on a local path."""
        return self._gs is not None

    @property
    def uri(self) -> str:
        if self._gs is not None:
            bucket, prefix = self._gs
            return f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
        return str(self.root)

    def path(self, rel: str) -> Path:
        return self.root / rel

    def uri_of(self, rel: str) -> str:
        """The absolute URI of an artifact: ``gs://...`` for a gs:// run, else a ``file://`` URI."""
        return f"{self.uri}/{rel}" if self.remote else self.path(rel).as_uri()

    def at(self, entry: Entry, **values: object) -> Path:
        """The local path of a layout entry, e.g. ``run.at(RunLayout.BEST_WEIGHTS, seed=42)``."""
        return self.path(entry.at(**values))

    @property
    def manifest_path(self) -> Path:
        """The local manifest (for a gs:// run the manifest is the object ``<uri>/manifest.json``)."""
        return self.path(MANIFEST_NAME)

    @contextlib.contextmanager
    def _locked(self, name: str = ".manifest.lock") -> Iterator[None]:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        with (self.root / name).open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read_manifest(self) -> Manifest:
        if self.remote:
            return self._read_remote_manifest()[0]
        if not self.manifest_path.exists():
            return Manifest()
        try:
            return Manifest.model_validate_json(self.manifest_path.read_text())
        except ValueError as err:
            raise StorageError(f"manifest {self.manifest_path} is corrupt: {err}") from None

    def record(self, rel: str, stage: str, config_hash: str, *, code_hash: str = "") -> ArtifactEntry:
        """Fingerprint an artifact that is already in place and add it to the manifest (last).

        For a gs:// run the artifact is first uploaded (a directory as one object per file, in parallel),
        and the manifest entry is only written once every object is in the bucket.
        """
        p = self.path(rel)
        seen = snapshot(p)
        files = tree_digests(p) if p.is_dir() else None
        sha, size = tree_fingerprint(files) if files is not None else fingerprint(p)
        entry = ArtifactEntry(
            path=rel,
            uri=self.uri_of(rel),
            kind="dir" if files is not None else "file",
            sha256=sha,
            bytes=size,
            stage=stage,
            config_hash=config_hash,
            code_hash=code_hash,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        if self.remote:
            self._upload(rel, entry, files)

            def add(manifest: Manifest) -> bool:
                manifest.artifacts[rel] = entry
                return True

            self._update_manifest(add)  # last: only after every object is in the bucket
        else:
            with self._locked():
                manifest = self.read_manifest()
                manifest.artifacts[rel] = entry
                atomic_write_text(self.manifest_path, manifest.model_dump_json(indent=2) + "\n")
        verified_save(self.root, rel, entry.sha256, entry.bytes, entry.kind, seen)  # just hashed: no re-hash
        return entry

    def forget(self, rel: str) -> None:
        """Drop a record (before an artifact is rewritten, so no stale sha256 outlives it)."""
        if self.remote:
            self._update_manifest(lambda m: m.artifacts.pop(rel, None) is not None)
            return
        with self._locked():
            manifest = self.read_manifest()
            if manifest.artifacts.pop(rel, None) is not None:
                atomic_write_text(self.manifest_path, manifest.model_dump_json(indent=2) + "\n")

    def delete(self, rel: str) -> None:
        """Drop a record, then the artifact itself (a gs:// run: its objects in the bucket and the mirror's copy).

        The record goes first, so no manifest ever describes objects that are being deleted; a crash in between
        leaves an unrecorded object that nothing reads and a later ``record`` of the same path overwrites.
        """
        entry = self.entry(rel)
        self.forget(rel)
        if self.remote and entry is not None:
            if entry.kind == "file":
                self._gcs.delete([rel])
            else:
                self._gcs.delete([f"{rel}/{name}" for name in self._gcs.list_under(rel)])
        p = self.path(rel)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)

    def entry(self, rel: str) -> ArtifactEntry | None:
        return self.read_manifest().artifacts.get(rel)

    def has(self, rel: str) -> bool:
        """Whether ``rel`` is recorded in the manifest and present at the root (gs://: its objects exist)."""
        entry = self.entry(rel)
        if entry is None:
            return False
        if not self.remote:
            return self.path(rel).exists()
        if entry.kind == "file":
            return self._gcs.exists(rel)
        return (entry.sha256, entry.bytes) == EMPTY_TREE or self._gcs.any_under(rel)

    def require(self, rel: str) -> ArtifactEntry:
        """The manifest record of an input artifact, or a clear error naming it.

        For a gs:// run this also makes sure the local mirror holds a copy verified against the record
        (downloaded and checked if missing or different).
        """
        entry = self.entry(rel)
        if entry is None or (not self.remote and not self.path(rel).exists()):
            where = self.uri_of(rel) if self.remote else self.path(rel)
            raise StorageError(
                f"input artifact {where} is missing from run {self.uri if self.remote else self.root} "
                "(or from its manifest); run the stage that produces it first"
            )
        if self.remote:
            self._materialize(rel, entry)
        return entry

    def fetch(self, rel: str) -> ArtifactEntry | None:
        """The record of an input that may also exist unrecorded (written by hand or by an older version).

        For a gs:// run a recorded input is staged and verified as by :meth:`require`; a local run only
        reads the record. None if unrecorded: the caller's own check of ``path(rel)`` reports a missing file.
        """
        entry = self.entry(rel)
        if entry is not None and self.remote:
            self._materialize(rel, entry)
        return entry

    def verify(self, rel: str) -> ArtifactEntry:
        """Re-fingerprint an artifact and compare it with its manifest record."""
        entry = self.require(rel)
        if self.remote:
            return entry  # require verified the local copy against the record
        if not self._verified_copy(rel, entry):
            sha, size = fingerprint(self.path(rel))
            raise StorageError(
                f"artifact {self.path(rel)} does not match the manifest "
                f"(sha256 {sha[:12]} vs recorded {entry.sha256[:12]}, {size} vs {entry.bytes} bytes)"
            )
        return entry

    def _verified_copy(self, rel: str, entry: ArtifactEntry) -> bool:
        """Whether the local copy of ``rel`` matches ``entry``: hashed only when its verification record
        (``rtscore.storage.verified``) is missing or its size, times or inode changed since; a match is
        recorded so that the next call does not hash again."""
        if verified_check(self.root, rel, entry.sha256, entry.bytes, entry.kind):  # one stat walk, no read
            return True
        p = self.path(rel)
        seen = snapshot(p)
        if seen is None:
            return False
        if fingerprint(p) != (entry.sha256, entry.bytes):
            return False
        verified_save(self.root, rel, entry.sha256, entry.bytes, entry.kind, seen)
        return True

    # ----------------------------------------------------------------------------- gs:// runs
    @property
    def _gcs(self) -> GcsStore:
        if self._store is None:
            assert self._gs is not None, "a local run has no bucket"
            retry = self._retry if self._retry is not None else RetryPolicy.from_env()
            self._store = GcsStore(*self._gs, retry, workers=transfer_workers())
        return self._store

    def _read_remote_manifest(self) -> tuple[Manifest, int]:
        """The bucket's manifest and its generation (0: none yet); a copy the caller may change.

        One request (the object's generation) when this process already parsed that generation; the
        content is downloaded and parsed only when it changed (see :class:`_ManifestCache`).
        """

        store = self._gcs
        retry = store.retry
        key = (store.endpoint, store.bucket_name, store.name(MANIFEST_NAME))
        for attempt in range(retry.conflict_attempts):
            cached = _manifests.get(key)
            try:
                got = store.read_unless(MANIFEST_NAME, known=cached[0] if cached is not None else 0)
            except ManifestConflict:  # rewritten between stat and download
                time.sleep(retry.delay(attempt))
                continue
            if got is None:
                return Manifest(), 0
            data, generation = got
            if data is None:  # the generation this process parsed
                assert cached is not None
                return cached[1].model_copy(deep=True), generation
            try:
                manifest = Manifest.model_validate_json(data)
            except ValueError as err:
                raise StorageError(f"manifest {store.uri(MANIFEST_NAME)} is corrupt: {err}") from None
            _manifests.put(key, generation, manifest.model_copy(deep=True))
            return manifest, generation
        raise StorageError(f"manifest {store.uri(MANIFEST_NAME)} kept changing while being read")

    def _update_manifest(self, change: Callable[[Manifest], bool]) -> None:
        """Read-modify-write of the bucket's manifest, conditional on the generation read (0: create only).

        ``change`` edits the manifest in place and says whether anything changed. A 412 (another worker
        wrote in between) re-reads and re-applies the change.
        """

        retry = self._gcs.retry
        for attempt in range(retry.conflict_attempts):
            manifest, generation = self._read_remote_manifest()
            if not change(manifest):
                return
            data = (manifest.model_dump_json(indent=2) + "\n").encode()
            try:
                self._gcs.write(MANIFEST_NAME, data, if_generation_match=generation, content_type="application/json")
                return
            except ManifestConflict:
                time.sleep(retry.delay(attempt))
        raise StorageError(
            f"manifest {self._gcs.uri(MANIFEST_NAME)} kept changing under concurrent writers; "
            f"gave up after {retry.conflict_attempts} attempts"
        )

    def _upload(self, rel: str, entry: ArtifactEntry, files: list[tuple[str, str, int]] | None) -> None:
        """Put an artifact's objects in the bucket; objects already holding the same content are skipped."""

        old = self.entry(rel)
        if old is not None and (old.sha256, old.kind) != (entry.sha256, entry.kind):
            self.forget(rel)  # no record may describe objects while they are being replaced

        def same(blob: Any, sha: str, size: int) -> bool:
            return blob is not None and (blob.metadata or {}).get(SHA_KEY) == sha and blob.size == size

        def generation(blob: Any) -> int:  # the upload's precondition: the object as seen, 0 if there is none
            return int(blob.generation or 0) if blob is not None else 0

        p = self.path(rel)
        if files is None:
            blob = self._gcs.get(rel)
            if not same(blob, entry.sha256, entry.bytes):
                self._gcs.upload_file(p, rel, entry.sha256, generation=generation(blob))
            return
        existing = self._gcs.list_under(rel)
        todo = [
            (p / name, f"{rel}/{name}", sha, generation(existing.get(name)))
            for name, sha, size in files
            if not same(existing.get(name), sha, size)
        ]
        self._gcs.upload_many(todo)
        names = {name for name, _, _ in files}
        self._gcs.delete([f"{rel}/{name}" for name in existing if name not in names])  # left by an older version

    def _materialize(self, rel: str, entry: ArtifactEntry) -> None:
        """Make the local mirror hold a copy of ``rel`` that matches ``entry`` (download, verify, move in)."""
        if verified_check(self.root, rel, entry.sha256, entry.bytes, entry.kind):
            return  # verified and unchanged since: no lock needed to trust it (a replacement changes its stats)
        p = self.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        lock = f".locks/require-{hashlib.sha256(rel.encode()).hexdigest()[:16]}.lock"
        with self._locked(lock):
            if self._verified_copy(rel, entry):
                return
            staging = p.with_name(f".{p.name}.download-{uuid.uuid4().hex[:8]}")
            try:
                if entry.kind == "dir":
                    self._download_dir(rel, entry, staging)
                else:
                    self._download_file(rel, entry, staging)
                _replace(staging, p)
                verified_save(self.root, rel, entry.sha256, entry.bytes, entry.kind)  # verified in staging
            finally:
                if staging.is_dir():
                    shutil.rmtree(staging, ignore_errors=True)
                else:
                    staging.unlink(missing_ok=True)

    def _download_file(self, rel: str, entry: ArtifactEntry, dest: Path) -> None:
        blob = self._gcs.get(rel)
        if blob is None:
            raise StorageError(
                f"object {self._gcs.uri(rel)} is recorded in the manifest but missing from the bucket; "
                "re-run the stage that produces it"
            )
        self._gcs.download_file(blob, rel, dest)
        sha, size = fingerprint(dest)
        if (sha, size) != (entry.sha256, entry.bytes):
            raise StorageError(
                f"object {self._gcs.uri(rel)} does not match the manifest (sha256 {sha[:12]} vs recorded "
                f"{entry.sha256[:12]}, {size} vs {entry.bytes} bytes); re-run the stage that produces it"
            )

    def _download_dir(self, rel: str, entry: ArtifactEntry, dest: Path) -> None:

        blobs = self._gcs.list_under(rel)
        if not blobs and (entry.sha256, entry.bytes) == EMPTY_TREE:  # an empty directory has no objects
            dest.mkdir(parents=True)
            return
        if not blobs:
            raise StorageError(
                f"no objects under {self._gcs.uri(rel)}/ although the manifest records it; "
                "re-run the stage that produces it"
            )
        dest.mkdir(parents=True)
        self._gcs.download_many([(b, f"{rel}/{name}", dest / name) for name, b in blobs.items()])
        files = tree_digests(dest)
        sha, size = tree_fingerprint(files)
        if (sha, size) == (entry.sha256, entry.bytes):
            return
        bad = [name for name, digest, _ in files if (blobs[name].metadata or {}).get(SHA_KEY) != digest]
        which = ", ".join(self._gcs.uri(f"{rel}/{n}") for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        detail = f"objects not as uploaded: {which}" if bad else f"{len(files)} objects, not the recorded set"
        raise StorageError(
            f"{self._gcs.uri(rel)} does not match the manifest (sha256 {sha[:12]} vs recorded "
            f"{entry.sha256[:12]}, {size} vs {entry.bytes} bytes; {detail}); re-run the stage that produces it"
        )
