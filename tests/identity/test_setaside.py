"""Stale resume state is moved, never deleted, and named in one warning line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rtscore.identity import set_aside


def test_set_aside_moves_what_exists_keeping_relative_paths_and_says_where_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = tmp_path / "seed"
    (base / "sub").mkdir(parents=True)
    (base / "a.pth").write_bytes(b"a")
    (base / "sub" / "b.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="rtscore"):
        folder = set_aside(
            [base / "a.pth", base / "sub", base / "missing.pth"],
            base / "set_aside",
            base=base,
            what="seed 1: the checkpoint",
            why="was written by other code",
        )
    assert folder is not None and folder.parent == base / "set_aside"
    assert (folder / "a.pth").read_bytes() == b"a" and (folder / "sub" / "b.json").read_text() == "{}"
    assert not (base / "a.pth").exists() and not (base / "sub").exists()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == f"seed 1: the checkpoint was written by other code: set aside in {folder}; starting fresh"


def test_nothing_to_set_aside_is_silent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rtscore"):
        assert set_aside([tmp_path / "none"], tmp_path / "aside", base=tmp_path, what="x", why="y") is None
    assert not caplog.records and not (tmp_path / "aside").exists()


def test_two_set_asides_never_overwrite_each_other(tmp_path: Path) -> None:
    folders = []
    for content in (b"1", b"2"):
        (tmp_path / "f").write_bytes(content)
        folders.append(set_aside([tmp_path / "f"], tmp_path / "aside", base=tmp_path, what="x", why="y"))
    assert folders[0] != folders[1]
    assert [(f / "f").read_bytes() for f in folders if f is not None] == [b"1", b"2"]
