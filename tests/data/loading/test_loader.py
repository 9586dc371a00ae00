"""DataLoaders of training and evaluation (rtscore.data.loading.loader)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtscore.config import parse_pipeline_config
from rtscore.data.errors import DataValidationError
from rtscore.data.loading.dataset import TileDataset
from rtscore.data.loading.loader import val_loader
from rtscore.data.normalization.compute import compute_normalization_stats
from rtscore.data.store.reader import ZarrTileStore
from rtscore.errors import PipelineError
from tests.helpers import SIZE, tiny_pipeline_config, write_full_nodata_store, write_test_store


def test_an_all_nodata_split_is_refused_naming_its_store_not_a_raw_value_error(tmp_path: Path) -> None:
    """Issue 21 weak case: a val split whose tiles are all NoData left validation with no tile, and training ended
    after its first epoch in a raw ValueError of the metrics naming no store. The loader refuses it up front."""
    write_test_store(tmp_path / "train.zarr", 8)
    stats = compute_normalization_stats(tmp_path / "train.zarr")
    val = write_full_nodata_store(tmp_path / "val.zarr", 6)
    cfg = parse_pipeline_config(tiny_pipeline_config(tile=SIZE, extra=False))
    ds = TileDataset(ZarrTileStore(val), stats)
    assert len(ds) == 0
    with pytest.raises(DataValidationError) as err:
        val_loader(cfg, ds)
    assert isinstance(err.value, PipelineError)
    message = str(err.value)
    assert message.startswith(f"store {val}: no usable tile to evaluate: all its 6 tiles are full NoData")
    assert "rts validate" in message and "fix this split" in message
    assert len(val_loader(cfg, TileDataset(ZarrTileStore(tmp_path / "train.zarr"), stats))) > 0
