"""A scene's acquisition date from its GeoTIFF tags (rtscore.data.raster.scene_date)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from rtscore.data.raster.scene_date import SceneDateError, date_from_tags, scene_date


def test_the_acquisition_tag_wins_over_the_tiff_datetime_and_bad_dates_are_named(tmp_path: Path) -> None:
    path = tmp_path / "s.tif"
    profile = dict(driver="GTiff", width=4, height=4, count=1, dtype="uint8", crs="EPSG:3413")
    with rasterio.open(path, "w", transform=from_origin(0, 0, 3, 3), **profile) as ds:
        ds.write(np.zeros((1, 4, 4), np.uint8))
        ds.update_tags(TIFFTAG_DATETIME="2024:01:02 10:00:00", acquisition_date="2019-07-05")
    assert scene_date(path) == (dt.date(2019, 7, 5), "ACQUISITION_DATE")
    assert date_from_tags({"TIFFTAG_DATETIME": "2024:01:02 10:00:00"}, "x") == (dt.date(2024, 1, 2), "TIFFTAG_DATETIME")
    assert date_from_tags({"AREA_OR_POINT": "Area"}, "x") == (None, None)
    with pytest.raises(SceneDateError, match=r"s\.tif: tag ACQUISITION_DATE: 'July' is not a date"):
        date_from_tags({"acquisition_date": "July"}, "s.tif")
