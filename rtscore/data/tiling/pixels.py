"""The pixels of `rts tile`: the fixed tile grid, the scenes read window by window, and each tile's RGB, validity and
EXTRA bands warped onto the grid (bilinear for values, nearest for validity; NDVI computed, companion rasters cut).
The run, its identity and resumption are in `rtscore.data.tiling.run`."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rtscore.config.binding import RasterBandMap
from rtscore.config.tiling import BandSource, TilingConfig
from rtscore.data.raster.bands import valid_mask
from rtscore.errors import PipelineError

if TYPE_CHECKING:
    from affine import Affine
    from rasterio.io import DatasetReader


class TilingError(PipelineError, ValueError):
    """Scenes, polygons or an output directory `rts tile` cannot use; the message names the file and the problem."""


MARGIN_PX = 2  # source pixels read beyond a tile's footprint, for the resampling kernel
_OPEN_DATASETS = 8  # rasters kept open at once (a mosaic of many quads opens each as its tiles need it)


@dataclass(frozen=True)
class GridCell:
    """One tile of the fixed grid."""

    col: int
    row: int
    tile_size: int
    pixel_size: float

    @property
    def tile_id(self) -> str:
        return f"c{self.col}_r{self.row}"

    @property
    def span(self) -> float:
        return self.tile_size * self.pixel_size

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        s = self.span
        return self.col * s, self.row * s, (self.col + 1) * s, (self.row + 1) * s

    @property
    def transform(self) -> Affine:
        from affine import Affine

        x0, _, _, y1 = self.bounds
        return Affine(self.pixel_size, 0.0, x0, 0.0, -self.pixel_size, y1)

    @property
    def centre(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.bounds
        return (x0 + x1) / 2, (y0 + y1) / 2


def grid_cells(bounds: tuple[float, float, float, float], tile_size: int, pixel_size: float) -> list[GridCell]:
    """The grid cells that ``bounds`` (grid CRS) touches, north to south, west to east."""
    span = tile_size * pixel_size
    x0, y0, x1, y1 = bounds
    cols = range(math.floor(x0 / span), math.ceil(x1 / span))
    rows = range(math.ceil(y1 / span) - 1, math.floor(y0 / span) - 1, -1)
    return [GridCell(c, r, tile_size, pixel_size) for r in rows for c in cols]


@dataclass(frozen=True)
class Scene:
    """A scene checked for tiling: its footprint on the grid CRS and its R, G, B (and alpha) bands."""

    path: Path
    bounds: tuple[float, float, float, float]  # in the grid CRS
    bands: RasterBandMap


class Datasets:
    """A few rasters kept open (least recently used closed first), so a tile's scenes open once per run of tiles."""

    def __init__(self, limit: int = _OPEN_DATASETS) -> None:
        self.limit = limit
        self.open: OrderedDict[Path, DatasetReader] = OrderedDict()

    def get(self, path: Path) -> DatasetReader:
        import rasterio

        if path in self.open:
            self.open.move_to_end(path)
            return self.open[path]
        try:
            ds = rasterio.open(path)
        except rasterio.errors.RasterioIOError as err:
            raise TilingError(f"{path}: not a readable raster ({err})") from None
        self.open[path] = ds
        while len(self.open) > self.limit:
            self.open.popitem(last=False)[1].close()
        return ds

    def close(self) -> None:
        for ds in self.open.values():
            ds.close()
        self.open.clear()


# --------------------------------------------------------------------------------------------- pixels


def _source_window(src: DatasetReader, cell: GridCell, grid_crs: str) -> Any:
    """The window of ``src`` covering ``cell`` (plus :data:`MARGIN_PX`), clipped to the raster; None: no overlap."""
    from rasterio.warp import transform
    from rasterio.windows import Window

    x0, y0, x1, y1 = cell.bounds
    t = np.linspace(0.0, 1.0, 9)
    xs = np.concatenate([x0 + (x1 - x0) * t, np.full(9, x1), x1 - (x1 - x0) * t, np.full(9, x0)])
    ys = np.concatenate([np.full(9, y0), y0 + (y1 - y0) * t, np.full(9, y1), y1 - (y1 - y0) * t])
    sx, sy = transform(grid_crs, src.crs, xs.tolist(), ys.tolist())
    cols, rows = ~src.transform @ (np.asarray(sx), np.asarray(sy))
    if not (np.isfinite(cols).all() and np.isfinite(rows).all()):
        return None
    c0 = max(math.floor(float(np.min(cols))) - MARGIN_PX, 0)
    r0 = max(math.floor(float(np.min(rows))) - MARGIN_PX, 0)
    c1 = min(math.ceil(float(np.max(cols))) + MARGIN_PX, src.width)
    r1 = min(math.ceil(float(np.max(rows))) + MARGIN_PX, src.height)
    if c1 <= c0 or r1 <= r0:
        return None
    return Window(c0, r0, c1 - c0, r1 - r0)


def _warp(
    data: np.ndarray, src: DatasetReader, window: Any, cell: GridCell, grid_crs: str, resampling: str, nodata: float
) -> np.ndarray:
    """(B, h, w) source pixels of ``window`` -> (B, n, n) on the tile grid; ``nodata`` source pixels are left out of
    the kernel and tile pixels nothing covers hold ``nodata``."""
    from rasterio.enums import Resampling
    from rasterio.warp import reproject

    n = cell.tile_size
    out = np.full((data.shape[0], n, n), nodata, dtype=data.dtype)
    reproject(
        source=data,
        destination=out,
        src_transform=src.window_transform(window),
        src_crs=src.crs,
        src_nodata=nodata,
        dst_transform=cell.transform,
        dst_crs=grid_crs,
        dst_nodata=nodata,
        resampling=Resampling[resampling],
    )
    return out


def _warp_bands(
    src: DatasetReader,
    window: Any,
    band_idx: list[int],
    valid: np.ndarray,
    cell: GridCell,
    cfg: TilingConfig,
    fill_from_nearest: np.ndarray | None = None,
) -> np.ndarray:
    """Bands (0-based) of ``src`` as float32 on the tile grid with ``cfg.resampling``, NaN where undefined.

    Where ``fill_from_nearest`` (tile pixels valid by the nearest-neighbour mask) is left NaN by the kernel (it
    found no valid source pixel in reach, at the edge of the valid area), the nearest source pixel is taken."""
    px = src.read([b + 1 for b in band_idx], window=window).astype(np.float32)
    px[:, ~valid] = np.nan
    px[~np.isfinite(px)] = np.nan
    out = _warp(px, src, window, cell, cfg.grid.crs, cfg.resampling, math.nan)
    if fill_from_nearest is not None:
        holes = fill_from_nearest & np.isnan(out).any(axis=0)
        if holes.any() and cfg.resampling != "nearest":
            near = _warp(px, src, window, cell, cfg.grid.crs, "nearest", math.nan)
            out[:, holes] = near[:, holes]
    return out


@dataclass
class TilePixels:
    """One tile on the grid: RGB, validity and the EXTRA bands (None without any)."""

    rgb: np.ndarray  # (3, n, n) uint8, 0 on NoData
    valid: np.ndarray  # (n, n) bool
    extra: np.ndarray | None  # (E, n, n) float32, NaN where undefined on valid pixels, 0 on NoData


def render_pixels(cell: GridCell, scenes: list[Scene], cfg: TilingConfig, datasets: Datasets) -> TilePixels | None:
    """The tile's pixels from ``scenes`` (first valid pixel wins) and companion rasters; None: no valid pixel."""
    n = cell.tile_size
    valid = np.zeros((n, n), bool)
    rgb = np.zeros((3, n, n), np.uint8)
    scene_band_ids = sorted({s.band for e in cfg.extra for s in e.sources if s.path is None})
    scene_bands = np.full((len(scene_band_ids), n, n), np.nan, np.float32)
    for scene in scenes:
        x0, y0, x1, y1 = scene.bounds
        cx0, cy0, cx1, cy1 = cell.bounds
        if x1 <= cx0 or x0 >= cx1 or y1 <= cy0 or y0 >= cy1:
            continue
        src = datasets.get(scene.path)
        window = _source_window(src, cell, cfg.grid.crs)
        if window is None:
            continue
        src_valid = valid_mask(src, scene.bands, window)  # the one NoData rule (rtscore.data.raster.bands)
        mask = _warp(src_valid[None].astype(np.uint8), src, window, cell, cfg.grid.crs, "nearest", 0)[0] > 0
        new = mask & ~valid
        if not new.any():
            continue
        colour = _warp_bands(src, window, scene.bands.rgb, src_valid, cell, cfg, fill_from_nearest=new)
        rgb[:, new] = np.clip(np.rint(colour[:, new]), 0, 255).astype(np.uint8)
        if scene_band_ids:
            scene_bands[:, new] = _warp_bands(src, window, scene_band_ids, src_valid, cell, cfg, new)[:, new]
        valid |= new
        if valid.all():
            break
    if not valid.any():
        return None
    extra = _extra_bands(cell, cfg, datasets, dict(zip(scene_band_ids, scene_bands, strict=True)), valid)
    return TilePixels(rgb, valid, extra)


def _companion_band(source: BandSource, cell: GridCell, cfg: TilingConfig, datasets: Datasets) -> np.ndarray:
    """A companion raster's band on the tile grid (float32), NaN where it has NoData or does not reach."""
    assert source.path is not None
    src = datasets.get(Path(source.path))
    window = _source_window(src, cell, cfg.grid.crs)
    if window is None:
        return np.full((cell.tile_size, cell.tile_size), np.nan, np.float32)
    valid = np.asarray(src.read_masks(source.band + 1, window=window) > 0)
    return _warp_bands(src, window, [source.band], valid, cell, cfg)[0]


def _extra_bands(
    cell: GridCell, cfg: TilingConfig, datasets: Datasets, scene_bands: dict[int, np.ndarray], valid: np.ndarray
) -> np.ndarray | None:
    if not cfg.extra:
        return None

    def band(s: BandSource) -> np.ndarray:
        return scene_bands[s.band] if s.path is None else _companion_band(s, cell, cfg, datasets)

    out = np.empty((len(cfg.extra), cell.tile_size, cell.tile_size), np.float32)
    for k, e in enumerate(cfg.extra):
        if e.kind == "ndvi":
            assert e.nir is not None and e.red is not None
            out[k] = ndvi(band(e.nir), band(e.red))
        else:
            assert e.band is not None
            out[k] = band(e.band)
    out[:, ~valid] = 0.0  # NoData pixels hold 0, as rts synth-geotiff writes them
    return out


def ndvi(nir: np.ndarray, red: np.ndarray) -> np.ndarray:
    """(nir - red) / (nir + red) as float32; NaN where either band is undefined or nir + red is 0."""
    nir64, red64 = nir.astype(np.float64), red.astype(np.float64)
    total = nir64 + red64
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total != 0, (nir64 - red64) / np.where(total != 0, total, 1.0), np.nan)
    out[~np.isfinite(out)] = np.nan
    return out.astype(np.float32)
