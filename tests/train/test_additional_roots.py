"""Joint training on additional train stores (`data.additional_roots`, guide §8.3 dual-scale training)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtscore.config.generation import GenerationConfig
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.loading.additional_roots import open_additional_roots, resolve_additional_roots
from rtscore.data.loading.dataset import build_train_dataset
from rtscore.data.loading.loader import positive_flags, train_loader
from rtscore.data.loading.sources import usable_indices
from rtscore.data.normalization.stats import load_normalization_stats
from rtscore.data.store.format import TileStoreError
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.synthetic.producer import generate_synthetic
from tests.helpers import write_test_store
from tests.train.conftest import tiny_train_config


def half_store(
    path: Path,
    *,
    extra: list[str] | None = None,
    split: str = "train",
    seed: int = 5,
    regions: tuple[str, ...] = ("ta", "tb"),
) -> Path:
    """A small 0.5x synthetic store matching the tiny train config (64 px tiles, ndvi; the train regions)."""
    cfg = GenerationConfig(
        split=split,
        seed=seed,
        tile_size=64,
        scale=0.5,
        synthetic={
            "n_positive": 4,
            "n_negative": 4,
            "n_full_nodata": 1,
            "regions": list(regions),
            "extra_channels": ["ndvi"] if extra is None else extra,
            "generation_batch_size": 4,
        },
        store={"shard_tiles": 8},
    )
    generate_synthetic(cfg, path)
    return path


def with_roots(cfg: PipelineConfig, roots: list[str], epochs: int | None = None) -> PipelineConfig:
    data = cfg.model_dump(mode="json")
    data["data"]["additional_roots"] = roots
    if epochs is not None:  # short runs: no warmup (max_epochs must exceed freeze + warmup)
        data["training"]["max_epochs"] = epochs
        data["lr_schedule"]["warmup_epochs"] = 0
        data["training"]["val_frequency"] = epochs  # validate once, at the end
    return PipelineConfig.model_validate(data)


def stats_of(run: Path) -> Any:
    return load_normalization_stats(run / "normalization_stats.json", ["ndvi"])


@pytest.fixture(scope="module")
def half_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 0.5x store outside the run directory (addressed by an absolute path)."""
    return half_store(tmp_path_factory.mktemp("half") / "train_half.zarr")


# ------------------------------------------------------------------------------------------------ train dataset


def test_train_dataset_joins_the_additional_store(data_run: Path, half_run: Path) -> None:
    base = tiny_train_config()
    stats = stats_of(data_run)
    plain = build_train_dataset(base, data_run, stats, seed=1)
    cfg = with_roots(base, [str(half_run)])
    ds = build_train_dataset(cfg, data_run, stats, seed=1)
    half = ZarrTileStore(half_run, extra_channels=["ndvi"])
    assert len(ds) == len(plain) + usable_indices(half).size
    assert ds.stats is stats  # normalization stays train.zarr's
    n_train = len(ZarrTileStore(data_run / "datasets" / "train.zarr"))
    flags = positive_flags(ds)
    from_half = ds.indices >= n_train
    assert flags[from_half].sum() == int(half.metadata.is_positive.sum()) > 0
    assert (~flags[from_half]).any() and (~flags[~from_half]).any()
    # The balanced sampler draws positives and negatives from both stores.
    _, sampler = train_loader(cfg, ds, seed=1)
    drawn = np.array([i for e in (1, 2, 3) for batch in sampler.batches(e) for i, _ in batch])
    src = ds.indices[drawn] >= n_train
    pos = flags[drawn]
    assert {(bool(s), bool(p)) for s, p in zip(src, pos, strict=True)} == {
        (False, False),
        (False, True),
        (True, False),
        (True, True),
    }
    sample = ds[int(np.flatnonzero(from_half)[0])]
    assert sample["tile_id"].endswith("@0.5x") and sample["image"].shape == (4, 64, 64)


def test_relative_roots_resolve_against_the_run_directory(tmp_path: Path) -> None:
    cfg = with_roots(tiny_train_config(), ["datasets/train_half.zarr", str(tmp_path / "abs.zarr")])
    assert resolve_additional_roots(cfg, tmp_path / "run") == [
        tmp_path / "run" / "datasets" / "train_half.zarr",
        tmp_path / "abs.zarr",
    ]


def _bad_store(kind: str, run: Path, tmp: Path) -> tuple[str, str]:
    """An additional-roots entry that must be refused, and a fragment of the expected message."""
    if kind == "missing":
        return "datasets/nope.zarr", "does not exist"
    if kind == "not_a_store":
        (tmp / "plain").mkdir()
        (tmp / "plain" / "x.txt").write_text("x")
        return str(tmp / "plain"), "not a published tile store"
    if kind == "split":
        return str(half_store(tmp / "val.zarr", split="val")), "holds the 'val' split"
    if kind == "tile_size":
        write_test_store(tmp / "small.zarr", 4, extra=1)
        return str(tmp / "small.zarr"), "has 32 px tiles; data.tile_size is 64"
    if kind == "extra":
        return str(half_store(tmp / "noextra.zarr", extra=[])), "lacks extra channels ['ndvi']"
    if kind == "duplicate":
        return str(run / "datasets" / "train.zarr"), "shares tile ids with datasets/train.zarr"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "not_a_store", "split", "tile_size", "extra", "duplicate"])
def test_bad_additional_store_is_refused_naming_key_and_path(
    kind: str, data_run: Path, half_run: Path, tmp_path: Path
) -> None:
    entry, problem = _bad_store(kind, data_run, tmp_path)
    cfg = with_roots(tiny_train_config(), [str(half_run), entry])  # the bad one is entry 1
    with pytest.raises(TileStoreError) as info:
        build_train_dataset(cfg, data_run, stats_of(data_run))
    msg = str(info.value)
    assert "data.additional_roots[1]" in msg and entry in msg and problem in msg
    path = resolve_additional_roots(cfg, data_run)[1]
    assert str(path) in msg


@pytest.mark.parametrize("region", ["va", "sa"])
def test_an_additional_store_of_a_val_or_test_region_is_refused(data_run: Path, tmp_path: Path, region: str) -> None:
    """An additional root is train data: a region of the val (va) or test (sa) store in it breaks spatial blocking,
    refused naming the root, the region and the split before any training step (issue 35: never checked)."""
    from rtscore.data.splits.blocking import BlockingError

    root = half_store(tmp_path / "leak.zarr", regions=("ta", region))
    cfg = with_roots(tiny_train_config(), [str(root)])
    split = "val" if region == "va" else "test"
    with pytest.raises(BlockingError) as info:
        build_train_dataset(cfg, data_run, stats_of(data_run))
    msg = str(info.value)
    assert f"data.additional_roots[0] ({root}): region(s) ['{region}']" in msg
    assert f"in the {split} split ({data_run / 'datasets' / f'{split}.zarr'})" in msg


def test_same_store_listed_twice_is_refused(data_run: Path, half_run: Path) -> None:
    cfg = with_roots(tiny_train_config(), [str(half_run), str(half_run)])
    with pytest.raises(TileStoreError, match=r"data.additional_roots\[1\].*shares tile ids with data.additional"):
        open_additional_roots(cfg, data_run)


def test_bad_store_fails_before_any_training_step(run_copy: Path) -> None:
    from rtscore.train.loop import train_seed

    cfg = with_roots(tiny_train_config(), ["datasets/missing.zarr"], epochs=2)
    with pytest.raises(
        TileStoreError,
        match=r"data.additional_roots\[0\] = 'datasets/missing.zarr' \(resolved .*missing.zarr\): does not exist",
    ):
        train_seed(cfg, run_copy, 0)
    assert not (run_copy / "seeds").exists()


# ------------------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_joint_training_with_a_half_store_end_to_end(run_copy: Path) -> None:
    from rtscore.train.loop import train_seed

    half_store(run_copy / "datasets" / "train_half.zarr")
    cfg = with_roots(tiny_train_config(), ["datasets/train_half.zarr"], epochs=2)
    result = train_seed(cfg, run_copy, 3)
    assert result.epochs_run == 2
    rows = [json.loads(x) for x in (Path(result.seed_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]
    assert all(np.isfinite(r["train_loss"]) and r["train_batches"] == 3 for r in rows)
    assert (Path(result.seed_dir) / "best_deployment.pth").exists()
