"""Fixtures of the tiling tests: the ARTS-shaped world of tests/data/inventory/world.py, written once per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.inventory.world import LABELS, write_arts_geojson, write_scene


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the scene dated by its tag (dated.tif), the same scene without a date (undated.tif) and the
    labels as ARTS's GeoJSON (arts.geojson)."""
    root = tmp_path_factory.mktemp("arts-world")
    write_scene(root / "dated.tif", "2022-07-15")
    write_scene(root / "undated.tif", None)
    write_arts_geojson(root / "arts.geojson", LABELS)
    return root
