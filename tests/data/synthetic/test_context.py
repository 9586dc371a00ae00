"""The 0.5x context store of a split: each tile's 2x field of view, the tile itself at its centre, same tile id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.generation import GenerationConfig
from rtscore.data.store.format import read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.synthetic import (
    downsample_mean_float,
    downsample_mean_uint8,
    downsample_valid,
    plan_tiles,
    render_context,
    render_tile,
)
from rtscore.data.synthetic.producer import generate_synthetic, generate_synthetic_context


def make_cfg(**synthetic: Any) -> GenerationConfig:
    syn: dict[str, Any] = {"n_positive": 3, "n_negative": 2, "n_full_nodata": 1, "regions": ["a", "b"]}
    syn.update(extra_channels=["ndvi"], partial_nodata_probability=0.5, **synthetic)
    return GenerationConfig(split="val", seed=5, tile_size=64, synthetic=syn)


def test_the_context_holds_the_tile_at_its_centre_and_other_ground_around_it() -> None:
    cfg = make_cfg()
    n, q = cfg.tile_size, cfg.tile_size // 4
    centre = (slice(q, n - q), slice(q, n - q))
    for plan in plan_tiles(cfg):
        tile, ctx = render_tile(plan, cfg), render_context(plan, cfg)
        assert ctx.tile_id == tile.tile_id and ctx.rgb.shape == tile.rgb.shape
        if plan.kind == "full_nodata":
            assert not ctx.alpha.any()
            continue
        alpha = downsample_valid(tile.alpha)
        np.testing.assert_array_equal(ctx.alpha[centre], alpha)
        rgb = downsample_mean_uint8(tile.rgb)
        rgb[:, alpha == 0] = 0
        np.testing.assert_array_equal(ctx.rgb[(slice(None), *centre)], rgb)
        assert tile.extra is not None and ctx.extra is not None
        extra = downsample_mean_float(tile.extra)
        extra[:, alpha == 0] = 0.0
        np.testing.assert_array_equal(ctx.extra[(slice(None), *centre)], extra)
        ring = np.ones((n, n), bool)
        ring[centre] = False
        assert ctx.alpha[ring].any() and ctx.rgb[:, ring].std() > 1.0  # real ground around it, not padding


def test_the_context_store_pairs_with_its_store_by_tile_id(tmp_path: Path) -> None:
    cfg = make_cfg()
    generate_synthetic(cfg, tmp_path / "val.zarr")
    generate_synthetic_context(cfg, tmp_path / "context.zarr")
    store, ctx = ZarrTileStore(tmp_path / "val.zarr"), ZarrTileStore(tmp_path / "context.zarr")
    assert list(ctx.metadata.tile_id) == list(store.metadata.tile_id)
    attrs, ctx_attrs = read_store_attrs(tmp_path / "val.zarr"), read_store_attrs(tmp_path / "context.zarr")
    assert ctx_attrs.context_of == attrs.config_hash and ctx_attrs.scale == 0.5
    assert attrs.pixel_size_m is not None and ctx_attrs.pixel_size_m == 2 * attrs.pixel_size_m
