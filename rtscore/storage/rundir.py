"""URI-addressed run directory: atomic artifact writes and the run's `manifest.json`.

A run directory is a local path or ``gs://bucket/prefix``. Stages always read and write local paths
(``RunDir.path``); for a gs:// root those lie in a local mirror (``$RTS_CACHE_DIR/gcs/<bucket>/<prefix>``),
``record`` uploads an artifact before adding it to the bucket's manifest, and ``require`` stages a verified
copy of an input into the mirror (see ``rtscore.storage.gcs``). The bucket's manifest and objects are handled by
:mod:`rtscore.storage.bucket`, the hard-linked copies ``adopt`` makes by :mod:`rtscore.storage.links`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from rtscore.storage.bucket import (
    copy_objects,
    fetch_dir,
    fetch_file,
    forget_parsed_manifests,
    put_objects,
    read_bucket_manifest,
    update_bucket_manifest,
)
from rtscore.storage.errors import StorageError
from rtscore.storage.files import EMPTY_TREE, atomic_write_text, fingerprint, tree_digests, tree_fingerprint
from rtscore.storage.gcs import GcsStore, RetryPolicy, parse_gs_uri, transfer_workers
from rtscore.storage.layout import VERIFIED_DIR, Entry
from rtscore.storage.links import file_stats, publish_links, replace_path, same_files_as_verified
from rtscore.storage.manifest import MANIFEST_NAME, ArtifactEntry, Manifest, manifest_json
from rtscore.storage.verified import Snapshot, snapshot
from rtscore.storage.verified import check as verified_check
from rtscore.storage.verified import save as verified_save

__all__ = ["CACHE_ENV", "RunDir", "absolute_location", "default_cache_dir", "forget_parsed_manifests"]

CACHE_ENV = "RTS_CACHE_DIR"  # base of the local mirrors of gs:// run directories


def default_cache_dir() -> Path:
    """Base of the local mirrors of gs:// run directories: ``$RTS_CACHE_DIR``, else ``~/.cache/rts``."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache").expanduser().resolve() / "rts"


def absolute_location(location: str) -> str:
    """A local path made absolute (workers may run in another directory); a URI (gs://...) unchanged."""
    if "://" in location:
        return location
    return str(Path(location).expanduser().resolve())


# What an adopted record keeps from its source's record (uri, created and adopted_from are its own).
_IDENTITY = ("path", "kind", "sha256", "bytes", "stage", "config_hash", "code_hash")


def _same_record(a: ArtifactEntry, b: ArtifactEntry) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in _IDENTITY)


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
        self._cache_base: Path | None = None  # a gs:// run's mirror base (where its sources' mirrors are too)
        if s.startswith("gs://"):
            bucket, prefix = parse_gs_uri(s)
            self._gs = (bucket, prefix)
            base = Path(cache_dir).expanduser().resolve() if cache_dir is not None else default_cache_dir()
            self._cache_base = base
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
            return read_bucket_manifest(self._gcs)[0]
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
        self._write_record(entry)  # last: only after every object is in the bucket
        verified_save(self.root, rel, entry.sha256, entry.bytes, entry.kind, seen)  # just hashed: no re-hash
        return entry

    def _write_record(self, entry: ArtifactEntry) -> None:
        """Add (or replace) ``entry``'s record in the manifest: the bucket's for a gs:// run."""
        if self.remote:

            def add(manifest: Manifest) -> bool:
                manifest.artifacts[entry.path] = entry
                return True

            update_bucket_manifest(self._gcs, add)
            return
        with self._locked():
            manifest = self.read_manifest()
            manifest.artifacts[entry.path] = entry
            atomic_write_text(self.manifest_path, manifest_json(manifest))

    def adopt(self, rel: str, source: RunDir) -> ArtifactEntry:
        """Make artifact ``rel`` of run ``source``, as its manifest records it, an artifact of this run too.

        How a sweep's variants share the stage runs whose identity they share (the data stages): one variant's
        run directory computes them, the others adopt its recorded outputs. The record written here is the
        source's (sha256, bytes, kind, stage, config_hash, code_hash) with this run's ``uri``, the time of the
        adoption as ``created`` and the source's URI of ``rel`` as ``adopted_from``; a stage of this run then
        finds its inputs (and ``recorded`` its results) as if it had produced them.

        - The source's copy is verified against its record first (``verify``; a gs:// source: ``require``
          stages a verified copy in its mirror); a source without that record is an error naming both.
        - The local copy (this run's directory, or its mirror for a gs:// run) is made of hard links to the
          source's verified files, built in a staged sibling and published whole (a file: linked to a
          temporary name, then renamed); a copy per file where a link cannot be made (another file system,
          links refused). Nothing is hashed: the links are checked to be the verified files (name, size,
          mtime and inode as when the source was verified) and this copy's verification record is written
          from the source's record, so neither this call nor a later ``verify`` reads a multi-GB store (nor
          one after another variant's links moved the shared files' change times: :meth:`_linked_to_verified`).
          Hard links are safe because every writer of this project publishes a new file atomically (staged,
          then renamed over the old name) and never rewrites a published file in place: a later write to
          either run replaces its own name and leaves the other's files as they were.
        - A gs:// run: the objects are in its bucket before its manifest records them, as ``record`` does:
          copied server-side from a gs:// source when the source's objects carry the recorded content
          (their sha256 metadata adds up to the record), else uploaded from the verified local copy (hashed
          once for the objects' metadata and checked against the record).
        - Idempotent: when this run already records ``rel`` as the source does and its copy is intact
          (local: unchanged since verified; gs://: its objects exist), nothing is done and that record is
          returned. Any other record of ``rel`` is dropped first (as a stage does before it rewrites an
          output), so a record never describes files being replaced; the new record is written last, so a
          kill at any moment leaves either no record or a correct one.

        Raises:
            StorageError: ``source`` is this run, ``rel`` is not a path inside the run, the source does not
                record ``rel``, or its copy does not match its record.
        """
        entry = self._source_entry(rel, source)
        existing = self.entry(rel)
        if existing is not None and _same_record(existing, entry) and self._intact(rel, existing):
            return existing
        if existing is not None:
            self.forget(rel)
        entry, seen = self._link_verified(rel, source)
        adopted = entry.model_copy(
            update={
                "uri": self.uri_of(rel),
                "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "adopted_from": source.uri_of(rel),
            }
        )
        if self.remote:
            self._put_adopted(rel, adopted, source)
        self._write_record(adopted)  # last: only once the files (and the bucket's objects) are in place
        if seen is not None:  # the local copy is the source's verified content: no later verify hashes it
            verified_save(self.root, rel, adopted.sha256, adopted.bytes, adopted.kind, seen)
        return adopted

    def _source_entry(self, rel: str, source: RunDir) -> ArtifactEntry:
        """What :meth:`adopt` adopts: the source's record of ``rel``, once ``rel`` is an artifact path another run
        may adopt (:meth:`_check_adoptable`); a source that never produced ``rel`` is refused before anything of
        this run is touched.

        Raises:
            StorageError: as :meth:`_check_adoptable`, or the source records no artifact ``rel``.
        """
        self._check_adoptable(rel, source)
        entry = source.entry(rel)
        if entry is None:
            raise StorageError(
                f"cannot adopt {rel} from run {source.uri}: its manifest records no artifact {rel}; "
                "run the stage that produces it in that run first"
            )
        return entry

    def _check_adoptable(self, rel: str, source: RunDir) -> None:
        if source.uri == self.uri:
            raise StorageError(f"cannot adopt {rel} from run {source.uri} into itself; name another run directory")
        parts = PurePosixPath(rel).parts
        if (
            not rel
            or rel.startswith("/")
            or any(p in ("", ".", "..") for p in rel.split("/"))
            or rel == MANIFEST_NAME
            or parts[0] in (VERIFIED_DIR, ".locks")
        ):
            raise StorageError(
                f"cannot adopt {rel!r} from run {source.uri}: not the path of an artifact inside the run "
                "directory (a relative path such as datasets/train.zarr, without '.' or '..')"
            )

    def _intact(self, rel: str, entry: ArtifactEntry) -> bool:
        """Whether this run's copy of a recorded artifact is in place: a local run's unchanged since it was
        verified (one stat walk), a gs:// run's objects in the bucket."""
        if self.remote:
            return self.has(rel)
        return verified_check(self.root, rel, entry.sha256, entry.bytes, entry.kind) or self._linked_to_verified(
            rel, entry
        )

    def _linked_to_verified(self, rel: str, entry: ArtifactEntry) -> bool:
        """Whether an adopted copy still is hard links to its source's verified files, so it need not be hashed
        (its verification record is written again).

        Every link to a file changes the file's change time, in every run directory holding a link to it: a
        later adoption of the same artifact by another variant makes this copy's verification record stale
        although its content cannot have changed. Its files are then compared with the source's (``adopted_from``;
        a gs:// source's mirror under the same cache base): the same names, sizes, mtimes and inodes as a copy
        that its own verification record (which every adoption renews) says is unchanged since it was hashed
        are the same files, hence the same content. Anything else (a copy, a replaced or edited file, a source
        gone or itself unverified) is False: the caller hashes as before.
        """
        origin = entry.adopted_from
        suffix = f"/{rel}"
        if origin is None or not origin.endswith(suffix):
            return False
        base = origin.removesuffix(suffix)
        if base.startswith("file://"):
            src_root = Path(unquote(urlsplit(base).path))  # the inverse of Path.as_uri
        elif base.startswith("gs://"):
            try:
                bucket, prefix = parse_gs_uri(base)
            except StorageError:
                return False
            cache = self._cache_base if self._cache_base is not None else default_cache_dir()
            src_root = cache / "gcs" / bucket / prefix if prefix else cache / "gcs" / bucket
        else:
            return False
        return same_files_as_verified(self.root, src_root, rel, entry)

    def _link_verified(self, rel: str, source: RunDir) -> tuple[ArtifactEntry, Snapshot | None]:
        """Publish at ``path(rel)`` hard links to (or copies of) the source's verified local copy of ``rel``.

        Returns the source's record and the snapshot of the published copy (taken before any hash). The copy is
        known to be the verified content when the links are the verified files (names, sizes, mtimes, inodes as
        when the source was verified) and a copied file has its source's size and mtime; otherwise (a source
        whose verification record cannot be kept, e.g. read-only, or that changed meanwhile) it is hashed.
        """
        src, dst = source.path(rel), self.path(rel)
        before: dict[str, tuple[int, int, int]] | None = None
        trusted = False
        for _ in range(2):  # a second round only when the source changed (or was linked) while looked at
            entry = source.require(rel) if source.remote else source.verify(rel)
            before = file_stats(src)
            if verified_check(source.root, rel, entry.sha256, entry.bytes, entry.kind):
                trusted = True  # unchanged since before was taken: a change would have moved a ctime
                break
        assert before is not None  # verify found it
        linked = publish_links(src, dst, entry.kind, before)
        seen = snapshot(dst)
        after = file_stats(dst)

        def key(stats: dict[str, tuple[int, int, int]] | None) -> dict[str, tuple[int, ...]]:
            return {n: (v if n in linked else v[:2]) for n, v in (stats or {}).items()}

        if trusted and key(after) == key(before) and key(file_stats(src)) == key(before):
            seen_src = snapshot(src)  # the links moved the source's change times: record it again, no re-hash
            if file_stats(src) == before:
                verified_save(source.root, rel, entry.sha256, entry.bytes, entry.kind, seen_src)
            return entry, seen
        if fingerprint(dst) != (entry.sha256, entry.bytes):
            raise StorageError(
                f"cannot adopt {rel} from run {source.uri}: its files changed while they were being adopted; "
                "let the stage writing them finish and adopt again"
            )
        return entry, seen

    def _put_adopted(self, rel: str, entry: ArtifactEntry, source: RunDir) -> None:
        """Put an adopted artifact's objects in this run's bucket: copied server-side from a gs:// source in
        the same storage when its objects carry the recorded content, else uploaded from the mirror's copy."""
        if (
            source.remote
            and source._gcs.endpoint == self._gcs.endpoint
            and copy_objects(self._gcs, source._gcs, rel, entry)
        ):
            return
        p = self.path(rel)
        files = tree_digests(p) if entry.kind == "dir" else None
        sha, size = tree_fingerprint(files) if files is not None else fingerprint(p)
        if (sha, size) != (entry.sha256, entry.bytes):
            raise StorageError(
                f"cannot adopt {rel} from run {source.uri}: the local copy {p} does not match the record "
                f"(sha256 {sha[:12]} vs recorded {entry.sha256[:12]}); adopt again"
            )
        self._upload(rel, entry, files)

    def forget(self, rel: str) -> None:
        """Drop a record (before an artifact is rewritten, so no stale sha256 outlives it)."""
        if self.remote:
            update_bucket_manifest(self._gcs, lambda m: m.artifacts.pop(rel, None) is not None)
            return
        with self._locked():
            manifest = self.read_manifest()
            if manifest.artifacts.pop(rel, None) is not None:
                atomic_write_text(self.manifest_path, manifest_json(manifest))

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
        if self._linked_to_verified(rel, entry):  # an adopted copy whose links another adoption touched
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

    def _upload(self, rel: str, entry: ArtifactEntry, files: list[tuple[str, str, int]] | None) -> None:
        """Put an artifact's objects in the bucket (:func:`~rtscore.storage.bucket.put_objects`), once no record
        describes objects about to be replaced."""
        old = self.entry(rel)
        if old is not None and (old.sha256, old.kind) != (entry.sha256, entry.kind):
            self.forget(rel)  # no record may describe objects while they are being replaced
        put_objects(self._gcs, rel, self.path(rel), entry, files)

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
                    fetch_dir(self._gcs, rel, entry, staging)
                else:
                    fetch_file(self._gcs, rel, entry, staging)
                replace_path(staging, p)
                verified_save(self.root, rel, entry.sha256, entry.bytes, entry.kind)  # verified in staging
            finally:
                if staging.is_dir():
                    shutil.rmtree(staging, ignore_errors=True)
                else:
                    staging.unlink(missing_ok=True)
