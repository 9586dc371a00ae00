"""The hash seed is fixed by the environment a process starts with, never set at run time (guide §2.2); the RNG
states of a resume checkpoint, every rank's, each restored by its own rank (issue 35)."""

from __future__ import annotations

import io
import logging
import os
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from rtscore.train.determinism import check_hash_seed, python_hash_seed, rng_state, seed_everything, set_rng_state
from rtscore.train.distributed import Ranks


def test_seeding_leaves_pythonhashseed_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Setting PYTHONHASHSEED inside a running interpreter cannot change its hashing: it only made the run
    look seeded. seed_everything must not pretend."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    seed_everything(42, deterministic=False)
    assert "PYTHONHASHSEED" not in os.environ
    assert python_hash_seed() is None


@pytest.mark.parametrize(("value", "expected"), [("42", "42"), ("0", "0"), ("random", None), ("", None)])
def test_python_hash_seed_reads_the_start_up_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: str | None
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", value)
    assert python_hash_seed() == expected


def test_a_deterministic_run_warns_when_hashing_is_random(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with caplog.at_level(logging.WARNING):
        assert check_hash_seed(deterministic=True) is None
    assert "PYTHONHASHSEED=42" in caplog.text
    caplog.clear()
    monkeypatch.setenv("PYTHONHASHSEED", "42")
    with caplog.at_level(logging.WARNING):
        assert check_hash_seed(deterministic=True) == "42"
    assert not caplog.text


def _seed(rank: int) -> None:
    torch.manual_seed(100 + rank)
    random.seed(200 + rank)
    np.random.seed(300 + rank)
    torch.rand(5)  # a rank a few draws into its run


def _draws() -> tuple[list[float], float, float]:
    return torch.rand(3).tolist(), random.random(), float(np.random.rand())


def _rank_states() -> tuple[list[dict[str, Any]], list[tuple[list[float], float, float]]]:
    """Two ranks' RNG states (made different on purpose) and the draws each rank takes next."""
    states, expected = [], []
    for rank in range(2):
        _seed(rank)
        states.append(rng_state())
        expected.append(_draws())
    return states, expected


def _resume_checkpoint(monkeypatch: pytest.MonkeyPatch, states: list[dict[str, Any]]) -> dict[str, Any]:
    """The resume checkpoint the loop writes on two ranks whose RNG states are ``states`` (what
    ``all_gather_object`` gives every rank), saved and read back as the loop reads it."""
    from rtscore.train import loop

    monkeypatch.setattr(loop.ddp, "gather", lambda _own: states)
    s = _setup(Ranks(0, 2))
    state = loop.resume_state(s, 3, _stopper(), loop.RunState(), "key")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    saved: dict[str, Any] = torch.load(buffer, weights_only=True)
    return saved


def _setup(ranks: Ranks) -> Any:
    from rtscore.train.ema import EMA

    model = nn.Linear(2, 1)
    return SimpleNamespace(
        model=model,
        ema=EMA(model, 0.9),
        optimizer=torch.optim.AdamW(model.parameters()),
        scaler=None,
        device=torch.device("cpu"),
        ranks=ranks,
    )


def _stopper() -> Any:
    from rtscore.train.early_stopping import EarlyStopping
    from tests.train.conftest import tiny_train_config

    return EarlyStopping(tiny_train_config().training.early_stopping)


def _restore(saved: dict[str, Any], rank: int, world_size: int) -> tuple[list[float], float, float]:
    from rtscore.train import loop

    _seed(7)  # the state a fresh process of the resumed run has before restoring
    assert loop.restore(_setup(Ranks(rank, world_size)), saved, _stopper(), Path("resume_latest.pth")) == 3
    return _draws()


def test_the_resume_checkpoint_keeps_every_rank_s_rng_state_and_each_rank_restores_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: rank 0 wrote its own states alone, so a resumed rank 1 continued from rank 0's generators."""
    states, expected = _rank_states()
    saved = _resume_checkpoint(monkeypatch, states)
    assert len(saved["rng_states_per_rank"]) == 2 and torch.equal(saved["rng_states"]["torch"], states[0]["torch"])
    assert [_restore(saved, rank, 2) for rank in range(2)] == expected


def test_a_resume_on_another_number_of_ranks_or_from_an_older_checkpoint_falls_back_to_rank_0_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    states, expected = _rank_states()
    saved = _resume_checkpoint(monkeypatch, states)
    with caplog.at_level(logging.WARNING):
        assert _restore(saved, 0, 1) == expected[0]  # 2 -> 1: rank 0 its own, nothing to say
        assert not caplog.records
        assert [_restore(saved, rank, 3) for rank in range(3)] == [expected[0], expected[1], expected[0]]  # 2 -> 3
    assert "rank 2 of 3: the resume checkpoint holds the RNG states of 2 rank(s); rank 2 continues from rank 0's" in (
        caplog.text
    )
    caplog.clear()
    old = {k: v for k, v in saved.items() if k != "rng_states_per_rank"}  # written before the states per rank
    with caplog.at_level(logging.WARNING):
        assert [_restore(old, rank, 2) for rank in range(2)] == [expected[0], expected[0]]
    assert "rank 1 continues from rank 0's" in caplog.text


class FakeCuda:
    """Two CUDA devices' generator states, as torch.cuda's state functions see them."""

    def __init__(self, count: int) -> None:
        self.states = {i: torch.tensor([10 + i], dtype=torch.uint8) for i in range(count)}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(self.states))
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [self.states[i] for i in sorted(self.states)])
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: self.states[_index(device)])
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set)

    def set(self, state: torch.Tensor, device: int | torch.device) -> None:
        index = _index(device)
        if index not in self.states:
            raise RuntimeError(f"invalid device ordinal {index}")
        self.states[index] = state.clone()


def _index(device: int | torch.device) -> int:
    return device if isinstance(device, int) else int(device.index or 0)


def test_each_rank_keeps_its_own_device_s_cuda_generator_and_restores_it_into_its_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 trains on cuda:1: its state of cuda:1 is the one its draws advanced; resumed as rank 0 of one device
    (or on a machine with fewer GPUs) that state goes into the device it now trains on, and no device it cannot see
    is set."""
    rank1 = FakeCuda(2)
    rank1.install(monkeypatch)
    rank1.states[1] = torch.tensor([99], dtype=torch.uint8)  # rank 1's generator, advanced by its draws
    state = rng_state(torch.device("cuda", 1))
    assert state["cuda_device"].item() == 99
    resumed = FakeCuda(2)
    resumed.install(monkeypatch)
    set_rng_state(state, torch.device("cuda", 1))
    assert resumed.states[1].item() == 99
    one_gpu = FakeCuda(1)
    one_gpu.install(monkeypatch)
    set_rng_state(state, torch.device("cuda", 0))  # two saved device states, one visible: no error
    assert one_gpu.states[0].item() == 99
