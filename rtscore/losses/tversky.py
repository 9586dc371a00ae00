"""Tversky loss over logits (guide §5.2)."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.losses._functional import check_range, tversky_loss


class TverskyLoss(nn.Module):
    """Tversky ``1 - (TP + s)/(TP + alpha·FN + beta·FP + s)`` with soft counts from sigmoid probabilities.

    ``TP = Σpt``, ``FN = Σ(1-p)t``, ``FP = Σp(1-t)`` over every valid pixel of the batch as one region.
    ``beta > alpha`` penalises false positives more (precision-focused). ``alpha = beta = 0.5`` is Dice with
    smoothing ``2s``. Soft targets are used as fractional memberships, as in ``DiceLoss``.

    Args:
        alpha: Weight on false negatives, >= 0.
        beta: Weight on false positives, >= 0.
        smooth: Additive smoothing ``s``, >= 0 (default 1.0).
    """

    def __init__(self, alpha: float = 0.3, beta: float = 0.7, smooth: float = 1.0) -> None:
        super().__init__()
        self.alpha = check_range("alpha", alpha, 0.0)
        self.beta = check_range("beta", beta, 0.0)
        self.smooth = check_range("smooth", smooth, 0.0)

    def forward(self, logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> Tensor:
        """Scalar loss from logits (B,1,H,W)/(B,H,W) and labels (B,H,W) in {0, 1, 255}."""
        return tversky_loss(logits, target, soft_target, alpha=self.alpha, beta=self.beta, smooth=self.smooth)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}, smooth={self.smooth}"
