"""Tests of the procedural tundra / thaw-slump tile source."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtscore.config.generation import GenerationConfig
from rtscore.data.synthetic import plan_tiles, render_batch, render_tile, render_tile_with_parts
from rtscore.data.tiles import IGNORE_INDEX, RawTile

REPO = Path(__file__).resolve().parents[3]


def make_cfg(size: int = 128, seed: int = 7, split: str = "train", store: dict | None = None, **synthetic: Any):
    syn: dict[str, Any] = {"n_positive": 4, "n_negative": 4, "regions": ["a", "b"]}
    syn.update(synthetic)
    return GenerationConfig(split=split, seed=seed, tile_size=size, synthetic=syn, store=store or {})


def arrays(t: RawTile) -> list[np.ndarray | None]:
    return [t.rgb, t.alpha, t.label_exact, t.label_noisy, t.extra]


def digest(t: RawTile) -> str:
    h = hashlib.sha256()
    for a in arrays(t):
        h.update(b"none" if a is None else a.tobytes())
    return h.hexdigest()


def luminance(rgb: np.ndarray) -> np.ndarray:
    return 0.3 * rgb[0].astype(float) + 0.59 * rgb[1] + 0.11 * rgb[2]


@pytest.fixture(scope="module")
def mixed() -> tuple[GenerationConfig, list, list[RawTile]]:
    cfg = make_cfg(
        n_positive=6, n_negative=6, n_full_nodata=2, regions=["a", "b", "c"], extra_channels=["ndvi", "slope"]
    )
    plans = plan_tiles(cfg)
    return cfg, plans, render_batch(plans, cfg)


# ------------------------------------------------------------------------------------------------ planning


def test_plan_counts_kinds_regions_and_ids() -> None:
    cfg = make_cfg(n_positive=7, n_negative=5, n_full_nodata=2, regions=["a", "b", "c"])
    plans = plan_tiles(cfg)
    assert len(plans) == 14
    assert Counter(p.kind for p in plans) == {"positive": 7, "negative": 5, "full_nodata": 2}
    assert [p.index for p in plans] == list(range(14))
    assert [p.tile_id for p in plans] == [f"train_{i:06d}" for i in range(14)]
    assert {p.seed for p in plans} == {cfg.seed}
    regions = Counter(p.region for p in plans)
    assert set(regions) == {"a", "b", "c"} and max(regions.values()) - min(regions.values()) <= 1
    # Positives are spread over regions too.
    assert len({p.region for p in plans if p.kind == "positive"}) == 3
    assert plan_tiles(cfg) == plans


def test_plan_is_shuffled_and_ids_unique_across_splits() -> None:
    plans = plan_tiles(make_cfg(n_positive=20, n_negative=20))
    kinds = [p.kind for p in plans]
    assert kinds != sorted(kinds) and kinds != sorted(kinds, reverse=True)
    val = plan_tiles(make_cfg(split="val", n_positive=20, n_negative=20))
    assert not {p.tile_id for p in plans} & {p.tile_id for p in val}


# ------------------------------------------------------------------------------------------------ determinism


def test_same_plan_gives_identical_tiles_in_any_order(mixed) -> None:
    cfg, plans, tiles = mixed
    again = [render_tile(p, cfg) for p in reversed(plans)][::-1]
    for a, b in zip(tiles, again, strict=True):
        assert digest(a) == digest(b)
        assert a.meta == b.meta and a.n_objects == b.n_objects


def test_identical_in_a_fresh_process() -> None:
    cfg = make_cfg(size=64, extra_channels=["ndvi"])
    plan = next(p for p in plan_tiles(cfg) if p.kind == "positive")
    code = (
        "import hashlib, sys\n"
        "from rtscore.config.generation import GenerationConfig\n"
        "from rtscore.data.synthetic import plan_tiles, render_tile\n"
        f"cfg = GenerationConfig.model_validate_json({cfg.model_dump_json()!r})\n"
        f"t = render_tile(plan_tiles(cfg)[{plan.index}], cfg)\n"
        "h = hashlib.sha256()\n"
        "for a in (t.rgb, t.alpha, t.label_exact, t.label_noisy, t.extra):\n"
        "    h.update(b'none' if a is None else a.tobytes())\n"
        "print(h.hexdigest())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == digest(render_tile(plan, cfg))


def test_global_random_state_untouched() -> None:
    cfg = make_cfg(size=64)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    render_batch(plan_tiles(cfg)[:3], cfg)
    assert np.array_equal(np.random.get_state()[1], before)


def test_different_seeds_and_splits_differ() -> None:
    a, b = make_cfg(seed=1), make_cfg(seed=2)
    ta, tb = render_tile(plan_tiles(a)[0], a), render_tile(plan_tiles(b)[0], b)
    assert not np.array_equal(ta.rgb, tb.rgb)
    # Same seed in two splits must not repeat scenes tile by tile.
    v = make_cfg(seed=1, split="val")
    assert not np.array_equal(ta.rgb, render_tile(plan_tiles(v)[0], v).rgb)


def test_render_batch_matches_render_tile(mixed) -> None:
    cfg, plans, tiles = mixed
    assert [digest(t) for t in render_batch(plans[:3], cfg)] == [digest(t) for t in tiles[:3]]


# ------------------------------------------------------------------------------------------------ content


def test_fields_shapes_and_label_values(mixed) -> None:
    cfg, plans, tiles = mixed
    n = cfg.tile_size
    for plan, t in zip(plans, tiles, strict=True):
        assert (t.tile_id, t.region, t.source_index, t.rotation) == (plan.tile_id, plan.region, plan.index, 0)
        assert t.rgb.shape == (3, n, n) and t.rgb.dtype == np.uint8
        assert t.alpha.shape == (n, n) and t.alpha.dtype == np.uint8
        assert set(np.unique(t.alpha)) <= {0, 255}
        for lab in (t.label_exact, t.label_noisy):
            assert lab is not None and lab.shape == (n, n) and lab.dtype == np.uint8
            assert set(np.unique(lab)) <= {0, 1, IGNORE_INDEX}
        assert all(isinstance(v, float) for v in t.meta.values())
        assert {"n_hard_negatives", "has_cloud"} <= set(t.meta) and set(t.meta) == set(tiles[0].meta)


def test_positive_and_negative_tiles(mixed) -> None:
    _, plans, tiles = mixed
    for plan, t in zip(plans, tiles, strict=True):
        if plan.kind == "positive":
            assert (t.label_exact == 1).any() and t.n_objects >= 1
        elif plan.kind == "negative":
            assert not (t.label_exact == 1).any() and t.n_objects == 0


def test_full_nodata_tiles(mixed) -> None:
    _, plans, tiles = mixed
    full = [t for p, t in zip(plans, tiles, strict=True) if p.kind == "full_nodata"]
    assert len(full) == 2
    for t in full:
        assert not t.alpha.any() and not t.rgb.any() and not t.extra.any()
        assert (t.label_exact == IGNORE_INDEX).all() and (t.label_noisy == IGNORE_INDEX).all()
        assert t.n_objects == 0


def test_tundra_looks_like_tundra(mixed) -> None:
    _, plans, tiles = mixed
    for plan, t in zip(plans, tiles, strict=True):
        if plan.kind == "full_nodata":
            continue
        med = np.median(t.rgb[:, t.alpha == 255], axis=1)
        assert 50 <= med[0] <= 130 and 60 <= med[1] <= 140 and 30 <= med[2] <= 100, med
        assert med[1] >= med[2]  # vegetation: green above blue
        assert t.rgb.std() > 3  # not flat colour


def test_partial_nodata_is_ignored() -> None:
    cfg = make_cfg(partial_nodata_probability=1.0, extra_channels=["ndvi", "slope"])
    for plan in plan_tiles(cfg):
        t = render_tile(plan, cfg)
        nodata = t.alpha == 0
        assert nodata.any() and not nodata.all()
        assert (t.label_exact[nodata] == IGNORE_INDEX).all() and (t.label_noisy[nodata] == IGNORE_INDEX).all()
        assert not t.rgb[:, nodata].any() and not t.extra[:, nodata].any()
        assert t.meta["has_partial_nodata"] == 1.0
        if plan.kind == "positive":
            assert (t.label_exact == 1).any()


def test_valid_pitch_dark_pixels() -> None:
    cfg = make_cfg(dark_pixel_probability=1.0, partial_nodata_probability=0.0)
    for plan in plan_tiles(cfg):
        t = render_tile(plan, cfg)
        black = (t.rgb == 0).all(axis=0)
        assert (black & (t.alpha == 255)).any()
        assert (t.label_exact[black] != IGNORE_INDEX).any()  # valid pixels, labels untouched
    off = make_cfg(dark_pixel_probability=0.0)
    assert all(render_tile(p, off).meta["has_dark_pixels"] == 0.0 for p in plan_tiles(off))


def test_noisy_labels_differ_but_keep_ignore() -> None:
    cfg = make_cfg(
        n_positive=6, n_negative=2, rts_diameter_fraction=(0.2, 0.6), noisy_labels={"boundary_jitter_px": 2.0}
    )
    differs = 0
    for plan in plan_tiles(cfg):
        t = render_tile(plan, cfg)
        ignore = t.label_exact == IGNORE_INDEX
        assert np.array_equal(t.label_noisy == IGNORE_INDEX, ignore)
        differs += int((t.label_noisy != t.label_exact).any())
    assert differs >= 1


def test_noisy_labels_missed_and_disabled() -> None:
    cfg = make_cfg(noisy_labels={"miss_probability": 1.0})
    for plan in plan_tiles(cfg):
        t = render_tile(plan, cfg)
        assert not (t.label_noisy == 1).any()
    off = make_cfg(store={"write_noisy_labels": False})
    t_off = render_tile(plan_tiles(off)[0], off)
    assert t_off.label_noisy is None
    # The image and exact labels do not depend on whether noisy labels are written.
    t_on = render_tile(plan_tiles(make_cfg())[0], make_cfg())
    assert np.array_equal(t_on.rgb, t_off.rgb) and np.array_equal(t_on.label_exact, t_off.label_exact)


def test_extra_channels(mixed) -> None:
    cfg, plans, tiles = mixed
    for plan, t in zip(plans, tiles, strict=True):
        assert t.extra is not None and t.extra.shape == (2, cfg.tile_size, cfg.tile_size)
        assert t.extra.dtype == np.float32 and np.isfinite(t.extra).all()
        ndvi, slope = t.extra
        assert ndvi.min() >= -1.0 and ndvi.max() <= 1.0
        assert slope.min() >= 0.0 and slope.max() < 90.0
        if plan.kind != "full_nodata":
            assert np.median(ndvi[t.alpha == 255]) > 0.2  # vegetated tundra


def test_extra_channel_order_and_absence() -> None:
    a, b, none = make_cfg(extra_channels=["ndvi", "slope"]), make_cfg(extra_channels=["slope", "ndvi"]), make_cfg()
    ta, tb = render_tile(plan_tiles(a)[0], a), render_tile(plan_tiles(b)[0], b)
    assert np.array_equal(ta.extra[::-1], tb.extra)
    tn = render_tile(plan_tiles(none)[0], none)
    assert tn.extra is None and np.array_equal(tn.rgb, ta.rgb)


def test_slump_parts_floor_brighter_than_headwall() -> None:
    cfg = make_cfg(
        n_positive=6,
        n_negative=0,
        rts_diameter_fraction=(0.3, 0.7),
        max_rts_per_tile=1,
        extra_channels=["ndvi", "slope"],
        cloud_probability=0.0,
        partial_nodata_probability=0.0,
    )
    for plan in plan_tiles(cfg):
        t, parts = render_tile_with_parts(plan, cfg)
        head, floor = parts["headwall"], parts["floor"]
        assert head.any() and floor.any()
        assert (t.label_exact[head | floor | parts["tongue"]] == 1).all()
        lum = luminance(t.rgb)
        background = (t.label_exact == 0) & ~parts["water"] & ~parts["bare"] & ~parts["road"]
        assert lum[floor].mean() > lum[head].mean() + 30
        assert lum[floor].mean() > lum[background].mean()  # bare floor brighter than tundra
        ndvi, slope = t.extra
        assert ndvi[floor].mean() < ndvi[background].mean() - 0.2
        assert slope[head].mean() > 2 * np.median(slope[background])  # steep scarp


def test_hard_negatives_stay_background() -> None:
    cfg = make_cfg(size=64, n_positive=0, n_negative=16, hard_negative_probability=1.0, cloud_probability=1.0)
    seen: set[str] = set()
    for plan in plan_tiles(cfg):
        t, parts = render_tile_with_parts(plan, cfg)
        assert t.meta["n_hard_negatives"] >= 1 and t.meta["has_cloud"] == 1.0
        assert not (t.label_exact == 1).any()
        seen |= {k for k in ("bare", "water", "road", "cloud") if parts[k].any()}
    assert {"bare", "water", "cloud"} <= seen


def test_slumps_larger_than_the_tile_are_ignored() -> None:
    cfg = make_cfg(
        n_positive=6, n_negative=0, rts_diameter_fraction=(1.2, 2.0), max_rts_per_tile=4, partial_nodata_probability=0.0
    )
    partial = 0
    for plan in plan_tiles(cfg):
        t = render_tile(plan, cfg)
        assert (t.label_exact == 1).any() and t.n_objects >= 1  # the one complete slump is shrunk to fit
        partial += int(((t.label_exact == IGNORE_INDEX) & (t.alpha == 255)).any())
    assert partial >= 1


def test_tile_edge_objects_never_labelled_one(mixed) -> None:
    for t in mixed[2]:
        lab = t.label_exact
        # A complete slump never touches the tile border.
        border = np.concatenate([lab[0], lab[-1], lab[:, 0], lab[:, -1]])
        assert not (border == 1).any()
