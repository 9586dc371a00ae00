"""A tile's label on its RGB raster's grid: a label raster (checked) or RTS polygons rasterised."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rtscore.data.geotiff.root import LABEL_POLYGON_SUFFIXES, TileEntry
from rtscore.data.raster.bands import CheckedRaster, same_grid
from rtscore.data.raster.vector_labels import LabelPolygonError, rasterize_labels, read_label_polygons
from rtscore.data.tiles import LABEL_VALUES


def read_label(path: Path, src: CheckedRaster, e: TileEntry) -> tuple[np.ndarray, str | None]:
    """The tile's label on the RGB raster's grid: a label raster (checked: one uint8 band, on the grid, values in
    {0, 1, 255}) or polygons reprojected to the tile's CRS and rasterised; else the problem, naming the file."""
    import rasterio

    where = f"tile {e.tile_id} ({path})"
    empty = np.zeros((0, 0), np.uint8)
    if path.suffix.lower() in LABEL_POLYGON_SUFFIXES:
        try:
            features = read_label_polygons(path, src.src.crs)
        except LabelPolygonError as err:
            return empty, f"tile {e.tile_id}: {err}"
        return rasterize_labels(features, src.src.transform, src.width), None
    with rasterio.open(path) as f:
        if f.count != 1 or f.dtypes[0] != "uint8":
            return empty, f"{where}: labels need 1 uint8 band; got {f.count} band(s) {sorted(set(f.dtypes))}"
        if (f.height, f.width) != (src.height, src.width):
            return empty, f"{where}: size must be {src.height}x{src.width} (its RGB raster's); got {f.height}x{f.width}"
        if not same_grid(src.src, f):
            return empty, (
                f"{where}: not on the grid of {src.path} (CRS {f.crs} vs {src.src.crs}, transform "
                f"{tuple(f.transform)[:6]} vs {tuple(src.src.transform)[:6]}): labels would be shifted"
            )
        label = f.read(1)
    return label, label_problem(label, where)


def label_problem(label: np.ndarray, where: str) -> str | None:
    """The label's values outside {0, 1, 255}, as a problem naming ``where``; None when there are none."""
    bad = np.setdiff1d(np.unique(label), LABEL_VALUES)
    return f"{where}: label values {bad.tolist()} outside {{0, 1, 255}}" if bad.size else None
