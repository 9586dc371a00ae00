"""Loss kernels and modules against hand-computed values, ignore-index and stability checks."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import ndimage
from torch import Tensor, nn

from rtscore.config.pipeline import LossConfig
from rtscore.data.tiles import ClassPixelCounts
from rtscore.losses import (
    BCELoss,
    ClassBalancedBCELoss,
    CompoundLoss,
    DiceLoss,
    FocalLoss,
    TverskyLoss,
    boundary_band,
    build_loss,
    loss_soft_targets,
    soft_boundary_targets,
    uses_soft_targets,
)
from rtscore.losses._functional import class_balanced_pos_weight, focal_terms

LN3 = math.log(3.0)

ALL_LOSSES: dict[str, Callable[[], nn.Module]] = {
    "focal": FocalLoss,
    "focal_g0": lambda: FocalLoss(gamma=0.0, alpha=0.5),
    "bce": BCELoss,
    "dice": DiceLoss,
    "tversky": TverskyLoss,
    "compound": CompoundLoss,
    "class_balanced": lambda: ClassBalancedBCELoss.from_counts(ClassPixelCounts(background=900, rts=100)),
    "class_balanced_fixed": lambda: ClassBalancedBCELoss(pos_weight=4.0),
}


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def t64(values: list) -> Tensor:
    return torch.tensor(values, dtype=torch.float64)


def labels(values: list) -> Tensor:
    return torch.tensor(values, dtype=torch.int64)


def random_batch(seed: int = 0, size: int = 6) -> tuple[Tensor, Tensor]:
    """Logits (2,1,s,s) and labels (2,s,s) with both classes and a block of 255."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 1, size, size, generator=g) * 3
    target = torch.randint(0, 2, (2, size, size), generator=g)
    target[0, :2, :3] = 255
    target[1, -1] = 255
    return logits, target


# --------------------------------------------------------------------------- focal
def test_focal_hand_values() -> None:
    # pixel a: x = 2, t = 1 -> p = sigma(2) = 0.880797, p_t = p, alpha_t = 0.25
    #   FL = 0.25 * (1 - 0.880797)^2 * -log(0.880797) = 0.25 * 0.119203^2 * 0.126928 = 4.50891e-4
    # pixel b: x = 0.5, t = 0 -> p = sigma(0.5) = 0.622459, p_t = 1 - p = 0.377541, alpha_t = 0.75
    #   FL = 0.75 * 0.622459^2 * -log(0.377541) = 0.75 * 0.387455 * 0.974077 = 0.283059
    # pixel c: 255 -> no contribution; mean over the two valid pixels
    p_a, p_b = sigmoid(2.0), sigmoid(0.5)
    fl_a = 0.25 * (1 - p_a) ** 2 * -math.log(p_a)
    fl_b = 0.75 * p_b**2 * -math.log(1 - p_b)
    assert fl_a == pytest.approx(4.50891e-4, rel=1e-5)
    assert fl_b == pytest.approx(0.283059, rel=1e-5)
    loss = FocalLoss(gamma=2.0, alpha=0.25)(t64([[[2.0, 0.5, 9.0]]]), labels([[[1, 0, 255]]]))
    assert loss.item() == pytest.approx((fl_a + fl_b) / 2, rel=1e-12)


def test_focal_gamma_3_alpha_075() -> None:
    # x = -1, t = 1 -> p = sigma(-1) = 0.268941, FL = 0.75 * (0.731059)^3 * -log(0.268941) = 0.385...
    p = sigmoid(-1.0)
    expected = 0.75 * (1 - p) ** 3 * -math.log(p)
    loss = FocalLoss(gamma=3.0, alpha=0.75)(t64([[[-1.0]]]), labels([[[1]]]))
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_focal_gamma0_alpha_half_is_half_bce() -> None:
    logits, target = random_batch()
    focal = FocalLoss(gamma=0.0, alpha=0.5)(logits, target)
    assert focal.item() == pytest.approx(0.5 * BCELoss()(logits, target).item(), rel=1e-6)


def test_focal_soft_target_hand_value() -> None:
    # x = 1, t = 0.9 -> p = 0.731059; p_t = 0.9p + 0.1(1-p) = 0.684847; alpha_t = 0.25*0.9 + 0.75*0.1 = 0.3
    # BCE = -(0.9 log p + 0.1 log(1-p)) = 0.413262; FL = 0.3 * (1 - 0.684847)^2 * 0.413262 = 0.0123137
    loss = FocalLoss(gamma=2.0, alpha=0.25)(t64([[[1.0]]]), labels([[[1]]]), soft_target=t64([[[0.9]]]))
    assert loss.item() == pytest.approx(0.0123137, rel=1e-5)


def test_focal_soft_target_gradcheck() -> None:
    x = torch.tensor([-3.0, -0.2, 0.4, 2.5, 1.0], dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0.0, 0.05, 0.5, 0.95, 1.0], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda v: focal_terms(v, t, 2.0, 0.25), (x,))


# --------------------------------------------------------------------------- bce
def test_bce_matches_torch_on_valid_pixels() -> None:
    logits, target = random_batch()
    valid = target != 255
    expected = F.binary_cross_entropy_with_logits(logits[:, 0][valid], target[valid].float())
    assert BCELoss()(logits, target).item() == pytest.approx(expected.item(), rel=1e-6)


def test_bce_soft_targets_match_torch() -> None:
    logits, target = random_batch(seed=1)
    soft = torch.rand(target.shape, generator=torch.Generator().manual_seed(5))
    valid = target != 255
    expected = F.binary_cross_entropy_with_logits(logits[:, 0][valid], soft[valid])
    assert BCELoss()(logits, target, soft).item() == pytest.approx(expected.item(), rel=1e-6)


# --------------------------------------------------------------------------- dice / tversky
# 2x2 example: logits [[ln 3, 0], [-ln 3, 5]] -> p = [[0.75, 0.5], [0.25, .]]; target [[1, 0], [1, 255]]
# valid: p = 0.75, 0.5, 0.25; t = 1, 0, 1
# TP = Σpt = 0.75 + 0.25 = 1.0; Σp = 1.5; Σt = 2; FN = Σ(1-p)t = 0.25 + 0.75 = 1.0; FP = Σp(1-t) = 0.5
LOGITS_2X2 = [[[LN3, 0.0], [-LN3, 5.0]]]
TARGET_2X2 = [[[1, 0], [1, 255]]]


def test_dice_hand_values() -> None:
    x, t = t64(LOGITS_2X2), labels(TARGET_2X2)
    # s = 1: 1 - (2*1 + 1)/(1.5 + 2 + 1) = 1 - 3/4.5 = 1/3
    assert DiceLoss()(x, t).item() == pytest.approx(1 / 3, rel=1e-12)
    # s = 0: 1 - 2/3.5 = 3/7
    assert DiceLoss(smooth=0.0)(x, t).item() == pytest.approx(3 / 7, rel=1e-12)


def test_tversky_hand_values() -> None:
    x, t = t64(LOGITS_2X2), labels(TARGET_2X2)
    # alpha 0.3 (FN), beta 0.7 (FP), s = 1: 1 - (1 + 1)/(1 + 0.3*1 + 0.7*0.5 + 1) = 1 - 2/2.65 = 0.245283
    assert TverskyLoss(0.3, 0.7)(x, t).item() == pytest.approx(1 - 2 / 2.65, rel=1e-12)
    # s = 0: 1 - 1/1.65 = 0.393939
    assert TverskyLoss(0.3, 0.7, smooth=0.0)(x, t).item() == pytest.approx(1 - 1 / 1.65, rel=1e-12)
    # alpha weighs FN: swapping gives 1 - 1/(1 + 0.7*1 + 0.3*0.5) = 1 - 1/1.85
    assert TverskyLoss(0.7, 0.3, smooth=0.0)(x, t).item() == pytest.approx(1 - 1 / 1.85, rel=1e-12)


def test_tversky_half_half_equals_dice() -> None:
    # (TP + s)/(TP + FN/2 + FP/2 + s) = (2TP + 2s)/(Σp + Σt + 2s): Dice with smoothing 2s
    logits, target = random_batch(seed=2)
    assert TverskyLoss(0.5, 0.5, smooth=0.0)(logits, target).item() == pytest.approx(
        DiceLoss(smooth=0.0)(logits, target).item(), rel=1e-6
    )
    assert TverskyLoss(0.5, 0.5, smooth=1.0)(logits, target).item() == pytest.approx(
        DiceLoss(smooth=2.0)(logits, target).item(), rel=1e-6
    )


def test_dice_is_micro_over_the_batch() -> None:
    # sample 0 all-negative, sample 1 the 2x2 example: one region, so sums add (no per-sample mean)
    x = torch.cat([t64([[[-LN3, -LN3], [0.0, 0.0]]]), t64(LOGITS_2X2)])
    t = torch.cat([labels([[[0, 0], [0, 0]]]), labels(TARGET_2X2)])
    # Σp gains 0.25 + 0.25 + 0.5 + 0.5 = 1.5 -> 3.0; TP 1.0, Σt 2: 1 - 3/(3 + 2 + 1) = 0.5
    assert DiceLoss()(x, t).item() == pytest.approx(0.5, rel=1e-12)


# --------------------------------------------------------------------------- compound
def test_compound_is_weighted_sum() -> None:
    logits, target = random_batch(seed=3)
    focal = FocalLoss(gamma=2.0, alpha=0.25)(logits, target)
    dice = DiceLoss()(logits, target)
    loss = CompoundLoss(focal_weight=2.0, dice_weight=0.5)(logits, target)
    assert loss.item() == pytest.approx(2.0 * focal.item() + 0.5 * dice.item(), rel=1e-6)


def test_compound_rejects_zero_weights() -> None:
    with pytest.raises(ValueError, match="both 0"):
        CompoundLoss(focal_weight=0.0, dice_weight=0.0)


# --------------------------------------------------------------------------- class-balanced
@pytest.mark.parametrize(
    ("weighting", "expected"),
    [("linear", 9.0), ("sqrt", 3.0), ("log", math.log(9.0))],  # n_bg 900, n_rts 100 -> ratio 9; ln 9 = 2.197
)
def test_class_balanced_weights(weighting: str, expected: float) -> None:
    assert class_balanced_pos_weight(900, 100, weighting).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("weighting", ["linear", "sqrt", "log"])
def test_class_balanced_weight_guards(weighting: str) -> None:
    assert class_balanced_pos_weight(100, 200, weighting).item() == 1.0  # ratio 0.5 <= 1
    assert class_balanced_pos_weight(100, 0, weighting).item() == 1.0  # no positives
    assert class_balanced_pos_weight(0, 0, weighting).item() == 1.0  # nothing valid
    # ratio 2: log 2 = 0.693 is floored at 1; sqrt 2 = 1.414 and linear 2 pass
    expected = {"linear": 2.0, "sqrt": math.sqrt(2.0), "log": 1.0}[weighting]
    assert class_balanced_pos_weight(200, 100, weighting).item() == pytest.approx(expected)


def test_class_balanced_loss_uses_the_dataset_weight() -> None:
    # logits 0 -> every BCE term is ln 2; 1 positive, 3 negatives valid (255 ignored). Dataset 1600:100 -> sqrt 4:
    # loss = ln 2 * (4 + 3) / 4, whatever this batch's own ratio (3) would give.
    x, t = t64([[[0.0, 0.0, 0.0], [0.0, 0.0, 7.0]]]), labels([[[1, 0, 0], [0, 255, 255]]])
    loss_fn = ClassBalancedBCELoss.from_counts(ClassPixelCounts(background=1600, rts=100), "sqrt")
    assert loss_fn.pos_weight == pytest.approx(4.0)
    loss = loss_fn(x, t)
    assert loss.item() == pytest.approx(math.log(2) * (4 + 3) / 4, rel=1e-12)
    expected = F.binary_cross_entropy_with_logits(
        x[t != 255], t[t != 255].double(), pos_weight=torch.tensor(4.0, dtype=torch.float64)
    )
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)


def test_class_balanced_weight_is_a_property_of_the_dataset_not_the_batch() -> None:
    """Guide §5.4 weights by class frequency: two batches of different composition (a 1:1 curriculum batch, a
    1:20 one) get the same weight, the one of the counts the loss was built with."""
    cfg = LossConfig(name="class_balanced_ce", class_weighting="linear")
    loss_fn = build_loss(cfg, ClassPixelCounts(background=999_000, rts=1_000))
    x = torch.zeros(1, 1, 2, 21, dtype=torch.float64)
    for n_pos in (21, 1):  # 21 of 42 pixels positive, then 1 of 42
        t = torch.zeros(1, 2, 21, dtype=torch.int64)
        t.view(-1)[:n_pos] = 1
        expected = math.log(2) * (999.0 * n_pos + (42 - n_pos)) / 42
        assert loss_fn(x, t).item() == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="pixel counts"):
        build_loss(cfg)


def test_class_balanced_fixed_weight() -> None:
    x, t = t64([[[0.0, 0.0, 0.0, 0.0]]]), labels([[[1, 0, 0, 0]]])
    # pos_weight 5: ln 2 * (5 + 3) / 4 = 2 ln 2
    assert ClassBalancedBCELoss(pos_weight=5.0)(x, t).item() == pytest.approx(2 * math.log(2), rel=1e-12)


def test_class_balanced_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="weighting"):
        ClassBalancedBCELoss.from_counts(ClassPixelCounts(1, 1), "cubic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pos_weight"):
        ClassBalancedBCELoss(pos_weight=0.0)
    with pytest.raises(ValueError, match="counts"):
        ClassBalancedBCELoss.from_counts(ClassPixelCounts(-1, 1))


# --------------------------------------------------------------------------- contract shared by every loss
@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_ignored_pixels_change_neither_loss_nor_gradient(name: str) -> None:
    loss_fn = ALL_LOSSES[name]()
    logits, target = random_batch(seed=4)
    ignored = (target == 255)[:, None]
    other = torch.where(ignored, torch.full_like(logits, -1e4), logits)
    a, b = logits.clone().requires_grad_(), other.clone().requires_grad_()
    loss_a, loss_b = loss_fn(a, target), loss_fn(b, target)
    loss_a.backward()
    loss_b.backward()
    assert torch.equal(loss_a, loss_b)
    assert torch.equal(a.grad, b.grad)
    assert torch.all(a.grad[ignored] == 0)
    assert a.grad[~ignored].abs().sum() > 0


@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_all_ignore_batch_is_zero_with_finite_grad(name: str) -> None:
    logits = torch.randn(2, 1, 3, 3, requires_grad=True)
    loss = ALL_LOSSES[name]()(logits, torch.full((2, 3, 3), 255))
    loss.backward()
    assert loss.item() == 0.0
    assert logits.grad is not None
    assert torch.all(logits.grad == 0)


@pytest.mark.parametrize("name", list(ALL_LOSSES))
@pytest.mark.parametrize("soft", [False, True])
def test_extreme_logits_are_stable(name: str, soft: bool) -> None:
    values = [-1e4, -100.0, 100.0, 1e4]
    logits = torch.tensor(values * 2, dtype=torch.float32).reshape(1, 1, 2, 4).requires_grad_()
    target = labels([[[0, 0, 0, 0], [1, 1, 1, 1]]])
    soft_target = torch.tensor([[[0.0, 0.05, 0.5, 0.0], [1.0, 0.95, 0.5, 1.0]]]) if soft else None
    loss = ALL_LOSSES[name]()(logits, target, soft_target)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_soft_value_zero_reproduces_hard_targets(name: str) -> None:
    loss_fn = ALL_LOSSES[name]()
    logits, target = random_batch(seed=6)
    soft = soft_boundary_targets(target, width=2, soft_value=0.0)
    valid = target != 255
    assert torch.equal(soft[valid], target[valid].float())
    assert loss_fn(logits, target, soft).item() == pytest.approx(loss_fn(logits, target).item(), rel=1e-6)


@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_channel_axis_is_optional(name: str) -> None:
    loss_fn = ALL_LOSSES[name]()
    logits, target = random_batch(seed=7)
    assert torch.equal(loss_fn(logits, target), loss_fn(logits[:, 0], target))
    assert torch.equal(loss_fn(logits[:1], target[:1]), loss_fn(logits[:1, 0], target[:1]))


def test_bad_shapes_and_dtypes_are_rejected() -> None:
    logits, target = random_batch()
    with pytest.raises(ValueError, match="one class"):
        FocalLoss()(logits.expand(2, 2, 6, 6), target)
    with pytest.raises(ValueError, match="do not match"):
        FocalLoss()(logits[:, :, :5], target)
    with pytest.raises(ValueError, match="integer labels"):
        FocalLoss()(logits, target.float())
    with pytest.raises(ValueError, match="soft_target"):
        FocalLoss()(logits, target, torch.zeros(2, 5, 6))


def test_module_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]; got 1.5"):
        FocalLoss(alpha=1.5)
    with pytest.raises(ValueError, match="gamma"):
        FocalLoss(gamma=-1.0)
    with pytest.raises(ValueError, match="smooth"):
        DiceLoss(smooth=-1.0)


# --------------------------------------------------------------------------- boundary
def test_soft_boundary_targets_hand_row() -> None:
    # [0 0 1 1], width 1: the two pixels either side of the edge soften -> [0, s, 1 - s, 1]
    soft = soft_boundary_targets(labels([[0, 0, 1, 1]]), width=1, soft_value=0.05)
    assert torch.allclose(soft, torch.tensor([[0.0, 0.05, 0.95, 1.0]]))
    # 255 is no class: [1 255 0] has no boundary within 1 px; within 2 px both ends soften; 255 stays 0
    row = labels([[1, 255, 0]])
    assert torch.equal(soft_boundary_targets(row, width=1, soft_value=0.1), torch.tensor([[1.0, 0.0, 0.0]]))
    assert torch.allclose(soft_boundary_targets(row, width=2, soft_value=0.1), torch.tensor([[0.9, 0.0, 0.1]]))


def scipy_band(target: np.ndarray, width: int) -> np.ndarray:
    """Reference band of one (H,W) label with scipy: each class dilated by a (2w+1)^2 square."""
    fg, bg = target == 1, target == 0
    if width == 0:
        return np.zeros_like(fg)
    square = np.ones((2 * width + 1, 2 * width + 1), dtype=bool)
    near_fg = ndimage.binary_dilation(fg, structure=square)
    near_bg = ndimage.binary_dilation(bg, structure=square)
    return (fg & near_bg) | (bg & near_fg)


@pytest.mark.parametrize("width", [0, 1, 2, 3, 6])
def test_boundary_band_matches_scipy(width: int) -> None:
    rng = np.random.default_rng(width)
    target = np.zeros((2, 9, 11), dtype=np.int64)
    target[0, 2:6, 3:8] = 1
    target[1] = rng.integers(0, 2, (9, 11))
    target[:, 0, :4] = 255
    band = boundary_band(torch.from_numpy(target), width).numpy()
    for b in range(2):
        assert np.array_equal(band[b], scipy_band(target[b], width))
    assert np.array_equal(boundary_band(torch.from_numpy(target[0]), width).numpy(), scipy_band(target[0], width))


def test_soft_boundary_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="soft_value"):
        soft_boundary_targets(labels([[0, 1]]), width=1, soft_value=0.5)
    with pytest.raises(ValueError, match="width"):
        soft_boundary_targets(labels([[0, 1]]), width=-1, soft_value=0.1)


# --------------------------------------------------------------------------- factory
@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("focal", FocalLoss),
        ("bce", BCELoss),
        ("dice", DiceLoss),
        ("tversky", TverskyLoss),
        ("compound", CompoundLoss),
        ("class_balanced_ce", ClassBalancedBCELoss),
    ],
)
def test_build_loss_builds_each_name(name: str, cls: type[nn.Module]) -> None:
    loss_fn = build_loss(LossConfig(name=name), ClassPixelCounts(background=900, rts=100))  # type: ignore[arg-type]
    assert type(loss_fn) is cls
    logits, target = random_batch()
    assert torch.isfinite(loss_fn(logits, target))


def test_build_loss_passes_config_values() -> None:
    cfg = LossConfig(
        name="compound", focal_gamma=3.0, focal_alpha=0.5, compound_focal_weight=2.0, compound_dice_weight=0.5
    )
    loss_fn = build_loss(cfg)
    assert isinstance(loss_fn, CompoundLoss)
    assert (loss_fn.focal_weight, loss_fn.dice_weight) == (2.0, 0.5)
    assert (loss_fn.focal.gamma, loss_fn.focal.alpha) == (3.0, 0.5)
    tversky = build_loss(LossConfig(name="tversky", tversky_alpha=0.7, tversky_beta=0.3))
    assert isinstance(tversky, TverskyLoss)
    assert (tversky.alpha, tversky.beta) == (0.7, 0.3)
    cb = build_loss(LossConfig(name="class_balanced_ce", class_weighting="log"), ClassPixelCounts(900, 100))
    assert isinstance(cb, ClassBalancedBCELoss)
    assert cb.pos_weight == pytest.approx(math.log(9.0))


def test_build_loss_rejects_unknown_name_and_bad_ranges() -> None:
    with pytest.raises(ValueError, match="loss.name .* got 'hinge'"):
        build_loss(LossConfig.model_construct(name="hinge"))
    with pytest.raises(ValueError, match=r"loss.tversky_alpha must be in \(0, 1\); got 1.3"):
        build_loss(LossConfig.model_construct(name="tversky", tversky_alpha=1.3))
    with pytest.raises(ValueError, match="compound_focal_weight and loss.compound_dice_weight"):
        build_loss(LossConfig.model_construct(name="compound", compound_focal_weight=0.0, compound_dice_weight=0.0))


def test_soft_target_switch() -> None:
    target = labels([[[0, 0, 1, 1]]])
    assert not uses_soft_targets(LossConfig(boundary_handling="ignore"))
    assert loss_soft_targets(LossConfig(), target) is None
    cfg = LossConfig(name="dice", boundary_handling="soft_labels", boundary_ignore_width=1, soft_label_value=0.05)
    assert uses_soft_targets(cfg)
    soft = loss_soft_targets(cfg, target)
    assert soft is not None
    assert torch.allclose(soft, torch.tensor([[[0.0, 0.05, 0.95, 1.0]]]))
