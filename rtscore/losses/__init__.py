"""Segmentation losses over logits with ignore index 255, and the config factory ``build_loss``."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.config.pipeline import LossConfig
from rtscore.data.tiles import ClassPixelCounts
from rtscore.losses._functional import check_range, global_batch
from rtscore.losses.bce import BCELoss
from rtscore.losses.boundary import boundary_band, soft_boundary_targets
from rtscore.losses.class_balanced import ClassBalancedBCELoss
from rtscore.losses.compound import CompoundLoss
from rtscore.losses.dice import DiceLoss
from rtscore.losses.focal import FocalLoss
from rtscore.losses.tversky import TverskyLoss

__all__ = [
    "BCELoss",
    "ClassBalancedBCELoss",
    "CompoundLoss",
    "DiceLoss",
    "FocalLoss",
    "TverskyLoss",
    "boundary_band",
    "build_loss",
    "global_batch",
    "loss_soft_targets",
    "soft_boundary_targets",
    "uses_soft_targets",
]


def _check_config(cfg: LossConfig) -> None:
    """Re-check the ranges the config declares, for configs built without validation (``model_construct``)."""
    check_range("loss.focal_gamma", cfg.focal_gamma, 0.0, 10.0)
    check_range("loss.focal_alpha", cfg.focal_alpha, 0.0, 1.0, low_open=True, high_open=True)
    check_range("loss.tversky_alpha", cfg.tversky_alpha, 0.0, 1.0, low_open=True, high_open=True)
    check_range("loss.tversky_beta", cfg.tversky_beta, 0.0, 1.0, low_open=True, high_open=True)
    check_range("loss.compound_focal_weight", cfg.compound_focal_weight, 0.0)
    check_range("loss.compound_dice_weight", cfg.compound_dice_weight, 0.0)
    check_range("loss.boundary_ignore_width", cfg.boundary_ignore_width, 0.0, 64.0)
    check_range("loss.soft_label_value", cfg.soft_label_value, 0.0, 0.5, high_open=True)
    if cfg.name == "compound" and cfg.compound_focal_weight == 0.0 and cfg.compound_dice_weight == 0.0:
        raise ValueError("loss.compound_focal_weight and loss.compound_dice_weight are both 0; set at least one > 0")
    if cfg.class_weighting not in ("linear", "sqrt", "log"):
        raise ValueError(f"loss.class_weighting must be one of linear, sqrt, log; got {cfg.class_weighting!r}")
    if cfg.boundary_handling not in ("none", "ignore", "soft_labels"):
        raise ValueError(
            f"loss.boundary_handling must be one of none, ignore, soft_labels; got {cfg.boundary_handling!r}"
        )


def build_loss(cfg: LossConfig, pixel_counts: ClassPixelCounts | None = None) -> nn.Module:
    """The loss module named by ``cfg.name``; every module has ``forward(logits, target, soft_target=None)``.

    Dice and Tversky use the default smoothing 1.0 (the config has no field for it). Class-balanced CE takes
    its positive weight from ``pixel_counts``, the train split's background/RTS pixels (guide §5.4), which it
    requires; the other losses ignore them.
    """
    _check_config(cfg)
    match cfg.name:
        case "focal":
            return FocalLoss(gamma=cfg.focal_gamma, alpha=cfg.focal_alpha)
        case "bce":
            return BCELoss()
        case "dice":
            return DiceLoss()
        case "tversky":
            return TverskyLoss(alpha=cfg.tversky_alpha, beta=cfg.tversky_beta)
        case "compound":
            return CompoundLoss(
                focal_weight=cfg.compound_focal_weight,
                dice_weight=cfg.compound_dice_weight,
                gamma=cfg.focal_gamma,
                alpha=cfg.focal_alpha,
            )
        case "class_balanced_ce":
            if pixel_counts is None:
                raise ValueError(
                    "loss.name class_balanced_ce weighs positives by the train split's pixel counts: pass them "
                    "(rtscore.data.loading.sources.class_pixel_counts of the training dataset)"
                )
            return ClassBalancedBCELoss.from_counts(pixel_counts, cfg.class_weighting)
        case _:
            raise ValueError(
                f"loss.name must be one of focal, bce, dice, tversky, compound, class_balanced_ce; got {cfg.name!r}"
            )


def uses_soft_targets(cfg: LossConfig) -> bool:
    """True when the loss gets soft boundary targets (``boundary_handling: soft_labels``).

    Every loss accepts them: BCE, focal and class-balanced CE use them as soft BCE targets (class-balanced
    counts stay on the hard labels); Dice, Tversky and the Dice half of compound use them as fractional
    memberships in their soft TP/FN/FP sums.
    """
    return cfg.boundary_handling == "soft_labels"


def loss_soft_targets(cfg: LossConfig, target: Tensor) -> Tensor | None:
    """The ``soft_target`` argument for the configured loss: softened boundary targets, or None.

    The band width is ``loss.boundary_ignore_width`` and the soft value ``loss.soft_label_value``.
    """
    if not uses_soft_targets(cfg):
        return None
    return soft_boundary_targets(target, cfg.boundary_ignore_width, cfg.soft_label_value)
