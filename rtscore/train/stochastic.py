"""Stochastic layers of one seed on several ranks drawing what one device draws (guide §9.1, §2.2).

Every rank is seeded alike (:func:`rtscore.train.determinism.seed_everything`), so a dropout, drop-path or
drop-connect layer left as it is draws on each rank the mask of a batch of ``b`` tiles from the same generator
state: the ranks drop the same paths on different tiles, and no rank draws what one device draws for the global
batch. :func:`make_rank_consistent` changes every such layer of a model so that each rank draws the random numbers
of the *whole* global batch, in the order and with the calls one device makes, and keeps its own rows: rank ``r``
of ``N`` with ``b`` tiles holds rows ``[r * b, (r + 1) * b)`` of the global batch, the contiguous slice the
sampler gives it (:class:`rtscore.data.loading.sampler.BalancedCurriculumSampler`). The generators then advance
alike on every rank and as on one device, so the masks are the one-device masks, step after step.

The layers it knows (exact types; a layer's probability is read at each forward):

- ``nn.Dropout`` (the DPT head's, timm's attention and MLP dropouts), ``nn.Dropout1d/2d/3d``;
- timm's ``DropPath`` (timm-efficientnet, mit_b* / SegFormer, the timm ``tu-`` encoders);
- smp's EfficientNet ``MBConvBlock`` drop-connect (``efficientnet-b*``): smp's module-level ``drop_connect`` is
  replaced by one that does what smp's does unless a rank-consistent block is calling it.

The noise is drawn by the layer's own function (torch's dropout, timm's ``drop_path``, smp's ``drop_connect``)
applied to ones shaped like the global batch's noise, so the generator calls are those of one device; an
element-wise dropout's ones are ``N`` times the layer's input (transient memory on each rank).

Any other layer that may draw at random in training (a class named like dropout / drop-path / noise / stochastic
depth with a non-zero probability, or a fused attention with ``attn_drop > 0``, whose dropout torch's
scaled-dot-product kernel draws) makes :func:`make_rank_consistent` refuse, naming it: a multi-rank run stops at
its start instead of drifting silently from the one-device run. One rank: nothing is changed (the caller applies
it only with several ranks). Assumes what every model :mod:`rtscore.models.factory` builds does: the batch is the
leading dimension of a stochastic layer's input (for an attention dropout, the batch-major first dimension).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rtscore.train.errors import TrainingError


class StochasticLayerError(TrainingError):
    """A model layer draws at random in training in a way the ranks of a seed cannot share."""


# (rank, world size) of the rank-consistent smp MBConvBlock running now; None: smp's own drop_connect.
_DROP_CONNECT_SLICE: ContextVar[tuple[int, int] | None] = ContextVar("rts_drop_connect_slice", default=None)
_STOCHASTIC_NAME = re.compile(r"drop|noise|stochastic|shake", re.IGNORECASE)
_PROBABILITY_ATTRS = ("p", "drop_prob", "drop_rate", "prob", "rate")


def rank_rows(noise: Tensor, local: int, rank: int) -> Tensor:
    """Rank ``rank``'s rows ``[rank * local, (rank + 1) * local)`` of a global batch's ``noise``."""
    return noise[rank * local : (rank + 1) * local]


def global_ones(x: Tensor, world_size: int, shape: tuple[int, ...] | None = None) -> Tensor:
    """Ones shaped like the global batch of ``x`` (``world_size`` times its rows; ``shape``: the trailing sizes, by
    default ``x``'s), laid out in memory as ``x`` is (as ``torch.empty_like`` would lay out the global batch)."""
    size = (x.shape[0] * world_size, *(x.shape[1:] if shape is None else shape))
    if x.is_contiguous() or shape is not None:
        return torch.ones(size, dtype=x.dtype, device=x.device)
    order = sorted(range(x.dim()), key=lambda d: x.stride(d), reverse=True)  # outermost dimension first
    ones = torch.ones([size[d] for d in order], dtype=x.dtype, device=x.device)
    return ones.permute([order.index(d) for d in range(x.dim())])


class _RankSlice:
    """What a rank-consistent layer knows: its rank and the number of ranks."""

    rank: int
    world_size: int

    def _set_slice(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size


class RankConsistentDropout(nn.Dropout, _RankSlice):
    """``nn.Dropout`` whose mask is this rank's rows of the mask one device draws for the global batch."""

    def forward(self, input: Tensor) -> Tensor:
        if not self.training or self.p == 0 or input.numel() == 0:
            return super().forward(input)
        noise = rank_rows(F.dropout(global_ones(input, self.world_size), self.p, True), input.shape[0], self.rank)
        return input.mul_(noise) if self.inplace else input * noise


class _RankConsistentFeatureDropout(_RankSlice):
    """``nn.Dropout1d/2d/3d`` (one draw per sample and channel) drawing the global batch's channel mask: mixed in
    before the torch class, whose ``forward`` it calls when nothing is drawn."""

    dims: int
    functional: Callable[..., Tensor]
    p: float
    inplace: bool
    training: bool

    def forward(self, input: Tensor) -> Tensor:
        if not self.training or self.p == 0 or input.numel() == 0:
            return super().forward(input)  # type: ignore[misc]
        if input.dim() != self.dims:
            raise StochasticLayerError(
                f"{type(self).__name__} on several ranks needs a batched {self.dims}-d input (the batch first); "
                f"got shape {tuple(input.shape)}"
            )
        ones = global_ones(input, self.world_size, (input.shape[1],) + (1,) * (self.dims - 2))
        noise = rank_rows(type(self).functional(ones, self.p, True), input.shape[0], self.rank)
        return input.mul_(noise) if self.inplace else input * noise


class RankConsistentDropout1d(_RankConsistentFeatureDropout, nn.Dropout1d):
    dims, functional = 3, F.dropout1d


class RankConsistentDropout2d(_RankConsistentFeatureDropout, nn.Dropout2d):
    dims, functional = 4, F.dropout2d


class RankConsistentDropout3d(_RankConsistentFeatureDropout, nn.Dropout3d):
    dims, functional = 5, F.dropout3d


@functools.cache
def _drop_path_class() -> tuple[type[nn.Module], type[nn.Module]]:
    """timm's ``DropPath`` and its rank-consistent subclass (timm imported on first use)."""
    from timm.layers import DropPath, drop_path

    class RankConsistentDropPath(DropPath, _RankSlice):
        """timm's ``DropPath`` keeping this rank's rows of the per-sample mask of the global batch."""

        def forward(self, x: Tensor) -> Tensor:
            if not self.training or self.drop_prob == 0.0:
                return super().forward(x)
            ones = global_ones(x, self.world_size, (1,) * (x.dim() - 1))
            noise = drop_path(ones, self.drop_prob, True, self.scale_by_keep)
            return x * rank_rows(noise, x.shape[0], self.rank)

    return DropPath, RankConsistentDropPath


@functools.cache
def _mbconv_class() -> tuple[type[nn.Module], type[nn.Module]]:
    """smp's EfficientNet ``MBConvBlock`` and its rank-consistent subclass; smp's module-level ``drop_connect``
    replaced, once, by :func:`_rank_drop_connect` around smp's own (the same as smp's outside such a block)."""
    from segmentation_models_pytorch.encoders import _efficientnet as eff

    smp_drop_connect = eff.drop_connect
    eff.drop_connect = functools.partial(_rank_drop_connect, smp_drop_connect)

    class RankConsistentMBConvBlock(eff.MBConvBlock, _RankSlice):
        """smp's ``MBConvBlock`` whose drop-connect keeps this rank's rows of the global batch's mask."""

        def forward(self, inputs: Tensor, drop_connect_rate: float | None = None) -> Tensor:
            token = _DROP_CONNECT_SLICE.set((self.rank, self.world_size))
            try:
                return super().forward(inputs, drop_connect_rate)
            finally:
                _DROP_CONNECT_SLICE.reset(token)

    return eff.MBConvBlock, RankConsistentMBConvBlock


def _rank_drop_connect(smp_drop_connect: Callable[..., Tensor], inputs: Tensor, p: float, training: bool) -> Tensor:
    """smp's ``drop_connect(inputs, p, training)``; inside a rank-consistent block, with this rank's rows of the
    mask smp draws for the global batch (``ones / keep * binary``, then times the inputs)."""
    where = _DROP_CONNECT_SLICE.get()
    if where is None or not training or not p:
        return smp_drop_connect(inputs, p=p, training=training)
    rank, world_size = where
    noise = smp_drop_connect(global_ones(inputs, world_size, (1,) * (inputs.dim() - 1)), p=p, training=True)
    return inputs * rank_rows(noise, inputs.shape[0], rank)


def _replacements() -> dict[type[nn.Module], type[nn.Module]]:
    """Each known stochastic layer type and its rank-consistent subclass."""
    drop_path, rank_drop_path = _drop_path_class()
    mbconv, rank_mbconv = _mbconv_class()
    return {
        nn.Dropout: RankConsistentDropout,
        nn.Dropout1d: RankConsistentDropout1d,
        nn.Dropout2d: RankConsistentDropout2d,
        nn.Dropout3d: RankConsistentDropout3d,
        drop_path: rank_drop_path,
        mbconv: rank_mbconv,
    }


def make_rank_consistent(model: nn.Module, rank: int, world_size: int) -> nn.Module:
    """Every stochastic layer of ``model`` made to draw the global batch's noise and keep rank ``rank``'s rows
    (in place: the layers' classes are swapped, so weights, state-dict keys and modes stay); ``model`` returned.

    Raises:
        StochasticLayerError: a layer may draw at random in training and is not one this module knows (named).
        ValueError: ``rank`` is not one of ``world_size`` ranks.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not one of {world_size} ranks")
    refused = [f"{name or '<model>'} ({why})" for name, why in unknown_stochastic_layers(model)]
    if refused:
        raise StochasticLayerError(
            f"the model draws at random in training in layers the ranks of a seed cannot share: {'; '.join(refused)}."
            " On several ranks each would draw the same noise for different tiles, and the run would not be the "
            "one-device run. Train it on one device (training.devices 1) or set these layers' probability to 0."
        )
    replace = _replacements()
    for module in model.modules():
        swap = replace.get(type(module))
        if swap is not None:
            module.__class__ = swap
        if isinstance(module, _RankSlice):  # swapped now, or by an earlier call: this rank's slice
            module._set_slice(rank, world_size)
    return model


def unknown_stochastic_layers(model: nn.Module) -> Iterator[tuple[str, str]]:
    """``(name, reason)`` of each layer of ``model`` that may draw at random in training and that
    :func:`make_rank_consistent` cannot make rank-consistent."""
    known = set(_replacements()) | set(_replacements().values())
    for name, module in model.named_modules():
        cls = type(module)
        attn_drop = getattr(module, "attn_drop", None)
        if getattr(module, "fused_attn", False) and isinstance(attn_drop, nn.Dropout) and attn_drop.p > 0:
            yield name, f"{cls.__name__}: fused attention with attn_drop p={attn_drop.p}, drawn inside the kernel"
        elif isinstance(module, nn.MultiheadAttention) and module.dropout > 0:
            yield name, f"nn.MultiheadAttention dropout={module.dropout}, drawn inside the attention"
        elif cls not in known and _STOCHASTIC_NAME.search(cls.__name__):
            p = next((getattr(module, a) for a in _PROBABILITY_ATTRS if hasattr(module, a)), None)
            if not isinstance(p, int | float) or p != 0:
                yield name, f"{cls.__module__}.{cls.__qualname__}" + (f" p={p}" if p is not None else "")
