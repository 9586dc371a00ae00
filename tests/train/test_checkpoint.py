from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rtscore.train import checkpoint as ckpt


def _rotate(seed_dir: Path, epochs: int, keep_last_n: int = 2) -> None:
    for epoch in range(1, epochs + 1):
        ckpt.save_resume(seed_dir, {"epoch": epoch, "w": torch.full((64,), float(epoch))}, epoch, keep_last_n)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_resume_falls_back_to_the_newest_readable_checkpoint_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 11.15: a truncated resume_latest.pth no longer stops the run when older checkpoints are intact."""
    _rotate(tmp_path, 4)  # resume_latest (epoch 4), resume_epoch_0003, resume_epoch_0004
    state, path = ckpt.load_resume(tmp_path) or ({}, None)
    assert state["epoch"] == 4 and path == tmp_path / "resume_latest.pth" and not caplog.records

    _truncate(tmp_path / "resume_latest.pth")
    _truncate(tmp_path / "resume_epoch_0004.pth")
    with caplog.at_level("WARNING", logger="rtscore.train.checkpoint"):
        state, path = ckpt.load_resume(tmp_path) or ({}, None)
    assert state["epoch"] == 3 and path == tmp_path / "resume_epoch_0003.pth"
    assert float(state["w"][0]) == 3.0
    warning = caplog.records[-1].getMessage()
    assert "resume_latest.pth" in warning and "resume_epoch_0004.pth" in warning
    assert "Resuming from resume_epoch_0003.pth (epoch 3)" in warning


def test_no_readable_checkpoint_names_each_and_the_way_out(tmp_path: Path) -> None:
    assert ckpt.load_resume(tmp_path) is None  # nothing to resume: a fresh start
    _rotate(tmp_path, 2, keep_last_n=1)
    for p in tmp_path.glob("resume_*.pth"):
        _truncate(p)
    with pytest.raises(ckpt.CheckpointError, match=r"no readable resume checkpoint .*resume_latest.pth.*--fresh"):
        ckpt.load_resume(tmp_path)
