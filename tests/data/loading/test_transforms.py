"""Tests of the per-sample transform pipeline (NoData, boundary ignore, augmentation, determinism)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from scipy import ndimage

from rtscore.config.pipeline import AugmentationConfig
from rtscore.data.loading.transforms import SamplePipeline, boundary_ignore_mask, nodata_substitute, normalize
from rtscore.data.tiles import IGNORE_INDEX

# albumentations 2 only warns about renamed (1.x) arguments and then drops them: any warning fails a test.
pytestmark = pytest.mark.filterwarnings("error")

SIZE = 64
AUG_NAMES = [n for n in AugmentationConfig.model_fields if n != "enabled"]
COLOUR = ("color", "gauss_noise", "clahe")


def _stats(n_extra: int) -> tuple[list[float], list[float]]:
    mean = [54.0, 50.5, 31.25] + [0.5 + i for i in range(n_extra)]
    std = [20.0, 18.0, 12.5] + [2.0 + i for i in range(n_extra)]
    return mean, std


def _sample(n_extra: int = 2, seed: int = 0) -> dict[str, Any]:
    """64x64 tile: random RGB/extras, all valid, a 1-square in the middle of background."""
    rng = np.random.default_rng(seed)
    label = np.zeros((SIZE, SIZE), np.uint8)
    label[20:44, 20:44] = 1
    return {
        "rgb": rng.integers(1, 255, (3, SIZE, SIZE), dtype=np.uint8),  # 1..254: 255 is free for markers
        "extra": rng.normal(3.0, 2.0, (n_extra, SIZE, SIZE)).astype(np.float32) if n_extra else None,
        "alpha": np.full((SIZE, SIZE), 255, np.uint8),
        "label": label,
    }


JITTERS = ("brightness", "contrast", "saturation")


def _p(name: str, p: float) -> dict[str, Any]:
    """The sub-config of transform ``name`` at probability ``p`` (colour: each of its three jitters)."""
    return {j: {"p": p} for j in JITTERS} if name == "color" else {"p": p}


def _only(**on: dict[str, Any]) -> AugmentationConfig:
    """Augmentation config with every transform off (p=0) except the given sub-configs."""
    data: dict[str, Any] = {name: _p(name, 0.0) for name in AUG_NAMES}
    data.update(on)
    return AugmentationConfig.model_validate(data)


def _pipeline(n_extra: int = 2, augmentation: AugmentationConfig | None = None, **kw: Any) -> SamplePipeline:
    mean, std = _stats(n_extra)
    return SamplePipeline(mean, std, augmentation, **kw)


def _plain(sample: dict[str, Any], n_extra: int = 2) -> np.ndarray:
    """Reference normalisation of the raw stack, CHW."""
    mean, std = _stats(n_extra)
    parts = [sample["rgb"].astype(np.float32)] + ([sample["extra"]] if n_extra else [])
    return normalize(np.concatenate(parts), mean, std, channel_axis=0)


# --------------------------------------------------------------------------- helpers
def test_nodata_substitute_keys_off_alpha_in_both_layouts() -> None:
    chw = np.zeros((3, 4, 5), np.uint8)  # every pixel pitch-dark
    chw[:, 0, 0] = 200
    alpha = np.full((4, 5), 255, np.uint8)
    alpha[0, :2] = 0
    out = nodata_substitute(chw, alpha, [54.4, 50.6, 31.0])
    assert out.dtype == np.uint8 and out.shape == chw.shape
    assert out[:, 0, 0].tolist() == [54, 51, 31] and out[:, 0, 1].tolist() == [54, 51, 31]  # rounded
    assert (out[:, 1:] == 0).all() and (out[:, 0, 2:] == 0).all()  # valid dark pixels untouched
    assert chw[0, 0, 0] == 200  # input not modified
    hwc = nodata_substitute(chw.transpose(1, 2, 0).astype(np.float32), alpha, [54.4, 50.6, 31.0])
    np.testing.assert_array_equal(hwc[0, 0], np.float32([54.4, 50.6, 31.0]))
    assert (hwc[1:] == 0).all()


def test_nodata_substitute_rejects_ambiguous_layout() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        nodata_substitute(np.zeros((3, 3, 3), np.float32), np.zeros((3, 3), np.uint8), [0.0, 0.0, 0.0])
    out = nodata_substitute(np.zeros((3, 3, 3), np.float32), np.zeros((3, 3), np.uint8), [1, 2, 3], channel_axis=0)
    assert out[:, 0, 0].tolist() == [1, 2, 3]


def test_normalize_both_layouts() -> None:
    x = np.array([[[10.0, 4.0]]], np.float32)  # HWC (1,1,2)
    np.testing.assert_array_equal(normalize(x, [0.0, 2.0], [5.0, 1.0]), [[[2.0, 2.0]]])
    out = normalize(x.transpose(2, 0, 1).astype(np.uint8), [0.0, 2.0], [5.0, 1.0], channel_axis=0)
    assert out.dtype == np.float32 and out[:, 0, 0].tolist() == [2.0, 2.0]
    with pytest.raises(ValueError):
        normalize(x, [0.0], [1.0])


def test_boundary_ignore_width_1_hand_computed() -> None:
    label = np.zeros((8, 8), np.uint8)
    label[2:6, 2:6] = 1
    expected = np.array(
        [
            [0, 0, 0, 0, 0, 0, 0, 0],
            [0, 1, 1, 1, 1, 1, 1, 0],
            [0, 1, 1, 1, 1, 1, 1, 0],
            [0, 1, 1, 0, 0, 1, 1, 0],
            [0, 1, 1, 0, 0, 1, 1, 0],
            [0, 1, 1, 1, 1, 1, 1, 0],
            [0, 1, 1, 1, 1, 1, 1, 0],
            [0, 0, 0, 0, 0, 0, 0, 0],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(boundary_ignore_mask(label, 1), expected)


def test_boundary_ignore_width_2_hand_computed() -> None:
    label = np.zeros((16, 16), np.uint8)
    label[4:12, 4:12] = 1
    expected = np.zeros((16, 16), bool)
    expected[2:14, 2:14] = True  # two pixels of background around the square ...
    expected[6:10, 6:10] = False  # ... and two pixels inside it
    np.testing.assert_array_equal(boundary_ignore_mask(label, 2), expected)
    assert not boundary_ignore_mask(label, 0).any()


def test_boundary_ignore_leaves_255_and_non_01_edges_alone() -> None:
    label = np.zeros((5, 6), np.uint8)
    label[:, 4:] = IGNORE_INDEX
    label[0:2, 2:4] = 1  # touches 255 on the right, 0 on the left and below
    expected = np.array(
        [
            [0, 1, 1, 0, 0, 0],  # (0, 3) has only 1s and 255s around it
            [0, 1, 1, 1, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [0, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(boundary_ignore_mask(label, 1), expected)
    assert not boundary_ignore_mask(np.full((8, 8), IGNORE_INDEX, np.uint8), 3).any()
    assert not boundary_ignore_mask(np.ones((8, 8), np.uint8), 3).any()


@pytest.mark.parametrize("width", [1, 2, 3, 7])
def test_boundary_ignore_matches_scipy_binary_dilation(width: int) -> None:
    # The guide specifies scipy binary dilation; the module uses cv2 for speed and must agree exactly.
    rng = np.random.default_rng(width)
    label = ndimage.binary_opening(rng.random((48, 40)) > 0.6).astype(np.uint8)
    label[rng.random(label.shape) > 0.95] = IGNORE_INDEX
    square = np.ones((2 * width + 1, 2 * width + 1), bool)
    fg, bg = label == 1, label == 0
    reference = (fg & ndimage.binary_dilation(bg, square)) | (bg & ndimage.binary_dilation(fg, square))
    assert reference.any()
    np.testing.assert_array_equal(boundary_ignore_mask(label, width), reference)


# --------------------------------------------------------------------------- NoData and boundaries in the pipeline
def test_nodata_keyed_off_alpha_only() -> None:
    s = _sample()
    s["rgb"][:, 5, 5] = 0  # pitch-dark but valid
    s["label"][5, 5] = 1
    s["alpha"][40:50, 50:60] = 0
    s["rgb"][:, 40:50, 50:60] = 200
    before = {k: v.copy() for k, v in s.items()}
    image, label, valid = _pipeline()(**s, seed=None)
    for k, v in before.items():
        np.testing.assert_array_equal(s[k], v)  # inputs are never modified in place
    mean, std = _stats(2)
    np.testing.assert_allclose(image[:3, 5, 5], [-m / sd for m, sd in zip(mean[:3], std[:3], strict=True)], rtol=1e-6)
    assert label[5, 5] == 1 and valid[5, 5]
    assert (image[:, 40:50, 50:60] == 0).all()  # every channel, extras too, became its mean
    assert (label[40:50, 50:60] == IGNORE_INDEX).all() and not valid[40:50, 50:60].any()
    assert valid.sum() == SIZE * SIZE - 100


def test_nodata_handling_off_keeps_pixels_but_still_ignores() -> None:
    s = _sample()
    s["alpha"][0:8, 0:8] = 0
    image, label, valid = _pipeline(nodata_handling=False)(**s, seed=None)
    np.testing.assert_array_equal(image, _plain(s))
    assert (label[0:8, 0:8] == IGNORE_INDEX).all() and not valid[0:8, 0:8].any()


def test_pipeline_boundary_ignore_and_soft_labels() -> None:
    s = _sample()
    s["label"][0, 0] = IGNORE_INDEX
    _, label, valid = _pipeline(boundary_handling="ignore", boundary_ignore_width=1)(**s, seed=None)
    expected = np.zeros((SIZE, SIZE), bool)
    expected[19:45, 19:45] = True  # square is rows/cols 20..43: one pixel outside ...
    expected[21:43, 21:43] = False  # ... and one inside
    expected[0, 0] = True  # the input 255 stays 255
    np.testing.assert_array_equal(label == IGNORE_INDEX, expected)
    assert valid.all()  # ignore is a label matter; the pixels are real
    for kw in ({"boundary_handling": "soft_labels"}, {"boundary_handling": "ignore", "boundary_ignore_width": 0}):
        _, label, _ = _pipeline(**kw)(**s, seed=None)
        np.testing.assert_array_equal(label, s["label"])


def test_boundary_ignore_on_unaugmented_label_then_warped_consistently() -> None:
    s = _sample()
    pipe = _pipeline(augmentation=_only(hflip={"p": 1.0}), boundary_handling="ignore", boundary_ignore_width=2)
    _, label, _ = pipe(**s, seed=3)
    _, reference, _ = _pipeline(boundary_handling="ignore", boundary_ignore_width=2)(**s, seed=None)
    np.testing.assert_array_equal(label, reference[:, ::-1])


# --------------------------------------------------------------------------- augmentation
def test_augmentation_none_or_disabled_is_plain_normalisation() -> None:
    s = _sample()
    expected = _plain(s)
    disabled = AugmentationConfig(enabled=False)
    for pipe in (_pipeline(), _pipeline(augmentation=disabled)):
        assert not pipe.augments
        image, label, valid = pipe(**s, seed=7)
        np.testing.assert_array_equal(image, expected)
        np.testing.assert_array_equal(label, s["label"])
        assert valid.all()


def test_colour_never_touches_extra_channels() -> None:
    s = _sample()
    aug = _only(color=_p("color", 1.0), gauss_noise={"p": 1.0}, clahe={"p": 1.0})
    image, label, valid = _pipeline(augmentation=aug)(**s, seed=11)
    expected = _plain(s)
    np.testing.assert_array_equal(image[3:], expected[3:])
    assert not np.array_equal(image[:3], expected[:3])
    np.testing.assert_array_equal(label, s["label"])
    assert valid.all()


def test_brightness_contrast_saturation_fire_independently() -> None:
    """Guide §9.2: three rows at p 0.5 each. Independent, a sample escapes all three 1 time in 8; one joint
    ColorJitter at p 0.5 would leave it untouched half the time and jitter all three together otherwise."""
    s = _sample(n_extra=0)
    pipe = _pipeline(n_extra=0, augmentation=_only(color=_p("color", 0.5)))
    plain = _plain(s, n_extra=0)
    n = 400
    untouched = sum(np.array_equal(pipe(**s, seed=seed)[0], plain) for seed in range(n))
    assert 0.07 < untouched / n < 0.19, untouched  # 1/8 = 0.125; binomial sd at n=400 is 0.017


@pytest.mark.parametrize("name", JITTERS)
def test_each_jitter_changes_only_its_own_property(name: str) -> None:
    """Brightness alone scales every channel by one factor; contrast alone keeps the grey; saturation alone
    keeps each pixel's grey value (up to rounding) and leaves grey pixels grey."""
    s = _sample(n_extra=0)
    s["rgb"][:, :8] = 128  # a grey band: saturation cannot move it
    jitters = {j: {"p": 1.0 if j == name else 0.0, "limit": 0.2} for j in JITTERS}
    pipe = _pipeline(n_extra=0, augmentation=_only(color=jitters))
    mean, std = _stats(0)
    for seed in range(3):
        image, _, _ = pipe(**s, seed=seed)
        rgb = image * np.float32(std)[:, None, None] + np.float32(mean)[:, None, None]
        assert not np.allclose(rgb, s["rgb"], atol=0.6)
        luma = np.array([0.299, 0.587, 0.114])[:, None, None]  # the grey ColorJitter blends with
        grey_in, grey_out = (s["rgb"] * luma).sum(axis=0), (rgb * luma).sum(axis=0)
        unclipped = ((rgb > 0.5) & (rgb < 254.5)).all(axis=0)
        if name == "brightness":
            factor = rgb[:, :8].mean() / 128.0  # the grey band, never clipped: factor to within 0.5 / 128
            assert 0.79 < factor < 1.21
            np.testing.assert_allclose(rgb, np.clip(s["rgb"] * factor, 0, 255), atol=1.6)
        elif name == "saturation":
            np.testing.assert_allclose(rgb[:, :8], 128.0, atol=1.01)
            np.testing.assert_allclose(grey_out[unclipped], grey_in[unclipped], atol=1.5)
        else:  # contrast: scaled about the image's grey mean, so a grey band stays grey
            assert np.ptp(rgb[:, :8], axis=0).max() <= 1.01


def test_joint_colour_form_names_its_replacement() -> None:
    with pytest.raises(ValueError, match="independent"):
        AugmentationConfig.model_validate({"color": {"p": 0.5, "brightness": 0.2}})


def test_colour_keeps_nodata_at_mean() -> None:
    s = _sample()
    s["alpha"][:10] = 0
    aug = _only(color=_p("color", 1.0), gauss_noise={"p": 1.0}, clahe={"p": 1.0})
    image, _, _ = _pipeline(augmentation=aug)(**s, seed=1)
    assert (image[:, :10] == 0).all()


def test_random_scale_pads_with_ignore_not_background() -> None:
    s = _sample()
    s["label"][:] = 0  # all background: padding must still come out 255
    aug = _only(random_scale={"p": 1.0, "scale_range": (0.5, 0.5)})
    image, label, valid = _pipeline(augmentation=aug, tile_size=SIZE)(**s, seed=0)
    inner = np.zeros((SIZE, SIZE), bool)
    inner[16:48, 16:48] = True  # 64 -> 32, centred
    assert (label[~inner] == IGNORE_INDEX).all() and not valid[~inner].any() and (image[:, ~inner] == 0).all()
    assert (label[inner] == 0).all() and valid[inner].all()


@pytest.mark.parametrize("name", ["affine", "elastic", "shear"])
def test_warps_sweep_in_ignore_not_background(name: str) -> None:
    s = _sample()
    s["label"][:] = 0
    _, label, valid = _pipeline(augmentation=_only(**{name: {"p": 1.0}}))(**s, seed=5)
    assert set(np.unique(label)) <= {0, IGNORE_INDEX}
    np.testing.assert_array_equal(label == IGNORE_INDEX, ~valid)


def test_flips_are_independent_draws() -> None:
    # Guards the albumentations set_random_seed trap: equally seeded per-transform generators flip together.
    s = _sample(n_extra=0)
    pipe = _pipeline(n_extra=0, augmentation=_only(hflip={"p": 0.5}, vflip={"p": 0.5}))
    plain = _plain(s, n_extra=0)
    variants = {
        "none": plain,
        "h": plain[:, :, ::-1],
        "v": plain[:, ::-1, :],
        "hv": plain[:, ::-1, ::-1],
    }
    seen = set()
    for seed in range(32):
        image, _, _ = pipe(**s, seed=seed)
        seen |= {k for k, v in variants.items() if np.array_equal(image, v)}
    assert seen == set(variants)


def test_same_seed_same_result_different_seed_differs() -> None:
    s = _sample()
    pipe = _pipeline(augmentation=AugmentationConfig(), tile_size=SIZE)
    first = pipe(**s, seed=123)
    _ = pipe(**s, seed=9)  # state from another call must not leak into the next
    again = _pipeline(augmentation=AugmentationConfig())(**s, seed=123)
    for a, b in zip(first, pipe(**s, seed=123), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    others = [pipe(**s, seed=seed)[0] for seed in (1, 2, 3)]
    assert all(not np.array_equal(first[0], o) for o in others)


@pytest.mark.parametrize("n_extra", [0, 2])
def test_output_dtypes_and_shapes(n_extra: int) -> None:
    s = _sample(n_extra)
    image, label, valid = _pipeline(n_extra, augmentation=AugmentationConfig())(**s, seed=4)
    assert image.shape == (3 + n_extra, SIZE, SIZE) and image.dtype == np.float32 and image.flags.c_contiguous
    assert label.shape == (SIZE, SIZE) and label.dtype == np.int64
    assert valid.shape == (SIZE, SIZE) and valid.dtype == np.bool_
    assert set(np.unique(label)) <= {0, 1, IGNORE_INDEX}


@pytest.mark.parametrize("name", [*AUG_NAMES, "all"])
def test_each_transform_runs_at_p1_on_five_channels(name: str) -> None:
    names = AUG_NAMES if name == "all" else [name]
    aug = _only(**{n: _p(n, 1.0) for n in names})
    s = _sample(n_extra=2)
    s["alpha"][:4] = 0
    pipe = _pipeline(augmentation=aug, boundary_handling="ignore", boundary_ignore_width=1)
    assert pipe.augments
    image, label, valid = pipe(**s, seed=21)
    assert image.shape == (5, SIZE, SIZE) and np.isfinite(image).all()
    assert set(np.unique(label)) <= {0, 1, IGNORE_INDEX}
    assert (label[~valid] == IGNORE_INDEX).all()


def test_geometry_moves_all_channels_and_masks_together() -> None:
    # A marker pixel set in every channel and the label must land in the same place after a warp.
    s = _sample()
    s["label"][:] = 0
    s["label"][10:14, 30:34] = 1
    s["rgb"][:, 10:14, 30:34] = 255
    s["extra"][:, 10:14, 30:34] = 100.0
    pipe = _pipeline(augmentation=_only(rotate90={"p": 1.0}, hflip={"p": 0.5}, vflip={"p": 0.5}))
    moved = 0
    for seed in range(4):
        image, label, _ = pipe(**s, seed=seed)
        where = label == 1
        assert where.sum() == 16
        moved += not where[10:14, 30:34].all()
        for c in range(5):
            np.testing.assert_array_equal(image[c] == image[c].max(), where)
    assert moved


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="std"):
        SamplePipeline([0.0] * 3, [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="equal-length"):
        SamplePipeline([0.0] * 3, [1.0] * 4)
    with pytest.raises(ValueError, match="boundary_handling"):
        SamplePipeline([0.0] * 3, [1.0] * 3, boundary_handling="dilate")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channels"):
        _pipeline(n_extra=1)(**_sample(n_extra=2), seed=None)
    with pytest.raises(ValueError, match="scale_range"):
        _pipeline(augmentation=_only(random_scale={"p": 1.0, "scale_range": (1.0, 0.5)}))


def test_image_and_label_stay_aligned_under_every_warp() -> None:
    # Encode the label in the RGB: after any warp, image sign and label must agree on (almost) all valid pixels.
    s = _sample(n_extra=0)
    s["rgb"] = np.repeat(s["label"][None] * 200 + 20, 3, axis=0).astype(np.uint8)
    s["alpha"][:, :8] = 0
    aug = _only(**{n: {"p": 1.0} for n in AUG_NAMES if n not in COLOUR})
    pipe = SamplePipeline([120.0] * 3, [100.0] * 3, aug)
    for seed in range(5):
        image, label, valid = pipe(**s, seed=seed)
        known = label != IGNORE_INDEX
        assert known.any() and not (known & ~valid).any()
        assert ((image[0] > 0) == (label == 1))[known].mean() > 0.9  # only interpolated edge pixels may differ


def test_pipeline_survives_pickling_for_dataloader_workers() -> None:
    s = _sample()
    pipe = _pipeline(augmentation=AugmentationConfig(), tile_size=SIZE)
    clone = pickle.loads(pickle.dumps(pipe))
    for a, b in zip(pipe(**s, seed=8), clone(**s, seed=8), strict=True):
        np.testing.assert_array_equal(a, b)
