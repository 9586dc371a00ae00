"""Class-balanced binary cross-entropy over logits (guide §5.4)."""

from __future__ import annotations

from torch import Tensor, nn

from rtscore.data.tiles import ClassPixelCounts
from rtscore.losses._functional import (
    ClassWeighting,
    check_range,
    class_balanced_bce_loss,
    class_balanced_pos_weight,
)

_WEIGHTINGS = ("linear", "sqrt", "log")


class ClassBalancedBCELoss(nn.Module):
    """BCE whose positive (RTS) terms carry a fixed weight, mean over valid pixels.

    The weight is a property of the dataset, not of the batch: build it with :meth:`from_counts` from the
    train split's background/RTS pixel counts, ``f(n_bg / n_rts)`` with f the guide's linear, sqrt or log
    (floored at 1, see ``class_balanced_pos_weight``). A per-batch estimate would follow the sampling
    curriculum (1:1 batches early, 1:20 later) instead of the data's class frequencies, and change from batch
    to batch.

    Args:
        pos_weight: Positive-class weight > 0.
    """

    def __init__(self, pos_weight: float) -> None:
        super().__init__()
        self.pos_weight = check_range("pos_weight", pos_weight, 0.0, low_open=True)

    @classmethod
    def from_counts(cls, counts: ClassPixelCounts, weighting: ClassWeighting = "sqrt") -> ClassBalancedBCELoss:
        """The loss with the weight of the dataset's background/RTS pixel counts."""
        if weighting not in _WEIGHTINGS:
            raise ValueError(f"weighting must be one of {_WEIGHTINGS}; got {weighting!r}")
        if counts.background < 0 or counts.rts < 0:
            raise ValueError(f"pixel counts must be >= 0; got {counts}")
        return cls(float(class_balanced_pos_weight(counts.background, counts.rts, weighting)))

    def forward(self, logits: Tensor, target: Tensor, soft_target: Tensor | None = None) -> Tensor:
        """Scalar loss from logits (B,1,H,W)/(B,H,W) and labels (B,H,W) in {0, 1, 255}."""
        return class_balanced_bce_loss(logits, target, soft_target, pos_weight=self.pos_weight)

    def extra_repr(self) -> str:
        return f"pos_weight={self.pos_weight}"
