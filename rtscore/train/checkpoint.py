"""Checkpoints (guide §4.3): best_deployment.pth (EMA weights only) and rotating resume checkpoints.

File names come from :mod:`rtscore.storage.layout`; torch is imported on first use (light to import).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtscore.models import CheckpointError, load_checkpoint
from rtscore.storage import layout

if TYPE_CHECKING:
    import torch

_RESUME_EPOCH_GLOB = layout.RESUME_EPOCH.replace("{epoch:04d}", "*")
_log = logging.getLogger(__name__)


def save_atomic(obj: Any, path: Path) -> None:
    """torch.save to a temporary name, fsync, then rename: a crash never leaves a torn checkpoint."""
    import torch

    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as err:  # permission denied, disk full: the previous checkpoint stays intact
        raise CheckpointError(f"cannot write checkpoint {path}: {err.strerror or type(err).__name__}") from err
    finally:
        tmp.unlink(missing_ok=True)


def save_best(seed_dir: Path, ema_state_dict: dict[str, torch.Tensor]) -> Path:
    """``best_deployment.pth``: the given (EMA) weights, on the CPU."""
    path = seed_dir / layout.BEST
    save_atomic({k: v.detach().cpu() for k, v in ema_state_dict.items()}, path)
    return path


def save_resume(seed_dir: Path, state: dict[str, Any], epoch: int, keep_last_n: int) -> Path:
    """Write ``resume_epoch_NNNN.pth`` and ``resume_latest.pth``; keep the last ``keep_last_n`` epochs."""
    path = seed_dir / layout.RESUME_EPOCH.format(epoch=epoch)
    save_atomic(state, path)
    tmp = seed_dir / f".{layout.RESUME_LATEST}.{uuid.uuid4().hex[:8]}.tmp"
    shutil.copyfile(path, tmp)
    tmp.replace(seed_dir / layout.RESUME_LATEST)
    for old in sorted(seed_dir.glob(_RESUME_EPOCH_GLOB))[:-keep_last_n]:
        old.unlink(missing_ok=True)
    return path


def load_resume(seed_dir: Path) -> tuple[dict[str, Any], Path] | None:
    """The newest readable resume checkpoint of a seed and its path; None when the seed has none.

    ``resume_latest.pth`` first, then the rotating ``resume_epoch_NNNN.pth``, newest first: a truncated or
    corrupt file (a full disk, a copy cut short) is skipped with a warning naming it, so a run resumes from
    the newest intact epoch instead of stopping. Only when none is readable is it an error.

    Raises:
        CheckpointError: Every resume checkpoint of the seed is unreadable (each named, with the way out).
    """
    latest = seed_dir / layout.RESUME_LATEST
    candidates = [latest] if latest.exists() else []
    candidates += sorted(seed_dir.glob(_RESUME_EPOCH_GLOB), reverse=True)
    problems: list[str] = []
    for path in candidates:
        try:
            state = load_checkpoint(path)
        except CheckpointError as err:
            problems.append(str(err))
            continue
        if not isinstance(state, dict) or "epoch" not in state:
            problems.append(f"{path} is not a resume checkpoint (no 'epoch')")
            continue
        if problems:
            _log.warning(
                f"{'; '.join(problems)}. Resuming from {path.name} (epoch {state['epoch']}), the newest readable "
                "resume checkpoint; the epochs after it are trained again."
            )
        return state, path
    if not candidates:
        return None
    raise CheckpointError(
        f"no readable resume checkpoint in {seed_dir}: {'; '.join(problems)}. "
        "Re-run with --fresh to start this seed over."
    )
