"""The files an `rts tile` run writes into the tile layout: one tile's GeoTIFFs (each under a temporary name,
then renamed), its centroid, metadata.csv from the tile records, and a text file rewritten only on change."""

from __future__ import annotations

import csv
import io
import math
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.tiling import TilingConfig
from rtscore.data.geotiff.root import METADATA_COLUMNS, OPTIONAL_METADATA_COLUMNS
from rtscore.data.raster.bands import EXTRA_DIR, LABEL_DIR, RGB_DIR
from rtscore.data.tiling.pixels import GridCell, TilePixels
from rtscore.storage import atomic_write_text

TILE_COLUMNS = METADATA_COLUMNS + OPTIONAL_METADATA_COLUMNS  # what rts tile writes: the layout's and the optional


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


def _write_tif(path: Path, data: np.ndarray, cell: GridCell, crs: str, **kw: Any) -> None:
    """A GeoTIFF on the tile grid, written under a temporary name and renamed into place."""
    import rasterio
    from rasterio.enums import ColorInterp

    interp = kw.pop("colorinterp", None)
    descriptions = kw.pop("descriptions", None)
    profile = {
        "driver": "GTiff",
        "width": cell.tile_size,
        "height": cell.tile_size,
        "count": data.shape[0],
        "dtype": data.dtype.name,
        "crs": crs,
        "transform": cell.transform,
        "compress": "lzw",
        **kw,
    }
    tmp = _tmp(path)
    try:
        with rasterio.open(tmp, "w", **profile) as f:
            f.write(data)
            if interp is not None:
                f.colorinterp = [ColorInterp[c] for c in interp]
            for b, name in enumerate(descriptions or [], start=1):
                f.set_band_description(b, name)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_tile(root: Path, cell: GridCell, px: TilePixels, label: np.ndarray, cfg: TilingConfig) -> dict[str, int]:
    """The tile's files; returns each file's size (root-relative path -> bytes) for its record."""
    alpha = np.where(px.valid, 255, 0).astype(np.uint8)
    rgb = np.where(px.valid, px.rgb, 0).astype(np.uint8)
    tid = cell.tile_id
    files = {f"{RGB_DIR}/{tid}.tif": None, f"{LABEL_DIR}/{tid}.tif": None}
    rgba = np.concatenate([rgb, alpha[None]])
    _write_tif(root / RGB_DIR / f"{tid}.tif", rgba, cell, cfg.grid.crs, colorinterp=["red", "green", "blue", "alpha"])
    _write_tif(root / LABEL_DIR / f"{tid}.tif", label[None], cell, cfg.grid.crs)
    if px.extra is not None:
        files[f"{EXTRA_DIR}/{tid}.tif"] = None
        names = [e.name for e in cfg.extra]
        _write_tif(root / EXTRA_DIR / f"{tid}.tif", px.extra, cell, cfg.grid.crs, nodata=math.nan, descriptions=names)
    return {rel: (root / rel).stat().st_size for rel in files}


def tile_lonlat(cell: GridCell, crs: str) -> tuple[float, float]:
    from rasterio.warp import transform

    xs, ys = transform(crs, "EPSG:4326", [cell.centre[0]], [cell.centre[1]])
    return float(xs[0]), float(ys[0])


def metadata_csv(rows: Iterable[Mapping[str, str]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(TILE_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: r[k] for k in TILE_COLUMNS})
    return buf.getvalue()


def write_if_changed(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically, unless the file already holds it: a re-run that changes nothing leaves
    the data root as it was (its listing, mtimes included, is its identity for the runs that read it)."""
    try:
        if path.read_text() == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    atomic_write_text(path, text)
