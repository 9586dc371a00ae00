"""The input transform (guide §4.1, §4.4): raw bound channels clipped to the training percentiles, NoData filled
and normalised; the one of training, evaluation, calibration, predict and drift."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rtscore.data.normalization.stats import NormalizationStats


def fill_where(channels: np.ndarray, where: np.ndarray, fill_values: Sequence[float], axis: int) -> None:
    """In place: channel c at ``where`` becomes ``fill_values[c]`` (rounded/clipped for integer dtypes)."""
    planes = np.moveaxis(channels, axis, 0)  # a view: writes land in ``channels``
    if len(fill_values) != planes.shape[0]:
        raise ValueError(f"{len(fill_values)} fill values for {planes.shape[0]} channels")
    fill = np.asarray(fill_values, dtype=np.float64)
    if np.issubdtype(channels.dtype, np.integer):
        info = np.iinfo(channels.dtype)
        fill = np.clip(np.rint(fill), info.min, info.max)
    for plane, value in zip(planes, fill.astype(channels.dtype), strict=True):
        plane[where] = value


def normalize_in_place(
    out: np.ndarray, mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray, axis: int
) -> None:
    """float32 ``out`` becomes ``(out - mean) / std``; in place, so no full-size temporaries."""
    shape = [1] * out.ndim
    shape[axis] = -1
    m = np.asarray(mean, dtype=np.float32).reshape(shape)
    s = np.asarray(std, dtype=np.float32).reshape(shape)
    if m.size != out.shape[axis] or s.size != m.size:
        raise ValueError(f"mean/std of length {m.size}/{s.size} for {out.shape[axis]} channels")
    out -= m
    out /= s


@dataclass(frozen=True)
class InputTransform:
    """Raw bound channels -> model input: the one deterministic transform of training, evaluation, calibration,
    ``predict`` and (its clipping) ``drift`` (guide §4.1, §4.4). Its parameters travel in the package:
    mean, std and clip bounds in ``normalization_stats.json``, the NoData fill in ``model_config.yaml``.

    1. :meth:`clip`: every channel clipped to the training percentiles ``[clip_min, clip_max]`` when the stats
       carry them (``normalization.clip_percentiles``); RGB stays uint8 (its bounds are whole numbers).
    2. :meth:`normalise`: the (C, H, W) float32 stack; with ``nodata_fill`` (``data.nodata_handling``) alpha-0
       pixels take each channel's raw training mean; then ``(x - mean) / std``.

    Training runs colour augmentation on the clipped uint8 RGB between the two steps; every other pass calls
    the transform itself (:meth:`__call__`).
    """

    mean: np.ndarray
    std: np.ndarray
    clip_min: np.ndarray | None = None
    clip_max: np.ndarray | None = None
    nodata_fill: bool = True

    @classmethod
    def from_stats(cls, stats: NormalizationStats, *, nodata_fill: bool = True) -> InputTransform:
        return cls(
            mean=np.asarray(stats.mean, np.float32),
            std=np.asarray(stats.std, np.float32),
            clip_min=None if stats.clip_min is None else np.asarray(stats.clip_min, np.float64),
            clip_max=None if stats.clip_max is None else np.asarray(stats.clip_max, np.float64),
            nodata_fill=nodata_fill,
        )

    def clip(self, rgb: np.ndarray, extra: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Step 1 on (3, H, W) uint8 RGB and (E, H, W) float32 extras (new arrays; the inputs are untouched)."""
        if self.clip_min is None or self.clip_max is None:
            return rgb, extra
        lo, hi = self.clip_min[:, None, None], self.clip_max[:, None, None]
        rgb = np.clip(rgb, lo[:3], hi[:3]).astype(np.uint8)
        if extra is not None:
            extra = np.clip(extra, lo[3:], hi[3:]).astype(np.float32)
        return rgb, extra

    def normalise(self, rgb: np.ndarray, extra: np.ndarray | None, alpha: np.ndarray) -> np.ndarray:
        """Step 2: the normalised (C, H, W) float32 stack of RGB + extras (alpha-0 pixels exactly 0 with the fill).

        CHW because per-channel arithmetic on contiguous planes is several times faster than on HWC pixels.
        """
        stack = np.empty((self.mean.size, *rgb.shape[1:]), dtype=np.float32)
        stack[:3] = rgb
        if extra is not None:
            stack[3:] = extra
        nodata = alpha == 0
        if self.nodata_fill and nodata.any():
            fill_where(stack, nodata, self.mean.tolist(), axis=0)
        normalize_in_place(stack, self.mean, self.std, axis=0)
        return stack

    def __call__(self, rgb: np.ndarray, extra: np.ndarray | None, alpha: np.ndarray) -> np.ndarray:
        """Steps 1 and 2: the model input of a tile or raster window."""
        return self.normalise(*self.clip(rgb, extra), alpha)
