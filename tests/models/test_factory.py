"""The smp model factory (rtscore/models/factory.py): UNet++/Unet/SegFormer with one logit at the input
resolution, the config checked before any step, local encoder weights loaded and adapted to extra channels, the
head prior, the encoder / decoder parameter groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rtscore.config.pipeline import ChannelsConfig, ExtraChannel, ModelConfig
from rtscore.models import ModelConfigError, build_model, decoder_parameters, encoder_parameters

FOUR = ChannelsConfig(extra=[ExtraChannel(name="ndvi", band=0)])


@pytest.mark.parametrize(
    ("arch", "backbone"),
    [("unetplusplus", "efficientnet-b0"), ("unet", "resnet18"), ("segformer", "mit_b0")],
)
def test_architectures_emit_one_logit_at_input_resolution(arch: str, backbone: str) -> None:
    m = build_model(ModelConfig(architecture=arch, backbone=backbone, encoder_weights=None), FOUR).eval()  # type: ignore[arg-type]
    with torch.no_grad():
        out = m(torch.randn(2, 4, 64, 64))
    assert out.shape == (2, 1, 64, 64)
    assert not any(isinstance(mod, torch.nn.Sigmoid) for mod in m.modules())


@pytest.fixture(scope="module")
def resnet18_unet() -> Any:  # Any: the tests reach into the encoder's submodules
    """An RGB Unet / resnet18 without pretrained weights (only read: its parameters, or its encoder saved as a
    weights file)."""
    return build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=None), ChannelsConfig())


def test_encoder_and_decoder_groups_partition_parameters(resnet18_unet: Any) -> None:
    m = resnet18_unet
    enc, dec = encoder_parameters(m), decoder_parameters(m)
    assert len(enc) + len(dec) == len(list(m.parameters())) and {id(p) for p in enc}.isdisjoint({id(p) for p in dec})


def test_unknown_backbone_is_a_clear_error() -> None:
    with pytest.raises(ModelConfigError, match=r"model.backbone 'efficientnet-b99' is not an smp encoder; similar: \["):
        build_model(ModelConfig(backbone="efficientnet-b99", encoder_weights=None), ChannelsConfig())
    with pytest.raises(ModelConfigError, match="segformer expects a mit_b"):
        build_model(ModelConfig(architecture="segformer", backbone="resnet18", encoder_weights=None), ChannelsConfig())


def test_local_encoder_weights_file_is_loaded_and_extra_channels_patched(resnet18_unet: Any, tmp_path: Path) -> None:
    src = resnet18_unet
    path = tmp_path / "enc.pth"
    torch.save(src.encoder.state_dict(), path)
    m = build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=str(path)), FOUR)
    w_src, w = src.encoder.conv1.weight, m.encoder.conv1.weight
    assert w.shape[1] == 4
    # smp's recipe: RGB filters reused cyclically for extra bands, scaled by 3/4 to keep the activation scale.
    torch.testing.assert_close(w[:, :3], w_src * 3 / 4)
    torch.testing.assert_close(w[:, 3], w_src[:, 0] * 3 / 4)
    torch.testing.assert_close(m.encoder.layer1[0].conv1.weight, src.encoder.layer1[0].conv1.weight)


def test_weights_of_another_encoder_are_refused(resnet18_unet: Any, tmp_path: Path) -> None:
    other = resnet18_unet
    path = tmp_path / "enc.pth"
    torch.save(other.encoder.state_dict(), path)
    with pytest.raises(ModelConfigError, match="do not fit efficientnet-b0"):
        build_model(
            ModelConfig(architecture="unet", backbone="efficientnet-b0", encoder_weights=str(path)), ChannelsConfig()
        )


def test_head_prior_starts_every_pixel_at_the_prior() -> None:
    import math

    cfg = ModelConfig(
        architecture="unet",
        backbone="resnet18",
        encoder_weights=None,
        decoder_channels=[16, 16, 8, 8, 8],
        head_prior=0.01,
    )
    model = build_model(cfg, ChannelsConfig()).eval()
    with torch.no_grad():
        p = torch.sigmoid(model(torch.randn(2, 3, 64, 64)))
    assert abs(float(p.mean()) - 0.01) < 0.005 and float(p.max()) < 0.05
    assert model.segmentation_head[0].bias.item() == pytest.approx(math.log(0.01 / 0.99))
