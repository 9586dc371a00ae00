"""Seeds and determinism switches (guide §2.2), and RNG state capture for exact resume."""

from __future__ import annotations

import logging
import os
import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed python, numpy and torch; in deterministic mode also cudnn and torch's algorithm choice.

    The hash seed is not set here: Python reads PYTHONHASHSEED once, at interpreter start-up, so it is fixed
    by the environment that starts the process (the Dockerfile, the work pools' job variables in prefect.yaml);
    see :func:`python_hash_seed`.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)


def python_hash_seed() -> str | None:
    """This interpreter's fixed hash seed (guide §2.2: 42), or None when str/bytes hashing is randomised.

    Read from the environment the process started with; nothing in the project sets PYTHONHASHSEED at run time,
    since that would not change the running interpreter's hashing and would only make this answer wrong.
    """
    value = os.environ.get("PYTHONHASHSEED", "")
    return None if value in ("", "random") else value


def check_hash_seed(deterministic: bool) -> str | None:
    """:func:`python_hash_seed`, with a warning when a deterministic run's interpreter hashes at random."""
    seed = python_hash_seed()
    if seed is None and deterministic:
        logging.getLogger(__name__).warning(
            "PYTHONHASHSEED is not set: this interpreter hashes strings with a random seed, so set iteration "
            "order may differ between runs (guide §2.2 fixes it at 42). Start the process with PYTHONHASHSEED=42 "
            "(the Docker image and the prefect.yaml work pools set it)."
        )
    return seed


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
