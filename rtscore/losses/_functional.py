"""Pure loss kernels on logits: input preparation, per-pixel terms, region sums and their reductions."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from rtscore.data.tiles import IGNORE_INDEX
from rtscore.runtime import all_reduce

ClassWeighting = Literal["linear", "sqrt", "log"]

_RANKS: ContextVar[int] = ContextVar("rts_loss_ranks", default=1)


@contextmanager
def global_batch(world_size: int) -> Iterator[None]:
    """Within this block every loss reduces over the global batch of ``world_size`` ranks (one seed trained on
    several devices), so that DDP's average of the ranks' gradients is the one-device gradient of the loss:

    - a pixel mean (``masked_mean``) divides this rank's sum by the valid pixels of every rank and multiplies by
      ``world_size`` (DDP divides by it again): the ranks' losses average to the global batch's mean;
    - a region loss (Dice, Tversky) all-reduces its soft confusion sums with autograd, so every rank holds the
      global batch's value and its gradient flows back to every rank's pixels.

    Outside (validation, one rank) the losses are the plain per-batch ones.
    """
    token = _RANKS.set(world_size)
    try:
        yield
    finally:
        _RANKS.reset(token)


def _ranks() -> int:
    return _RANKS.get()


# --------------------------------------------------------------------------- argument checks
def check_range(
    name: str, value: float, low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = False
) -> float:
    """Return ``value`` if it lies in the interval, else raise a ValueError naming ``name`` and the interval.

    Args:
        name: What the caller calls the value (``"alpha"``, ``"loss.tversky_alpha"``).
        value: The value to check.
        low: Lower bound.
        high: Upper bound (``inf``: any finite value).
        low_open: Exclude ``low`` itself.
        high_open: Exclude ``high`` itself.
    """
    value = float(value)
    below = value <= low if low_open else value < low
    above = value >= high if high_open or math.isinf(high) else value > high  # inf itself is never accepted
    if math.isnan(value) or below or above:
        left, right = "(" if low_open else "[", ")" if high_open or math.isinf(high) else "]"
        upper = "inf" if math.isinf(high) else f"{high:g}"
        raise ValueError(f"{name} must be in {left}{low:g}, {upper}{right}; got {value:g}")
    return value


# --------------------------------------------------------------------------- input preparation
def prepare_inputs(logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Shape-check and mask the inputs of every loss.

    Args:
        logits: Raw logits (B,1,H,W) or (B,H,W).
        target: Integer labels (B,H,W) in {0, 1, 255}; 255 = ignore. Values are not checked (that would sync).
        soft_target: Optional float targets (B,H,W) in [0, 1] replacing 0/1 at valid pixels.

    Returns:
        ``(x, t, valid)``, all (B,H,W): logits in at least float32 (bf16/fp16 are upcast) with ignored pixels
        set to 0, float targets with ignored pixels set to 0, and the bool valid mask. Zeroing the ignored
        logits through ``torch.where`` keeps every downstream term finite there and routes exactly zero
        gradient back to them, whatever their value.
    """
    if logits.ndim == 4:
        if logits.shape[1] != 1:
            raise ValueError(f"expected logits (B,1,H,W) or (B,H,W) for one class; got {tuple(logits.shape)}")
        logits = logits[:, 0]
    if logits.ndim != 3 or logits.shape != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match target {tuple(target.shape)}; expected (B,H,W) for both "
            "(logits may carry a channel axis of size 1)"
        )
    if target.dtype.is_floating_point or target.dtype == torch.bool:
        raise ValueError(f"target must hold integer labels {{0, 1, {IGNORE_INDEX}}}; got dtype {target.dtype}")
    if soft_target is not None and soft_target.shape != target.shape:
        raise ValueError(f"soft_target {tuple(soft_target.shape)} does not match target {tuple(target.shape)}")
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))
    valid = target != IGNORE_INDEX
    t = target.to(x.dtype) if soft_target is None else soft_target.to(x.dtype)
    zero = x.new_zeros(())
    return torch.where(valid, x, zero), torch.where(valid, t, zero), valid


def masked_mean(terms: Tensor, valid: Tensor) -> Tensor:
    """Mean of ``terms`` over ``valid`` pixels; 0 (still attached to the graph) when none is valid."""
    total = torch.where(valid, terms, terms.new_zeros(())).sum()
    if (n := _ranks()) > 1:  # the global batch's mean: see global_batch
        count = all_reduce(valid.sum())
        return total * n / count.clamp_min(1).to(terms.dtype)
    return total / valid.sum().clamp_min(1).to(terms.dtype)


def any_valid(valid: Tensor) -> Tensor:
    """Whether the batch (the global batch within :func:`global_batch`) has a valid pixel, as a bool tensor."""
    if _ranks() > 1:
        return all_reduce(valid.sum()) > 0
    return valid.any()


# --------------------------------------------------------------------------- per-pixel terms
def bce_terms(x: Tensor, t: Tensor, pos_weight: Tensor | float | None = None) -> Tensor:
    """Per-pixel BCE on logits, ``-(w·t·log p + (1-t)·log(1-p))``, with ``log p`` from ``logsigmoid``.

    Same values as ``F.binary_cross_entropy_with_logits(x, t, pos_weight=w, reduction="none")``; ``t`` may be soft.
    """
    log_p, log_1mp = F.logsigmoid(x), F.logsigmoid(-x)
    pos = t * log_p if pos_weight is None else pos_weight * t * log_p
    return -(pos + (1.0 - t) * log_1mp)


def focal_terms(x: Tensor, t: Tensor, gamma: float, alpha: float) -> Tensor:
    """Per-pixel focal loss ``alpha_t · (1 - p_t)^gamma · BCE(x, t)`` on logits.

    For hard ``t`` this is ``-alpha_t (1 - p_t)^gamma log(p_t)`` with ``alpha_t = alpha`` on positives and
    ``1 - alpha`` on negatives. Soft ``t`` uses the standard generalisation (torchvision's
    ``sigmoid_focal_loss``): ``p_t = p·t + (1-p)(1-t)``, ``alpha_t = alpha·t + (1-alpha)(1-t)`` and the BCE
    against ``t``. The modulating factor is ``exp(gamma · log(1 - p_t))`` with
    ``log(1 - p_t) = logaddexp(log p + log(1-t), log(1-p) + log t)``, all from ``logsigmoid``, so it stays
    finite and differentiable at any finite logit (``log 0 = -inf`` terms only meet constants).
    """
    ce = bce_terms(x, t)
    alpha_t = alpha * t + (1.0 - alpha) * (1.0 - t)
    if gamma == 0.0:
        return alpha_t * ce
    log_p, log_1mp = F.logsigmoid(x), F.logsigmoid(-x)
    log_1m_pt = torch.logaddexp(log_p + torch.log1p(-t), log_1mp + torch.log(t))
    return alpha_t * torch.exp(gamma * log_1m_pt) * ce


# --------------------------------------------------------------------------- region terms
def soft_confusion(x: Tensor, t: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Soft ``(TP, FN, FP)`` summed over every valid pixel of the batch (micro): ``Σpt, Σ(1-p)t, Σp(1-t)``."""
    p = torch.where(valid, torch.sigmoid(x), x.new_zeros(()))
    t = torch.where(valid, t, t.new_zeros(()))
    tp = (p * t).sum()
    if _ranks() > 1:  # the global batch's sums, differentiable: see global_batch
        tp, t_sum, p_sum = all_reduce(torch.stack([tp, t.sum(), p.sum()])).unbind()
        return tp, t_sum - tp, p_sum - tp
    return tp, t.sum() - tp, p.sum() - tp


def tversky_index(tp: Tensor, fn: Tensor, fp: Tensor, alpha: float, beta: float, smooth: float, eps: float) -> Tensor:
    """``(TP + s) / (TP + alpha·FN + beta·FP + s)``; the denominator is floored at ``eps`` (safe for ``s = 0``)."""
    return (tp + smooth) / (tp + alpha * fn + beta * fp + smooth).clamp_min(eps)


# --------------------------------------------------------------------------- reduced losses
def bce_loss(
    logits: Tensor, target: Tensor, soft_target: Tensor | None = None, *, pos_weight: Tensor | float | None = None
) -> Tensor:
    """BCE with logits, mean over valid pixels (soft targets allowed; ``pos_weight`` multiplies positive terms)."""
    x, t, valid = prepare_inputs(logits, target, soft_target)
    return masked_mean(bce_terms(x, t, pos_weight), valid)


def focal_loss(
    logits: Tensor, target: Tensor, soft_target: Tensor | None = None, *, gamma: float = 2.0, alpha: float = 0.25
) -> Tensor:
    """Sigmoid focal loss (see ``focal_terms``), mean over valid pixels."""
    x, t, valid = prepare_inputs(logits, target, soft_target)
    return masked_mean(focal_terms(x, t, gamma, alpha), valid)


def tversky_loss(
    logits: Tensor,
    target: Tensor,
    soft_target: Tensor | None = None,
    *,
    alpha: float = 0.3,
    beta: float = 0.7,
    smooth: float = 1.0,
    eps: float = 1e-7,
) -> Tensor:
    """``1 - (TP + s)/(TP + alpha·FN + beta·FP + s)`` on sigmoid probabilities, one region over the whole batch.

    ``alpha`` weighs false negatives, ``beta`` false positives (guide §5.2). A batch without valid pixels gives 0.
    """
    x, t, valid = prepare_inputs(logits, target, soft_target)
    tp, fn, fp = soft_confusion(x, t, valid)
    loss = 1.0 - tversky_index(tp, fn, fp, alpha, beta, smooth, eps)
    return torch.where(any_valid(valid), loss, loss * 0.0)


def dice_loss(
    logits: Tensor, target: Tensor, soft_target: Tensor | None = None, *, smooth: float = 1.0, eps: float = 1e-7
) -> Tensor:
    """Soft Dice ``1 - (2Σpt + s)/(Σp + Σt + s)`` on sigmoid probabilities, one region over the whole batch.

    A batch without valid pixels gives 0.
    """
    x, t, valid = prepare_inputs(logits, target, soft_target)
    tp, fn, fp = soft_confusion(x, t, valid)
    # Σp + Σt = 2TP + FN + FP
    loss = 1.0 - (2.0 * tp + smooth) / (2.0 * tp + fn + fp + smooth).clamp_min(eps)
    return torch.where(any_valid(valid), loss, loss * 0.0)


def class_balanced_pos_weight(n_bg: Tensor | float, n_rts: Tensor | float, weighting: ClassWeighting) -> Tensor:
    """Positive-class weight from background/RTS pixel counts (guide §5.4).

    ``ratio = n_bg / n_rts``; linear: ``ratio``, sqrt: ``sqrt(ratio)``, log: ``log(ratio)``. The weight is floored
    at 1 (positives are never down-weighted, so ``ratio <= 1`` and small log weights give 1) and is 1 when there
    are no positive pixels.
    """
    n_bg_t = torch.as_tensor(n_bg, dtype=torch.float64)
    n_rts_t = torch.as_tensor(n_rts, dtype=torch.float64, device=n_bg_t.device)
    ratio = n_bg_t / n_rts_t.clamp_min(1.0)
    match weighting:
        case "linear":
            weight = ratio
        case "sqrt":
            weight = ratio.sqrt()
        case "log":
            weight = ratio.clamp_min(1.0).log()
        case _:
            raise ValueError(f"class weighting must be one of linear, sqrt, log; got {weighting!r}")
    return torch.where(n_rts_t > 0, weight.clamp_min(1.0), torch.ones_like(weight))


def class_balanced_bce_loss(
    logits: Tensor, target: Tensor, soft_target: Tensor | None = None, *, pos_weight: Tensor | float
) -> Tensor:
    """BCE with a fixed positive-class weight (from dataset-level counts, ``class_balanced_pos_weight``), mean
    over valid pixels."""
    x, t, valid = prepare_inputs(logits, target, soft_target)
    if isinstance(pos_weight, Tensor):
        pos_weight = pos_weight.to(device=x.device, dtype=x.dtype)
    return masked_mean(bce_terms(x, t, pos_weight), valid)
