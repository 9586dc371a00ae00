"""The index's lon/lat footprints: reprojected once per parts file content, the cache never changes the result."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rtscore.mapping.fetch import fetch_scene_parts
from rtscore.mapping.footprints import lonlat_footprints
from rtscore.mapping.outputs import CampaignRoot
from tests.mapping.test_fetch import publish_parts
from tests.mapping.test_merge import grid_scene


def test_cached_footprints_are_the_fresh_ones_and_only_new_content_is_reprojected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import rasterio.warp

    import rtscore.mapping.footprints as fp

    out = CampaignRoot(tmp_path / "campaign")
    done = [publish_parts(out, grid_scene(0, c, c + 1)) for c in range(3)]
    fetched = fetch_scene_parts(out, done, workers=2)
    fresh = json.dumps(lonlat_footprints(fetched, None))
    cache = tmp_path / "cache.json"
    calls: list[int] = []
    real = rasterio.warp.transform_geom

    def counted(src: object, dst: object, geoms: list[object]) -> object:
        calls.append(len(geoms))
        return real(src, dst, geoms)

    monkeypatch.setattr(rasterio.warp, "transform_geom", counted)
    assert json.dumps(lonlat_footprints(fetched, cache)) == fresh and calls == [3]  # one call for the one CRS
    assert json.dumps(lonlat_footprints(fetched, cache)) == fresh and calls == [3]  # all from the cache
    done[1] = publish_parts(out, grid_scene(0, 1, 99))  # re-mapped: another parts file under the same id
    again = fetch_scene_parts(out, done, workers=2)
    got = lonlat_footprints(again, cache)
    assert calls == [3, 1] and json.dumps(got) == json.dumps(lonlat_footprints(again, None))
    body = json.loads(cache.read_text())
    body["versions"] = "another GDAL"
    cache.write_text(json.dumps(body))
    lonlat_footprints(again, cache)
    assert calls[-1] == 3  # made by other versions: all reprojected
    cache.write_text("{torn")
    monkeypatch.setattr(logging.getLogger("rtscore"), "propagate", True)
    with caplog.at_level("WARNING"):
        assert json.dumps(lonlat_footprints(again, cache)) == json.dumps(got)
    assert f"index footprint cache {cache} unreadable" in caplog.text
    assert fp.LONLAT_CACHE == "index-lonlat.json"
