from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from affine import Affine

from rtscore.data.raster.vector_labels import LabelPolygonError, rasterize_labels, read_label_polygons

PX = 4.77
ORIGIN = (-15_000_000.0, 11_000_000.0)  # EPSG:3857 metres, ~70°N


def _square(col0: float, row0: float, col1: float, row1: float, **props: object) -> dict:
    x0, y0 = ORIGIN[0] + col0 * PX, ORIGIN[1] - row0 * PX
    x1, y1 = ORIGIN[0] + col1 * PX, ORIGIN[1] - row1 * PX
    ring = [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]
    return {"type": "Feature", "properties": props, "geometry": {"type": "Polygon", "coordinates": [ring]}}


def test_polygons_inside_are_rts_cut_by_the_edge_or_flagged_are_ignore(tmp_path: Path) -> None:
    doc = {
        "type": "FeatureCollection",
        "crs": {"type": "name", "properties": {"name": "EPSG:3857"}},
        "features": [
            _square(2, 2, 6, 6),
            _square(-3, 10, 3, 14),
            _square(20, 20, 24, 24, ignore=True),
            _square(50, 50, 60, 60),
        ],
    }
    path = tmp_path / "labels.geojson"
    path.write_text(json.dumps(doc))
    labels = rasterize_labels(read_label_polygons(path), Affine(PX, 0.0, ORIGIN[0], 0.0, -PX, ORIGIN[1]), 32)
    assert labels.dtype == np.uint8 and set(np.unique(labels)) == {0, 1, 255}
    assert (labels[2:6, 2:6] == 1).all() and labels[2:6, 2:6].size == (labels == 1).sum()
    assert (labels[10:14, 0:3] == 255).all()  # cut by the tile's left edge: partial object
    assert (labels[20:24, 20:24] == 255).all()


def test_bad_label_files_are_clear_errors(tmp_path: Path) -> None:
    p = tmp_path / "x.geojson"
    p.write_text(
        json.dumps(
            {
                "type": "FeatureCollection",
                "features": [
                    {"type": "Feature", "properties": {}, "geometry": {"type": "Point", "coordinates": [0, 0]}}
                ],
            }
        )
    )
    with pytest.raises(LabelPolygonError, match="feature 0 has geometry 'Point'"):
        read_label_polygons(p)
    p.write_text("{not json")
    with pytest.raises(LabelPolygonError, match="not a readable vector file"):
        read_label_polygons(p)


def test_geojson_without_crs_is_wgs84_and_is_reprojected_to_the_tile_crs(tmp_path: Path) -> None:
    """RFC 7946: no crs member means lon/lat. Read as EPSG:3857 metres, a polygon near 70 N lands at (−150 m, 70 m)."""
    lon0, lat0 = -149.0, 70.0
    ring = [[lon0, lat0], [lon0 + 0.001, lat0], [lon0 + 0.001, lat0 - 0.0005], [lon0, lat0 - 0.0005], [lon0, lat0]]
    p = tmp_path / "lonlat.geojson"
    p.write_text(
        json.dumps(
            {
                "type": "FeatureCollection",
                "features": [
                    {"type": "Feature", "properties": {}, "geometry": {"type": "Polygon", "coordinates": [ring]}}
                ],
            }
        )
    )
    (feature,) = read_label_polygons(p)
    xy = np.asarray(feature["geometry"]["coordinates"][0])
    assert xy[:, 0].min() == pytest.approx(-149.0 * 111319.49079327357, rel=1e-9)
    assert xy[:, 1].max() == pytest.approx(11_068_715.659, rel=1e-6)
