"""Reading a tile's bound bands from its rasters: the one reader of GeoTIFF ingestion, ``predict`` and ``drift``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rtscore.config.binding import ExtraChannel, InputBinding

if TYPE_CHECKING:
    from rasterio.io import DatasetReader


def unreadable_extra(binding: InputBinding, band_count: int) -> list[ExtraChannel]:
    """The EXTRA channels whose bound band is beyond an EXTRA raster of ``band_count`` bands."""
    return [c for c in binding.extra if c.band >= band_count]


def read_bound_bands(
    binding: InputBinding, rgb: DatasetReader, extra: DatasetReader | None, window: Any = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(3, h, w) RGB as stored (uint8) and (E, h, w) float32 EXTRA channels (None without any), each channel read
    from the band the binding names (rasterio counts bands from 1, the binding from 0)."""
    rgb_px = rgb.read([c.band + 1 for c in binding.channels[:3]], window=window)
    if not binding.extra_bands:
        return rgb_px, None
    if extra is None:
        raise ValueError(f"EXTRA channels {binding.extra_names} need an EXTRA raster")
    bands = [b + 1 for b in binding.extra_bands]
    return rgb_px, extra.read(bands, window=window).astype(np.float32, copy=False)
