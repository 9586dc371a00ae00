"""The model-building error, shared by the factory, the DPT builder and the pretrained-weights lookup (light:
importing it imports nothing but the error base)."""

from __future__ import annotations

from rtscore.errors import PipelineError


class ModelConfigError(PipelineError, ValueError):
    """The model cannot be built as configured (unknown backbone, weights unavailable, ...)."""
