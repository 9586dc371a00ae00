"""rtscore/runtime.py: forward_logits, the one forward of every caller, bit for bit what each wrote before; the
precision checks and device selection."""

from __future__ import annotations

import pytest
import torch

from rtscore.config import parse_pipeline_config
from rtscore.config.pipeline import ChannelsConfig, ExtraChannel, ModelConfig, PipelineConfig
from rtscore.models import build_model
from rtscore.runtime import DeviceError, autocast, check_precision, forward_logits, inference_precision, select_device

FOUR = ChannelsConfig(extra=[ExtraChannel(name="ndvi", band=0)])


def _pipeline_config() -> PipelineConfig:
    from tests.helpers import tiny_pipeline_config

    return parse_pipeline_config(tiny_pipeline_config())


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
