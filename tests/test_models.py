from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rtscore.config import parse_pipeline_config
from rtscore.config.pipeline import ChannelsConfig, ExtraChannel, ModelConfig, PipelineConfig
from rtscore.models import (
    CheckpointError,
    ModelConfigError,
    build_model,
    decoder_parameters,
    encoder_parameters,
    load_model,
)
from rtscore.package.format import PackagedChannels, PackagedModelConfig
from rtscore.runtime import DeviceError, autocast, check_precision, forward_logits, inference_precision, select_device

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


def test_encoder_and_decoder_groups_partition_parameters() -> None:
    m = build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=None), ChannelsConfig())
    enc, dec = encoder_parameters(m), decoder_parameters(m)
    assert len(enc) + len(dec) == len(list(m.parameters())) and {id(p) for p in enc}.isdisjoint({id(p) for p in dec})


def test_unknown_backbone_is_a_clear_error() -> None:
    with pytest.raises(ModelConfigError, match=r"model.backbone 'efficientnet-b99' is not an smp encoder; similar: \["):
        build_model(ModelConfig(backbone="efficientnet-b99", encoder_weights=None), ChannelsConfig())
    with pytest.raises(ModelConfigError, match="segformer expects a mit_b"):
        build_model(ModelConfig(architecture="segformer", backbone="resnet18", encoder_weights=None), ChannelsConfig())


def test_missing_imagenet_weights_fail_fast_offline(monkeypatch: pytest.MonkeyPatch, network_calls: list[str]) -> None:
    """Fast: no connection tried and no hub download asked for (the hub client would retry for ~30 s); the time
    it takes is a bench figure (bench/fail_fast_bench.py)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    with pytest.raises(ModelConfigError, match=r"not in the local cache .*model.encoder_weights"):
        build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights="imagenet"), ChannelsConfig())
    assert network_calls == []


def test_local_encoder_weights_file_is_loaded_and_extra_channels_patched(tmp_path: Path) -> None:
    src = build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=None), ChannelsConfig())
    path = tmp_path / "enc.pth"
    torch.save(src.encoder.state_dict(), path)
    m = build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=str(path)), FOUR)
    w_src, w = src.encoder.conv1.weight, m.encoder.conv1.weight
    assert w.shape[1] == 4
    # smp's recipe: RGB filters reused cyclically for extra bands, scaled by 3/4 to keep the activation scale.
    torch.testing.assert_close(w[:, :3], w_src * 3 / 4)
    torch.testing.assert_close(w[:, 3], w_src[:, 0] * 3 / 4)
    torch.testing.assert_close(m.encoder.layer1[0].conv1.weight, src.encoder.layer1[0].conv1.weight)


def test_weights_of_another_encoder_are_refused(tmp_path: Path) -> None:
    other = build_model(ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=None), ChannelsConfig())
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


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_forward_logits_is_the_forward_each_caller_wrote_before_bit_for_bit(precision: str) -> None:
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(architecture="unet", backbone="resnet18", encoder_weights=None, decoder_channels=[16, 16, 8, 8, 8]),
        FOUR,
    ).eval()
    x = torch.randn(2, 4, 64, 64, generator=torch.Generator().manual_seed(1))
    dev = x.device

    def same(a: torch.Tensor, b: torch.Tensor) -> None:
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert a.contiguous().view(torch.uint8).numpy().tobytes() == b.contiguous().view(torch.uint8).numpy().tobytes()

    with torch.inference_mode():
        # training, validation and profiling: channels_last input, channel 0, float32
        with autocast(precision, dev):
            ref = model(x.contiguous(memory_format=torch.channels_last))[:, 0]
        same(forward_logits(model, x, precision=precision, channels_last=True), ref.float())
        # calibration / evaluation / predict numerics: every channel kept, the first one taken after
        with autocast(precision, dev):
            y = model(x.contiguous(memory_format=torch.channels_last))
        got = forward_logits(model, x, precision=precision, channels_last=True, keep_channels=True)
        same(got[:, :1], y[:, :1].float())
        # package verify: the raw output, in the dtype autocast produced
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            raw = model(x)
        out = forward_logits(model, x, precision=precision, keep_channels=True, as_float=False)
        same(out, raw)
        assert out.shape == (2, 1, 64, 64) and out.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)


def test_runtime_precision_checks() -> None:
    cpu = torch.device("cpu")
    assert inference_precision("fp16", cpu) == "fp32" and inference_precision("bf16", cpu) == "bf16"
    with pytest.raises(DeviceError, match="fp16 needs a CUDA device"):
        check_precision("fp16", cpu)
    check_precision("bf16", cpu)
    cfg = _pipeline_config()
    assert select_device(cfg) == cpu  # the tiny config asks for the CPU
