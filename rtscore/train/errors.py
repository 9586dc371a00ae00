"""The training error (light: importing it imports nothing but the error base)."""

from __future__ import annotations

from rtscore.errors import PipelineError


class TrainingError(PipelineError):
    """Training cannot start or cannot go on (bad setup, non-finite loss, incompatible resume)."""
