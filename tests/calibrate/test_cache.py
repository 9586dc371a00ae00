from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

from rtscore import stages
from rtscore.calibrate.cache import CacheError, Combo, LogitCache, candidate_combos, large_positive_mask
from rtscore.inference.numerics import predict_logits, prepare_model
from rtscore.metrics import LogitBins, TileHistogramAccumulator, pr_auc
from tests.calibrate.conftest import calib_config


def _full_logits(run: Path, cfg, seed: int, combo: Combo) -> tuple[np.ndarray, np.ndarray, list[str]]:  # type: ignore[no-untyped-def]
    """Recompute the fused logits of every val tile with the deployment path (no cache involved); a 0.5x pass
    takes each tile's context from the val context store, paired by tile id."""
    from rtscore.inference.context import needs_context
    from rtscore.stages.seeds import seed_model_and_loader
    from rtscore.storage import RunDir

    model, loader, _ = seed_model_and_loader(RunDir(str(run)), cfg, seed, "val", context=needs_context(combo.scales))
    run_model = prepare_model(model, False)
    zs, ys, ids = [], [], []
    with torch.inference_mode():
        for b in loader:
            z = predict_logits(
                run_model,
                b["image"],
                tta=combo.tta,
                scales=combo.scales,
                fusion=combo.fusion,
                precision="fp32",
                context=b.get("context"),
            )
            zs.append(z.numpy())
            ys.append(b["label"].numpy())
            ids += list(b["tile_id"])
    return np.concatenate(zs), np.concatenate(ys), ids


@pytest.fixture(scope="module")
def cached(model_run: Path) -> tuple[Path, LogitCache]:
    """Seed 1's logit cache, as the logit-cache stage wrote it into the shared run (tests/calibrate/conftest.py)."""
    return model_run, LogitCache(model_run / "calibration/seed_1/logit_cache.zarr")


@pytest.mark.parametrize(
    "combo", [Combo("none", (1.0,)), Combo("standard", (1.0,)), Combo("minimal", (1.0, 0.5), "max")], ids=str
)
def test_cache_gives_the_pr_auc_of_the_full_probabilities(cached: tuple[Path, LogitCache], combo: Combo) -> None:
    run, cache = cached
    cfg = calib_config()
    z, y, ids = _full_logits(run, cfg, 1, combo)
    h = cache.tile_hist(combo)
    assert list(h.tile_ids) == ids
    # Same histograms as binning the recomputed logits (up to float noise moving a pixel across a bin edge).
    acc = TileHistogramAccumulator(LogitBins(core_bins=cfg.metrics.pr_bins))
    acc.add_batch(z, y, ids)
    ref = acc.result()
    assert np.abs(ref.pos.astype(np.int64) - h.pos).sum() <= 2
    assert np.abs(ref.neg.astype(np.int64) - h.neg).sum() <= 0.001 * h.neg.sum() + 2
    # ... and the PR-AUC of the full-resolution probabilities (pixel level, sklearn), within bin resolution.
    valid = y != 255
    exact = average_precision_score(y[valid] == 1, z[valid])
    assert pr_auc(h, None) == pytest.approx(exact, abs=2e-3)


def test_cache_layout_grows_with_tiles_times_bins(cached: tuple[Path, LogitCache]) -> None:
    _, cache = cached
    cfg = calib_config()
    combos = candidate_combos(cfg.calibration)
    assert cache.keys == [c.key for c in combos]
    assert cache._group["hist"].shape == (
        len(combos),
        cache.n_tiles,
        3,
        LogitBins(core_bins=cfg.metrics.pr_bins).n_bins,
    )
    assert cache.attrs["precision"] == "fp32" and cache.attrs["torch_compile"] is False
    sizes = cache.nbytes()
    assert sizes["hist"] > 0 and sizes["total"] >= sizes["hist"] + sizes["dense"]


def test_full_resolution_part_reproduces_the_fused_logits(cached: tuple[Path, LogitCache]) -> None:
    run, cache = cached
    combo = Combo("minimal", (1.0, 0.5), "weighted_mean")
    z, y, _ = _full_logits(run, calib_config(), 1, combo)
    rows = []
    for row, dz, label in cache.dense_tiles(combo):
        rows.append(row)
        np.testing.assert_allclose(dz, z[row], atol=0.02, rtol=2e-3)  # stored as float16
        assert np.array_equal(label, y[row])
    positive = np.flatnonzero((y == 1).reshape(len(y), -1).any(axis=1))
    assert set(positive) <= set(rows), "every tile with GT objects is kept at full resolution"


def test_large_positive_mask_keeps_only_rts_with_a_long_bounding_box() -> None:
    label = np.zeros((20, 20), np.uint8)
    label[1:3, 1:3] = 1  # 2 px box
    label[5:7, 2:15] = 1  # 13 px long
    label[10, 10] = 255
    large = large_positive_mask(label, 10)
    assert large[5:7, 2:15].all() and not large[1:3, 1:3].any() and large.sum() == 26


def test_missing_or_foreign_cache_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CacheError, match="no logit cache"):
        LogitCache(tmp_path / "nothing.zarr")
    import zarr

    g = zarr.open_group(str(tmp_path / "c.zarr"), mode="w", zarr_format=3)
    bins = {"core_bins": 64, "lo": -16, "hi": 16, "tail_octaves": 5, "n_bins": 64 + 2 * (5 * 4 + 1)}
    g.attrs.update({"format": "rts-logit-cache/2", "bins": bins, "combos": []})
    with pytest.raises(CacheError, match="has no configuration tta=full"):
        LogitCache(tmp_path / "c.zarr").index(Combo("full", (1.0,)))
    g.attrs["bins"] = {**bins, "n_bins": 64}
    with pytest.raises(CacheError, match="holds 64 bins per histogram"):
        LogitCache(tmp_path / "c.zarr")
    # A cache of the ±16-clamped binning is refused with the way forward, never read with the new bins.
    g.attrs.update({"format": "rts-logit-cache/1", "bins": {"n_bins": 64, "lo": -16, "hi": 16}})
    with pytest.raises(CacheError, match=r"format 'rts-logit-cache/1'.*run the logit-cache stage again"):
        LogitCache(tmp_path / "c.zarr")
    g.attrs["format"] = "something else"
    with pytest.raises(CacheError, match="not a logit cache"):
        LogitCache(tmp_path / "c.zarr")


def test_every_stage_that_bins_logits_reruns_when_the_binning_changes() -> None:
    """The histogram binning is in the code fingerprint of each stage that writes histograms or statistics
    derived from them, so a change of binning recomputes them instead of reading them with other bins."""
    for name in ("train-seed", "logit-cache", "calibrate", "evaluate-test"):
        modules, _ = stages.code_closure(stages.BY_NAME[name].module)
        assert {"rtscore.metrics.histograms", "rtscore.metrics.bins"} <= set(modules), name  # bins: the binning


def test_calibration_pairs_each_tile_with_its_context_by_tile_id(
    cached: tuple[Path, LogitCache], tmp_path: Path
) -> None:
    """The 0.5x input of a tile is the context-store tile with the same id, whatever order the 1x dataset is in;
    a context store lacking a tile, or made for another store, is refused."""
    import shutil

    from rtscore.data.loading.dataset import build_dataset
    from rtscore.data.normalization.stats import load_normalization_stats
    from rtscore.inference.context import ContextError, ContextPairedDataset, check_context_store

    model_run, cache = cached
    cfg = calib_config()
    stats = load_normalization_stats(model_run / "normalization_stats.json", [c.name for c in cfg.channels.extra])
    val, ctx_path = model_run / "datasets" / "val.zarr", model_run / "datasets" / "context" / "val.zarr"
    check_context_store(val, ctx_path)
    base = build_dataset(cfg, val, stats, train=False)
    base.indices = base.indices[::-1].copy()  # another order than the context store's
    paired = ContextPairedDataset(base, build_dataset(cfg, ctx_path, stats, train=False))
    reference = build_dataset(cfg, ctx_path, stats, train=False)
    ids = [str(t) for t in reference.source.metadata.tile_id]  # type: ignore[attr-defined]
    reference.indices = np.arange(len(ids))
    for i in range(len(paired)):
        item = paired[i]
        ref = reference[ids.index(item["tile_id"])]
        assert ref["tile_id"] == item["tile_id"] and torch.equal(item["context"], ref["image"])
    assert cache.attrs["scale_candidates"] == [1.0, 0.5] and cache.attrs["scales_not_evaluated"] is None

    short = build_dataset(cfg, ctx_path, stats, train=False)
    short.source.metadata.tile_id[0] = "elsewhere_000000"  # type: ignore[attr-defined]
    with pytest.raises(ContextError, match="lacks 1 of the"):
        ContextPairedDataset(build_dataset(cfg, val, stats, train=False), short)
    test_ctx = model_run / "datasets" / "context" / "test.zarr"
    with pytest.raises(ContextError, match="is not the 0.5x context store of"):
        check_context_store(val, shutil.copytree(test_ctx, tmp_path / "ctx.zarr"))
