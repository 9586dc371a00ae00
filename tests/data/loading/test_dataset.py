"""Tests of the dataset layer's joined sources (ConcatSource: several train stores as one)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from rtscore.data.loading.sources import ConcatSource, class_pixel_counts, usable_indices
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.tiles import StoredSample
from tests.helpers import write_test_store


def test_concat_source_joins_tiles_and_metadata(tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    write_test_store(a, 10, extra=1)
    write_test_store(b, 6, extra=1)
    sa, sb = ZarrTileStore(a), ZarrTileStore(b)
    joined = ConcatSource([sa, sb])
    assert len(joined) == 16 and joined.channel_names == ["R", "G", "B", "e0"]
    assert joined.locate(9) == (0, 9) and joined.locate(10) == (1, 0) and joined.locate(-1) == (1, 5)
    s = joined[12]
    assert s.index == 12 and s.tile_id == sb[2].tile_id
    np.testing.assert_array_equal(s.rgb, sb[2].rgb)
    meta = joined.metadata
    assert meta is not None and len(meta) == 16 and meta.tile_size == 32
    np.testing.assert_array_equal(meta.is_positive, np.concatenate([sa.metadata.is_positive, sb.metadata.is_positive]))
    assert usable_indices(joined).size == usable_indices(sa).size + usable_indices(sb).size
    with pytest.raises(IndexError, match="out of range for 16 tiles"):
        joined[16]
    again = pickle.loads(pickle.dumps(joined))  # DataLoader workers: reopened lazily per process
    np.testing.assert_array_equal(again[3].label, sa[3].label)


def test_concat_source_refuses_mixed_channels(tmp_path: Path) -> None:
    write_test_store(tmp_path / "a.zarr", 4, extra=1)
    write_test_store(tmp_path / "b.zarr", 4)
    with pytest.raises(ValueError, match="different channels"):
        ConcatSource([ZarrTileStore(tmp_path / "a.zarr"), ZarrTileStore(tmp_path / "b.zarr")])


class _NoMetadata:
    """A source without store metadata (as a legacy npz directory)."""

    def __init__(self, store: ZarrTileStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index: int) -> StoredSample:
        return self.store[index]


def test_concat_source_without_metadata_falls_back_to_pixels(tmp_path: Path) -> None:
    write_test_store(tmp_path / "a.zarr", 5)
    write_test_store(tmp_path / "b.zarr", 3)
    sa = ZarrTileStore(tmp_path / "a.zarr")
    joined = ConcatSource([sa, _NoMetadata(ZarrTileStore(tmp_path / "b.zarr"))])
    assert joined.metadata is None and joined.channel_names is None
    np.testing.assert_array_equal(usable_indices(joined), np.arange(8))


def test_class_pixel_counts_from_metadata_match_the_pixels(tmp_path: Path) -> None:
    """The class-balanced CE weight's counts come from tile metadata; they equal a count of the labels training
    sees (alpha 0 and 255 excluded), also over a join of stores."""
    write_test_store(tmp_path / "a.zarr", 10)
    write_test_store(tmp_path / "b.zarr", 7)
    joined = ConcatSource([ZarrTileStore(tmp_path / "a.zarr"), ZarrTileStore(tmp_path / "b.zarr")])
    idx = usable_indices(joined)[1:]  # any subset: only the tiles training uses count
    from_meta = class_pixel_counts(joined, idx)
    from_pixels = class_pixel_counts(_NoMetadata(joined), idx)  # type: ignore[arg-type]
    assert from_meta == from_pixels
    assert from_meta.rts > 0 and from_meta.background > 10 * from_meta.rts
    labels = [np.where(joined[int(i)].alpha == 0, 255, joined[int(i)].label) for i in idx]
    assert from_meta.rts == sum(int((lab == 1).sum()) for lab in labels)
    assert from_meta.background == sum(int((lab == 0).sum()) for lab in labels)


def test_loader_refuses_bad_label_values_and_non_finite_inputs_naming_tile_and_store(tmp_path: Path) -> None:
    """Issue 11.16: label 7 or NaN EXTRA values stop the loader at the tile, not as a non-finite loss later."""
    import zarr

    from rtscore.data.loading.dataset import SampleValueError, TileDataset
    from rtscore.data.normalization.compute import compute_normalization_stats

    path = tmp_path / "train.zarr"
    write_test_store(path, 8, extra=1)
    stats = compute_normalization_stats(path)
    group = zarr.open_group(str(path), mode="r+")
    pixels = group["pixels"]  # planes R, G, B, alpha, labels_exact, labels_noisy
    bad = np.asarray(pixels[3])
    bad[4, 10, 10] = 7
    pixels[3] = bad
    extra = group["extra"]
    nan = np.asarray(extra[6])
    nan[0, 20, 20:23] = np.nan  # valid pixels (alpha 255)
    extra[6] = nan

    ds = TileDataset(ZarrTileStore(path), stats)
    position = {int(i): p for p, i in enumerate(ds.indices)}
    assert ds[position[2]]["label"].max() <= 1  # clean tiles load as before
    with pytest.raises(SampleValueError, match=rf"tile t0003 \(index 3 of store {path}\): label values \[7\]"):
        ds[position[3]]
    with pytest.raises(SampleValueError, match=r"tile t0006 .*non-finite values .*channels e0 \(3 px\)"):
        ds[position[6]]
    joined = TileDataset(ConcatSource([ZarrTileStore(write_test_store_at(tmp_path)), ZarrTileStore(path)]), stats)
    with pytest.raises(SampleValueError, match=rf"tile t0003 \(index 3 of store {path}\)"):
        joined[int(np.flatnonzero(joined.indices == 4 + 3)[0])]


def write_test_store_at(tmp_path: Path) -> Path:
    out = tmp_path / "other.zarr"
    write_test_store(out, 4, extra=1)
    return out
