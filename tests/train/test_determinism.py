"""The hash seed is fixed by the environment a process starts with, never set at run time (guide §2.2)."""

from __future__ import annotations

import logging
import os

import pytest

from rtscore.train.determinism import check_hash_seed, python_hash_seed, seed_everything


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
