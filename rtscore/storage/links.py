"""Hard-linked copies of verified artifacts: how a run shares another run's artifact without copying or hashing
it (:meth:`~rtscore.storage.rundir.RunDir.adopt`), and how such a copy is later known to be unchanged.

A link is the very file its source's verification record vouches for: the same name, size, mtime and inode say
so without reading it. Links are safe because every writer of this project publishes a new file atomically
(staged, then renamed over the old name) and never rewrites a published file in place. Where a link cannot be
made (another file system, links refused) a file is copied with its times.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

from rtscore.storage.files import os_errors, publish_dir, staged_dir
from rtscore.storage.manifest import ArtifactEntry
from rtscore.storage.verified import _walk as walk_files
from rtscore.storage.verified import check as verified_check
from rtscore.storage.verified import save as verified_save
from rtscore.storage.verified import snapshot

# Why a hard link cannot be made, where a copy can: another file system, a file system or a policy that
# refuses links (fs.protected_hardlinks), too many links to one inode.
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP})


def replace_path(src: Path, dst: Path) -> None:
    """Move a verified download (file or directory) into place, replacing whatever ``dst`` is."""
    if src.is_dir():
        if dst.is_file() or dst.is_symlink():
            dst.unlink()
        publish_dir(src, dst)
        return
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    src.replace(dst)


def file_stats(path: Path) -> dict[str, tuple[int, int, int]] | None:
    """(size, mtime, inode) of every regular file of an artifact, by name relative to it ("" for a file);
    None if it is neither a file nor a directory. Not the change time: linking a file changes it."""
    try:
        top = path.stat()
    except FileNotFoundError:
        return None
    if path.is_file():
        stats = [("", top)]
    elif path.is_dir():
        stats = []
        walk_files(str(path), "", stats)
    else:
        return None
    return {name: (st.st_size, st.st_mtime_ns, st.st_ino) for name, st in stats}


def link_or_copy(src: Path, dst: Path) -> bool:
    """Hard-link ``src`` as ``dst``, else copy it (with its times); whether it was linked."""
    try:
        os.link(src, dst)
        return True
    except OSError as err:
        if err.errno not in _NO_LINK:
            raise
    shutil.copy2(src, dst)
    return False


def publish_links(src: Path, dst: Path, kind: str, names: Iterable[str]) -> set[str]:
    """Publish at ``dst`` hard links to (or copies of) the files ``names`` of artifact ``src`` (relative to it;
    "" for a file): a directory built in a staged sibling and published whole, a file linked to a temporary name,
    then renamed, so ``dst`` is never half there. The names that were linked (the others were copied)."""
    linked: set[str] = set()

    def put(name: str, target: Path) -> None:
        if link_or_copy(src / name if name else src, target):
            linked.add(name)

    with os_errors("write", dst):
        dst.parent.mkdir(parents=True, exist_ok=True)
        if kind == "dir":
            if dst.is_file() or dst.is_symlink():
                dst.unlink()
            with staged_dir(dst) as staging:
                for name in sorted(names):
                    (staging / name).parent.mkdir(parents=True, exist_ok=True)
                    put(name, staging / name)
        else:
            tmp = dst.with_name(f".{dst.name}.adopt-{uuid.uuid4().hex[:8]}")
            try:
                put("", tmp)
                replace_path(tmp, dst)
            finally:
                tmp.unlink(missing_ok=True)
    return linked


def same_files_as_verified(root: Path, src_root: Path, rel: str, entry: ArtifactEntry) -> bool:
    """Whether ``root``'s copy of ``rel`` is the very files of ``src_root``'s copy, which that run's verification
    record says are unchanged since they were hashed as ``entry``: the same names, sizes, mtimes and inodes. If so,
    ``root``'s verification record is written again (no hash) and True; anything else is False."""
    p = root / rel
    seen = snapshot(p)
    mine = file_stats(p)
    if seen is None or mine is None or src_root == root:
        return False
    if not verified_check(src_root, rel, entry.sha256, entry.bytes, entry.kind):
        return False
    if file_stats(src_root / rel) != mine:  # taken before the check: a change in between moves an inode
        return False
    verified_save(root, rel, entry.sha256, entry.bytes, entry.kind, seen)
    return True
