"""Tests of the 0.5x context-expanded synthetic store (guide §8.3): rendering at 2x field of view, downsampling."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtscore.config.base import ConfigError, parse_config
from rtscore.config.generation import GenerationConfig
from rtscore.data.store.format import read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.synthetic import PIXEL_SIZE_M, native_config, plan_tiles, render_tile, render_tile_with_parts
from rtscore.data.synthetic._scale import (
    downsample_labels,
    downsample_mask,
    downsample_mean_float,
    downsample_mean_uint8,
    downsample_tile,
    downsample_valid,
)
from rtscore.data.synthetic.producer import generate_synthetic
from rtscore.data.tiles import IGNORE_INDEX, RawTile

REPO = Path(__file__).resolve().parents[3]


def make_cfg(scale: float = 0.5, size: int = 64, seed: int = 7, **synthetic: Any) -> GenerationConfig:
    syn: dict[str, Any] = {"n_positive": 5, "n_negative": 4, "n_full_nodata": 1, "regions": ["a", "b"]}
    syn.update(synthetic)
    return GenerationConfig(split="train", seed=seed, tile_size=size, scale=scale, synthetic=syn)


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ config


def test_scale_defaults_to_native_and_only_half_is_allowed() -> None:
    base = {"split": "train", "synthetic": {"n_positive": 1, "n_negative": 1, "regions": ["a"]}}
    assert parse_config(GenerationConfig, base).scale == 1.0
    assert parse_config(GenerationConfig, {**base, "scale": 0.5}).scale == 0.5
    assert isinstance(parse_config(GenerationConfig, {**base, "scale": 1}).scale, float)
    with pytest.raises(ConfigError, match=r"scale: .*must be one of \[1.0, 0.5\]"):
        parse_config(GenerationConfig, {**base, "scale": 0.25})


def test_quickstart_half_config_is_the_half_companion_of_train() -> None:
    from rtscore.config.base import load_config

    one = load_config(GenerationConfig, REPO / "configs/generation/quickstart_train.yaml")
    half = load_config(GenerationConfig, REPO / "configs/generation/quickstart_train_half.yaml")
    assert half.scale == 0.5 and one.scale == 1.0 and half.seed != one.seed
    assert (half.split, half.tile_size, half.synthetic.extra_channels) == ("train", one.tile_size, ["ndvi"])


def test_native_config_keeps_physical_rts_sizes() -> None:
    cfg = make_cfg(size=64, rts_diameter_fraction=(0.1, 1.2))
    native = native_config(cfg)
    assert native.tile_size == 128 and native.scale == 1.0
    assert native.synthetic.rts_diameter_fraction == (0.05, 0.6)
    # The diameter in native pixels is fraction x rendered size: unchanged.
    for f1, f2 in zip(cfg.synthetic.rts_diameter_fraction, native.synthetic.rts_diameter_fraction, strict=True):
        assert f1 * cfg.tile_size == f2 * native.tile_size
    assert cfg.synthetic.rts_diameter_fraction == (0.1, 1.2)  # the caller's config is untouched
    one = make_cfg(scale=1.0)
    assert native_config(one) is one


# ------------------------------------------------------------------------------------------------ downsampling


def test_downsampling_rules_on_a_4x4_example() -> None:
    # Images: 2x2 mean rounded half up.
    img = np.array([[0, 1, 10, 10], [1, 1, 10, 11], [255, 255, 3, 4], [255, 254, 5, 6]], np.uint8)
    np.testing.assert_array_equal(downsample_mean_uint8(img[None]), [[[1, 10], [255, 5]]])
    # Extra bands: plain 2x2 mean, float32.
    ext = downsample_mean_float(img[None].astype(np.float32) / 2)
    assert ext.dtype == np.float32
    np.testing.assert_allclose(ext, [[[0.375, 5.125], [127.375, 2.25]]])
    # Alpha: valid only if all four source pixels are.
    alpha = np.array([[255, 255, 255, 0], [255, 255, 255, 255], [0, 0, 255, 255], [0, 0, 255, 255]], np.uint8)
    np.testing.assert_array_equal(downsample_valid(alpha), [[255, 0], [0, 255]])
    # Labels: majority (ties to 1) among the non-ignore pixels; 255 only if all four are ignore.
    lab = np.array([[1, 1, 1, 0], [0, 0, 0, 0], [1, 255, 255, 255], [0, 0, 255, 255]], np.uint8)
    np.testing.assert_array_equal(downsample_labels(lab), [[1, 0], [0, 255]])
    lab2 = np.array([[1, 255, 1, 0], [255, 255, 255, 0], [1, 0, 0, 0], [1, 255, 255, 0]], np.uint8)
    np.testing.assert_array_equal(downsample_labels(lab2), [[1, 0], [1, 0]])
    np.testing.assert_array_equal(downsample_mask(lab == 1), [[True, False], [False, False]])
    with pytest.raises(ValueError, match="even"):
        downsample_labels(np.zeros((3, 4), np.uint8))


def test_downsample_tile_keeps_nodata_rules_and_recounts() -> None:
    rgb = np.full((3, 4, 4), 9, np.uint8)
    rgb[:, 0, 0] = 0  # NoData pixel: the whole top-left block becomes NoData
    rgb[:, 2:, 2:] = 0  # a valid pitch-dark block
    alpha = np.full((4, 4), 255, np.uint8)
    alpha[0, 0] = 0
    label = np.zeros((4, 4), np.uint8)
    label[0, 0] = IGNORE_INDEX
    label[0:2, 1] = 1  # majority of the top-left block, which is NoData: must not count
    extra = np.ones((1, 4, 4), np.float32)
    extra[:, 0, 0] = 0.0
    tile = RawTile(
        tile_id="t@0.5x",
        region="r",
        rgb=rgb,
        alpha=alpha,
        label_exact=label,
        label_noisy=label.copy(),
        extra=extra,
        n_objects=1,
        source_index=3,
        meta={"has_partial_nodata": 1.0, "has_dark_pixels": 0.0, "n_hard_negatives": 2.0},
        pixel_area_m2=4.77**2,
    )
    small = downsample_tile(tile)
    np.testing.assert_array_equal(small.alpha, [[0, 255], [255, 255]])
    np.testing.assert_array_equal(small.rgb[0], [[0, 9], [9, 0]])
    np.testing.assert_array_equal(small.extra[0], [[0.0, 1.0], [1.0, 1.0]])
    for lab in (small.label_exact, small.label_noisy):
        np.testing.assert_array_equal(lab, [[IGNORE_INDEX, 0], [0, 0]])
    assert small.n_objects == 0  # no label-1 pixel survives
    assert small.meta == {"has_partial_nodata": 1.0, "has_dark_pixels": 1.0, "n_hard_negatives": 2.0}
    assert (small.tile_id, small.source_index, small.size) == ("t@0.5x", 3, 2)


# ------------------------------------------------------------------------------------------------ rendering


@pytest.fixture(scope="module")
def half() -> tuple[GenerationConfig, list[RawTile]]:
    cfg = make_cfg(extra_channels=["ndvi", "slope"], partial_nodata_probability=0.5, dark_pixel_probability=0.5)
    return cfg, [render_tile(p, cfg) for p in plan_tiles(cfg)]


def test_half_tiles_have_the_tile_size_and_valid_labels(half) -> None:
    cfg, tiles = half
    n = cfg.tile_size
    for t in tiles:
        assert t.rgb.shape == (3, n, n) and t.rgb.dtype == np.uint8
        assert t.alpha.shape == (n, n) and set(np.unique(t.alpha)) <= {0, 255}
        assert t.extra is not None and t.extra.shape == (2, n, n) and t.extra.dtype == np.float32
        for lab in (t.label_exact, t.label_noisy):
            assert lab is not None and lab.shape == (n, n) and set(np.unique(lab)) <= {0, 1, IGNORE_INDEX}
            assert (lab[t.alpha == 0] == IGNORE_INDEX).all()
        assert (t.label_noisy[t.label_exact == IGNORE_INDEX] == IGNORE_INDEX).all()
        assert (t.rgb[:, t.alpha == 0] == 0).all() and (t.extra[:, t.alpha == 0] == 0).all()
        if t.alpha.any():  # (full-NoData tiles have no scene metadata)
            assert t.meta["has_partial_nodata"] == float((t.alpha == 0).any())
            assert t.meta["has_dark_pixels"] == float(((t.rgb == 0).all(0) & (t.alpha > 0)).any())
        assert t.n_objects == 0 or (t.label_exact == 1).any()
    kinds = [p.kind for p in plan_tiles(cfg)]
    assert all((t.label_exact == 1).any() for t, k in zip(tiles, kinds, strict=True) if k == "positive")
    assert not any((t.label_exact == 1).any() for t, k in zip(tiles, kinds, strict=True) if k != "positive")
    assert any(t.meta["has_partial_nodata"] for t in tiles)


def test_half_tile_is_the_downsampled_native_render(half) -> None:
    cfg, tiles = half
    plan = next(p for p in plan_tiles(cfg) if p.kind == "positive")
    tile, parts = render_tile_with_parts(plan, cfg)
    from rtscore.data.synthetic._render import render_scene

    big, big_parts = render_scene(plan, native_config(cfg), fov=2)
    assert big.size == 2 * cfg.tile_size
    np.testing.assert_array_equal(tile.rgb, downsample_tile(big).rgb)
    np.testing.assert_array_equal(tile.label_exact, tiles[plan.index].label_exact)
    assert set(parts) == set(big_parts) and all(m.shape == (cfg.tile_size,) * 2 for m in parts.values())


def test_half_tile_ids_and_scenes_differ_from_the_native_store() -> None:
    one, half = make_cfg(scale=1.0), make_cfg(scale=0.5)
    ids_one = [p.tile_id for p in plan_tiles(one)]
    ids_half = [p.tile_id for p in plan_tiles(half)]
    assert ids_half == [f"{i}@0.5x" for i in ids_one] and not set(ids_one) & set(ids_half)
    p1, ph = plan_tiles(one)[0], plan_tiles(half)[0]
    assert not np.array_equal(render_tile(p1, one).rgb, render_tile(ph, half).rgb)


def test_full_nodata_half_tile() -> None:
    cfg = make_cfg(n_positive=0, n_negative=0, n_full_nodata=1)
    t = render_tile(plan_tiles(cfg)[0], cfg)
    assert t.size == cfg.tile_size and not t.alpha.any() and (t.label_exact == IGNORE_INDEX).all()


# ------------------------------------------------------------------------------------------------ stores


def test_half_store_attrs_metadata_and_determinism(tmp_path: Path) -> None:
    cfg = make_cfg(extra_channels=["ndvi"], partial_nodata_probability=0.5)
    cfg.store.shard_tiles = 4
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    attrs = generate_synthetic(cfg, a, num_workers=1)
    generate_synthetic(cfg, b, num_workers=2)
    assert tree_digest(a) == tree_digest(b)
    stored = read_store_attrs(a)
    assert stored == attrs  # read back typed as written
    assert stored.scale == 0.5 and stored.pixel_size_m == pytest.approx(2 * PIXEL_SIZE_M)
    assert stored.tile_size == 64 and stored.config["scale"] == 0.5
    store = ZarrTileStore(a)
    meta = store.metadata
    assert all(str(t).endswith("@0.5x") for t in meta.tile_id)
    for i in range(len(store)):
        s = store[i]
        assert s.rgb.shape == (3, 64, 64)
        assert int(meta.n_positive_px[i]) == int((s.label == 1).sum())
        assert int(meta.n_ignore_px[i]) == int((s.label == IGNORE_INDEX).sum())
        assert int(meta.n_nodata_px[i]) == int((s.alpha == 0).sum())
        assert bool(meta.is_positive[i]) == bool((s.label == 1).any())
    assert attrs.counts.n_positive == 5 and attrs.counts.n_full_nodata == 1


def test_native_store_records_scale_and_pixel_size(gen_config: GenerationConfig, tmp_path: Path) -> None:
    attrs = generate_synthetic(gen_config, tmp_path / "one.zarr")
    assert attrs.scale == 1.0 and attrs.pixel_size_m == PIXEL_SIZE_M == 4.77
