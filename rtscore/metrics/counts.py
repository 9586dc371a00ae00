"""A batch's pixel counts per tile, logit bin and label (0, 1, 255): what every per-tile histogram adds up. One
kernel in numpy (a tile at a time, buffers in cache) and its twin on an accelerator (only the counts leave the
device); both refuse NaN logits and labels outside {0, 1, 255}, naming the tile."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

from rtscore.data.tiles import IGNORE_INDEX
from rtscore.metrics.bins import ArrayLike, LogitBins, _bin_codes, _compute_dtype, _float_layout, to_numpy

_INVALID_CODE = -(1 << 40)  # any label outside {0, 1, 255} maps here so bincount refuses it


def as_tile_batch(logits: ArrayLike, target: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
    """Accept (B,H,W) or (B,1,H,W) logits and targets; return both as (B,H,W).

    Raises:
        ValueError: Other ranks, a channel dimension other than 1, or shapes that differ.
    """

    def squeeze(a: ArrayLike, name: str) -> ArrayLike:
        if a.ndim == 4 and a.shape[1] == 1:
            return a[:, 0]
        if a.ndim != 3:
            raise ValueError(f"{name} must be (B,H,W) or (B,1,H,W); got shape {tuple(a.shape)}")
        return a

    lg, tg = squeeze(logits, "logits"), squeeze(target, "target")
    if tuple(lg.shape) != tuple(tg.shape):
        raise ValueError(f"logits {tuple(lg.shape)} and target {tuple(tg.shape)} must have the same (B,H,W) shape")
    return lg, tg


def _label_codes(bins: LogitBins) -> np.ndarray:
    """Per label value, the offset of its row in a (neg, pos, ignore) histogram of 3 × n_bins."""
    lut = np.full(256, _INVALID_CODE, np.int64)
    lut[0] = 0
    lut[1] = bins.n_bins
    lut[IGNORE_INDEX] = 2 * bins.n_bins
    return lut


def _bad_input(x: np.ndarray, t: np.ndarray, tile_id: Hashable) -> ValueError:
    if np.isnan(x).any():
        return ValueError(f"tile {tile_id!r}: logits contain NaN; hint: check the model output for divergence")
    found = np.unique(t).tolist()
    return ValueError(f"tile {tile_id!r}: labels must be in {{0, 1, {IGNORE_INDEX}}}; found values {found}")


def _as_uint8_labels(t: np.ndarray, tile_id: Hashable) -> np.ndarray:
    if t.dtype == np.uint8:
        return t
    lo, hi = int(t.min(initial=0)), int(t.max(initial=0))
    if lo < 0 or hi > 255:
        raise ValueError(f"tile {tile_id!r}: labels must be in {{0, 1, {IGNORE_INDEX}}}; found range [{lo}, {hi}]")
    return t.astype(np.uint8)


def _tile_counts_numpy(
    logits: np.ndarray, target: np.ndarray, bins: LogitBins, tile_ids: Sequence[Hashable]
) -> np.ndarray:
    """(B, 3, n_bins) int64 counts (neg, pos, ignore) per tile; one tile at a time so buffers stay in cache."""
    b = logits.shape[0]
    n = bins.n_bins
    dtype = _compute_dtype(logits.dtype)
    flat_x, flat_t = logits.reshape(b, -1), target.reshape(b, -1)
    buf = np.empty(flat_x.shape[1], dtype)
    lut = _label_codes(bins)
    out = np.empty((b, 3, n), np.int64)
    for i in range(b):
        t = _as_uint8_labels(flat_t[i], tile_ids[i])
        try:
            codes = _bin_codes(flat_x[i], bins, dtype, buf)
            codes += np.take(lut, t)
            out[i] = np.bincount(codes, minlength=3 * n).reshape(3, n)
        except (FloatingPointError, ValueError):  # NaN, or a label code went negative
            raise _bad_input(flat_x[i], t, tile_ids[i]) from None
    return out


def _tile_counts_torch(
    logits: torch.Tensor, target: torch.Tensor, bins: LogitBins, tile_ids: Sequence[Hashable]
) -> np.ndarray:
    """Device-side twin of `_tile_counts_numpy`: only the (B, 3, n_bins) counts leave the accelerator."""
    b, n = logits.shape[0], bins.n_bins
    dev = logits.device
    x = logits.detach().reshape(b, -1)
    x = x if x.dtype == torch.float64 else x.float()
    z = round(-bins.lo * bins.scale)
    k = torch.floor(x * bins.scale).clamp_(-z, bins.core_bins - 1 - z)
    bins_of = k.long() + bins.zero_index
    if bins.tail_octaves:  # the numpy kernel's `_tail_codes`, on every pixel (cheap on an accelerator)
        itype, mantissa = _float_layout(np.float64 if x.dtype == torch.float64 else np.float32)
        shift = mantissa - bins.tail_bits
        base = int(np.array(bins.hi, np.float64 if x.dtype == torch.float64 else np.float32).view(itype)) >> shift
        bits = x.abs().contiguous().view(torch.int64 if itype is np.int64 else torch.int32).long()
        up = ((bits >> shift) - base).clamp_(0, bins.n_tail - 1) + (bins.n_tail + bins.core_bins)
        down = (bins.n_tail - 1) - (((bits - 1) >> shift) - base).clamp_(0, bins.n_tail - 1)
        bins_of = torch.where(x >= bins.hi, up, torch.where(x < bins.lo, down, bins_of))
    lut = torch.from_numpy(_label_codes(bins)).to(dev)
    t = target.detach().to(dev).reshape(b, -1).long()
    bad_label = (t < 0) | (t > 255)
    codes = bins_of + lut[t.clamp(0, 255)]
    bad = torch.isnan(k).any() | bad_label.any() | (codes < 0).any()
    if bool(bad):  # one host sync per batch
        x_cpu, t_cpu = x.cpu().numpy(), t.cpu().numpy()
        for i in range(b):
            if np.isnan(x_cpu[i]).any() or not np.isin(t_cpu[i], (0, 1, IGNORE_INDEX)).all():
                raise _bad_input(x_cpu[i], t_cpu[i], tile_ids[i])
    codes += (torch.arange(b, device=dev) * (3 * n)).unsqueeze(1)
    counts = torch.bincount(codes.reshape(-1), minlength=b * 3 * n)
    return counts.reshape(b, 3, n).cpu().numpy().astype(np.int64)


def tile_counts(
    logits: ArrayLike, target: ArrayLike, bins: LogitBins, tile_ids: Sequence[Hashable] | None = None
) -> np.ndarray:
    """(B, 3, n_bins) int64 pixel counts per tile and logit bin for labels (0, 1, 255), on the tensor's device.

    Raises:
        ValueError: Shape mismatch, NaN logits or labels outside {0, 1, 255} (naming the tile).
    """
    logits, target = as_tile_batch(logits, target)
    ids = list(tile_ids) if tile_ids is not None else list(range(logits.shape[0]))
    if isinstance(logits, torch.Tensor) and logits.device.type != "cpu":
        return _tile_counts_torch(logits, torch.as_tensor(target), bins, ids)
    return _tile_counts_numpy(to_numpy(logits), to_numpy(target), bins, ids)
