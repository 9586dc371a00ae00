"""Compound loss: weighted focal plus Dice (guide §5.3)."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.losses._functional import check_range
from rtscore.losses.dice import DiceLoss
from rtscore.losses.focal import FocalLoss


class CompoundLoss(nn.Module):
    """``focal_weight · Focal + dice_weight · Dice``: pixel-level calibration plus region overlap.

    Args:
        focal_weight: lambda_1, >= 0.
        dice_weight: lambda_2, >= 0.
        gamma: Focal gamma.
        alpha: Focal alpha.
        smooth: Dice smoothing.
    """

    def __init__(
        self,
        focal_weight: float = 1.0,
        dice_weight: float = 1.0,
        gamma: float = 2.0,
        alpha: float = 0.25,
        smooth: float = 1.0,
    ) -> None:
        super().__init__()
        self.focal_weight = check_range("focal_weight", focal_weight, 0.0)
        self.dice_weight = check_range("dice_weight", dice_weight, 0.0)
        if self.focal_weight == 0.0 and self.dice_weight == 0.0:
            raise ValueError("focal_weight and dice_weight are both 0: the loss would be constant")
        self.focal = FocalLoss(gamma=gamma, alpha=alpha)
        self.dice = DiceLoss(smooth=smooth)

    def forward(self, logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> Tensor:
        """Scalar loss from logits (B,1,H,W)/(B,H,W) and labels (B,H,W) in {0, 1, 255}."""
        focal = self.focal(logits, target, soft_target)
        dice = self.dice(logits, target, soft_target)
        return self.focal_weight * focal + self.dice_weight * dice

    def extra_repr(self) -> str:
        return f"focal_weight={self.focal_weight}, dice_weight={self.dice_weight}"
