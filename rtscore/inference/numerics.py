"""Deployment numerics in one place: D4 test-time augmentation, multi-scale inference and fusion, in logit space.

Calibration, test evaluation and inference all call these functions, so the probabilities a threshold is
chosen on are computed exactly as the ones it is later applied to (guide §4.6).

Averaging follows guide §11.2 (average the probabilities of the transforms), done in logit space without
leaving it: ``logit(mean_i sigmoid(z_i)) = logsumexp_i(logsigmoid(z_i)) - logsumexp_i(logsigmoid(-z_i))``
(the 1/n cancels). This is exact for one transform (it returns z) and stable at any |z|, where going
through float32 probabilities would saturate near p = 1. Temperature is applied after fusion:
``p = sigmoid(fused_logit / T)``, the quantity the cached histograms describe.

Scales: a 1x pass sees the tile; a 0.5x pass sees the tile's context, its 2x field of view downsampled to the
tile size (guide §8.3; :mod:`rtscore.inference.context`), and keeps the centre half of its output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from rtscore.data.synthetic import CONTEXT_FACTOR
from rtscore.inference.context import CONTEXT_SCALE, ContextError
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


def _context_centre(y: torch.Tensor) -> torch.Tensor:
    """The tile's footprint in a 0.5x output (B, 1, H, W) at native resolution: the whole map upsampled 2x
    (bilinear, so the crop's border pixels interpolate towards their true neighbours), its centre H x W kept."""
    import torch.nn.functional as F

    h, w = y.shape[-2:]
    up = F.interpolate(y, size=(CONTEXT_FACTOR * h, CONTEXT_FACTOR * w), mode="bilinear", align_corners=False)
    top, left = (CONTEXT_FACTOR * h - h) // 2, (CONTEXT_FACTOR * w - w) // 2
    return up[..., top : top + h, left : left + w]


def scale_logits(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    scale: float,
    transforms: Sequence[str],
    precision: str,
    context: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Per transform, the (B, H, W) float32 logits at native resolution of the model run at `scale`.

    At 1.0 the model sees the tile `x`. At 0.5 it sees `context`, the tile's 2x field of view downsampled to
    the tile size (:mod:`rtscore.inference.context`, guide §8.3), and the centre half of its output (the tile's
    footprint) comes back at native resolution; a 0.5x pass without its context is refused, never replaced by
    a shrunken copy of the tile (the same footprint blurred, not the guide's 0.5x).
    """
    if scale == 1.0:
        xs = x
    elif scale == CONTEXT_SCALE:
        if context is None:
            raise ContextError(
                f"a {scale:g}x pass needs the tile's context (its 2x field of view, downsampled): from the "
                "surrounding raster in predict, from the split's context store in calibration and test evaluation"
            )
        if context.shape != x.shape:
            raise ContextError(f"the context batch has shape {tuple(context.shape)}, the tiles {tuple(x.shape)}")
        xs = context
    else:
        raise ContextError(f"scale {scale:g}: only 1.0 and {CONTEXT_SCALE:g} (the 2x context) are implemented")
    out: dict[str, torch.Tensor] = {}
    for name in transforms:
        y = forward_logits(model, transform(xs, name), precision=precision, channels_last=True, keep_channels=True)
        y = invert(y[:, :1], name)
        if scale != 1.0:
            y = _context_centre(y.float())
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
    context: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fused (B, H, W) logits of a batch exactly as deployed (before temperature); `context` is the batch's
    0.5x context (required when `scales` holds 0.5, see :func:`scale_logits`)."""
    per_scale = [tta_logits(scale_logits(model, x, s, TTA_TRANSFORMS[tta], precision, context), tta) for s in scales]
    return fuse_scales(per_scale, fusion)


def prepare_model(model: torch.nn.Module, torch_compile: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """The model in eval mode and channels_last, compiled when the deployment says so (calibrate as you deploy)."""
    import torch

    model.eval().to(memory_format=torch.channels_last)
    return torch.compile(model) if torch_compile else model
