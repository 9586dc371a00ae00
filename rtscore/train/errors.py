"""The training error (light: the runtime raises it too, for a device or precision the run cannot use)."""

from __future__ import annotations

from rtscore.errors import PipelineError


class TrainingError(PipelineError):
    """Training cannot start or cannot go on (bad setup, non-finite loss, incompatible resume)."""
