"""Deployment numerics in one place: D4 test-time augmentation, multi-scale inference and fusion, in logit space.

Calibration, test evaluation and inference all call these functions, so the probabilities a threshold is
chosen on are computed exactly as the ones it is later applied to (guide §4.6).

Averaging follows guide §11.2 (average the probabilities of the transforms), done in logit space without
leaving it: ``logit(mean_i sigmoid(z_i)) = logsumexp_i(logsigmoid(z_i)) - logsumexp_i(logsigmoid(-z_i))``
(the 1/n cancels). This is exact for one transform (it returns z) and stable at any |z|, where going
through float32 probabilities would saturate near p = 1. Temperature is applied after fusion:
``p = sigmoid(fused_logit / T)``, the quantity the cached histograms describe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from rtscore.runtime import forward_logits

if TYPE_CHECKING:
    import torch

# The eight symmetries of the square (D4), by name. Each maps a (..., H, W) tensor; all are their own inverse
# except the two quarter turns, which invert each other.
D4 = ("id", "hflip", "vflip", "rot180", "rot90", "rot270", "transpose", "antitranspose")
_INVERSE = {"rot90": "rot270", "rot270": "rot90"}

# TTA configurations of guide §11.1 (cost = number of forward passes per scale).
TTA_TRANSFORMS: dict[str, tuple[str, ...]] = {
    "none": ("id",),
    "minimal": ("id", "hflip"),
    "standard": ("id", "hflip", "vflip", "rot180"),
    "full": D4,
}

# Fusions of multi-scale probabilities: average, any scale fires (max), every scale must agree (min).
FUSIONS = ("weighted_mean", "max", "consensus")


def tta_cost(tta: str) -> int:
    """Forward passes per scale of a TTA configuration."""
    return len(TTA_TRANSFORMS[tta])


def transform(x: torch.Tensor, name: str) -> torch.Tensor:
    """Apply a D4 symmetry to the last two dimensions (square tiles)."""
    import torch

    if name == "id":
        return x
    if name == "hflip":
        return torch.flip(x, (-1,))
    if name == "vflip":
        return torch.flip(x, (-2,))
    if name == "rot180":
        return torch.flip(x, (-2, -1))
    if name == "rot90":
        return torch.rot90(x, 1, (-2, -1))
    if name == "rot270":
        return torch.rot90(x, -1, (-2, -1))
    if name == "transpose":
        return x.transpose(-2, -1)
    if name == "antitranspose":
        return torch.flip(x, (-2, -1)).transpose(-2, -1)
    raise ValueError(f"unknown D4 transform {name!r}; expected one of {D4}")


def invert(y: torch.Tensor, name: str) -> torch.Tensor:
    """Undo `transform(·, name)`."""
    return transform(y, _INVERSE.get(name, name))


def mean_prob_logit(logits: Sequence[torch.Tensor], weights: Sequence[float] | None = None) -> torch.Tensor:
    """logit of the (weighted) mean of sigmoid(logits), computed stably in logit space."""
    import torch
    import torch.nn.functional as F

    if len(logits) == 1:
        return logits[0]
    z = torch.stack([t.float() for t in logits])
    if weights is not None:
        w = torch.as_tensor(weights, dtype=z.dtype, device=z.device)
        lw = torch.log(w / w.sum()).reshape(-1, *([1] * (z.ndim - 1)))
        return torch.logsumexp(F.logsigmoid(z) + lw, 0) - torch.logsumexp(F.logsigmoid(-z) + lw, 0)
    return torch.logsumexp(F.logsigmoid(z), 0) - torch.logsumexp(F.logsigmoid(-z), 0)


def fuse_scales(per_scale: Sequence[torch.Tensor], fusion: str) -> torch.Tensor:
    """Fuse per-scale logits (all at native resolution): weighted_mean of probabilities, max, or consensus (min)."""
    import torch

    if len(per_scale) == 1:
        return per_scale[0]
    if fusion == "weighted_mean":
        return mean_prob_logit(per_scale)
    if fusion == "max":
        return torch.stack(list(per_scale)).amax(0)
    if fusion == "consensus":
        return torch.stack(list(per_scale)).amin(0)
    raise ValueError(f"unknown fusion {fusion!r}; expected one of {FUSIONS}")


def resize_input(x: torch.Tensor, scale: float) -> torch.Tensor:
    """The input seen at `scale` (0.5: half resolution, area-averaged like the 0.5x training store)."""
    import torch.nn.functional as F

    if scale == 1.0:
        return x
    h, w = x.shape[-2:]
    size = (round(h * scale), round(w * scale))
    if size[0] % 32 or size[1] % 32:
        raise ValueError(
            f"scale {scale} turns {h}x{w} tiles into {size[0]}x{size[1]}, not a multiple of 32 as the encoder needs"
        )
    return F.interpolate(x, size=size, mode="area")


def scale_logits(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    scale: float,
    transforms: Sequence[str],
    precision: str,
) -> dict[str, torch.Tensor]:
    """Per transform, the (B, H, W) float32 logits at native resolution of the model run at `scale`."""
    import torch.nn.functional as F

    h, w = x.shape[-2:]
    xs = resize_input(x, scale)
    out: dict[str, torch.Tensor] = {}
    for name in transforms:
        y = forward_logits(model, transform(xs, name), precision=precision, channels_last=True, keep_channels=True)
        y = invert(y[:, :1], name)
        if scale != 1.0:
            y = F.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
        out[name] = y[:, 0]
    return out


def tta_logits(per_transform: Mapping[str, torch.Tensor], tta: str) -> torch.Tensor:
    """The TTA average of one scale's per-transform logits."""
    return mean_prob_logit([per_transform[t] for t in TTA_TRANSFORMS[tta]])


def predict_logits(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    tta: str,
    scales: Sequence[float],
    fusion: str,
    precision: str,
) -> torch.Tensor:
    """Fused (B, H, W) logits of a batch exactly as deployed (before temperature)."""
    per_scale = [tta_logits(scale_logits(model, x, s, TTA_TRANSFORMS[tta], precision), tta) for s in scales]
    return fuse_scales(per_scale, fusion)


def prepare_model(model: torch.nn.Module, torch_compile: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """The model in eval mode and channels_last, compiled when the deployment says so (calibrate as you deploy)."""
    import torch

    model.eval().to(memory_format=torch.channels_last)
    return torch.compile(model) if torch_compile else model
