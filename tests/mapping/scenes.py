"""Synthetic mapping campaigns for tests (no tests here): scenes that are mosaics of `rts synth-geotiff` tiles, one
scene without a valid pixel, one corrupt file, and a deployment package whose raster contract and normalisation
moments those scenes pass (no drift blocker).

The tiles come from :func:`rtscore.data.geotiff.synth.write_synthetic_geotiffs` (what ``rts synth-geotiff`` writes:
EPSG:3857, 4.77 m pixels, RGB + alpha with their colour interpretations). A scene is a ``rows x cols`` mosaic of
them, tiles taken round-robin from the rendered set, written as one GeoTIFF on the same CRS and pixel size, each
scene at its own place on a grid near 70 N (scenes do not touch). The package is tests/test_predict.py's tiny
random model with the moments of the tiles' valid RGB pixels as its normalisation stats.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import ColorInterp
from rasterio.transform import Affine

from rtscore.config.binding import RasterContract
from rtscore.config.generation import GenerationConfig, SyntheticConfig
from rtscore.data.geotiff.root import CRS
from rtscore.data.geotiff.synth import tile_origin, write_synthetic_geotiffs
from rtscore.data.normalization.stats import NormalizationStats
from rtscore.data.raster.bands import RGB_DIR
from rtscore.data.synthetic import PIXEL_SIZE_M
from tests.test_predict import write_package

TILE = 64  # the synthetic tiles' and the package's tile size
CONTRACT = RasterContract(crs=CRS, pixel_size=PIXEL_SIZE_M)  # what synth-geotiff writes
_GAP_TILES = 2  # empty tiles between two scenes on the grid


@dataclass(frozen=True)
class SceneSet:
    """The scenes of a campaign input directory: ids sorted as the campaign lists them."""

    root: Path  # the campaign input directory (one <scene_id>.tif each)
    valid: tuple[str, ...]  # scenes with valid pixels: mapped `done`
    nodata: str  # alpha 0 throughout: `skipped-full-nodata`
    corrupt: str  # a truncated GeoTIFF: `failed`
    grids: dict[str, tuple[int, int]]  # tiles per scene (rows, cols)

    @property
    def ids(self) -> list[str]:
        return sorted([*self.valid, self.nodata, self.corrupt])

    def path(self, scene_id: str) -> Path:
        return self.root / f"{scene_id}.tif"


def synth_tiles(root: Path, n_tiles: int = 8, seed: int = 3) -> list[np.ndarray]:
    """Render ``n_tiles`` synthetic tiles with ``rts synth-geotiff``'s writer under ``root``; their RGBA arrays."""
    n_pos = n_tiles // 2
    cfg = GenerationConfig(
        split="test",
        tile_size=TILE,
        seed=seed,
        synthetic=SyntheticConfig(
            n_positive=n_pos,
            n_negative=n_tiles - n_pos,
            n_full_nodata=0,
            regions=["alpha tundra"],
            extra_channels=[],
            partial_nodata_probability=0.0,
        ),
    )
    write_synthetic_geotiffs(cfg, root)
    tiles = []
    for path in sorted((root / RGB_DIR).glob("*.tif")):
        with rasterio.open(path) as src:
            assert src.crs.to_string() == CRS and src.res == (PIXEL_SIZE_M, PIXEL_SIZE_M)
            tiles.append(src.read())
    return tiles


def write_mosaic(path: Path, tiles: list[np.ndarray], grid: tuple[int, int], index: int, first: int) -> np.ndarray:
    """A ``grid`` mosaic of ``tiles`` (round-robin from ``first``) as scene ``index`` of the grid; its RGBA."""
    rows, cols = grid
    data = np.concatenate(
        [
            np.concatenate([tiles[(first + r * cols + c) % len(tiles)] for c in range(cols)], axis=2)
            for r in range(rows)
        ],
        axis=1,
    )
    x0, y0 = tile_origin("test", index * (4 + _GAP_TILES), TILE, PIXEL_SIZE_M)  # scenes at most 4 tiles wide
    profile = {
        "driver": "GTiff",
        "width": data.shape[2],
        "height": data.shape[1],
        "count": 4,
        "dtype": "uint8",
        "crs": CRS,
        "transform": Affine(PIXEL_SIZE_M, 0.0, x0, 0.0, -PIXEL_SIZE_M, y0),
        "tiled": True,
        "blockxsize": TILE,
        "blockysize": TILE,
    }
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
        dst.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
    return data


def write_scene_set(
    root: Path,
    tiles: list[np.ndarray],
    *,
    n_valid: int = 12,
    grid: tuple[int, int] = (2, 2),
    large: tuple[str, ...] = (),
    large_grid: tuple[int, int] = (4, 4),
    nodata_at: int = 6,
    corrupt_at: int = 10,
) -> SceneSet:
    """``n_valid`` mosaics plus a full-NoData and a corrupt scene under ``root``, ids ``s00``, ``s01``, ... in
    campaign order. The ids in ``large`` get ``large_grid`` tiles (slower to map), the others ``grid``.
    The NoData scene (alpha 0 throughout) has id number ``nodata_at``, the corrupt one (the first valid scene's
    file truncated to a third) ``corrupt_at``."""
    root.mkdir(parents=True)
    n = n_valid + 2
    ids = [f"s{k:02d}" for k in range(n)]
    nodata, corrupt = ids[nodata_at], ids[corrupt_at]
    valid = [i for i in ids if i not in (nodata, corrupt)]
    grids: dict[str, tuple[int, int]] = {}
    for k, scene_id in enumerate(ids):
        if scene_id == corrupt:
            continue
        g = large_grid if scene_id in large else grid
        grids[scene_id] = g
        data = write_mosaic(root / f"{scene_id}.tif", tiles, g, k, first=k)
        if scene_id == nodata:  # every pixel NoData: rewrite with alpha 0
            data[3] = 0
            with rasterio.open(root / f"{scene_id}.tif", "r+") as dst:
                dst.write(data)
    good = (root / f"{valid[0]}.tif").read_bytes()
    (root / f"{corrupt}.tif").write_bytes(good[: len(good) // 3])  # a GeoTIFF cut short (an interrupted copy)
    grids[corrupt] = grids[valid[0]]
    return SceneSet(root, tuple(valid), nodata, corrupt, grids)


def tile_stats(tiles: list[np.ndarray]) -> NormalizationStats:
    """The RGB moments of the tiles' valid pixels (alpha > 0): a package trained on such tiles."""
    rgb = np.concatenate([t[:3][:, t[3] > 0] for t in tiles], axis=1).astype(np.float64)
    return NormalizationStats(
        channel_names=["R", "G", "B"],
        mean=rgb.mean(axis=1),
        std=rgb.std(axis=1),
        n_tiles_used=len(tiles),
        dataset_version="synth-geotiff",
        computed_date="2026-01-01T00:00:00Z",
    )


def write_scene_package(pkg: Path, tiles: list[np.ndarray]) -> Path:
    """A tiny deployment package the scenes pass: synth-geotiff's raster contract, the tiles' moments."""
    return write_package(pkg, stats=tile_stats(tiles), raster=CONTRACT)
