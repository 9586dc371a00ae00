"""Exponential moving average of the full state_dict, swapped in for validation (guide §9.1)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class EMA:
    """EMA of parameters and float buffers; integer buffers (num_batches_tracked) are copied.

    The shadow tensors are detached copies, never handed to the optimizer and never part of a graph.
    """

    def __init__(self, model: torch.nn.Module, decay: float, warmup: bool = False) -> None:
        self.decay = decay
        self.warmup = warmup
        self.updates = 0
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def current_decay(self) -> float:
        """The decay of the next update: ramped up from 0.1 when ``warmup`` (timm's ModelEma recipe)."""
        if not self.warmup:
            return self.decay
        return min(self.decay, (1.0 + self.updates) / (10.0 + self.updates))

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        d = self.current_decay()
        shadow_f, live_f = [], []
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                shadow_f.append(self.shadow[k])
                live_f.append(v.detach())
            else:
                self.shadow[k].copy_(v)
        # One fused multi-tensor op (as timm's ModelEmaV3): shadow += (1 - d) * (live - shadow).
        torch._foreach_lerp_(shadow_f, live_f, 1.0 - d)
        self.updates += 1

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Shadow weights only (this is what best_deployment.pth holds); see ``resume_state`` for the counter."""
        return {k: v.clone() for k, v in self.shadow.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor], updates: int | None = None) -> None:
        missing = set(self.shadow) ^ set(state)
        if missing:
            raise KeyError(f"EMA state does not match the model: {sorted(missing)[:5]}")
        for k, v in state.items():
            self.shadow[k].copy_(v)
        if updates is not None:
            self.updates = updates

    @contextlib.contextmanager
    def swapped_in(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        """Load the EMA weights (BatchNorm buffers included) and restore the live state byte-identically."""
        live = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(self.shadow)
        try:
            yield model
        finally:
            model.load_state_dict(live)
