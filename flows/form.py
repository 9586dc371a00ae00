"""The base of every flow's parameter model: what the Prefect UI form and the `rts` options are built from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FormModel(BaseModel):
    """A flow's (or command's) parameters: unknown fields are refused, every field has a description."""

    model_config = ConfigDict(extra="forbid")
