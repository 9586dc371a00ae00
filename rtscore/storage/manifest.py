"""The run's `manifest.json`: every artifact with its fingerprint, producing stage and stage hashes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rtscore.storage.layout import RunLayout

MANIFEST_NAME = RunLayout.MANIFEST.template


class ArtifactEntry(BaseModel):
    """One artifact of a run, as recorded in the manifest."""

    path: str = Field(..., description="Path relative to the run directory.")
    uri: str = Field(..., description="Absolute URI of the artifact.")
    kind: Literal["file", "dir"] = Field(..., description="A single file or a directory tree (e.g. a Zarr store).")
    sha256: str = Field(..., description="sha256 of the file, or of the sorted (path, sha256, size) list of a tree.")
    bytes: int = Field(..., ge=0, description="Total size in bytes.")
    stage: str = Field(..., description="Pipeline stage that produced it.")
    config_hash: str = Field(..., description="sha256 of the config sections the producing stage reads.")
    code_hash: str = Field("", description="sha256 of the producing stage's code (its import closure).")
    created: str = Field(..., description="UTC time the record was written.")
    adopted_from: str | None = Field(
        None,
        description=(
            "URI of the artifact this one was adopted from (RunDir.adopt: the same content, recorded by another "
            "run directory's stage run); None when a stage of this run directory produced it."
        ),
    )


class Manifest(BaseModel):
    """Every artifact of a run."""

    schema_version: int = 1
    artifacts: dict[str, ArtifactEntry] = Field(default_factory=dict)


def manifest_json(manifest: Manifest) -> str:
    """The manifest's JSON: a record's optional ``adopted_from`` only where set (older records are unchanged)."""
    return manifest.model_dump_json(indent=2, exclude_none=True) + "\n"
