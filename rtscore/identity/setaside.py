"""Resume state from another identity is set aside, never resumed and never deleted.

A resume point (a training checkpoint, a generation's staged shards, a tiling run's records, a mapping log) is
only valid for the identity that wrote it: the same code, config and inputs. One written under another identity
is moved out of the way into a dated folder the caller names, with one log line saying what, why and where,
and the work starts fresh. The user keeps it (to compare, or to copy back by hand); nothing reads it again.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from rtscore.storage.files import os_errors

_log = logging.getLogger(__name__)

SET_ASIDE_DIR = "set_aside"  # the folder name callers put set-aside state under


def set_aside(paths: Iterable[Path], into: Path, *, base: Path, what: str, why: str) -> Path | None:
    """Move every existing path of ``paths`` into ``into/<UTC time>/`` keeping its path relative to ``base``.

    Logs one warning: ``<what> <why>: set aside in <folder>; starting fresh``. Returns the folder, or None when
    none of the paths exists.
    """
    found = [p for p in paths if p.exists() or p.is_symlink()]
    if not found:
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    folder, n = into / stamp, 1
    while folder.exists():  # two set-asides within one clock tick never share a folder
        folder, n = into / f"{stamp}-{n}", n + 1
    for p in found:
        try:
            rel = p.relative_to(base)
        except ValueError:
            rel = Path(p.name)
        target = folder / rel
        with os_errors("set aside", p):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(p), str(target))
    _log.warning(f"{what} {why}: set aside in {folder}; starting fresh")
    return folder
