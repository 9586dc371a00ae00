"""Learning rates per epoch: frozen phase, linear warmup, cosine to min_lr (guide §9.1)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rtscore.config.pipeline import LRScheduleConfig


@dataclass(frozen=True)
class EpochLR:
    """Learning rates of one epoch; ``encoder`` is 0 while the backbone is frozen."""

    decoder: float
    encoder: float
    frozen: bool
    phase: str


def cosine_t_max(cfg: LRScheduleConfig, max_epochs: int) -> int:
    return max_epochs - cfg.freeze_backbone_epochs - cfg.warmup_epochs


def lr_at(epoch: int, cfg: LRScheduleConfig, max_epochs: int) -> EpochLR:
    """LRs for a 1-based epoch.

    Epochs 1..F: frozen backbone, decoder at ``frozen_lr``. Epochs F+1..F+W: linear warmup from
    ``warmup_start_lr`` (at F+1) towards ``base_lr``. Then cosine from ``base_lr`` (at F+W+1) to ``min_lr``
    with T_max = max_epochs - F - W. The encoder runs at ``backbone_lr_multiplier`` x the decoder LR.
    """
    f, w = cfg.freeze_backbone_epochs, cfg.warmup_epochs
    if epoch <= f:
        return EpochLR(cfg.frozen_lr, 0.0, True, "frozen")
    if epoch <= f + w:
        i = epoch - f - 1
        lr = cfg.warmup_start_lr + (cfg.base_lr - cfg.warmup_start_lr) * i / w
        return EpochLR(lr, lr * cfg.backbone_lr_multiplier, False, "warmup")
    t_max = cosine_t_max(cfg, max_epochs)
    t = min(epoch - f - w - 1, t_max)
    lr = cfg.min_lr + (cfg.base_lr - cfg.min_lr) * (1 + math.cos(math.pi * t / t_max)) / 2
    return EpochLR(lr, lr * cfg.backbone_lr_multiplier, False, "cosine")
