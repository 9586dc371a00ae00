from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

from rtscore.data.normalization.compute import RunningMoments, compute_normalization_stats
from rtscore.data.normalization.stats import (
    NormalizationStatsError,
    load_normalization_stats,
    write_normalization_stats,
)
from rtscore.data.store.reader import ZarrTileStore
from tests.helpers import write_test_store


@pytest.fixture(scope="module")
def train_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("norm") / "train.zarr"
    write_test_store(path, 11, extra=2)
    return path


def _reference(store: Path) -> tuple[np.ndarray, np.ndarray]:
    s = ZarrTileStore(store)
    vals = []
    for i in range(len(s)):
        t = s[i]
        stack = np.concatenate([t.rgb.astype(np.float64), t.extra.astype(np.float64)])
        vals.append(stack[:, t.alpha > 0])
    v = np.concatenate(vals, axis=1)
    return v.mean(axis=1), v.std(axis=1)


def test_stats_match_numpy_over_valid_pixels(train_store: Path) -> None:
    stats = compute_normalization_stats(train_store)
    mean, std = _reference(train_store)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-9)
    np.testing.assert_allclose(stats.std, std, rtol=1e-6)
    assert stats.channel_names == ["R", "G", "B", "e0", "e1"]
    assert stats.n_tiles_used == 11


def test_nodata_is_keyed_off_alpha_not_zero(tmp_path: Path) -> None:
    """Valid pitch-dark (0,0,0) pixels count; alpha-0 pixels do not."""
    from rtscore.data.store.writer import write_store
    from tests.helpers import ListProducer, _attrs, _layout

    class Dark(ListProducer):
        def batches(self, start, stop):  # type: ignore[no-untyped-def]
            for tiles, codes in super().batches(start, stop):
                for t in tiles:
                    t.rgb[:, -3:, :] = 0  # valid dark pixels, alpha stays 255
                yield tiles, codes

    out = tmp_path / "train.zarr"
    write_store(Dark(5), _layout(5), out, _attrs())
    stats = compute_normalization_stats(out)
    s = ZarrTileStore(out)
    v = np.concatenate([s[i].rgb[:, s[i].alpha > 0].astype(float) for i in range(5)], axis=1)
    np.testing.assert_allclose(stats.mean, v.mean(axis=1))
    assert (v == 0).all(axis=0).sum() == 5 * 3 * 32  # the dark rows were counted


def test_json_schema_of_guide(train_store: Path, tmp_path: Path) -> None:
    stats = compute_normalization_stats(train_store, extra_channels=["e1"])
    path = write_normalization_stats(stats, tmp_path / "normalization_stats.json")
    doc = json.loads(path.read_text())
    assert list(doc) == ["dataset_version", "computed_date", "n_tiles_used", "rgb", "extra", "regions"]
    assert doc["rgb"]["channel_names"] == ["R", "G", "B"] and list(doc["rgb"]) == ["channel_names", "mean", "std"]
    assert doc["extra"]["channel_names"] == ["e1"] and len(doc["extra"]["mean"]) == 1
    assert doc["computed_date"].endswith("Z")
    loaded = load_normalization_stats(path, ["e1"])
    np.testing.assert_allclose(loaded.mean, stats.mean)


def test_channel_binding_is_enforced(train_store: Path, tmp_path: Path) -> None:
    path = write_normalization_stats(compute_normalization_stats(train_store), tmp_path / "s.json")
    with pytest.raises(
        NormalizationStatsError, match=r"s\.json: extra\.channel_names \['e0', 'e1'\] do not match .*\['e1', 'e0'\]"
    ):
        load_normalization_stats(path, ["e1", "e0"])
    with pytest.raises(NormalizationStatsError, match=r"do not match the config's channels.extra \[\]"):
        load_normalization_stats(path, [])
    doc = json.loads(path.read_text())
    doc["rgb"]["channel_names"] = ["G", "R", "B"]
    path.write_text(json.dumps(doc))
    with pytest.raises(NormalizationStatsError, match=r"rgb.channel_names must be \['R', 'G', 'B'\]"):
        load_normalization_stats(path, ["e0", "e1"])


def _region_reference(store: Path, clip: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Each region's valid pixels (C, K) from the tiles one by one (clipped to ``clip`` when given)."""
    s = ZarrTileStore(store)
    by_region: dict[str, list[np.ndarray]] = {}
    for i in range(len(s)):
        t = s[i]
        stack = np.concatenate([t.rgb.astype(np.float64), t.extra.astype(np.float64)])[:, t.alpha > 0]
        if clip is not None:
            stack = np.clip(stack, clip[0][:, None], clip[1][:, None])
        by_region.setdefault(t.region, []).append(stack)
    return {r: np.concatenate(v, axis=1) for r, v in by_region.items()}


def test_each_training_region_s_moments_are_recorded(train_store: Path, tmp_path: Path) -> None:
    """Issue 23 point 10: the stats pass keeps each region's valid pixels apart (the store's per-tile region): count,
    mean and std per channel; the pooled moments are their pixel-weighted whole; they travel through the file."""
    stats = compute_normalization_stats(train_store)
    ref = _region_reference(train_store)
    assert stats.regions is not None and [r.region for r in stats.regions] == ["r0", "r1", "r2"]
    for r in stats.regions:
        v = ref[r.region]
        assert r.n_pixels == v.shape[1] and r.n_tiles == sum(1 for i in range(11) if f"r{i % 3}" == r.region)
        np.testing.assert_allclose(r.mean, v.mean(axis=1), rtol=1e-9)
        np.testing.assert_allclose(r.std, v.std(axis=1), rtol=1e-6)
    weights = np.array([r.n_pixels for r in stats.regions], np.float64)
    pooled = (np.stack([r.mean for r in stats.regions]) * weights[:, None]).sum(axis=0) / weights.sum()
    np.testing.assert_allclose(pooled, stats.mean, rtol=1e-9)
    means = np.stack([r.mean for r in stats.regions])
    assert (means.max(axis=0) - means.min(axis=0) > 0).all()  # the regions really differ
    path = write_normalization_stats(stats, tmp_path / "normalization_stats.json")
    loaded = load_normalization_stats(path, ["e0", "e1"])
    assert loaded.regions is not None
    for a, b in zip(loaded.regions, stats.regions, strict=True):
        assert (a.region, a.n_tiles, a.n_pixels) == (b.region, b.n_tiles, b.n_pixels)
        np.testing.assert_array_equal(a.mean, b.mean)
        np.testing.assert_array_equal(a.std, b.std)


def test_region_moments_are_of_the_clipped_values(train_store: Path) -> None:
    """With clip_percentiles the regions' moments describe the values the model is fed, as the pooled ones: clipped
    to the pooled bounds (RGB exactly; EXTRA from the second pass's histograms)."""
    stats = compute_normalization_stats(train_store, clip_percentiles=(5.0, 95.0))
    assert stats.clip_min is not None and stats.clip_max is not None and stats.regions is not None
    ref = _region_reference(train_store, (stats.clip_min, stats.clip_max))
    for r in stats.regions:
        v = ref[r.region]
        np.testing.assert_allclose(r.mean[:3], v[:3].mean(axis=1), rtol=1e-9)
        np.testing.assert_allclose(r.std[:3], v[:3].std(axis=1), rtol=1e-6)
        assert (np.abs(r.mean[3:] - v[3:].mean(axis=1)) < 1e-3 * stats.std[3:]).all()  # 4096 bins over the range
    weights = np.array([r.n_pixels for r in stats.regions], np.float64)
    pooled = (np.stack([r.mean for r in stats.regions]) * weights[:, None]).sum(axis=0) / weights.sum()
    np.testing.assert_allclose(pooled, stats.mean, rtol=1e-9)


def test_a_stats_file_without_regions_still_loads_and_a_bad_one_is_named(train_store: Path, tmp_path: Path) -> None:
    """Files written before regions were recorded load as before; malformed entries are all named at once."""
    path = write_normalization_stats(compute_normalization_stats(train_store), tmp_path / "s.json")
    doc = json.loads(path.read_text())
    regions = doc.pop("regions")
    path.write_text(json.dumps(doc))
    assert load_normalization_stats(path, ["e0", "e1"]).regions is None
    regions[0]["mean"] = regions[0]["mean"][:3]
    del regions[2]["std"]
    path.write_text(json.dumps(doc | {"regions": regions}))
    with pytest.raises(NormalizationStatsError, match=r"regions\[0\] \(r0\): 3 means .*regions\[2\]: needs region"):
        load_normalization_stats(path, ["e0", "e1"])


def test_train_split_only(tmp_path: Path) -> None:
    out = tmp_path / "val.zarr"
    write_test_store(out, 4, split="val")
    with pytest.raises(NormalizationStatsError, match="train split only; .*val.zarr holds split 'val'"):
        compute_normalization_stats(out)


def test_percentile_clipping(train_store: Path) -> None:
    plain = compute_normalization_stats(train_store)
    clipped = compute_normalization_stats(train_store, clip_percentiles=(5.0, 95.0))
    assert clipped.clip_min is not None and clipped.clip_max is not None
    assert (clipped.std < plain.std).all()
    assert (clipped.clip_min[:3] > 0).all() and (clipped.clip_max[:3] < 255).all()
    doc = clipped.to_json()
    assert len(doc["rgb"]["clip_min"]) == 3 and len(doc["extra"]["clip_max"]) == 2


def test_running_moments_merge_equals_numpy() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3, 2, (2, 1000))
    m = RunningMoments.empty(2)
    for part in np.array_split(data, 7, axis=1):
        m.add(part)
    np.testing.assert_allclose(m.mean, data.mean(axis=1))
    np.testing.assert_allclose(m.std, data.std(axis=1))


def test_malformed_stats_files(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(NormalizationStatsError, match="bad.json is not valid JSON"):
        load_normalization_stats(p)
    p.write_text(json.dumps({"rgb": {"channel_names": ["R", "G", "B"], "mean": [1, 2, 3], "std": [1, 0, 1]}}))
    with pytest.raises(NormalizationStatsError, match="std > 0"):
        load_normalization_stats(p)
    with pytest.raises(NormalizationStatsError, match="not found"):
        load_normalization_stats(tmp_path / "missing.json")


def test_clipping_is_one_transform_in_training_evaluation_and_predict(train_store: Path, tmp_path: Path) -> None:
    """Issue 11 point 2: the dataset (training and evaluation) and predict apply the same clip -> fill -> normalise,
    with the bounds the stats file carries."""
    from rtscore.config.pipeline import AugmentationConfig
    from rtscore.data.loading.dataset import TileDataset
    from rtscore.data.normalization.input_transform import InputTransform

    clipped = compute_normalization_stats(train_store, clip_percentiles=(5.0, 95.0))
    path = write_normalization_stats(clipped, tmp_path / "stats.json")
    stats = load_normalization_stats(path, ["e0", "e1"])  # the bounds travel through the file
    assert stats.clip_min is not None and stats.clip_max is not None
    transform = InputTransform.from_stats(stats)
    source = ZarrTileStore(train_store)
    evaluation = TileDataset(source, stats)
    training = TileDataset(source, stats, augmentation=_never(AugmentationConfig()))  # the training code path
    hi = (stats.clip_max - stats.mean) / stats.std
    lo = (stats.clip_min - stats.mean) / stats.std
    for i in range(len(evaluation)):
        tile = source[int(evaluation.indices[i])]
        expected = transform(tile.rgb, tile.extra, tile.alpha)
        np.testing.assert_array_equal(evaluation[i]["image"].numpy(), expected)
        np.testing.assert_array_equal(training[i]["image"].numpy(), expected)
        valid = tile.alpha > 0
        image = expected[:, valid]
        assert (image <= hi[:, None].astype(np.float32) + 1e-6).all() and (image >= lo[:, None] - 1e-6).all()
    # the clip really bit: raw values beyond the bounds exist
    raw = np.concatenate([source[i].rgb.reshape(3, -1) for i in range(len(source))], axis=1)
    assert (raw > stats.clip_max[:3, None]).any() and (raw < stats.clip_min[:3, None]).any()


def _never(model: BaseModel) -> Any:
    """``model`` with every probability ``p`` (at any depth) set to 0: augmentation on, nothing fires."""
    update: dict[str, Any] = {"p": 0.0} if "p" in type(model).model_fields else {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            update[name] = _never(value)
    return model.model_copy(update=update)
