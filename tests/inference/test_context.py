"""The 0.5x input is the tile's 2x field of view (guide §8.3), built alike from a raster and in the stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rtscore.data.synthetic import downsample_mean_float, downsample_mean_uint8, downsample_valid
from rtscore.inference.context import ContextError, ContextWindows, context_window
from rtscore.inference.numerics import predict_logits

TILE = 32


def _raster(centre: int, around: int) -> tuple[np.ndarray, np.ndarray]:
    """A 4x4-tile raster (RGB + one extra band) whose tile at (32, 32) holds `centre`, the rest `around`."""
    channels = np.full((4, 4 * TILE, 4 * TILE), float(around), np.float32)
    channels[:, TILE : 2 * TILE, TILE : 2 * TILE] = float(centre)
    return channels, np.full((4 * TILE, 4 * TILE), 255, np.uint8)


def test_the_half_scale_input_is_the_2x_context_of_the_same_tile() -> None:
    channels, alpha = _raster(centre=200, around=40)
    raw, a = context_window(channels, alpha, TILE, TILE, TILE)
    q = TILE // 4
    assert raw.shape == (4, TILE, TILE) and (a == 255).all()
    assert (raw[:, q : TILE - q, q : TILE - q] == 200).all()  # the tile itself, at half resolution, in the centre
    ring = np.ones((TILE, TILE), bool)
    ring[q : TILE - q, q : TILE - q] = False
    assert (raw[:, ring] == 40).all()  # ... and its surroundings around it: 2x the field of view

    seen: list[torch.Tensor] = []

    def model(x: torch.Tensor) -> torch.Tensor:  # pixelwise: what it sees is what it returns
        seen.append(x.clone())
        return x[:, :1]

    windows = ContextWindows.of_arrays(channels, alpha, TILE, lambda c, _a: c / 100.0)
    tile = torch.from_numpy(channels[None, :, TILE : 2 * TILE, TILE : 2 * TILE] / 100.0)
    ctx = torch.from_numpy(windows.batch([(TILE, TILE)]))
    z = predict_logits(model, tile, tta="none", scales=[1.0, 0.5], fusion="max", precision="fp32", context=ctx)
    assert bool((seen[1] == 0.4).any()) and bool((seen[1] == 2.0).any())  # the 0.5x pass saw the surroundings
    assert torch.allclose(z[0, 2:-2, 2:-2], torch.full((TILE - 4, TILE - 4), 2.0))  # and kept the tile's centre


def test_a_half_scale_pass_without_its_context_is_refused() -> None:
    x = torch.zeros(1, 3, TILE, TILE)
    with pytest.raises(ContextError, match="needs the tile's context"):
        predict_logits(lambda t: t[:, :1], x, tta="none", scales=[1.0, 0.5], fusion="max", precision="fp32")
    one = predict_logits(lambda t: t[:, :1], x, tta="none", scales=[1.0], fusion="max", precision="fp32")
    assert one.shape == (1, TILE, TILE)  # 1x needs nothing more


def test_the_raster_context_is_downsampled_as_the_stores_are() -> None:
    rng = np.random.default_rng(0)
    h, w = 3 * TILE + 10, 3 * TILE + 6
    channels = np.concatenate(
        [rng.integers(0, 256, (3, h, w)).astype(np.float32), rng.normal(0, 1, (1, h, w)).astype(np.float32)]
    )
    alpha = np.where(rng.random((h, w)) < 0.05, 0, 255).astype(np.uint8)
    y, x = 5, 0  # a window at the raster's top-left edge: part of its context lies outside the raster
    raw, a = context_window(channels, alpha, y, x, TILE)
    # The reference: pad with NoData, take the 2x window, the stores' 2x2 rules (rtscore.data.synthetic).
    pad = TILE
    big = np.zeros((4, h + 2 * pad, w + 2 * pad), np.float32)
    big_a = np.zeros((h + 2 * pad, w + 2 * pad), np.uint8)
    big[:, pad:-pad, pad:-pad], big_a[pad:-pad, pad:-pad] = channels, alpha
    sl = (slice(y + pad - TILE // 2, y + pad + 3 * TILE // 2), slice(x + pad - TILE // 2, x + pad + 3 * TILE // 2))
    ref_a = downsample_valid(big_a[sl])
    ref_rgb = downsample_mean_uint8(big[(slice(0, 3), *sl)].astype(np.uint8))
    ref_extra = downsample_mean_float(big[(slice(3, 4), *sl)])
    nodata = ref_a == 0
    ref_rgb[:, nodata], ref_extra[:, nodata] = 0, 0.0
    assert nodata[0].all() and not nodata.all()  # outside the raster is NoData, inside mostly valid
    np.testing.assert_array_equal(a, ref_a)
    np.testing.assert_array_equal(raw[:3], ref_rgb.astype(np.float32))
    np.testing.assert_array_equal(raw[3:], ref_extra)


def test_predict_takes_the_half_scale_input_from_the_surrounding_raster(tmp_path: Path) -> None:
    """A multi-scale package: a tile's probabilities depend on the ground around it (its 0.5x context), and are
    those of the deployment numerics on the tile and on its 2x window from the raster."""
    pytest.importorskip("rasterio")
    import rasterio
    import yaml

    from rtscore.inference.predict import load_package, predict_raster
    from rtscore.package import DEPLOYMENT, write_sha256sums
    from tests.helpers import calibrated_deployment
    from tests.test_predict import TILE as T
    from tests.test_predict import random_rgba, write_package, write_raster

    pkg = write_package(tmp_path / "pkg", tta="none")
    dep = calibrated_deployment(threshold=0.5, temperature=1.7, tta="none", precision="fp32", scales=[1.0, 0.5])
    dep = dep.model_copy(
        update={"fusion": "max", "calibrated_with": dep.numerics().model_copy(update={"fusion": "max"})}
    )
    (pkg / DEPLOYMENT).write_text(yaml.safe_dump(dep.model_dump(mode="json"), sort_keys=False))
    write_sha256sums(pkg)
    rng = np.random.default_rng(3)
    a = random_rgba(rng, 3 * T, 3 * T)
    b = a.copy()
    b[:3, :T, :] = 255 - b[:3, :T, :]  # other ground in the top row of tiles only
    out_a = predict_raster(pkg, write_raster(tmp_path / "a.tif", a), tmp_path / "out_a", stride=T)
    out_b = predict_raster(pkg, write_raster(tmp_path / "b.tif", b), tmp_path / "out_b", stride=T)
    with rasterio.open(out_a.prob) as pa, rasterio.open(out_b.prob) as pb:
        prob_a, prob_b = pa.read(1), pb.read(1)
    centre = (slice(T, 2 * T), slice(T, 2 * T))  # the middle tile: its own pixels are the same in a and b
    assert not np.allclose(prob_a[centre], prob_b[centre])  # ... but not its surroundings, which its 0.5x pass sees

    loaded = load_package(pkg)
    raw = a[:3].astype(np.float32)
    ctx_raw, ctx_alpha = context_window(raw, a[3], T, T, T)
    ctx = loaded.prepare_raw(ctx_raw, ctx_alpha)
    tile = loaded.input_transform(a[:3], None, a[3])[None, :, T : 2 * T, T : 2 * T]
    with torch.inference_mode():
        z = predict_logits(
            loaded.model,
            torch.from_numpy(np.ascontiguousarray(tile)),
            tta="none",
            scales=[1.0, 0.5],
            fusion="max",
            precision="fp32",
            context=torch.from_numpy(ctx[None]),
        )
    expected = torch.sigmoid(z / 1.7)[0].numpy()
    np.testing.assert_allclose(prob_a[centre], expected, atol=1e-5)
