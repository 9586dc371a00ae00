from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from rtscore.data.store.shard_reader import FastShardArray, ShardFormatError
from tests.helpers import write_test_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "train.zarr"
    write_test_store(path, 13, extra=2, format_version=1)  # 4 tiles per shard: the last shard is partial
    return path


@pytest.fixture(scope="module")
def store_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "train.zarr"
    write_test_store(path, 13, extra=2)
    return path


@pytest.mark.parametrize(
    ("version", "name"),
    [(1, "images"), (1, "alpha"), (1, "labels_exact"), (1, "labels_noisy"), (1, "extra"), (2, "pixels"), (2, "extra")],
)
def test_fast_reads_equal_zarr(store: Path, store_v2: Path, version: int, name: str) -> None:
    store = store if version == 1 else store_v2
    fast = FastShardArray.open(store / name)
    assert fast is not None, "our writer's layout must take the fast path"
    ref = zarr.open_array(str(store / name), mode="r")
    for i in range(13):
        got = fast[i]
        np.testing.assert_array_equal(got, ref[i])
        assert got.dtype == ref.dtype and got.flags.writeable


def test_other_layouts_are_declined(tmp_path: Path) -> None:
    plain = zarr.create_array(str(tmp_path / "plain.zarr"), shape=(4, 8), chunks=(1, 8), dtype="uint8")
    plain[:] = 1
    assert FastShardArray.open(tmp_path / "plain.zarr") is None
    assert FastShardArray.open(tmp_path / "missing.zarr") is None


def test_absent_shard_reads_as_fill_and_corrupt_index_is_detected(store: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    fast = FastShardArray.open(copy / "labels_exact")
    assert fast is not None
    (copy / "labels_exact" / "c" / "2" / "0" / "0").unlink()
    assert (fast[9] == 255).all()  # zarr semantics: absent chunk = fill value (labels fill is ignore)
    shard = copy / "images" / "c" / "1" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[-10] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(ShardFormatError, match="checksum mismatch"):
        FastShardArray.open(copy / "images")[5]  # type: ignore[index]
