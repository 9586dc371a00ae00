"""Whole-raster inference: parity with the evaluation numerics, tiled rasters, NoData, refused inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from rtscore.config.binding import RasterContract
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import DEFAULT_MIN_OBJECT_AREA_M2, ChannelsConfig, ModelConfig
from rtscore.data.normalization.stats import NormalizationStats, write_normalization_stats
from rtscore.data.raster.bands import RasterContractError, open_checked
from rtscore.inference.predict import PredictError, predict_raster
from rtscore.models import build_model
from rtscore.package import (
    DEPLOYMENT,
    METADATA,
    MODEL,
    REQUIREMENTS,
    STATS,
    WEIGHTS,
    PackagedChannels,
    PackagedModelConfig,
    RunMetadata,
    TrainedWith,
    write_sha256sums,
)
from tests.helpers import calibrated_deployment

rasterio = pytest.importorskip("rasterio")

TILE = 64
MEAN = np.array([60.0, 70.0, 55.0])
STD = np.array([25.0, 30.0, 20.0])
TRANSFORM = rasterio.Affine(4.77, 0.0, 1_000_000.0, 0.0, -4.77, 8_000_000.0)
CONTRACT = RasterContract(crs="EPSG:3857", pixel_size=4.77)  # what the package's training rasters were


def write_package(
    pkg: Path,
    *,
    threshold: float | None = 0.5,
    temperature: float | None = 1.7,
    tta: str = "minimal",
    extra: list[dict[str, object]] | None = None,
    stats: NormalizationStats | None = None,
    raster: RasterContract | None = CONTRACT,
    threshold_source: str = "target_precision",
    min_object_area_m2: float | None = DEFAULT_MIN_OBJECT_AREA_M2,
) -> Path:
    """A complete package (every file build_package writes, SHA256SUMS last: it passes the audit predict, map and
    drift load packages through), with a seeded random tiny model, the given stats (default: fixed moments, no
    clipping), raster contract and minimum object area (None: an older package's). A test that edits a file
    afterwards regenerates the sums (:func:`rtscore.package.write_sha256sums`) unless the sums are what it tests."""
    pkg.mkdir(parents=True, exist_ok=True)
    extra = extra or []
    names = ["R", "G", "B", *(str(e["name"]) for e in extra)]
    model_cfg = ModelConfig(
        architecture="unet", backbone="mobilenet_v2", encoder_weights=None, decoder_channels=[16, 16, 8, 8, 8]
    )
    channels = ChannelsConfig.model_validate({"extra": extra})
    torch.manual_seed(0)
    model = build_model(model_cfg, channels)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, pkg / WEIGHTS)
    mc = PackagedModelConfig(
        architecture="unet",
        backbone="mobilenet_v2",
        decoder_channels=[16, 16, 8, 8, 8],
        in_channels=len(names),
        channels=PackagedChannels(rgb=["R", "G", "B"], extra=channels.extra),
        tile_size=TILE,
        raster=raster,
        min_object_area_m2=min_object_area_m2,
    )
    (pkg / MODEL).write_text(yaml.safe_dump(mc.model_dump(mode="json"), sort_keys=False))
    n_extra = len(extra)
    stats = stats or NormalizationStats(
        channel_names=names,
        mean=np.concatenate([MEAN, np.full(n_extra, 0.5)]),
        std=np.concatenate([STD, np.full(n_extra, 0.2)]),
        n_tiles_used=4,
        dataset_version="t",
        computed_date="2026-01-01T00:00:00Z",
    )
    write_normalization_stats(stats, pkg / STATS)
    dep = calibrated_deployment(
        threshold=threshold, temperature=temperature, tta=tta, precision="fp32", threshold_source=threshold_source
    )
    (pkg / DEPLOYMENT).write_text(yaml.safe_dump(dep.model_dump(mode="json"), sort_keys=False))
    meta = RunMetadata(
        git_sha="unknown",
        training_date="2026-01-01T00:00:00Z",
        package_date="2026-01-01T00:00:00Z",
        seed=0,
        epoch=1,
        best_metric=None,
        trained_with=TrainedWith(precision="fp32", seed=0, config_sha="0" * 64),
    )
    (pkg / METADATA).write_text(meta.model_dump_json(indent=2) + "\n")
    (pkg / REQUIREMENTS).write_text(f"torch=={torch.__version__}\n")
    write_sha256sums(pkg)
    return pkg


def write_raster(path: Path, data: np.ndarray, *, dtype: str = "uint8", offset: tuple[int, int] = (0, 0)) -> Path:
    """``data`` (bands, h, w) as an EPSG:3857 GeoTIFF whose top-left corner is ``offset`` (col, row) pixels east and
    south of TRANSFORM's."""
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=data.shape[2],
        height=data.shape[1],
        count=data.shape[0],
        dtype=dtype,
        crs="EPSG:3857",
        transform=TRANSFORM @ rasterio.Affine.translation(*offset),
    ) as dst:
        dst.write(data.astype(dtype))
    return path


def random_rgba(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    rgba = np.empty((4, h, w), np.uint8)
    rgba[:3] = rng.integers(0, 256, (3, h, w))
    rgba[3] = 255
    return rgba


def reference_prob(pkg: Path, rgba: np.ndarray) -> np.ndarray:
    """The evaluation path, computed independently: normalise as training, predict_logits / T, sigmoid."""
    from rtscore.inference.numerics import predict_logits, prepare_model

    dep = DeploymentConfig.model_validate(yaml.safe_load((pkg / DEPLOYMENT).read_text()))
    model = build_model(
        ModelConfig(
            architecture="unet", backbone="mobilenet_v2", encoder_weights=None, decoder_channels=[16, 16, 8, 8, 8]
        ),
        ChannelsConfig(),
    )
    model.load_state_dict(torch.load(pkg / WEIGHTS, weights_only=True))
    x = rgba[:3].astype(np.float32)
    nodata = rgba[3] == 0
    for c in range(3):
        x[c][nodata] = MEAN[c]
    x = (x - MEAN[:, None, None].astype(np.float32)) / STD[:, None, None].astype(np.float32)
    with torch.inference_mode():
        z = predict_logits(
            prepare_model(model, dep.torch_compile),
            torch.from_numpy(x[None]),
            tta=dep.tta,
            scales=dep.scales,
            fusion=dep.fusion,
            precision=dep.precision,
        ) / float(dep.temperature)  # type: ignore[arg-type]
    return torch.sigmoid(z)[0].numpy()


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package")


def read(path: Path) -> tuple[np.ndarray, object, object, object]:
    with rasterio.open(path) as src:
        return src.read(1), src.crs, src.transform, src.nodata


def test_single_tile_matches_evaluation_path(package: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rgba = random_rgba(rng, TILE, TILE)
    rgba[3, :5, :7] = 0
    src = write_raster(tmp_path / "scene.tif", rgba)
    out = predict_raster(package, src, tmp_path / "out", stride=TILE)
    assert out.windows == 1
    prob, crs, transform, nodata = read(out.prob)
    ref = reference_prob(package, rgba)
    valid = rgba[3] > 0
    np.testing.assert_allclose(prob[valid], ref[valid], rtol=1e-5, atol=1e-6)
    assert (prob[~valid] == -1.0).all() and nodata == -1.0
    assert crs == rasterio.crs.CRS.from_epsg(3857) and transform == TRANSFORM
    mask, mcrs, mtransform, mnodata = read(out.mask)
    assert mnodata == 255 and mcrs == crs and mtransform == TRANSFORM
    assert (mask[~valid] == 255).all()
    np.testing.assert_array_equal(mask[valid], (prob[valid] >= 0.5).astype(np.uint8))
    with rasterio.open(out.prob) as ds:
        assert ds.dtypes[0] == "float32" and ds.profile.get("tiled", False)
        assert ds.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"


def test_multi_tile_raster_equals_per_tile_path(package: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    tiles = [[random_rgba(rng, TILE, TILE) for _ in range(3)] for _ in range(2)]
    tiles[1][2][3, 10:30, 20:40] = 0
    big = np.concatenate([np.concatenate(row, axis=2) for row in tiles], axis=1)
    src = write_raster(tmp_path / "mosaic.tif", big)
    out = predict_raster(package, src, tmp_path / "out", stride=TILE)
    assert out.windows == 6
    prob, crs, transform, _ = read(out.prob)
    assert prob.shape == (2 * TILE, 3 * TILE)
    assert crs == rasterio.crs.CRS.from_epsg(3857) and transform == TRANSFORM
    for i, row in enumerate(tiles):
        for j, t in enumerate(row):
            got = prob[i * TILE : (i + 1) * TILE, j * TILE : (j + 1) * TILE]
            ref = reference_prob(package, t)
            valid = t[3] > 0
            np.testing.assert_allclose(got[valid], ref[valid], rtol=1e-5, atol=1e-6)
            assert (got[~valid] == -1.0).all()


def test_overlapping_windows_odd_size(package: Path, tmp_path: Path) -> None:
    """Any size >= tile: default stride (half a tile), border windows clamped; probabilities in [0, 1]."""
    rng = np.random.default_rng(3)
    rgba = random_rgba(rng, TILE + 37, 2 * TILE + 5)
    rgba[3, -3:, :] = 0
    out = predict_raster(package, write_raster(tmp_path / "odd.tif", rgba), tmp_path / "out")
    prob, *_ = read(out.prob)
    assert out.windows == 3 * 4
    valid = rgba[3] > 0
    assert ((prob[valid] >= 0) & (prob[valid] <= 1)).all() and (prob[~valid] == -1.0).all()
    # a three-band raster (no alpha): everything valid
    out3 = predict_raster(package, write_raster(tmp_path / "rgb.tif", rgba[:3]), tmp_path / "out")
    prob3, *_ = read(out3.prob)
    assert (prob3 >= 0).all()


def test_nir_zero_pixels_of_an_rgbn_raster_with_nodata_zero_are_predicted(package: Path, tmp_path: Path) -> None:
    """R,G,B,NIR tagged red, green, blue, undefined, nodata=0: GDAL's dataset mask is band 4's, but NIR never
    decides validity. NoData is where R, G, B are all 0; the probabilities are those of the same RGB as 3 bands."""
    from tests.helpers import write_raster as write_tagged

    rng = np.random.default_rng(5)
    data = np.empty((4, TILE, TILE), np.uint8)
    data[:3] = rng.integers(1, 256, (3, TILE, TILE))
    data[3] = rng.integers(1, 256, (TILE, TILE))
    data[3, 10:40, 5:50] = 0  # NIR 0 (dark water), RGB valid
    data[:3, 50:60, :20] = 0  # RGB 0: NoData
    common = {"transform": TRANSFORM, "nodata": 0}
    rgbn = write_tagged(
        tmp_path / "rgbn.tif", data, interp=["red", "green", "blue", "undefined"], alpha="UNSPECIFIED", **common
    )
    rgb = write_tagged(tmp_path / "rgb.tif", data[:3], interp=["red", "green", "blue"], **common)
    prob, *_ = read(predict_raster(package, rgbn, tmp_path / "out", stride=TILE).prob)
    prob3, *_ = read(predict_raster(package, rgb, tmp_path / "out3", stride=TILE).prob)
    nodata = (data[:3] == 0).all(axis=0)
    assert (prob[~nodata] >= 0).all() and (prob[nodata] == -1.0).all()
    np.testing.assert_array_equal(prob, prob3)


def test_refuses_uncalibrated_package(tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "pkg", threshold=None)
    src = write_raster(tmp_path / "s.tif", random_rgba(np.random.default_rng(0), TILE, TILE))
    with pytest.raises(PredictError, match="threshold"):
        predict_raster(pkg, src, tmp_path / "out")


def test_refuses_a_package_whose_numerics_were_edited_after_calibration(tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "pkg")
    edited = yaml.safe_load((pkg / DEPLOYMENT).read_text()) | {"tta": "full"}
    (pkg / DEPLOYMENT).write_text(yaml.safe_dump(edited))
    src = write_raster(tmp_path / "s.tif", random_rgba(np.random.default_rng(0), TILE, TILE))
    with pytest.raises(PredictError, match="tta: 'full' in the file, calibrated with 'minimal'"):
        predict_raster(pkg, src, tmp_path / "out")


def test_refuses_wrong_band_count(package: Path, tmp_path: Path) -> None:
    src = write_raster(tmp_path / "two.tif", np.zeros((2, TILE, TILE)))
    with pytest.raises(RasterContractError, match=r"two\.tif: needs at least 3 bands \(R, G, B\); this file has 2"):
        predict_raster(package, src, tmp_path / "out")


def test_refuses_raster_smaller_than_tile(package: Path, tmp_path: Path) -> None:
    src = write_raster(tmp_path / "small.tif", random_rgba(np.random.default_rng(0), TILE - 1, TILE))
    with pytest.raises(PredictError, match="smaller than the package's tile size"):
        predict_raster(package, src, tmp_path / "out")


def test_extra_channels(tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "pkg", extra=[{"name": "ndvi", "band": 1}])
    rgba = random_rgba(np.random.default_rng(4), TILE, TILE)
    src = write_raster(tmp_path / "s.tif", rgba)
    with pytest.raises(RasterContractError, match=r"EXTRA channels \['ndvi'\].*s_extra.tif was not found"):
        predict_raster(pkg, src, tmp_path / "out")
    write_raster(tmp_path / "s_extra.tif", np.random.default_rng(5).random((2, TILE, TILE)), dtype="float32")
    out = predict_raster(pkg, src, tmp_path / "out")
    prob, *_ = read(out.prob)
    assert ((prob >= 0) & (prob <= 1)).all()


def test_predict_command(package: Path, tmp_path: Path) -> None:
    from flows.cli.main import main

    d = tmp_path / "in"
    d.mkdir()
    for k in range(2):
        write_raster(d / f"s{k}.tif", random_rgba(np.random.default_rng(k), TILE, TILE))
    assert main(["predict", "--package", str(package), "--input", str(d), "--output", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "s0_mask.tif",
        "s0_predict.json",
        "s0_prob.tif",
        "s1_mask.tif",
        "s1_predict.json",
        "s1_prob.tif",
    ]


def test_whole_tile_prediction_is_bit_identical_to_the_evaluation_path(tmp_path: Path) -> None:
    """A tile of a store ingested from GeoTIFFs (EXTRA channel bound to band 1, percentile clipping on), predicted
    from its GeoTIFFs with window = tile: the input and the probabilities equal the evaluation path's exactly."""
    from rtscore.config import parse_pipeline_config
    from rtscore.config.binding import ExtraChannel
    from rtscore.data.geotiff.ingest import ingest_geotiffs
    from rtscore.data.loading.dataset import build_dataset
    from rtscore.data.normalization.compute import compute_normalization_stats
    from rtscore.inference.numerics import predict_logits, prepare_model
    from rtscore.inference.predict import DEFAULT_BATCH, load_package
    from rtscore.models import load_model
    from tests.data.geotiff.test_geotiff import two_band_root
    from tests.helpers import tiny_pipeline_config

    root, geo = two_band_root(tmp_path)
    store = tmp_path / "train.zarr"
    ingest_geotiffs(geo, root, store)
    extra = [{"name": "nbr", "band": 1}]
    stats = compute_normalization_stats(
        store, extra_channels=[ExtraChannel(name="nbr", band=1)], clip_percentiles=(2, 98)
    )
    assert stats.clip_min is not None and stats.clip_max is not None
    from rtscore.data.store.format import read_store_attrs

    contract = read_store_attrs(store).contract()  # as the package stage records it
    pkg = load_package(write_package(tmp_path / "pkg", extra=extra, stats=stats, raster=contract), device="cpu")
    base = tiny_pipeline_config(tile=TILE, extra=False)
    cfg = parse_pipeline_config({**base, "data": {**base["data"], "generation": {}}, "channels": {"extra": extra}})
    dataset = build_dataset(cfg, store, stats, train=False)
    dep = pkg.deployment
    model = prepare_model(load_model(pkg.path / WEIGHTS, pkg.model_config, "cpu"), dep.torch_compile)
    clipped = nodata_tiles = 0
    for i in range(len(dataset)):
        item = dataset[i]
        rgb_tif = root / "PLANET-RGB" / f"{item['tile_id']}.tif"
        with open_checked(pkg.contract, pkg.binding, rgb_tif, root / "EXTRA" / rgb_tif.name) as raster:
            rgb, extra, valid_in = raster.read()
        assert extra is not None
        image = pkg.input_transform(rgb, extra, valid_in.astype(np.uint8))
        np.testing.assert_array_equal(image, item["image"].numpy())  # the one input transform
        batch = torch.zeros((DEFAULT_BATCH, *item["image"].shape))  # at predict's batch shape (padded with zeros)
        batch[0] = item["image"]
        with torch.inference_mode():
            z = predict_logits(
                model, batch, tta=dep.tta, scales=dep.scales, fusion=dep.fusion, precision=dep.precision
            ) / float(dep.temperature)  # type: ignore[arg-type]
        ref = torch.sigmoid(z)[0].numpy()
        out = predict_raster(pkg, rgb_tif, tmp_path / "out", stride=TILE)
        prob, *_ = read(out.prob)
        valid = item["valid"].numpy()
        np.testing.assert_array_equal(prob[valid], ref[valid])
        assert (prob[~valid] == -1.0).all()
        clipped += int((extra < stats.clip_min[3]).any() or (extra > stats.clip_max[3]).any())
        nodata_tiles += int((~valid).any())
    assert clipped > 0 and nodata_tiles > 0, "tiles with clipped values and with NoData were compared"


class CountingModel:
    """A model wrapper that counts the windows it is called on (not the all-zero padding of a batch) and records
    the batch sizes."""

    def __init__(self, model: object) -> None:
        self.model, self.windows, self.batch_sizes = model, 0, set[int]()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.windows += int((x.flatten(1).abs().sum(1) > 0).sum())
        self.batch_sizes.add(x.shape[0])
        return self.model(x)  # type: ignore[operator]


def test_full_nodata_windows_are_skipped_and_logged(
    package: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guide §4.4: a window that is NoData throughout never reaches the model and is listed in the manifest."""
    import json
    import logging

    from rtscore.inference.predict import DEFAULT_BATCH, load_package

    rng = np.random.default_rng(7)
    rgba = random_rgba(rng, 2 * TILE, 2 * TILE)
    rgba[3, TILE:, :TILE] = 0  # the lower-left tile is NoData throughout
    rgba[3, :3, -5:] = 0  # a partial NoData corner still runs
    pkg = load_package(package, device="cpu")
    counter = CountingModel(pkg.model)
    pkg.model = counter
    with caplog.at_level(logging.INFO, logger="rtscore.inference.predict"):
        out = predict_raster(pkg, write_raster(tmp_path / "s.tif", rgba), tmp_path / "out", stride=TILE)
    assert counter.windows == 3 * 2  # three windows, two TTA passes each ('minimal')
    assert counter.batch_sizes == {DEFAULT_BATCH}  # every call at one batch shape, padded
    assert out.windows == 4 and out.skipped_windows == 1
    manifest = json.loads(out.manifest.read_text())
    assert manifest["skipped_full_nodata"] == [[TILE, 0]] and manifest["windows_run"] == 3
    assert manifest["device"] == "cpu" and manifest["precision"] == "fp32"
    # issue 23 point 11: the console gets the count and where the list is, not the list (a scene may skip hundreds)
    assert "s.tif: skipped 1 of 4 windows that are entirely NoData" in caplog.text
    assert "skipped_full_nodata in s_predict.json" in caplog.text and f"({TILE}, 0)" not in caplog.text
    prob, *_ = read(out.prob)
    assert (prob[TILE:, :TILE] == -1.0).all()
    valid = rgba[3] > 0
    assert ((prob[valid] >= 0) & (prob[valid] <= 1)).all()
    # a raster that is NoData throughout runs no window at all
    rgba[3] = 0
    counter.windows = 0
    empty = predict_raster(pkg, write_raster(tmp_path / "e.tif", rgba), tmp_path / "out")
    assert counter.windows == 0 and empty.skipped_windows == empty.windows == 9
    mask, *_ = read(empty.mask)
    assert (mask == 255).all()


def test_predict_defaults_to_the_gpu_when_there_is_one(
    package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rts predict` and `load_package` ask for device 'auto', which takes CUDA when present (as calibration ran)."""
    import rtscore.inference.predict as predict_mod
    from flows.cli.main import main
    from rtscore.runtime import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto", key="--device") == torch.device("cuda")
    asked: list[str] = []

    def spy(want: str, *, key: str) -> torch.device:
        asked.append(want)
        return torch.device("cpu")  # this machine may have no GPU: run on the CPU, but record what was asked

    monkeypatch.setattr(predict_mod, "resolve_device", spy)
    predict_mod.load_package(package)
    src = write_raster(tmp_path / "s.tif", random_rgba(np.random.default_rng(0), TILE, TILE))
    assert main(["predict", "--package", str(package), "--input", str(src), "--output", str(tmp_path / "o")]) == 0
    assert asked == ["auto", "auto"]
    monkeypatch.setattr(predict_mod, "resolve_device", resolve_device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(PredictError, match="--device is 'cuda' but no CUDA device"):
        predict_mod.load_package(package, device="cuda")


# --------------------------------------------------------------------------- bounded memory (issue 12)
def whole_raster_reference(pkg: Any, rgba: np.ndarray, stride: int, batch_size: int = 8) -> np.ndarray:
    """The fusion as it was before windowed reads: the whole raster normalised and accumulated at once, every model
    call at predict's one batch shape (the last batch padded with zeros)."""
    from rtscore.inference.predict import window_probabilities, window_starts
    from rtscore.inference.stream import window_weights

    tile = pkg.tile_size
    image = pkg.input_transform(rgba[:3], None, rgba[3])
    nodata = rgba[3] == 0
    _, h, w = image.shape
    windows = [(y, x) for y in window_starts(h, tile, stride) for x in window_starts(w, tile, stride)]
    run = [(y, x) for y, x in windows if not nodata[y : y + tile, x : x + tile].all()]
    acc, norm, weight = np.zeros((h, w)), np.zeros((h, w)), window_weights(tile)
    for i in range(0, len(run), batch_size):
        chunk = run[i : i + batch_size]
        batch = np.stack([image[:, y : y + tile, x : x + tile] for y, x in chunk])
        batch = np.concatenate([batch, np.zeros((batch_size - len(chunk), *batch.shape[1:]), batch.dtype)])
        for (y, x), p in zip(chunk, window_probabilities(pkg, batch), strict=False):  # the padding is dropped
            acc[y : y + tile, x : x + tile] += weight * p
            norm[y : y + tile, x : x + tile] += weight
    prob = np.divide(acc, norm, out=np.zeros_like(acc), where=norm > 0).astype(np.float32)
    prob[nodata] = -1.0
    return prob


@pytest.mark.parametrize("stride", [TILE // 2, 23])
def test_windowed_rolling_fusion_equals_the_whole_raster_fusion(
    package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stride: int
) -> None:
    """A raster taller than the rolling band (so rows are handed out several times) and not a multiple of the
    tile, with a NoData block that skips windows: the maps equal the whole-raster fusion bit for bit, and no read
    is larger than a window."""
    from rtscore.data.raster.bands import CheckedRaster
    from rtscore.inference.predict import load_package
    from rtscore.inference.stream import OUT_BLOCK

    rng = np.random.default_rng(11)
    h, w = 2 * OUT_BLOCK + 3 * TILE + 17, TILE + 29
    rgba = random_rgba(rng, h, w)
    rgba[3, OUT_BLOCK - 40 : OUT_BLOCK + 2 * TILE, :] = 0  # whole windows of NoData across a band boundary
    rgba[3, -7:, :11] = 0
    pkg = load_package(package, device="cpu")
    reads: list[tuple[int, ...]] = []
    original = CheckedRaster.read

    def spy(self: CheckedRaster, window: Any = None) -> Any:
        pixels = original(self, window)
        reads.append(pixels[2].shape)
        return pixels

    monkeypatch.setattr(CheckedRaster, "read", spy)
    out = predict_raster(pkg, write_raster(tmp_path / "tall.tif", rgba), tmp_path / "out", stride=stride)
    monkeypatch.setattr(CheckedRaster, "read", original)
    prob, *_ = read(out.prob)
    np.testing.assert_array_equal(prob, whole_raster_reference(pkg, rgba, stride))
    assert out.skipped_windows > 0 and max(reads) == (TILE, TILE) and len(reads) == out.windows
    mask, *_ = read(out.mask)
    valid = rgba[3] > 0
    np.testing.assert_array_equal(mask, np.where(valid, (prob >= 0.5).astype(np.uint8), 255))
    assert out.valid_pixels == int(valid.sum()) and out.positive_pixels == int((mask == 1).sum())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "tall_mask.tif",
        "tall_predict.json",
        "tall_prob.tif",
    ]


def test_the_fusion_band_is_bounded_by_tile_and_block_rows() -> None:
    from rtscore.inference.predict import window_starts
    from rtscore.inference.stream import OverlapFusion

    fusion = OverlapFusion(10_000, 300, TILE, 256)
    assert fusion.acc.shape == (256 + TILE, 300)
    handed: list[int] = []
    for y in window_starts(10_000, TILE, TILE // 2):
        handed += [row for row, *_ in fusion.finished(y)]
        fusion.add(y, 0, np.full((TILE, TILE), 0.25, np.float32), np.ones((TILE, TILE), bool))
    (last, prob, valid), *more = [*fusion.rest()]
    assert not more and handed == list(range(0, last, 256)) and last % 256 == 0
    assert prob.shape == (10_000 - last, 300) and 10_000 - last <= 256 + TILE  # the rows left, in one strip
    assert (prob[:, :TILE] == 0.25).all() and (prob[:, TILE:] == 0).all() and (valid[:, :TILE]).all()


def test_a_failure_mid_raster_leaves_no_file_behind(package: Path, tmp_path: Path) -> None:
    """The model fails after rows were written: no map, no temporary file, no manifest is left."""
    from rtscore.inference.predict import load_package
    from rtscore.inference.stream import OUT_BLOCK

    pkg = load_package(package, device="cpu")
    calls = 0
    model = pkg.model

    def failing(x: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        if calls > 4:  # the third batch: the first band of rows is in the temporary GeoTIFFs by then
            raise RuntimeError("CUDA out of memory (simulated)")
        return model(x)

    pkg.model = failing
    rgba = random_rgba(np.random.default_rng(12), 2 * OUT_BLOCK + TILE, TILE)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="simulated"):
        predict_raster(pkg, write_raster(tmp_path / "s.tif", rgba), out, stride=TILE // 2)
    assert calls == 5 and not any(out.glob("*"))  # hidden temporaries included


# --------------------------------------------------------------------------- issue 21: load = verify
def tamper(pkg: Path, how: str) -> str:
    """Tamper with a package as `rts package verify` must catch it; the check that fails.

    ``weights-crc``: one tensor value of weights.pth changed and SHA256SUMS regenerated (only the zip CRC tells);
    ``sums``: the threshold edited in deployment_config.yaml, still a valid config (only SHA256SUMS tells)."""
    from tests.helpers import alter_weights_tensor

    if how == "weights-crc":
        member = alter_weights_tensor(pkg / WEIGHTS)
        write_sha256sums(pkg)
        return f"weights.pth pickle check: weights.pth: member {member} fails its CRC-32 check"
    dep = pkg / DEPLOYMENT
    dep.write_text(dep.read_text().replace("threshold: 0.5", "threshold: 0.3"))
    return "SHA256SUMS check: SHA256SUMS: deployment_config.yaml: sha256 mismatch"


def predict_cli(package: Path, d: Path, out: Path, *, side: int = TILE) -> int:
    """`rts predict` (the CLI's main, in process) on one raster of ``side`` px written into ``d``."""
    from flows.cli.main import main

    d.mkdir(exist_ok=True)
    write_raster(d / "s.tif", random_rgba(np.random.default_rng(0), side, side))
    return main(["predict", "--package", str(package), "--input", str(d), "--output", str(out), "--device", "cpu"])


@pytest.mark.parametrize("how", ["weights-crc", "sums"])
def test_predict_refuses_a_package_that_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    pkg = write_package(tmp_path / "pkg")
    failed_check = tamper(pkg, how)
    out = tmp_path / "out"
    assert predict_cli(pkg, tmp_path / "in", out) == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rts predict")]  # one line
    assert line.startswith(f"rts predict: error: package {pkg} fails `rts package verify`") and failed_check in line
    assert not out.exists()


def test_predict_refuses_a_key_given_twice_in_model_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`tile_size: 64` then `tile_size: 128` (sums regenerated): plain YAML would run the 64 px model at 128 px."""
    pkg = write_package(tmp_path / "pkg")
    (pkg / MODEL).write_text((pkg / MODEL).read_text() + "tile_size: 128\n")
    write_sha256sums(pkg)
    out = tmp_path / "out"
    assert predict_cli(pkg, tmp_path / "in", out, side=2 * TILE) == 2
    err = capsys.readouterr().err
    assert "model_config.yaml check:" in err and "key 'tile_size' is given twice" in err
    assert not out.exists()


def test_a_fallback_threshold_warns_on_every_predict_and_is_in_the_manifest(tmp_path: Path) -> None:
    import json

    from tests.helpers import logged

    fallback = write_package(tmp_path / "fallback", threshold_source="max_f1_fallback")
    with logged("rtscore") as warnings:
        for k in range(2):  # each use warns, not only the first load of the process
            assert predict_cli(fallback, tmp_path / "in", tmp_path / f"out{k}") == 0
    said = [w for w in warnings if "max-F1 fallback" in w]
    assert len(said) == 2 and str(fallback) in said[0] and "threshold_source max_f1_fallback" in said[0]
    manifest = json.loads((tmp_path / "out0" / "s_predict.json").read_text())
    assert manifest["threshold_source"] == "max_f1_fallback"

    normal = write_package(tmp_path / "normal")
    with logged("rtscore") as warnings:
        assert predict_cli(normal, tmp_path / "in", tmp_path / "out_normal") == 0
    assert not [w for w in warnings if "fallback" in w]
    assert json.loads((tmp_path / "out_normal" / "s_predict.json").read_text())["threshold_source"] == (
        "target_precision"
    )


def test_the_package_is_verified_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """predict, drift and repeated loads of one unchanged package run its audit once."""
    from rtscore.inference.drift import drift_report
    from rtscore.inference.predict import load_package
    from tests.helpers import count_audits

    audits = count_audits(monkeypatch)
    pkg = write_package(tmp_path / "pkg")
    load_package(pkg, device="cpu")
    load_package(pkg, device="cpu")
    assert predict_cli(pkg, tmp_path / "in", tmp_path / "out") == 0
    drift_report(pkg, tmp_path / "in", tmp_path / "drift")
    assert audits == [pkg]
