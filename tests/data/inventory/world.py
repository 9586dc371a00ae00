"""An ARTS-shaped world built in code for the inventory tests: one scene of 2 x 2 tiles of 64 pixels on the EPSG:3857
grid near 68 N 133 W (the Peel Plateau), and labels of every kind, each inside one tile, written as ARTS (GeoJSON
without a crs member in EPSG:3413, or a shapefile with the abbreviated names) or another inventory."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
import shapely
import yaml
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin
from rasterio.warp import transform_geom

from rtscore.config.tiling import TilingConfig, load_tiling_config
from rtscore.data.inventory.arts import ABBREVIATIONS, ARTS_CRS

GRID = "EPSG:3857"
PX = 9.54
TILE = 64
SPAN = PX * TILE
C0 = math.floor(-14_805_600 / SPAN)  # 133 W
R0 = math.floor(10_350_000 / SPAN)  # 68 N
SCENE_DATE = "2022-07-15"  # the dated scene's ACQUISITION_DATE tag


def tile_id(dc: int, dr: int) -> str:
    """The id of tile (C0 + dc, R0 + dr): dr 1 is the northern row."""
    return f"c{C0 + dc}_r{R0 + dr}"


def box(dc: int, dr: int, x0: float, y0: float, x1: float, y1: float) -> shapely.Polygon:
    """A rectangle in tile (dc, dr), offsets in metres from its south-west corner."""
    ox, oy = (C0 + dc) * SPAN, (R0 + dr) * SPAN
    return shapely.box(ox + x0, oy + y0, ox + x1, oy + y1)


def bow_tie(dc: int, dr: int) -> shapely.Polygon:
    """A self-intersecting outline (invalid) in tile (dc, dr): two triangles meeting at (450, 450)."""
    ox, oy = (C0 + dc) * SPAN, (R0 + dr) * SPAN
    return shapely.Polygon([(ox + 350, oy + 350), (ox + 550, oy + 550), (ox + 550, oy + 350), (ox + 350, oy + 550)])


@dataclass(frozen=True)
class Label:
    uid: str
    train_class: str
    label_type: str
    date: str
    geom: shapely.Polygon  # EPSG:3857


HOLE = box(0, 1, 200, 200, 300, 300)
LABELS = [
    Label("P1-hole", "Positive", "Polygon", "2021-08-01", box(0, 1, 100, 100, 400, 400).difference(HOLE)),
    Label("R1-range", "Positive", "Polygon", "2019-06-01,2022-08-01", box(1, 1, 100, 100, 300, 300)),
    Label("N1-negative", "Negative", "Polygon", "2022-07-01", box(1, 1, 250, 250, 500, 500)),
    Label("B1-box", "Positive", "BoundingBox", "2022-07-01", box(0, 0, 150, 200, 450, 400)),
    Label("S1-stale", "Positive", "Polygon", "2016-01-01,2019-12-31", box(1, 0, 80, 80, 250, 250)),
    Label("V1-bowtie", "Positive", "Polygon", "2022-7-5", bow_tie(1, 0)),
]


def write_scene(path: Path, date: str | None) -> Path:
    """The 128 x 128 scene over the four tiles (RGB + alpha uint8), ``date`` in its ACQUISITION_DATE tag."""
    rng = np.random.default_rng(3)
    data = np.concatenate([rng.integers(30, 220, (3, 2 * TILE, 2 * TILE)), np.full((1, 2 * TILE, 2 * TILE), 255)])
    profile = {
        "driver": "GTiff",
        "height": 2 * TILE,
        "width": 2 * TILE,
        "count": 4,
        "dtype": "uint8",
        "crs": GRID,
        "transform": from_origin(C0 * SPAN, (R0 + 2) * SPAN, PX, PX),
    }
    with rasterio.open(path, "w", **profile) as f:
        f.write(data.astype(np.uint8))
        f.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
        if date is not None:
            f.update_tags(ACQUISITION_DATE=date)
    return path


def arts_fields(label: Label, **over: Any) -> dict[str, Any]:
    """A label's ARTS attributes (required fields and UID)."""
    fields = {
        "CentroidLat": 68.0,
        "CentroidLon": -133.0,
        "RegionName": "Peel Plateau",
        "CreatorLab": "A Lab",
        "BaseMapDate": label.date,
        "BaseMapSource": "PlanetScope",
        "BaseMapResolution": 3.0,
        "TrainClass": label.train_class,
        "LabelType": label.label_type,
        "UID": label.uid,
    }
    return {**fields, **over}


def write_arts_geojson(path: Path, labels: list[Label], rows: list[dict[str, Any]] | None = None) -> Path:
    """ARTS's main file: GeoJSON in EPSG:3413 without a crs member (``rows``: attributes, else arts_fields)."""
    rows = rows or [arts_fields(lab) for lab in labels]
    features = [
        {
            "type": "Feature",
            "properties": props,
            "geometry": transform_geom(GRID, ARTS_CRS, shapely.geometry.mapping(lab.geom)) if lab else None,
        }
        for lab, props in zip(labels, rows, strict=True)
    ]
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    return path


def write_vector(
    path: Path, labels: list[Label], rows: list[dict[str, Any]], crs: str, *, abbreviated: bool = False
) -> Path:
    """``labels`` with attributes ``rows`` in ``crs``, as a shapefile or GeoPackage by suffix (pyogrio)."""
    import pyogrio

    names = list(rows[0])
    geoms = [shapely.geometry.shape(transform_geom(GRID, crs, shapely.geometry.mapping(lab.geom))) for lab in labels]
    pyogrio.raw.write(
        path,
        geometry=np.array([shapely.to_wkb(g) for g in geoms], dtype=object),
        field_data=[
            np.array([r[n] for r in rows], dtype=float if isinstance(rows[0][n], float) else object) for n in names
        ],
        fields=[ABBREVIATIONS.get(n, n) if abbreviated else n for n in names],
        crs=crs,
        driver="ESRI Shapefile" if path.suffix == ".shp" else "GPKG",
        geometry_type="Polygon",
    )
    return path


def tiling_config(root: Path, **over: Any) -> TilingConfig:
    """A tiling config in ``root`` (a new file each call) over dated.tif and arts.geojson, one region 'peel' in
    train, 64-pixel tiles; ``over`` replaces keys."""
    doc: dict[str, Any] = {
        "scenes": ["dated.tif"],
        "polygons": {"path": "arts.geojson"},
        "regions": {"name": "peel"},
        "grid": {"pixel_size": PX, "tile_size": TILE},
        "splits": {"train": ["peel"]},
        "min_valid_fraction": 0.0,
    }
    doc.update(over)
    path = root / f"tile-{len(list(root.glob('tile-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_tiling_config(path)
