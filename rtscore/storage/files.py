"""Content fingerprints and atomic writes: files and directory trees, published whole or not at all."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from rtscore.storage.errors import StorageError


@contextlib.contextmanager
def os_errors(action: str, path: Path) -> Iterator[None]:
    """An OSError (permission denied, read-only file system, disk full, a file where a directory should be)
    raised inside becomes a StorageError naming ``path`` and what was being done."""
    try:
        yield
    except OSError as err:
        reason = err.strerror or type(err).__name__
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(path) else ""
        raise StorageError(f"cannot {action} {path}: {reason}{where}") from err


def check_writable(path: str | Path, *, directory: bool = False) -> None:
    """Refuse early a location that cannot be written: the nearest existing one of ``path`` and its parents
    must be a directory this process may write into (``path`` itself when it is an existing directory). With
    ``directory`` (a run directory, an output directory), ``path`` itself must not be an existing file.

    Raises:
        StorageError: naming ``path`` and the existing ancestor that blocks it.
    """
    target = Path(path).expanduser().absolute()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_file():
        if probe != target:
            raise StorageError(f"cannot write {target}: {probe} is a file, not a directory")
        if directory:
            raise StorageError(f"cannot write into {target}: it is a file, not a directory")
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise StorageError(f"cannot write {target}: {probe} is not writable (permission denied or read-only)")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with os_errors("read", path), path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def tree_digests(path: Path) -> list[tuple[str, str, int]]:
    """(relative posix path, sha256, bytes) of every file under ``path``, in fingerprint order."""
    return [
        (f.relative_to(path).as_posix(), sha256_file(f), f.stat().st_size)
        for f in sorted(p for p in path.rglob("*") if p.is_file())
    ]


def tree_fingerprint(files: list[tuple[str, str, int]]) -> tuple[str, int]:
    """The Merkle-style (sha256, bytes) of a directory from its :func:`tree_digests`."""
    h = hashlib.sha256()
    total = 0
    for name, sha, size in files:
        total += size
        h.update(f"{name}\t{sha}\t{size}\n".encode())
    return h.hexdigest(), total


EMPTY_TREE = tree_fingerprint([])


def fingerprint(path: Path) -> tuple[str, int]:
    """(sha256, bytes) of a file, or a Merkle-style digest of a directory tree."""
    if path.is_file():
        return sha256_file(path), path.stat().st_size
    if not path.is_dir():
        raise StorageError(f"artifact not found: {path}")
    return tree_fingerprint(tree_digests(path))


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so that readers see the old or the new content, never a partial one."""
    atomic_write_lines(path, [text])


def atomic_write_lines(path: Path, lines: Iterable[str]) -> None:
    """As :func:`atomic_write_text`, the text given in pieces (each line with its newline) and written as they
    come: a large file is never held whole in memory."""
    with atomic_writer(path, "w") as f:
        f.writelines(lines)


@contextlib.contextmanager
def atomic_writer(path: Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """A file opened under a temporary name next to ``path`` (``mode`` ``"w"`` or ``"wb"``), flushed, synced and
    renamed to ``path`` when the ``with`` ends without an error; removed otherwise: readers see the old or the new
    content, never a partial one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with os_errors("write", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with tmp.open(mode) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)


def atomic_write_json(path: Path, data: object) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def publish_dir(staging: Path, final: Path) -> None:
    """Move a completed staging directory into place, replacing any previous version."""
    trash = None
    with os_errors("publish", final):
        final.parent.mkdir(parents=True, exist_ok=True)
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
    with os_errors("write", final):
        staging.mkdir(parents=True)
    try:
        yield staging
        publish_dir(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
