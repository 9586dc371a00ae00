"""Store format 2 (one chunk of uint8 planes + one of EXTRA per tile) and the reader of format-1 stores."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from rtscore.data.store.format import FORMAT_VERSION, TileStoreError, read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.store.shard_reader import FastShardArray
from rtscore.data.store.writer import staging_path, write_store
from tests.helpers import ListProducer, _attrs, _layout, write_test_store


def _count_chunk_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    real = FastShardArray.__getitem__
    calls = {"n": 0}

    def counting(self: FastShardArray, i: int) -> np.ndarray:
        calls["n"] += 1
        return real(self, i)

    monkeypatch.setattr(FastShardArray, "__getitem__", counting)
    return calls


@pytest.mark.parametrize(("extra", "reads"), [(2, 2), (0, 1)])
def test_a_sample_is_at_most_two_chunk_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: int, reads: int
) -> None:
    path = tmp_path / "train.zarr"
    write_test_store(path, 8, extra=extra)
    assert read_store_attrs(path).format_version == FORMAT_VERSION >= 2
    for mask_type in ("exact", "noisy"):
        store = ZarrTileStore(path, mask_type)
        store[0]  # opens the arrays
        calls = _count_chunk_reads(monkeypatch)
        for i in range(8):
            store[i]
        assert calls["n"] == 8 * reads, f"{mask_type}: {calls['n'] / 8} chunk reads per sample"
        monkeypatch.undo()


def test_format_1_store_reads_the_same_tiles_stats_and_training_batches(tmp_path: Path) -> None:
    import torch

    from rtscore.config.pipeline import AugmentationConfig
    from rtscore.data.loading.dataset import TileDataset
    from rtscore.data.normalization.compute import compute_normalization_stats

    v1, v2 = tmp_path / "v1.zarr", tmp_path / "v2.zarr"
    write_test_store(v1, 13, extra=2, format_version=1)
    write_test_store(v2, 13, extra=2)
    assert read_store_attrs(v1).format_version == 1 and (v1 / "images").is_dir() and not (v1 / "pixels").exists()
    assert (v2 / "pixels").is_dir() and not (v2 / "images").exists()
    for mask_type in ("exact", "noisy"):
        old, new = ZarrTileStore(v1, mask_type), ZarrTileStore(v2, mask_type, ["e1"])
        for i in range(13):
            a, b = old[i], new[i]
            assert a.tile_id == b.tile_id and a.pixel_area_m2 == b.pixel_area_m2
            for name in ("rgb", "alpha", "label"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{name} tile {i}")
            assert a.extra is not None and b.extra is not None
            np.testing.assert_array_equal(a.extra[[1]], b.extra)  # the selected EXTRA channel only
        np.testing.assert_array_equal(old.metadata.n_nodata_px, new.metadata.n_nodata_px)
    s1, s2 = compute_normalization_stats(v1), compute_normalization_stats(v2)
    assert s1.to_json()["rgb"] == s2.to_json()["rgb"] and s1.to_json()["extra"] == s2.to_json()["extra"]
    # Training batches (augmented, same seed) and one optimizer step agree bit for bit.
    losses = []
    for path in (v1, v2):
        ds = TileDataset(ZarrTileStore(path), s1, augmentation=AugmentationConfig(), seed=3)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False)
        torch.manual_seed(0)
        model = torch.nn.Conv2d(5, 2, 3, padding=1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        total = []
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"], ignore_index=255)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total.append(loss.item())
        losses.append((total, model.weight.detach().clone()))
    assert losses[0][0] == losses[1][0] and torch.equal(losses[0][1], losses[1][1])


def test_a_format_1_store_keeps_its_missing_shard_and_checksum_guards(tmp_path: Path) -> None:
    path = tmp_path / "v1.zarr"
    write_test_store(path, 8, format_version=1)
    (path / "alpha" / "c" / "1" / "0" / "0").unlink()
    with pytest.raises(TileStoreError, match="tile index 6 .*t0006.*shard is missing or corrupt"):
        ZarrTileStore(path)[6]
    assert ZarrTileStore(path).checksummed


def test_a_missing_pixels_shard_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "v2.zarr"
    write_test_store(path, 8, extra=1)
    (path / "pixels" / "c" / "1" / "0" / "0" / "0").unlink()
    with pytest.raises(TileStoreError, match="tile index 6 .*t0006.*shard is missing or corrupt"):
        ZarrTileStore(path)[6]


def test_planes_are_named_in_the_array_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "v2.zarr"
    write_test_store(path, 4)
    meta_path = path / "pixels" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    assert meta["attributes"]["planes"] == ["R", "G", "B", "alpha", "labels_exact", "labels_noisy"]
    meta["attributes"]["planes"] = ["alpha", "R", "G", "B", "labels_exact"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(TileStoreError, match=r"pixels planes \['alpha', 'R'"):
        ZarrTileStore(path)


def test_a_newer_format_is_refused_naming_the_store(tmp_path: Path) -> None:
    path = tmp_path / "v2.zarr"
    write_test_store(path, 4)
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["rtscore"]["format_version"] = FORMAT_VERSION + 1
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(TileStoreError, match=rf"{path} has format_version {FORMAT_VERSION + 1}"):
        ZarrTileStore(path)


def test_an_interrupted_format_1_generation_is_restarted_in_format_2(tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    old = dataclasses.replace(_layout(8), format_version=1)
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_store(ListProducer(8, fail_at=4), old, out, _attrs())
    assert (staging_path(out) / "images").is_dir()
    write_store(ListProducer(8), _layout(8), out, _attrs())  # same config, new rtscore: format 2
    assert read_store_attrs(out).format_version == FORMAT_VERSION
    assert not (out / "images").exists() and ZarrTileStore(out)[5].tile_id == "t0005"
