"""Focal loss over logits (guide §5.1)."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.losses._functional import check_range, focal_loss


class FocalLoss(nn.Module):
    """Sigmoid focal loss ``-alpha_t (1 - p_t)^gamma log(p_t)``, mean over valid pixels.

    Soft targets use ``p_t = p·t + (1-p)(1-t)`` and ``alpha_t = alpha·t + (1-alpha)(1-t)`` (see ``focal_terms``).

    Args:
        gamma: Focusing exponent, >= 0 (0 turns focal into alpha-weighted BCE).
        alpha: Weight of the positive class in [0, 1]; negatives get ``1 - alpha``.
    """

    def __init__(self, gamma: float = 2.0, alpha: float = 0.25) -> None:
        super().__init__()
        self.gamma = check_range("gamma", gamma, 0.0)
        self.alpha = check_range("alpha", alpha, 0.0, 1.0)

    def forward(self, logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> Tensor:
        """Scalar loss from logits (B,1,H,W)/(B,H,W) and labels (B,H,W) in {0, 1, 255}."""
        return focal_loss(logits, target, soft_target, gamma=self.gamma, alpha=self.alpha)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, alpha={self.alpha}"
