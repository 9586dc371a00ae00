"""Early stopping on a smoothed validation metric, patience counted in validation events (guide §9.1, §10.2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rtscore.config.pipeline import EarlyStoppingConfig


@dataclass
class Decision:
    smoothed: float
    is_best: bool
    stop: bool
    bad_events: int


@dataclass
class EarlyStopping:
    """Moving average over ``smoothing_window`` validations; stopping only from ``start_epoch`` on.

    ``best`` (for the best checkpoint) is the highest smoothed value so far. Patience counts validation
    events at or after ``start_epoch`` whose smoothed value does not beat the reference by ``min_delta``.
    Settings always come from the config; only the history is restored on resume.
    """

    cfg: EarlyStoppingConfig
    history: list[float] = field(default_factory=list)
    best: float = float("-inf")
    reference: float = float("-inf")
    bad_events: int = 0

    def update(self, epoch: int, value: float) -> Decision:
        self.history.append(float(value))
        window = self.history[-self.cfg.smoothing_window :]
        smoothed = sum(window) / len(window)
        is_best = smoothed > self.best
        if is_best:
            self.best = smoothed
        if smoothed > self.reference + self.cfg.min_delta:
            self.reference = smoothed
            self.bad_events = 0
        elif epoch >= self.cfg.start_epoch:
            self.bad_events += 1
        stop = epoch >= self.cfg.start_epoch and self.bad_events >= self.cfg.patience
        return Decision(smoothed, is_best, stop, self.bad_events)

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history), "best": self.best, "reference": self.reference, "bad": self.bad_events}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [float(x) for x in state["history"]]
        self.best, self.reference = float(state["best"]), float(state["reference"])
        self.bad_events = int(state["bad"])
