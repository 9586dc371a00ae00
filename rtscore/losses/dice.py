"""Soft Dice loss over logits (the region half of the compound loss, guide §5.3)."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.losses._functional import check_range, dice_loss


class DiceLoss(nn.Module):
    """Soft Dice ``1 - (2Σpt + s)/(Σp + Σt + s)`` on sigmoid probabilities.

    The sums run over every valid pixel of the batch as one region ("micro"), so a batch of negative tiles
    still gives a defined loss; ``smooth`` keeps it so (with ``smooth = 0`` an all-negative batch scores 1).
    Soft targets enter ``Σt`` and ``Σpt`` as fractional memberships, so the minimum is then above 0.

    Args:
        smooth: Additive smoothing ``s`` in numerator and denominator, >= 0 (default 1.0: negligible against
            the pixel counts of a real batch).
    """

    def __init__(self, smooth: float = 1.0) -> None:
        super().__init__()
        self.smooth = check_range("smooth", smooth, 0.0)

    def forward(self, logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> Tensor:
        """Scalar loss from logits (B,1,H,W)/(B,H,W) and labels (B,H,W) in {0, 1, 255}."""
        return dice_loss(logits, target, soft_target, smooth=self.smooth)

    def extra_repr(self) -> str:
        return f"smooth={self.smooth}"
