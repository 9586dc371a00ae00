"""A published store's attribute document read back typed (StoreAttrs.as_recorded): what older stores lack, what
a later rtscore adds, and counts as recorded, all still read; the fallbacks for an unrecorded contract and binding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rtscore.config.binding import RasterContract
from rtscore.data.store.attrs import StoreAttrs
from rtscore.data.store.format import ATTRS_KEY, TileStoreError, read_store_attrs
from tests.helpers import store_attrs_doc


def _published(path: Path, doc: dict[str, Any]) -> Path:
    """A store directory whose zarr.json holds ``doc`` as its attributes (all read_store_attrs reads)."""
    path.mkdir(parents=True)
    (path / "zarr.json").write_text(
        json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {ATTRS_KEY: doc}})
    )
    return path


def _legacy(**fields: Any) -> dict[str, Any]:
    """A document of a store written before scale, pixel_size_m and raster_contract were recorded."""
    doc = store_attrs_doc(**fields)
    for key in ("scale", "pixel_size_m", "raster_contract"):
        doc.pop(key)
    return doc


def test_a_store_written_before_a_field_was_recorded_reads_with_its_fallbacks(tmp_path: Path) -> None:
    attrs = read_store_attrs(_published(tmp_path / "old.zarr", _legacy(extra_channel_names=["nbr", "ndvi"])))
    assert attrs.scale == 1.0 and attrs.pixel_size_m is None and attrs.raster_contract is None
    assert attrs.contract() == RasterContract(crs="EPSG:3857", pixel_size=None)  # pixel size not checked
    assert attrs.binding().bands_by_name() == {"nbr": 0, "ndvi": 1}  # positional
    synthetic = StoreAttrs.as_recorded({**_legacy(source="synthetic"), "pixel_size_m": 4.77})
    assert synthetic.contract() == RasterContract(crs="EPSG:3857", pixel_size=4.77)


def test_an_attribute_a_later_rtscore_added_is_ignored(tmp_path: Path) -> None:
    doc = store_attrs_doc(added_later={"x": 1})
    assert read_store_attrs(_published(tmp_path / "new.zarr", doc)) == StoreAttrs.as_recorded(store_attrs_doc())
    with pytest.raises(ValidationError, match="added_later"):
        StoreAttrs.model_validate(doc)  # the writer's document is checked whole


def test_counts_read_as_recorded_the_writer_refuses_them(tmp_path: Path) -> None:
    """Data validation names a store whose counts are not a partition of its tiles; it must be able to read it."""
    counts = {"n_tiles": 3, "n_positive": 1, "n_negative": 1, "n_full_nodata": 0, "n_regions": 0, "regions": []}
    attrs = read_store_attrs(_published(tmp_path / "edited.zarr", store_attrs_doc(counts=counts)))
    assert attrs.counts.n_tiles == 3 and attrs.counts.n_positive + attrs.counts.n_negative == 2
    with pytest.raises(ValidationError, match="must be a partition"):
        StoreAttrs.model_validate(store_attrs_doc(counts=counts))


def test_a_document_it_cannot_type_is_a_store_error_naming_the_field(tmp_path: Path) -> None:
    doc = store_attrs_doc()
    del doc["counts"]
    with pytest.raises(TileStoreError, match=r"broken\.zarr: its 'rtscore' attributes .*counts: Field required"):
        read_store_attrs(_published(tmp_path / "broken.zarr", doc))
