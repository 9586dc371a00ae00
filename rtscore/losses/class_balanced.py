"""Class-balanced binary cross-entropy over logits (guide §5.4)."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.losses._functional import (
    ClassWeighting,
    check_range,
    class_balanced_bce_loss,
    class_balanced_pos_weight,
)

_WEIGHTINGS = ("linear", "sqrt", "log")


class ClassBalancedBCELoss(nn.Module):
    """BCE whose positive (RTS) terms are weighted by ``f(n_bg / n_rts)``, mean over valid pixels.

    By default the counts are this batch's valid hard labels, so the weight follows the sampling curriculum;
    ``pos_weight`` (or ``from_counts`` with dataset-level counts) fixes it instead. The weight is floored at 1
    and is 1 for a batch without positives (see ``class_balanced_pos_weight``).

    Args:
        weighting: ``linear`` (ratio), ``sqrt`` (sqrt of ratio) or ``log`` (log of ratio).
        pos_weight: Fixed positive-class weight > 0 overriding the per-batch estimate.
    """

    def __init__(self, weighting: ClassWeighting = "sqrt", pos_weight: float | None = None) -> None:
        super().__init__()
        if weighting not in _WEIGHTINGS:
            raise ValueError(f"weighting must be one of {_WEIGHTINGS}; got {weighting!r}")
        self.weighting: ClassWeighting = weighting
        self.pos_weight = None if pos_weight is None else check_range("pos_weight", pos_weight, 0.0, low_open=True)

    @classmethod
    def from_counts(cls, n_bg: float, n_rts: float, weighting: ClassWeighting = "sqrt") -> ClassBalancedBCELoss:
        """A loss with the weight fixed from dataset-level background/RTS pixel counts."""
        if n_bg < 0 or n_rts < 0:
            raise ValueError(f"pixel counts must be >= 0; got n_bg={n_bg}, n_rts={n_rts}")
        return cls(weighting, pos_weight=float(class_balanced_pos_weight(n_bg, n_rts, weighting)))

    def forward(self, logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> Tensor:
        """Scalar loss from logits (B,1,H,W)/(B,H,W) and labels (B,H,W) in {0, 1, 255}."""
        return class_balanced_bce_loss(
            logits, target, soft_target, weighting=self.weighting, pos_weight=self.pos_weight
        )

    def extra_repr(self) -> str:
        return f"weighting={self.weighting!r}, pos_weight={self.pos_weight}"
