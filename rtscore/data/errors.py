"""Errors of the data layer shared by several of its modules."""

from __future__ import annotations

from rtscore.errors import PipelineError


class DataValidationError(PipelineError, ValueError):
    """A data check failed; the message names the check, and the split and tile where it failed."""
