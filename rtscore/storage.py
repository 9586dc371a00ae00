"""URI-addressed run directory: atomic artifact writes and the run's `manifest.json`."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

MANIFEST_NAME = "manifest.json"


class StorageError(RuntimeError):
    """An artifact is missing, unreadable or does not match its manifest record."""


class ArtifactEntry(BaseModel):
    """One artifact of a run, as recorded in the manifest."""

    path: str = Field(..., description="Path relative to the run directory.")
    uri: str = Field(..., description="Absolute URI of the artifact.")
    kind: Literal["file", "dir"] = Field(..., description="A single file or a directory tree (e.g. a Zarr store).")
    sha256: str = Field(..., description="sha256 of the file, or of the sorted (path, sha256, size) list of a tree.")
    bytes: int = Field(..., ge=0, description="Total size in bytes.")
    stage: str = Field(..., description="Pipeline stage that produced it.")
    config_hash: str = Field(..., description="Hash of the resolved config the stage ran with.")
    created: str = Field(..., description="UTC time the record was written.")


class Manifest(BaseModel):
    """Every artifact of a run."""

    schema_version: int = 1
    artifacts: dict[str, ArtifactEntry] = Field(default_factory=dict)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fingerprint(path: Path) -> tuple[str, int]:
    """(sha256, bytes) of a file, or a Merkle-style digest of a directory tree."""
    if path.is_file():
        return sha256_file(path), path.stat().st_size
    if not path.is_dir():
        raise StorageError(f"artifact not found: {path}")
    h = hashlib.sha256()
    total = 0
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        size = f.stat().st_size
        total += size
        h.update(f"{f.relative_to(path).as_posix()}\t{sha256_file(f)}\t{size}\n".encode())
    return h.hexdigest(), total


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so that readers see the old or the new content, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_json(path: Path, data: object) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def publish_dir(staging: Path, final: Path) -> None:
    """Move a completed staging directory into place, replacing any previous version."""
    final.parent.mkdir(parents=True, exist_ok=True)
    trash = None
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
        final.rename(trash)
    staging.rename(final)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling directory that is published as ``final`` only on success."""
    staging = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    staging.mkdir(parents=True)
    try:
        yield staging
        publish_dir(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


class RunDir:
    """A run's directory (`<root>/<run_name>/`) and its manifest; local paths for now."""

    def __init__(self, uri: str | Path) -> None:
        s = str(uri)
        if s.startswith("gs://"):
            raise StorageError(f"gs:// run directories are not supported yet: {s}")
        self.root = Path(s.removeprefix("file://")).expanduser().resolve()

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    @property
    def uri(self) -> str:
        return str(self.root)

    def path(self, rel: str) -> Path:
        return self.root / rel

    # Layout of ARCHITECTURE.md.
    def dataset(self, split: str) -> Path:
        return self.path(f"datasets/{split}.zarr")

    @property
    def normalization_stats(self) -> Path:
        return self.path("normalization_stats.json")

    @property
    def validation_dir(self) -> Path:
        return self.path("validation")

    @property
    def manifest_path(self) -> Path:
        return self.path(MANIFEST_NAME)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / ".manifest.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read_manifest(self) -> Manifest:
        if not self.manifest_path.exists():
            return Manifest()
        try:
            return Manifest.model_validate_json(self.manifest_path.read_text())
        except ValueError as err:
            raise StorageError(f"manifest {self.manifest_path} is corrupt: {err}") from None

    def record(self, rel: str, stage: str, config_hash: str) -> ArtifactEntry:
        """Fingerprint an artifact that is already in place and add it to the manifest (last)."""
        p = self.path(rel)
        sha, size = fingerprint(p)
        entry = ArtifactEntry(
            path=rel,
            uri=p.as_uri(),
            kind="dir" if p.is_dir() else "file",
            sha256=sha,
            bytes=size,
            stage=stage,
            config_hash=config_hash,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        with self._locked():
            manifest = self.read_manifest()
            manifest.artifacts[rel] = entry
            atomic_write_text(self.manifest_path, manifest.model_dump_json(indent=2) + "\n")
        return entry

    def forget(self, rel: str) -> None:
        """Drop a record (before an artifact is rewritten, so no stale sha256 outlives it)."""
        with self._locked():
            manifest = self.read_manifest()
            if manifest.artifacts.pop(rel, None) is not None:
                atomic_write_text(self.manifest_path, manifest.model_dump_json(indent=2) + "\n")

    def entry(self, rel: str) -> ArtifactEntry | None:
        return self.read_manifest().artifacts.get(rel)

    def require(self, rel: str) -> ArtifactEntry:
        """The manifest record of an input artifact, or a clear error naming it."""
        entry = self.entry(rel)
        if entry is None or not self.path(rel).exists():
            raise StorageError(
                f"input artifact {self.path(rel)} is missing from run {self.root} (or from its manifest); "
                "run the stage that produces it first"
            )
        return entry

    def verify(self, rel: str) -> ArtifactEntry:
        """Re-fingerprint an artifact and compare it with its manifest record."""
        entry = self.require(rel)
        sha, size = fingerprint(self.path(rel))
        if sha != entry.sha256 or size != entry.bytes:
            raise StorageError(
                f"artifact {self.path(rel)} does not match the manifest "
                f"(sha256 {sha[:12]} vs recorded {entry.sha256[:12]}, {size} vs {entry.bytes} bytes)"
            )
        return entry
