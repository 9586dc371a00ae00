from __future__ import annotations

import pytest
import torch
from scipy.special import expit, logit

from rtscore.inference.context import ContextError
from rtscore.inference.numerics import (
    D4,
    TTA_TRANSFORMS,
    fuse_scales,
    invert,
    mean_prob_logit,
    predict_logits,
    scale_logits,
    transform,
)


@pytest.mark.parametrize("name", D4)
def test_every_d4_transform_is_undone_by_its_inverse(name: str) -> None:
    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    assert torch.equal(invert(transform(x, name), name), x)


def test_d4_transforms_are_eight_distinct_symmetries() -> None:
    x = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4)
    images = {tuple(transform(x, n).flatten().tolist()) for n in D4}
    assert len(images) == 8
    assert TTA_TRANSFORMS["full"] == D4 and TTA_TRANSFORMS["none"] == ("id",)


def test_mean_prob_logit_is_the_logit_of_the_mean_probability_and_stable() -> None:
    z = [torch.tensor([-3.0, 0.0, 2.5]), torch.tensor([1.0, -1.0, 4.0])]
    expected = logit((expit(z[0].numpy()) + expit(z[1].numpy())) / 2)
    assert torch.allclose(mean_prob_logit(z), torch.from_numpy(expected).float(), atol=1e-5)
    big = mean_prob_logit([torch.tensor([80.0]), torch.tensor([90.0])])
    assert torch.isfinite(big).all() and big.item() > 79  # float32 probabilities would saturate to inf here
    assert torch.equal(mean_prob_logit([z[0]]), z[0])


def test_fusions() -> None:
    a, b = torch.tensor([-2.0, 3.0]), torch.tensor([1.0, -4.0])
    assert torch.equal(fuse_scales([a, b], "max"), torch.tensor([1.0, 3.0]))
    assert torch.equal(fuse_scales([a, b], "consensus"), torch.tensor([-2.0, -4.0]))
    assert torch.allclose(fuse_scales([a, b], "weighted_mean"), mean_prob_logit([a, b]))
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse_scales([a, b], "median")


def test_tta_of_an_equivariant_model_equals_no_tta() -> None:
    def model(x: torch.Tensor) -> torch.Tensor:  # pixelwise: commutes with every symmetry
        return x[:, :1] * 2.0 - 1.0

    x = torch.randn(2, 3, 64, 64)
    none = predict_logits(model, x, tta="none", scales=[1.0], fusion="weighted_mean", precision="fp32")
    full = predict_logits(model, x, tta="full", scales=[1.0], fusion="weighted_mean", precision="fp32")
    assert torch.allclose(none, full, atol=1e-5)
    assert none.shape == (2, 64, 64)


def test_half_scale_runs_on_the_context_and_keeps_its_centre_at_native_resolution() -> None:
    seen = []

    def model(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape[-2:]))
        return x[:, :1]

    ctx = torch.zeros(1, 3, 64, 64)
    ctx[..., 16:48, 16:48] = 1.0  # the tile's footprint: the centre half of its 2x field of view
    out = scale_logits(model, torch.full((1, 3, 64, 64), 5.0), 0.5, ["id"], "fp32", ctx)
    assert seen == [(64, 64)] and out["id"].shape == (1, 64, 64)  # a tile-sized pass over the context
    assert torch.allclose(out["id"][:, 2:-2, 2:-2], torch.ones(1, 60, 60))  # the centre, not the surroundings
    with pytest.raises(ContextError, match="needs the tile's context"):
        scale_logits(model, torch.ones(1, 3, 64, 64), 0.5, ["id"], "fp32")
