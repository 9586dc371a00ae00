from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rtscore.data.loading.sources import ConcatSource
from rtscore.data.store.format import TileStoreError, read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.store.writer import staging_path, write_store
from rtscore.data.tiles import RawTile, TileInventory
from tests.conftest import make_tile
from tests.helpers import SIZE, ListProducer, _attrs, _layout


def test_roundtrip_and_metadata(tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    attrs = write_store(ListProducer(10, extra=2), _layout(10, 2), out, _attrs(2))
    assert attrs.counts.n_tiles == 10 and attrs.counts.n_positive == 5
    store = ZarrTileStore(out)
    assert len(store) == 10 and store.channel_names == ["R", "G", "B", "e0", "e1"]
    for i in (0, 3, 9):
        want = make_tile(i, SIZE, positive=i % 2 == 0, extra=2, nodata_rows=4 if i % 5 == 0 else 0)
        got = store[i]
        assert got.tile_id == want.tile_id and got.region == f"r{i % 3}"
        np.testing.assert_array_equal(got.rgb, want.rgb)
        np.testing.assert_array_equal(got.label, want.label_exact)
        np.testing.assert_array_equal(got.alpha, want.alpha)
        np.testing.assert_array_equal(got.extra, want.extra)
    meta = store.metadata
    assert meta.is_positive.tolist() == [i % 2 == 0 for i in range(10)]
    assert int(meta.n_nodata_px[5]) == 4 * SIZE
    assert not (tmp_path / ".train.zarr.partial").exists()
    # Channel selection by name (EXTRA {name, band} selection downstream).
    sel = ZarrTileStore(out, extra_channels=["e1"])
    np.testing.assert_array_equal(sel[3].extra, store[3].extra[1:2])
    with pytest.raises(TileStoreError, match=r"no extra channels \['ndvi'\]"):
        ZarrTileStore(out, extra_channels=["ndvi"])


def test_parallel_workers_own_whole_shards(tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    write_store(ListProducer(13), _layout(13), a, _attrs())
    write_store(ListProducer(13), _layout(13), b, _attrs(), num_workers=2)
    sa, sb = ZarrTileStore(a), ZarrTileStore(b)
    for i in range(13):  # no tile lost, none mixed up
        np.testing.assert_array_equal(sa[i].rgb, sb[i].rgb)
        assert sa[i].tile_id == sb[i].tile_id


def test_same_input_gives_byte_identical_store(tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    write_store(ListProducer(9), _layout(9), a, _attrs())
    write_store(ListProducer(9), _layout(9), b, _attrs())
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_interrupted_generation_resumes_from_last_complete_shard(tmp_path: Path) -> None:
    out, log = tmp_path / "train.zarr", tmp_path / "log.txt"
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_store(ListProducer(14, fail_at=8, log=log), _layout(14), out, _attrs())
    assert not out.exists(), "a half-written store must never be visible under its final name"
    with pytest.raises(TileStoreError, match="interrupted generation is staged"):
        ZarrTileStore(out)
    log.write_text("")
    write_store(ListProducer(14, log=log), _layout(14), out, _attrs())
    assert log.read_text().split() == ["8", "12"], "only the unfinished shards are produced again"
    ref = tmp_path / "ref.zarr"
    write_store(ListProducer(14), _layout(14), ref, _attrs())
    for i in range(14):
        np.testing.assert_array_equal(ZarrTileStore(out)[i].rgb, ZarrTileStore(ref)[i].rgb)


def test_staged_generation_of_another_config_is_set_aside_not_mixed_in(tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    with pytest.raises(RuntimeError):
        write_store(ListProducer(8, fail_at=4), _layout(8), out, _attrs(chash="old"))
    write_store(ListProducer(8), _layout(8), out, _attrs(chash="new"))  # the old staging is set aside
    assert read_store_attrs(out).config_hash == "new"
    assert not staging_path(out).exists()
    (aside,) = (tmp_path / "set_aside").iterdir()
    assert (aside / staging_path(out).name / "zarr.json").is_file(), "kept for the user, not deleted"
    ref = tmp_path / "ref.zarr"
    write_store(ListProducer(8), _layout(8), ref, _attrs(chash="new"))
    for i in range(8):
        np.testing.assert_array_equal(ZarrTileStore(out)[i].rgb, ZarrTileStore(ref)[i].rgb)


def test_existing_output_needs_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    write_store(ListProducer(4), _layout(4), out, _attrs())
    with pytest.raises(TileStoreError, match="already exists; pass overwrite"):
        write_store(ListProducer(4), _layout(4), out, _attrs())
    write_store(ListProducer(4), _layout(4), out, _attrs(), overwrite=True)


class BadLabelProducer(ListProducer):
    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        for tiles, codes in super().batches(start, stop):
            for t in tiles:
                if t.source_index == 6:
                    t.label_exact[0, 0] = 7
            yield tiles, codes


class InventoryProducer(ListProducer):
    """ListProducer's tiles with an inventory: ids, a mapped Negative polygon on every third tile, latitudes
    (tile 5's unknown)."""

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        for tiles, codes in super().batches(start, stop):
            for t in tiles:
                i = t.source_index
                t.inventory = TileInventory(
                    uids=f"u{i}" if i % 2 == 0 else "",
                    negative_uids=f"n{i};m{i}" if i % 3 == 0 else "",
                    object_pixels=f"u{i}@1,2" if i % 2 == 0 else "",
                    latitude=math.nan if i == 5 else 60.0 + i,
                )
            yield tiles, codes


def test_the_inventory_ids_and_latitudes_round_trip_and_a_store_without_them_reads(tmp_path: Path) -> None:
    """Issue 36: meta/uids, negative_uids, object_pixels, latitude are optional per-tile arrays."""
    layout = dataclasses.replace(_layout(6), write_inventory=True)
    write_store(InventoryProducer(6), layout, tmp_path / "inv.zarr", _attrs())
    meta = ZarrTileStore(tmp_path / "inv.zarr").metadata
    assert meta.uids is not None and meta.negative_uids is not None and meta.object_pixels is not None
    assert meta.uids.tolist() == ["u0", "", "u2", "", "u4", ""]
    assert meta.negative_uids.tolist() == ["n0;m0", "", "", "n3;m3", "", ""]
    assert meta.object_pixels.tolist()[:3] == ["u0@1,2", "", "u2@1,2"]
    assert meta.latitude is not None and meta.latitude.dtype == np.float64
    np.testing.assert_array_equal(meta.latitude, [60.0, 61.0, 62.0, 63.0, 64.0, np.nan])
    assert meta.records_negatives and meta.mapped_negative.tolist() == [True, False, False, True, False, False]
    # without the arrays (synthetic, legacy, written before them): None, and no tile has a mapped negative
    write_store(InventoryProducer(6), _layout(6), tmp_path / "bare.zarr", _attrs())
    bare = ZarrTileStore(tmp_path / "bare.zarr").metadata
    assert (bare.uids, bare.negative_uids, bare.object_pixels, bare.latitude) == (None, None, None, None)
    assert not bare.records_negatives and not bare.mapped_negative.any() and len(bare) == 6
    # joined sources: the arrays where every source has them
    both = ConcatSource([ZarrTileStore(tmp_path / "inv.zarr"), ZarrTileStore(tmp_path / "inv.zarr")]).metadata
    assert both is not None and both.latitude is not None and both.latitude.size == 12
    mixed = ConcatSource([ZarrTileStore(tmp_path / "inv.zarr"), ZarrTileStore(tmp_path / "bare.zarr")]).metadata
    assert mixed is not None and mixed.uids is None and mixed.latitude is None and len(mixed) == 12
    with pytest.raises(TileStoreError, match=r"tile t0000: the store records each tile's inventory ids; this"):
        write_store(ListProducer(4), dataclasses.replace(_layout(4), write_inventory=True), tmp_path / "x", _attrs())


def test_label_values_outside_set_name_the_tile(tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    with pytest.raises(TileStoreError, match=r"tile t0006: label_exact has values \[7\] outside \{0, 1, 255\}"):
        write_store(BadLabelProducer(8), _layout(8), out, _attrs())
    assert not out.exists()


def test_truncated_shard_gives_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    write_store(ListProducer(8), _layout(8), out, _attrs())
    shard = out / "pixels" / "c" / "1" / "0" / "0" / "0"
    assert shard.is_file()
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 3])
    store = ZarrTileStore(out)
    np.testing.assert_array_equal(store[1].rgb, make_tile(1, SIZE, positive=False).rgb)  # other shards still read
    with pytest.raises(TileStoreError, match=rf"store {out}, tile index 5 \(t0005\): .*corrupt"):
        store[5]


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(TileStoreError, match="tile store not found"):
        ZarrTileStore(tmp_path / "missing.zarr")
    import zarr

    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    with pytest.raises(TileStoreError, match="not a published rts tile store"):
        ZarrTileStore(tmp_path / "plain.zarr")


def test_reader_pickles_without_open_handles(tmp_path: Path) -> None:
    import pickle

    out = tmp_path / "train.zarr"
    write_store(ListProducer(4), _layout(4), out, _attrs())
    store = ZarrTileStore(out)
    _ = store[0]
    clone = pickle.loads(pickle.dumps(store))
    assert clone._arrays is None
    np.testing.assert_array_equal(clone[1].rgb, store[1].rgb)


def test_missing_shard_is_detected_not_read_as_nodata(tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    write_store(ListProducer(8), _layout(8), out, _attrs())
    (out / "pixels" / "c" / "1" / "0" / "0" / "0").unlink()
    with pytest.raises(TileStoreError, match="tile index 6 .*t0006.*shard is missing or corrupt"):
        ZarrTileStore(out)[6]


def test_transient_read_errors_are_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from rtscore.data.store.shard_reader import FastShardArray

    out = tmp_path / "train.zarr"
    write_store(ListProducer(4), _layout(4), out, _attrs())
    real = FastShardArray.__getitem__
    calls = {"n": 0}

    def flaky(self: FastShardArray, i: int) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EIO, "Input/output error (network mount hiccup)")
        return real(self, i)

    monkeypatch.setattr(FastShardArray, "__getitem__", flaky)
    monkeypatch.setattr("rtscore.data.store.reader.time.sleep", lambda s: None)
    tile = ZarrTileStore(out)[2]
    assert tile.tile_id == "t0002" and calls["n"] > 1


# --------------------------------------------------------------------------- per-chunk checksums (issue 11.13)
def _flip(path: Path, bit: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(raw))


def test_every_flipped_bit_in_an_image_shard_is_caught_naming_the_tile(tmp_path: Path) -> None:
    import shutil

    ref = tmp_path / "ref.zarr"
    write_store(ListProducer(8), _layout(8), ref, _attrs())
    good = ZarrTileStore(ref)
    shard_rel = Path("pixels/c/1/0/0/0")  # tiles 4..7
    n_bits = (ref / shard_rel).stat().st_size * 8
    rng = np.random.default_rng(0)
    for k, bit in enumerate(rng.choice(n_bits, size=40, replace=False)):
        copy = tmp_path / f"flip{k}.zarr"
        shutil.copytree(ref, copy)
        _flip(copy / shard_rel, int(bit))
        store = ZarrTileStore(copy)
        caught = []
        for i in range(4, 8):
            try:
                tile = store[i]
            except TileStoreError as err:
                assert f"t{i:04d}" in str(err) and str(copy) in str(err), err
                caught.append(i)
            else:  # a tile that reads must read exactly what was written
                np.testing.assert_array_equal(tile.rgb, good[i].rgb)
        assert caught, f"flip of bit {bit} decoded to pixels without error"


def test_statistics_pass_over_a_corrupt_store_fails_naming_it(tmp_path: Path) -> None:
    from rtscore.data.normalization.compute import compute_normalization_stats

    out = tmp_path / "train.zarr"
    write_store(ListProducer(8), _layout(8), out, _attrs())
    shard = out / "pixels/c/0/0/0/0"
    _flip(shard, 8 * 40 + 3)  # inside the first chunk's data
    with pytest.raises(TileStoreError, match=rf"store {out}, tiles 0..3: cannot decode .*regenerate"):
        compute_normalization_stats(out)


def test_store_without_checksums_reads_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from zarr.codecs import BloscCodec

    import rtscore.data.store.shards as shards_mod

    def old_style(layout: object, typesize: int) -> list[object]:
        return [BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle" if typesize == 1 else "shuffle")]

    monkeypatch.setattr(shards_mod, "_compressors", old_style)
    out = tmp_path / "old.zarr"
    write_store(ListProducer(4), _layout(4), out, _attrs())
    monkeypatch.undo()
    with caplog.at_level("WARNING", logger="rtscore.data.store.reader"):
        store = ZarrTileStore(out)
    assert not store.checksummed
    assert any("without per-chunk checksums" in r.message and "Regenerate" in r.message for r in caplog.records)
    np.testing.assert_array_equal(store[2].rgb, make_tile(2, SIZE).rgb)
    assert ZarrTileStore(write_test_store_path(tmp_path)).checksummed


def write_test_store_path(tmp_path: Path) -> Path:
    out = tmp_path / "new.zarr"
    write_store(ListProducer(4), _layout(4), out, _attrs())
    return out
