"""Trained weights read back (rtscore/models/checkpoint.py): load_model from a pipeline config or a package's
model_config.yaml, and the errors that name what is wrong with a weights file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rtscore.config import parse_pipeline_config
from rtscore.config.pipeline import ChannelsConfig, ModelConfig, PipelineConfig
from rtscore.models import CheckpointError, build_model, load_model
from rtscore.package.format import PackagedChannels, PackagedModelConfig


def _pipeline_config() -> PipelineConfig:
    from tests.helpers import tiny_pipeline_config

    return parse_pipeline_config(tiny_pipeline_config())


def _packaged(cfg: PipelineConfig) -> PackagedModelConfig:
    return PackagedModelConfig(
        architecture=cfg.model.architecture,
        backbone=cfg.model.backbone,
        decoder_channels=cfg.model.decoder_channels,
        in_channels=cfg.channels.count,
        channels=PackagedChannels(rgb=["R", "G", "B"], extra=cfg.channels.extra),
        tile_size=64,
    )


def test_load_model_from_pipeline_or_packaged_config_gives_the_saved_weights_in_eval_mode(tmp_path: Path) -> None:
    cfg = _pipeline_config()
    torch.manual_seed(0)
    src = build_model(cfg.model, cfg.channels)
    torch.save(src.state_dict(), tmp_path / "w.pth")
    for config in (cfg, _packaged(cfg)):
        model = load_model(tmp_path / "w.pth", config, "cpu")
        assert not model.training and next(model.parameters()).device.type == "cpu"
        got = model.state_dict()
        assert got.keys() == src.state_dict().keys()
        for k, v in src.state_dict().items():
            assert got[k].numpy().tobytes() == v.numpy().tobytes(), k


def test_load_model_errors_name_the_problem(tmp_path: Path) -> None:
    cfg = _pipeline_config()
    with pytest.raises(CheckpointError, match="checkpoint not found: .*missing.pth"):
        load_model(tmp_path / "missing.pth", cfg, "cpu")
    torch.save({"not": [1, 2]}, tmp_path / "junk.pth")
    with pytest.raises(TypeError, match="not a state_dict"):
        load_model(tmp_path / "junk.pth", cfg, "cpu")
    other = build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=None), ChannelsConfig())
    torch.save(other.state_dict(), tmp_path / "other.pth")  # 3 input channels, default decoder: does not fit
    with pytest.raises(RuntimeError, match="size mismatch|Missing key"):
        load_model(tmp_path / "other.pth", _packaged(cfg), "cpu")
