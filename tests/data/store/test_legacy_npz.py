from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtscore.data.store.legacy_npz import BatchedNpzSource, BatchWriter, LegacyNpzError, import_npz
from rtscore.data.store.reader import ZarrTileStore
from tests.conftest import make_tile


def _legacy(root: Path, n: int = 7, per_batch: int = 3, noisy: bool = True) -> list:
    tiles = [make_tile(i, 32, positive=i % 2 == 0, extra=1, region=f"r{i % 2}") for i in range(n)]
    for sub in ("exact_masks", "mad_masks") if noisy else ("exact_masks",):
        w = BatchWriter(root / sub, samples_per_batch=per_batch)
        for t in tiles:
            if sub == "mad_masks":
                t = make_tile(t.source_index, 32, positive=False, extra=1, region=t.region)
            w.add(t)
        w.finalize(extra_channel_names=["ndvi"])
    return tiles


def test_reader_lru_cache_and_samples(tmp_path: Path) -> None:
    tiles = _legacy(tmp_path)
    src = BatchedNpzSource(tmp_path / "exact_masks", cache_size=2)
    assert len(src) == 7 and sorted(p.name for p in (tmp_path / "exact_masks").glob("*.npz")) == [
        "batch_000.npz",
        "batch_001.npz",
        "batch_002.npz",
    ]
    for i in (6, 0, 4, 2):
        s = src[i]
        assert s.tile_id == tiles[i].tile_id
        np.testing.assert_array_equal(s.rgb, tiles[i].rgb)
        np.testing.assert_array_equal(s.label, tiles[i].label_exact)
        np.testing.assert_array_equal(s.extra, tiles[i].extra)
    assert len(src._cache) == 2 and list(src._cache) == [1, 0]  # least recently used evicted
    with pytest.raises(IndexError):
        src[7]


def test_import_npz_gives_same_samples_with_both_mask_variants(tmp_path: Path) -> None:
    tiles = _legacy(tmp_path / "legacy")
    out = tmp_path / "train.zarr"
    attrs = import_npz(tmp_path / "legacy", out, split="train", shard_tiles=4)
    assert attrs.mask_types == ["exact", "noisy"] and attrs.counts.n_tiles == 7
    exact, noisy = ZarrTileStore(out), ZarrTileStore(out, mask_type="noisy")
    for i in range(7):
        np.testing.assert_array_equal(exact[i].rgb, tiles[i].rgb)
        np.testing.assert_array_equal(exact[i].label, tiles[i].label_exact)
        assert not (noisy[i].label == 1).any()
    assert exact.channel_names == ["R", "G", "B", "ndvi"]


def test_dataset_accepts_any_source_with_getitem(tmp_path: Path) -> None:
    from rtscore.data.loading.dataset import TileDataset
    from rtscore.data.normalization.stats import NormalizationStats

    _legacy(tmp_path, noisy=False)
    src = BatchedNpzSource(tmp_path / "exact_masks")
    stats = NormalizationStats(
        ["R", "G", "B", "ndvi"], np.array([120.0] * 3 + [0.0]), np.array([60.0] * 3 + [1.0]), 7, "t", "now"
    )
    ds = TileDataset(src, stats)
    sample = ds[3]
    assert tuple(sample["image"].shape) == (4, 32, 32) and sample["tile_id"] == "t0003"


def test_malformed_legacy_dataset(tmp_path: Path) -> None:
    with pytest.raises(LegacyNpzError, match="metadata.json not found"):
        BatchedNpzSource(tmp_path)
    _legacy(tmp_path, noisy=False)
    (tmp_path / "exact_masks" / "batch_001.npz").write_bytes(b"garbage")
    src = BatchedNpzSource(tmp_path / "exact_masks")
    with pytest.raises(LegacyNpzError, match=r"batch_001.npz: cannot read"):
        src[4]
