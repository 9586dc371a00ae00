"""Binary cross-entropy over logits."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.losses._functional import bce_loss


class BCELoss(nn.Module):
    """BCE with logits, mean over valid pixels; soft targets replace 0/1 at valid pixels when given."""

    def forward(self, logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> Tensor:
        """Scalar loss from logits (B,1,H,W)/(B,H,W) and labels (B,H,W) in {0, 1, 255}."""
        return bce_loss(logits, target, soft_target)
