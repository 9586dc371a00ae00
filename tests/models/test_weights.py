"""Pretrained encoder weights (rtscore/models/weights.py): not cached and no network fails fast, saying what to
do. The DPT hub-tag case: tests/models/test_dpt.py."""

from __future__ import annotations

import pytest

from rtscore.config.pipeline import ChannelsConfig, ModelConfig
from rtscore.models import ModelConfigError, build_model


def test_missing_imagenet_weights_fail_fast_offline(monkeypatch: pytest.MonkeyPatch, network_calls: list[str]) -> None:
    """Fast: no connection tried and no hub download asked for (the hub client would retry for ~30 s); the time
    it takes is a bench figure (bench/fail_fast_bench.py)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    with pytest.raises(ModelConfigError, match=r"not in the local cache .*model.encoder_weights"):
        build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights="imagenet"), ChannelsConfig())
    assert network_calls == []
