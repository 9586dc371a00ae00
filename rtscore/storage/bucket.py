"""The bucket side of a gs:// run directory: its ``manifest.json`` object and its artifacts' objects.

The manifest is read through this process's parsed copies (downloaded and parsed again only when its generation
changed) and rewritten only on the generation read, so concurrent writers never lose each other's records. An
artifact's objects carry their sha256 in their metadata: one already holding the content is neither uploaded nor
copied again, another run's are copied server-side when they add up to the record, and a download is checked
against the record. :class:`~rtscore.storage.rundir.RunDir` calls these with its
:class:`~rtscore.storage.gcs.GcsStore`; the local mirror, its locks and verification records stay its own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from rtscore.storage.errors import StorageError
from rtscore.storage.files import EMPTY_TREE, fingerprint, tree_digests, tree_fingerprint
from rtscore.storage.gcs import SHA_KEY, GcsStore, ManifestConflict
from rtscore.storage.manifest import MANIFEST_NAME, ArtifactEntry, Manifest, manifest_json


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


def read_bucket_manifest(store: GcsStore) -> tuple[Manifest, int]:
    """The bucket's manifest and its generation (0: none yet); a copy the caller may change.

    One request (the object's generation) when this process already parsed that generation; the
    content is downloaded and parsed only when it changed (see :class:`_ManifestCache`).
    """

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


def update_bucket_manifest(store: GcsStore, change: Callable[[Manifest], bool]) -> None:
    """Read-modify-write of the bucket's manifest, conditional on the generation read (0: create only).

    ``change`` edits the manifest in place and says whether anything changed. A 412 (another worker
    wrote in between) re-reads and re-applies the change.
    """

    retry = store.retry
    for attempt in range(retry.conflict_attempts):
        manifest, generation = read_bucket_manifest(store)
        if not change(manifest):
            return
        data = manifest_json(manifest).encode()
        try:
            store.write(MANIFEST_NAME, data, if_generation_match=generation, content_type="application/json")
            return
        except ManifestConflict:
            time.sleep(retry.delay(attempt))
    raise StorageError(
        f"manifest {store.uri(MANIFEST_NAME)} kept changing under concurrent writers; "
        f"gave up after {retry.conflict_attempts} attempts"
    )


def _holds(blob: Any, sha: str, size: int) -> bool:
    """Whether an object (None: there is none) holds the content of that sha256 and size, by its metadata."""
    return blob is not None and (blob.metadata or {}).get(SHA_KEY) == sha and blob.size == size


def _generation(blob: Any) -> int:
    """An object's generation, a write's precondition: the object as seen, 0 if there is none."""
    return int(blob.generation or 0) if blob is not None else 0


def put_objects(
    store: GcsStore, rel: str, local: Path, entry: ArtifactEntry, files: list[tuple[str, str, int]] | None
) -> None:
    """Put artifact ``rel`` (``local``: its copy, ``files``: a directory's (name, sha256, size) or None for a
    file) in the bucket; objects already holding the same content are skipped, and a directory's objects that
    are not among its files (left by an older version) deleted."""
    if files is None:
        blob = store.get(rel)
        if not _holds(blob, entry.sha256, entry.bytes):
            store.upload_file(local, rel, entry.sha256, generation=_generation(blob))
        return
    existing = store.list_under(rel)
    todo = [
        (local / name, f"{rel}/{name}", sha, _generation(existing.get(name)))
        for name, sha, size in files
        if not _holds(existing.get(name), sha, size)
    ]
    store.upload_many(todo)
    names = {name for name, _, _ in files}
    store.delete([f"{rel}/{name}" for name in existing if name not in names])  # left by an older version


def copy_objects(store: GcsStore, source: GcsStore, rel: str, entry: ArtifactEntry) -> bool:
    """Copy the source's objects of ``rel`` server-side; False (nothing copied) when their sha256 metadata
    does not add up to the record (objects written by another tool, or changed since)."""
    if entry.kind == "file":
        blob = source.get(rel)
        if not _holds(blob, entry.sha256, entry.bytes):
            return False
        have = store.get(rel)
        if not _holds(have, entry.sha256, entry.bytes):
            store.copy_object(blob, rel, entry.sha256, generation=_generation(have))
        return True
    blobs = source.list_under(rel)
    listed = [
        (name, (b.metadata or {}).get(SHA_KEY) or "", int(b.size or 0))
        for name, b in sorted(blobs.items(), key=lambda nb: PurePosixPath(nb[0]))  # tree_digests' order
    ]
    if tree_fingerprint(listed) != (entry.sha256, entry.bytes):
        return False
    existing = store.list_under(rel)
    store.copy_many(
        [
            (blobs[name], f"{rel}/{name}", sha, _generation(existing.get(name)))
            for name, sha, size in listed
            if not _holds(existing.get(name), sha, size)
        ]
    )
    store.delete([f"{rel}/{name}" for name in existing if name not in blobs])  # left by an older version
    return True


def fetch_file(store: GcsStore, rel: str, entry: ArtifactEntry, dest: Path) -> None:
    """Download file artifact ``rel`` to ``dest`` and check it against its record."""
    blob = store.get(rel)
    if blob is None:
        raise StorageError(
            f"object {store.uri(rel)} is recorded in the manifest but missing from the bucket; "
            "re-run the stage that produces it"
        )
    store.download_file(blob, rel, dest)
    sha, size = fingerprint(dest)
    if (sha, size) != (entry.sha256, entry.bytes):
        raise StorageError(
            f"object {store.uri(rel)} does not match the manifest (sha256 {sha[:12]} vs recorded "
            f"{entry.sha256[:12]}, {size} vs {entry.bytes} bytes); re-run the stage that produces it"
        )


def fetch_dir(store: GcsStore, rel: str, entry: ArtifactEntry, dest: Path) -> None:
    """Download directory artifact ``rel``'s objects under ``dest`` and check the tree against its record,
    naming the objects that are not as uploaded."""

    blobs = store.list_under(rel)
    if not blobs and (entry.sha256, entry.bytes) == EMPTY_TREE:  # an empty directory has no objects
        dest.mkdir(parents=True)
        return
    if not blobs:
        raise StorageError(
            f"no objects under {store.uri(rel)}/ although the manifest records it; re-run the stage that produces it"
        )
    dest.mkdir(parents=True)
    store.download_many([(b, f"{rel}/{name}", dest / name) for name, b in blobs.items()])
    files = tree_digests(dest)
    sha, size = tree_fingerprint(files)
    if (sha, size) == (entry.sha256, entry.bytes):
        return
    bad = [name for name, digest, _ in files if (blobs[name].metadata or {}).get(SHA_KEY) != digest]
    which = ", ".join(store.uri(f"{rel}/{n}") for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
    detail = f"objects not as uploaded: {which}" if bad else f"{len(files)} objects, not the recorded set"
    raise StorageError(
        f"{store.uri(rel)} does not match the manifest (sha256 {sha[:12]} vs recorded "
        f"{entry.sha256[:12]}, {size} vs {entry.bytes} bytes; {detail}); re-run the stage that produces it"
    )
