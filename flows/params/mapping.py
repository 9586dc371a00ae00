"""The mapping flows' parameters: map-region (a campaign, locally or fanned out to map-chunk runs) and the
map-chunk run it hands each chunk of scenes."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, model_validator

from flows.fields import Cli, local_file, run_location
from flows.form import FormModel
from flows.params import (
    FAN_OUT_TIMEOUT_S,
    MAX_ATTEMPTS,
    POLL_INTERVAL_S,
    FanOutTimeout,
    JobVariables,
    MaxAttempts,
    PollInterval,
)
from rtscore.mapping import DEFAULT_CHUNK_SIZE

MAP_CHUNK_DEPLOYMENT = "map-chunk/stage-map-chunk"  # the deployment a distributed map-region fans out to (gpu pool)


class MapCampaignParams(FormModel):
    """What every mapping flow needs: the deployment package, the scenes and the campaign's output root."""

    package: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="Deployment package directory (rts package build's output: weights, stats, configs, "
        "SHA256SUMS) on the worker: absolute, or relative to the project directory.",
    )
    input: str = Field(
        ...,
        description="The scenes: a directory of GeoTIFFs (subfolders too), a gs://bucket/prefix, or a scene list "
        "CSV (a path or uri column, optional scene_id).",
    )
    output: Annotated[str, Cli(parse=run_location)] = Field(
        ...,
        description="Campaign output root: a gs://bucket/prefix, or a local directory seen by every worker: "
        "scenes/, log/, objects.gpkg, index.geojson, summary.md. A re-run resumes from its log.",
    )
    device: str = Field("auto", description="Inference device: auto (CUDA when available), cpu, cuda or cuda:N.")


class PlannedFile(FormModel):
    """A file's identity as the campaign listed it (rtscore.mapping.scenes.InputIdentity, as a form can show it)."""

    sha256: str | None = Field(None, description="sha256 of a local file's content.")
    generation: int | None = Field(None, description="Generation of a gs:// object.")
    size: int = Field(..., ge=0, description="Bytes.")
    crc32c: str | None = Field(None, description="The object's CRC32C (base64), when GCS reports one.")
    md5: str | None = Field(None, description="The object's MD5 (base64), when GCS reports one.")


class PlannedCompanion(FormModel):
    """A file read with a scene (its EXTRA raster), as the campaign listed it."""

    role: Literal["extra"] = Field(..., description="What the file is to the scene: its EXTRA raster.")
    uri: str = Field(..., description="Where it is read from (where rts predict looks for it).")
    identity: PlannedFile | None = Field(None, description="Its content. Empty: absent when listed.")


class PlannedScene(FormModel):
    """One scene of a chunk as the campaign planned it: what the chunk run maps, checked on its worker against the
    scene's files as they are then (docs/mapping.md, "How a chunk run finds its scenes")."""

    scene_id: str = Field(..., description="The scene's id.")
    uri: str = Field(..., description="Where the scene is read from (an absolute path or a gs:// URI).")
    identity: PlannedFile = Field(..., description="The scene raster's content when listed.")
    companions: list[PlannedCompanion] = Field(
        default_factory=list, description="Its EXTRA raster when the package reads EXTRA bands."
    )
    logged: datetime | None = Field(
        None,
        description="Time of the scene's latest log record the campaign planned from: the chunk resumes only from "
        "its own chunk's records newer than it. Empty: the scene had none.",
    )


class MapChunkParams(MapCampaignParams):
    """map-chunk: map one chunk of a campaign's scenes (those not yet done with this scene identity, package, mapping
    code and settings)."""

    chunk: int = Field(..., ge=0, description="Chunk index: names the chunk's log file (log/chunk-<k>-<run>.jsonl).")
    scene_ids: list[str] = Field(
        ...,
        min_length=1,
        description="The scene ids to map: those of the chunk the campaign found left to do, each handed over in "
        "`scenes`. Without `scenes` (a run started by hand) the worker lists the input to find them.",
    )
    scenes: list[PlannedScene] = Field(
        default_factory=list,
        description="The chunk's scenes as map-region planned them (URI, identity, EXTRA raster, latest record's "
        "time): the worker checks only these files and reads only its own chunk's log files. Empty: list the input "
        "and read the whole log (as a run started by hand must).",
    )
    mapping_identity: str | None = Field(
        None,
        description="The campaign's mapping identity (sha256 over package, mapping code and settings), as map-region "
        "computed it; a worker whose own differs refuses the chunk. Empty: not checked.",
    )

    @model_validator(mode="after")
    def _scenes_handed_over(self) -> MapChunkParams:
        handed = Counter(s.scene_id for s in self.scenes)
        if twice := sorted(i for i, n in handed.items() if n > 1):
            raise ValueError(f"scenes: ids handed over twice: {twice}")
        if handed and (missing := [i for i in self.scene_ids if i not in handed]):
            raise ValueError(f"scene_ids {missing} are not among the scenes handed over")
        return self


class MapDistributedParams(FormModel):
    """How a distributed map-region runs its chunks: one map-chunk flow run per chunk on the GPU pool."""

    deployment: str = Field(
        MAP_CHUNK_DEPLOYMENT,
        description="Deployment started once per chunk, as '<flow name>/<deployment name>' (prefect.yaml: "
        "stage-map-chunk on the 'gpu' pool).",
    )
    max_attempts: MaxAttempts = Field(
        MAX_ATTEMPTS,
        description="Runs per chunk when its run crashes (its worker vanished): a crashed run is re-submitted "
        "until this many ran; the new run skips the scenes its predecessor logged. A failed run is not re-submitted.",
    )
    timeout_s: FanOutTimeout = Field(
        FAN_OUT_TIMEOUT_S,
        description="Wait at most this long (seconds) for all chunk runs; the campaign then fails naming the runs "
        "still going (a retry of map-region re-attaches to them).",
    )
    poll_interval_s: PollInterval = Field(
        POLL_INTERVAL_S, description="Seconds between checks of the chunk runs' states."
    )
    job_variables: JobVariables = Field(
        default_factory=dict, description="Job variables for every chunk run, over the deployment's."
    )


class MapParams(MapCampaignParams):
    """`rts map`: a mapping campaign in this process: drift check, scene list, chunks, then the campaign's
    objects, footprint index and summary; a re-run resumes from its log and retries failed scenes."""

    chunk_size: int = Field(
        DEFAULT_CHUNK_SIZE, ge=1, description="Scenes per chunk (one map-chunk run each when distributed)."
    )
    allow_drift: bool = Field(
        False, description="Map even when the drift check on a sample of the scenes finds a blocker."
    )


class MapRegionParams(MapParams):
    """map-region: a mapping campaign: drift check, scene list, chunks (in process or as map-chunk runs), then
    the campaign's objects, footprint index and summary."""

    execution: Literal["local", "distributed"] = Field(
        "local",
        description="local: every chunk is mapped inside this flow run. distributed: one map-chunk flow run per "
        "chunk on the deployment below (a GPU pool); this run waits, then builds the campaign's outputs.",
    )
    distributed: MapDistributedParams = Field(
        default_factory=MapDistributedParams,
        title="Distributed execution",
        description="Fan-out settings (used when execution is distributed).",
    )
