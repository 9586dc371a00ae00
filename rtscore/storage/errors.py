"""The storage error (no other import: every storage module and its callers can raise it)."""

from __future__ import annotations

from rtscore.errors import PipelineError


class StorageError(PipelineError):
    """An artifact is missing, unreadable or does not match its manifest record."""
