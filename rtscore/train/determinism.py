"""Seeds and determinism switches (guide §2.2), and RNG state capture for exact resume."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping
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


def rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """All RNG states, as tensors and plain lists so the checkpoint loads with ``weights_only=True``; with a CUDA
    ``device`` (the one this rank trains on) also its generator's state apart (``cuda_device``), which a rank on
    another device index restores into its own (:func:`set_rng_state`)."""
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
        if device is not None and device.type == "cuda":
            state["cuda_device"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device | None = None) -> None:
    """Restore :func:`rng_state`'s states: every CUDA generator saved that this process sees, then (``device``
    CUDA) the saved rank's own device generator into ``device``'s."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), *n[2:]))
    p = state["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))
    if "cuda" in state and torch.cuda.is_available():
        for index, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)
        if "cuda_device" in state and device is not None and device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_device"], device)


def rng_checkpoint(states: list[dict[str, Any]]) -> dict[str, Any]:
    """The RNG entries of a resume checkpoint from every rank's :func:`rng_state` in rank order: ``rng_states``
    (rank 0's, all a one-device checkpoint holds, as before) and, with several ranks, ``rng_states_per_rank``."""
    entries: dict[str, Any] = {"rng_states": states[0]}
    if len(states) > 1:
        entries["rng_states_per_rank"] = states
    return entries


def rank_rng_state(saved: Mapping[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    """The RNG state rank ``rank`` of ``world_size`` restores from a resume checkpoint: its own when the checkpoint
    was written by as many ranks. Resumed on another number of ranks, rank ``r`` takes saved rank ``r``'s state
    when there is one, else rank 0's, with a warning; a checkpoint of one rank, or written before the states were
    kept per rank, gives every rank its ``rng_states`` (rank 0's), with a warning on the other ranks. Each rank's
    own device generator is then set from the saved rank's (:func:`set_rng_state`): the stochastic layers draw
    alike on every rank (:mod:`rtscore.train.stochastic`), so any rank's generators continue the run."""
    per_rank: list[dict[str, Any]] = list(saved.get("rng_states_per_rank") or [saved["rng_states"]])
    take = rank if rank < len(per_rank) else 0
    if take != rank:
        logging.getLogger(__name__).warning(
            f"rank {rank} of {world_size}: the resume checkpoint holds the RNG states of {len(per_rank)} rank(s); "
            f"rank {rank} continues from rank {take}'s"
        )
    return per_rank[take]
