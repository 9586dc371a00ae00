"""Region palettes: vegetation and barren colours derived from the region name."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

# --------------------------------------------------------------------------------------------- palette


@dataclass(frozen=True)
class _Palette:
    """Region look: vegetation endmember colours and terrain character."""

    moist: np.ndarray  # green moist tundra
    dry: np.ndarray  # olive/brown shrub and tussock tundra
    wet: np.ndarray  # dark wet sedge
    lichen: np.ndarray  # pale lichen heath
    lichen_weight: float
    veg_bias: float
    relief_m: float
    brightness: float


def _region_palette(region: str) -> _Palette:
    """Deterministic region palette (crc32 of the name: stable across processes, unlike hash())."""
    r = np.random.default_rng(zlib.crc32(region.encode("utf-8")))
    brown = r.uniform(-1.0, 1.0)  # -1 greener regions, +1 browner (drier / later season)
    return _Palette(
        moist=np.array([74.0, 98.0, 56.0]) + brown * np.array([7.0, 2.0, -3.0]) + r.normal(0, 3.5, 3),
        dry=np.array([106.0, 104.0, 72.0]) + brown * np.array([8.0, 3.0, -2.0]) + r.normal(0, 3.5, 3),
        wet=np.array([58.0, 77.0, 54.0]) + r.normal(0, 3.0, 3),
        lichen=np.array([120.0, 121.0, 96.0]) + r.normal(0, 3.5, 3),
        lichen_weight=float(r.uniform(0.0, 0.45)),
        veg_bias=float(r.uniform(-0.2, 0.2)),
        relief_m=float(np.exp(r.uniform(np.log(6.0), np.log(40.0)))),
        brightness=float(r.uniform(0.93, 1.07)),
    )


def _barren_colour(rng: np.random.Generator) -> np.ndarray:
    """Grey-brown of exposed mud / thawed sediment (RTS floors and look-alike bare patches)."""
    grey = rng.uniform(0.0, 1.0)  # wet grey silt ... dry tan sediment
    base = np.array([152.0, 142.0, 124.0]) + grey * np.array([-12.0, -6.0, 2.0])
    col = base * rng.uniform(0.85, 1.12) + rng.normal(0.0, 2.0, 3)
    col[2] = min(col[2], col[1] - 3.0)  # never bluish/pink: mud is grey-brown
    return col
