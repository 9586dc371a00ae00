"""How models run: device selection, precision checks, autocast and the one batch forward every pass uses."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import cache
from typing import TYPE_CHECKING, Any

from rtscore.errors import PipelineError

if TYPE_CHECKING:
    import torch

    from rtscore.config.pipeline import PipelineConfig


class DeviceError(PipelineError):
    """The requested device does not exist on this machine or is not a torch device, or it cannot run the
    requested precision."""


def select_device(cfg: PipelineConfig) -> torch.device:
    """``training.device``: 'auto' takes CUDA when available, else the CPU; 'cuda' without a GPU is refused."""
    return resolve_device(cfg.training.device, key="training.device")


def resolve_device(want: str, *, key: str) -> torch.device:
    """The device of a setting ``key`` (e.g. ``--device``): 'auto' takes CUDA when available, else the CPU;
    'cpu', 'cuda' or 'cuda:N' as named, refused when this machine has no such device."""
    import torch

    if want == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(want)
    except (RuntimeError, ValueError):
        raise DeviceError(f"{key} {want!r} is not a device; expected auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"{key} is {want!r} but no CUDA device is available (set 'auto' or 'cpu')")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise DeviceError(f"{key} is {want!r} but this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type not in ("cpu", "cuda"):
        raise DeviceError(f"{key} {want!r}: only cpu and cuda devices are supported")
    return dev


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse a training precision the device cannot run, before any step."""
    import torch

    if precision == "fp16" and device.type != "cuda":
        raise DeviceError("training.precision fp16 needs a CUDA device (GradScaler); on CPU use bf16 or fp32")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise DeviceError("training.precision bf16 is not supported by this GPU; use fp16 (e.g. L4/T4) or fp32")


def inference_precision(precision: str, device: torch.device) -> str:
    """The precision a deployment runs at on ``device``: fp16 has no CPU autocast, so the CPU runs it as fp32."""
    return "fp32" if precision == "fp16" and device.type == "cpu" else precision


def autocast(precision: str, device: torch.device) -> AbstractContextManager[Any]:
    """The autocast region of a precision: none for fp32, bfloat16 or float16 autocast on the device's type."""
    import torch

    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def forward_logits(
    model: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    *,
    precision: str,
    channels_last: bool = False,
    keep_channels: bool = False,
    as_float: bool = True,
) -> torch.Tensor:
    """The model's logits of a batch of images, run under the precision's autocast on the images' device.

    Training, validation, profiling, calibration, test evaluation, package verification and prediction all
    take this one step, so a logit means the same wherever it is computed.

    Args:
        model: The model (or its compiled view); its output is (B, C, H, W) logits.
        images: (B, C_in, H, W) on the device to run on.
        precision: ``fp32``, ``bf16`` or ``fp16`` (see :func:`autocast`).
        channels_last: Hand the model the images in channels_last memory format.
        keep_channels: Return the whole (B, C, H, W) output instead of channel 0 as (B, H, W).
        as_float: Cast the output to float32 (outside autocast); False keeps the dtype autocast produced.
    """
    import torch

    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    with autocast(precision, images.device):
        out = model(images)
    if not keep_channels:
        out = out[:, 0]
    return out.float() if as_float else out


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over the ranks of the process group, differentiably: each rank's input gets the sum of
    every rank's gradient of the output (every rank's loss depends on every rank's input through the sum).

    The one cross-rank sum of a seed on several devices: global-batch batch norm, the losses' region sums and
    valid-pixel counts (integer tensors: no gradient, the same sum), the step's loss and sample count of the log
    (:func:`rtscore.train.distributed.sum_across`). The input is left as it is; the sum is a new tensor."""
    out: torch.Tensor = _sum_across().apply(tensor)
    return out


@cache
def _sum_across() -> Any:
    import torch
    import torch.distributed as dist

    class SumAcross(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
            out = tensor.clone(memory_format=torch.contiguous_format)
            dist.all_reduce(out)
            return out

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            out = grad.clone(memory_format=torch.contiguous_format)
            dist.all_reduce(out)
            return out

    return SumAcross
