"""Verification records: an input is hashed once per content, not once per use.

After an artifact's local copy has been hashed and found to match its manifest record, a small JSON record
(``<root>/.verified/<key>.json``, see :data:`rtscore.storage.layout.VERIFIED_DIR`) keeps the manifest's
sha256, bytes and kind together with a digest of the copy's file metadata: for every file its relative
name, size, ``st_mtime_ns``, ``st_ctime_ns`` and inode. A later check whose metadata digest and manifest
fields equal the record's trusts the copy without reading it; any difference (or a missing or unreadable
record) means the caller hashes again.

Why the change time: ``os.utime`` can set a file's mtime back, but no user-level call sets its ctime, and
every write, truncate, ``utime``, rename-over or ``chmod`` moves it. So an edit that keeps the size and
restores the mtime is still seen. Two windows remain, both documented in docs/cloud.md: a write inside the
same clock tick as the verification itself (a concurrent writer of an input while it is being verified;
:func:`save` waits out the tick of the newest change before it returns so later writes cannot share it),
and corruption below the file system (media bit rot, which changes no metadata).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from pathlib import Path

from rtscore.storage.errors import StorageError
from rtscore.storage.files import atomic_write_text
from rtscore.storage.layout import VERIFIED_DIR

RECORD_VERSION = 1
# Longer than one tick of the kernel's coarse clock that stamps mtime/ctime (1-10 ms), with margin.
RACY_NS = 20_000_000


class Snapshot:
    """The metadata digest of a file or a directory tree (every regular file under it, in name order)."""

    __slots__ = ("digest", "files", "newest_ns")

    def __init__(self, digest: str, files: int, newest_ns: int) -> None:
        self.digest, self.files, self.newest_ns = digest, files, newest_ns

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Snapshot) and (self.digest, self.files) == (other.digest, other.files)

    def __hash__(self) -> int:
        return hash((self.digest, self.files))


def snapshot(path: Path) -> Snapshot | None:
    """The metadata digest of ``path`` (None if it is neither a file nor a directory)."""
    try:
        top = path.stat()
    except FileNotFoundError:
        return None
    if stat.S_ISREG(top.st_mode):
        stats = [("", top)]
    elif stat.S_ISDIR(top.st_mode):
        stats = []
        _walk(str(path), "", stats)
        stats.sort(key=lambda x: x[0])
    else:
        return None
    h = hashlib.sha256()
    newest = 0
    for name, st in stats:
        h.update(f"{name}\t{st.st_size}\t{st.st_mtime_ns}\t{st.st_ctime_ns}\t{st.st_ino}\n".encode())
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    return Snapshot(h.hexdigest(), len(stats), newest)


def _walk(top: str, prefix: str, out: list[tuple[str, os.stat_result]]) -> None:
    """Every regular file under ``top`` (symlinks followed, as the content fingerprint does) and its stat.

    One ``os.scandir`` pass per directory and one ``stat`` per file: a directory is recognised from the
    entry's type (no system call unless it is a symlink), and only files are stat-ed.
    """
    with os.scandir(top) as it:
        for e in it:
            if e.is_dir():
                _walk(e.path, f"{prefix}{e.name}/", out)
                continue
            try:
                st = e.stat()
            except FileNotFoundError:  # a dangling link: not a file of the artifact (nor of its fingerprint)
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((f"{prefix}{e.name}", st))


def record_path(root: Path, rel: str) -> Path:
    """Where the verification record of artifact ``rel`` of the run at ``root`` lives."""
    return root / VERIFIED_DIR / f"{hashlib.sha256(rel.encode()).hexdigest()[:24]}.json"


def _expected(rel: str, sha256: str, size: int, kind: str, snap: Snapshot) -> dict[str, object]:
    return {
        "version": RECORD_VERSION,
        "path": rel,
        "kind": kind,
        "sha256": sha256,
        "bytes": size,
        "files": snap.files,
        "stat_digest": snap.digest,
    }


def check(root: Path, rel: str, sha256: str, size: int, kind: str) -> bool:
    """Whether the copy at ``root/rel`` was verified against (sha256, size, kind) and has not changed since."""
    try:
        recorded = json.loads(record_path(root, rel).read_text())
    except (OSError, ValueError):
        return False
    snap = snapshot(root / rel)
    return snap is not None and recorded == _expected(rel, sha256, size, kind, snap)


def save(root: Path, rel: str, sha256: str, size: int, kind: str, seen: Snapshot | None = None) -> None:
    """Record that the copy at ``root/rel`` matches (sha256, size, kind).

    ``seen`` is the snapshot taken before the content was hashed: if the copy changed while it was being
    hashed nothing is recorded (the next check hashes again). Before returning, waits until the newest
    change of the copy is more than a clock tick old, so that no later write can carry the recorded times.
    """
    snap = snapshot(root / rel)
    if snap is None or (seen is not None and snap != seen):
        return
    wait_ns = snap.newest_ns + RACY_NS - time.time_ns()
    if wait_ns > 0:  # changed within the last tick: let it pass, then look again
        time.sleep(wait_ns / 1e9)
        if snapshot(root / rel) != snap:
            return
    # A read-only run directory: nothing recorded, the next check hashes again (only slower).
    with contextlib.suppress(StorageError):
        atomic_write_text(record_path(root, rel), json.dumps(_expected(rel, sha256, size, kind, snap)) + "\n")
