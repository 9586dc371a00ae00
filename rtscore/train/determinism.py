"""Seeds and determinism switches (guide §2.2), and RNG state capture for exact resume."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed python, numpy and torch; in deterministic mode also cudnn and torch's algorithm choice."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))  # affects child processes (DataLoader workers)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)


def rng_state() -> dict[str, Any]:
    """All RNG states, as tensors and plain lists so the checkpoint loads with ``weights_only=True``."""
    np_state = np.random.get_state()
    assert isinstance(np_state, tuple)  # the legacy global generator (MT19937) gives the tuple form
    py_state = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), *n[2:]))
    p = state["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
