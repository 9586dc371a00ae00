"""A synthetic GeoTIFF data root (``rts synth-geotiff``): the synthetic scenes of generation configs written in
the tile layout of docs/geotiff.md, on a deterministic EPSG:3857 grid near 70 N (each split on its own rows)."""

from __future__ import annotations

import csv
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.generation import GenerationConfig
from rtscore.data.geotiff.root import (
    CRS,
    METADATA_COLUMNS,
    METADATA_CSV,
    OPTIONAL_METADATA_COLUMNS,
    SPLITS_YAML,
    GeotiffError,
    read_splits,
)
from rtscore.data.inventory.object_pixels import ObjectPixel, format_object_pixels, join_ids
from rtscore.data.raster.bands import EXTRA_DIR, LABEL_DIR, RGB_DIR
from rtscore.data.raster.ground import WEB_MERCATOR_RADIUS_M
from rtscore.data.synthetic import PIXEL_SIZE_M, plan_tiles, render_tile

EARTH_RADIUS_M = WEB_MERCATOR_RADIUS_M
GRID_LAT_DEG, GRID_LON_DEG = 70.0, -150.0  # north-west corner of the synthetic tile grid (Arctic Alaska)
GRID_COLUMNS = 64  # synthetic tiles per grid row
_SPLIT_ROW_OFFSET = {"train": 0, "val": 200, "test": 400}  # grid rows: splits never share ground


def _mercator_y(lat_deg: float) -> float:
    return EARTH_RADIUS_M * math.log(math.tan(math.pi / 4 + math.radians(lat_deg) / 2))


def mercator_to_lonlat(x: float, y: float) -> tuple[float, float]:
    """EPSG:3857 metres to (lon, lat) degrees on the Web Mercator sphere."""
    return math.degrees(x / EARTH_RADIUS_M), math.degrees(2 * math.atan(math.exp(y / EARTH_RADIUS_M)) - math.pi / 2)


def tile_origin(split: str, index: int, tile_size: int, pixel_size_m: float) -> tuple[float, float]:
    """Upper-left corner (EPSG:3857) of synthetic tile ``index`` of ``split``: adjacent, non-overlapping cells."""
    span = tile_size * pixel_size_m
    row = _SPLIT_ROW_OFFSET.get(split, 0) + index // GRID_COLUMNS
    col = index % GRID_COLUMNS
    x0 = math.radians(GRID_LON_DEG) * EARTH_RADIUS_M + col * span
    y0 = _mercator_y(GRID_LAT_DEG) - row * span
    return x0, y0


class SyntheticRoot(BaseModel):
    """What :func:`write_synthetic_geotiffs` wrote: the data root, its splits and its tiles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: str = Field(..., description="The data root written.")
    splits: list[str] = Field(..., description="Its splits, in the order of the configs.")
    n_tiles: int = Field(..., ge=0, description="Tiles of all splits (one file set each).")
    n_positive: int = Field(..., ge=0, description="Tiles with an RTS.")
    n_full_nodata: int = Field(..., ge=0, description="Tiles without a valid pixel.")
    regions: dict[str, list[str]] = Field(..., description="Each split's regions (its splits.yaml entry).")


def write_synthetic_geotiffs(
    cfg: GenerationConfig | Sequence[GenerationConfig], output: str | Path, *, overwrite: bool = False
) -> SyntheticRoot:
    """Write the synthetic scenes of one or more splits' generation configs as one GeoTIFF data root.

    One file set per source tile (rotation expansion is not applied), the exact labels, EPSG:3857 with
    ``4.77 / cfg.scale`` m pixels on a deterministic grid near 70 N (each split on its own rows).
    ``metadata.csv`` lists every tile and ``splits.yaml`` every split's regions, as a real root holds them
    (docs/geotiff.md). The root is written to a hidden sibling and renamed into place at the end.

    Args:
        cfg: Generation config of a split, or of several splits (e.g. a pipeline's train, val and test).
        output: Data root to create.
        overwrite: Replace an existing ``output``.

    Returns:
        What was written: output path, splits, tile count, positives, full-NoData tiles, regions per split.
    """
    cfgs = [cfg] if isinstance(cfg, GenerationConfig) else list(cfg)
    splits = [c.split for c in cfgs]
    if not cfgs or len(set(splits)) != len(splits):
        raise GeotiffError(f"give one generation config per split; got splits {splits}")
    if any(c.synthetic is None for c in cfgs):
        raise GeotiffError(
            "synth-geotiff renders synthetic scenes: every generation config needs its synthetic section"
        )
    output = Path(output)
    if output.exists() and not overwrite:
        raise GeotiffError(f"output {output} already exists; pass overwrite (--overwrite) to replace it")
    staging = output.with_name(f".{output.name}.partial")
    if staging.exists():
        shutil.rmtree(staging)
    rows: list[dict[str, str]] = []
    counts = {"n_positive": 0, "n_full_nodata": 0}
    for c in cfgs:
        rows += _write_split(c, staging, counts)
    with open(staging / METADATA_CSV, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*METADATA_COLUMNS, *OPTIONAL_METADATA_COLUMNS])
        writer.writeheader()
        writer.writerows(rows)
    _write_yaml(staging / SPLITS_YAML, {c.split: list(c.synthetic_settings.regions) for c in cfgs})
    read_splits(staging)  # a region in two splits is refused before the root appears
    if output.exists():
        shutil.rmtree(output)
    staging.rename(output)
    return SyntheticRoot(
        output=str(output),
        splits=splits,
        n_tiles=len(rows),
        **counts,
        regions={c.split: list(c.synthetic_settings.regions) for c in cfgs},
    )


def _write_split(cfg: GenerationConfig, staging: Path, counts: dict[str, int]) -> list[dict[str, str]]:
    """Write one split's tiles into the staging root; returns their metadata.csv rows."""
    import rasterio
    from rasterio.enums import ColorInterp
    from rasterio.transform import Affine

    for d in (RGB_DIR, LABEL_DIR, *([EXTRA_DIR] if cfg.synthetic_settings.extra_channels else [])):
        (staging / d).mkdir(parents=True, exist_ok=True)
    n = cfg.tile_size
    px = PIXEL_SIZE_M / cfg.scale
    rows: list[dict[str, str]] = []
    for plan in plan_tiles(cfg):
        tile = render_tile(plan, cfg)
        x0, y0 = tile_origin(cfg.split, plan.index, n, px)
        profile = {
            "driver": "GTiff",
            "width": n,
            "height": n,
            "crs": CRS,
            "transform": Affine(px, 0.0, x0, 0.0, -px, y0),  # rasterio from_origin(x0, y0, px, px)
            "compress": "lzw",
        }
        with rasterio.open(staging / RGB_DIR / f"{plan.tile_id}.tif", "w", count=4, dtype="uint8", **profile) as f:
            f.write(np.concatenate([tile.rgb, tile.alpha[None]]))
            f.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
        with rasterio.open(staging / LABEL_DIR / f"{plan.tile_id}.tif", "w", count=1, dtype="uint8", **profile) as f:
            f.write(tile.label_exact[None])
        if tile.extra is not None:
            path = staging / EXTRA_DIR / f"{plan.tile_id}.tif"
            with rasterio.open(path, "w", count=tile.extra.shape[0], dtype="float32", **profile) as f:
                f.write(tile.extra)
                for b, name in enumerate(cfg.synthetic_settings.extra_channels, start=1):
                    f.set_band_description(b, name)
        lon, lat = mercator_to_lonlat(x0 + n * px / 2, y0 - n * px / 2)
        positive = plan.kind == "positive"
        counts["n_positive"] += positive
        counts["n_full_nodata"] += plan.kind == "full_nodata"
        rows.append(
            {
                "Tile_id": plan.tile_id,
                "centroid_lat": f"{lat:.6f}",
                "centroid_lon": f"{lon:.6f}",
                "TrainClass": "positive" if positive else "negative",
                "RegionName": plan.region,
                **_object_ids(plan.tile_id, tile.label_exact),
            }
        )
    return rows


def _object_ids(tile_id: str, label: np.ndarray) -> dict[str, str]:
    """A synthetic tile's inventory columns: an id per RTS of its label (``<tile>-rts<k>``, one per 8-connected
    component of label 1, in raster order), the first pixel of each as its ``ObjectPixels`` entry, no mapped
    Negative polygons (a synthetic scene has none)."""
    from scipy import ndimage

    components, _ = ndimage.label(label == 1, structure=np.ones((3, 3), bool))
    _, first = np.unique(components.ravel(), return_index=True)  # the first pixel of each label, 0 included
    pixels = [ObjectPixel(f"{tile_id}-rts{k}", *divmod(int(i), label.shape[1])) for k, i in enumerate(first[1:])]
    return {
        "UIDs": join_ids(p.uid for p in pixels),
        "NegativeUIDs": "",
        "ObjectPixels": format_object_pixels(pixels),
    }


def _write_yaml(path: Path, data: dict[str, Any]) -> None:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
