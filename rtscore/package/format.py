"""The deployment package's format (guide §4.3): file names, the schemas of its sibling files, what its
weights' pickle may reference, and the reports of its audit. Shared by building (`rtscore.package`) and
auditing (`rtscore.package.verify`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from rtscore.config.base import StrictModel
from rtscore.config.binding import RGB_NAMES, ExtraChannel, InputBinding, RasterContract, check_extra_channels
from rtscore.config.deployment import Precision
from rtscore.config.pipeline import DEFAULT_MIN_OBJECT_AREA_M2, ArchitectureName
from rtscore.errors import PipelineError
from rtscore.identity.commit import UNKNOWN_COMMIT, CommitSource
from rtscore.storage import sha256_file
from rtscore.train.result import METRIC

WEIGHTS = "weights.pth"
STATS = "normalization_stats.json"
DEPLOYMENT = "deployment_config.yaml"
MODEL = "model_config.yaml"
METADATA = "run_metadata.json"
REQUIREMENTS = "requirements_frozen.txt"
SUMS = "SHA256SUMS"
PACKAGE_FILES = (WEIGHTS, STATS, DEPLOYMENT, MODEL, METADATA, REQUIREMENTS, SUMS)

# The contract of a package built before ``raster`` was recorded: its training rasters were EPSG:3857 (GeoTIFF
# ingestion required it; synthetic stores are written in it), uint8 RGB by colour interpretation, float32 EXTRA;
# their pixel size was not recorded, so it is not checked.
LEGACY_RASTER_CONTRACT = RasterContract(crs="EPSG:3857")


class PackageError(PipelineError, ValueError):
    """The package cannot be built from this run (missing or uncalibrated input, unknown seed, ...), or a file of
    a package is missing or malformed (the message names the file)."""


# --------------------------------------------------------------------------- package file schemas
class PackagedChannels(StrictModel):
    """Input channels in order: RGB, then the EXTRA bands (early fusion)."""

    rgb: list[str] = Field(..., description="RGB channel names; always ['R', 'G', 'B'].")
    extra: list[ExtraChannel] = Field(
        default_factory=list, description="EXTRA channels: name and 0-based band of the EXTRA raster."
    )

    @field_validator("extra")
    @classmethod
    def _binding_rules(cls, v: list[ExtraChannel]) -> list[ExtraChannel]:
        return check_extra_channels(v)

    @property
    def names(self) -> list[str]:
        return [*self.rgb, *(c.name for c in self.extra)]

    @property
    def binding(self) -> InputBinding:
        """The input binding predict and drift read rasters with: the one training's stores were written with."""
        return InputBinding.of_extra(self.extra)


class PackagedModelConfig(StrictModel):
    """`model_config.yaml`: the architecture ``weights.pth`` fits and the input it expects."""

    architecture: ArchitectureName = Field(..., description="smp architecture.")
    backbone: str = Field(..., min_length=1, description="smp encoder name.")
    decoder_channels: list[int] | None = Field(None, description="Decoder widths (null: smp's default).")
    in_channels: int = Field(..., ge=1, description="3 + number of EXTRA channels.")
    classes: Literal[1] = Field(1, description="One output channel.")
    output: Literal["logits"] = Field("logits", description="The model outputs logits (no activation).")
    channels: PackagedChannels = Field(..., description="Input channel binding.")
    tile_size: int = Field(..., ge=32, le=4096, description="Model input size (snapshot of data.tile_size).")
    nodata_handling: bool = Field(
        True,
        description="Snapshot of data.nodata_handling: alpha-0 pixels take the channel's training mean before "
        "normalisation (predict applies the input transform training applied).",
    )
    raster: RasterContract | None = Field(
        None,
        description="What the training rasters were (band sources, dtypes, CRS, pixel size, NoData rule): the "
        "train store's raster_contract; predict and drift refuse inputs that differ. Null: a package built before "
        "it was recorded, read as EPSG:3857 at an unchecked pixel size (with a warning).",
    )
    min_object_area_m2: float | None = Field(
        None,
        ge=0.0,
        allow_inf_nan=False,
        description="Snapshot of package.min_object_area_m2: `rts map` writes no object under this ground area. "
        "Null: a package built before it was recorded, mapped at the "
        f"default {DEFAULT_MIN_OBJECT_AREA_M2:g} m² (with a warning).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PackagedModelConfig:
        if self.channels.rgb != list(RGB_NAMES):
            raise ValueError(f"channels.rgb must be {list(RGB_NAMES)}; got {self.channels.rgb}")
        if self.in_channels != len(self.channels.names):
            raise ValueError(
                f"in_channels ({self.in_channels}) differs from the {len(self.channels.names)} declared channels "
                f"{self.channels.names}"
            )
        return self

    @property
    def contract(self) -> RasterContract:
        """The raster contract inputs are checked against (``raster``, else :data:`LEGACY_RASTER_CONTRACT`)."""
        return self.raster if self.raster is not None else LEGACY_RASTER_CONTRACT

    @property
    def effective_min_object_area_m2(self) -> float:
        """The smallest object ``rts map`` writes, m² (``min_object_area_m2``, else the default)."""
        return DEFAULT_MIN_OBJECT_AREA_M2 if self.min_object_area_m2 is None else self.min_object_area_m2


class TrainedWith(StrictModel):
    precision: Precision = Field(..., description="training.precision (must equal the deployment precision).")
    seed: int = Field(..., description="Training seed.")
    config_sha: str = Field(..., min_length=64, max_length=64, description="config_hash of the pipeline config.")


class RunMetadata(StrictModel):
    """`run_metadata.json`: where the weights come from."""

    git_sha: str = Field(
        ..., description="Commit of the code that built the package (see git_source), or 'unknown' (git_source none)."
    )
    git_dirty: bool | None = Field(None, description="Uncommitted changes to tracked files (null: unknown).")
    git_source: CommitSource | None = Field(
        None,
        description="Where git_sha comes from: 'checkout' (git of the project checkout), 'image' (RTS_GIT_SHA, the "
        "worker image's build argument GIT_SHA), 'none' (neither: git_sha is 'unknown'); null in packages built "
        "before it was recorded.",
    )
    mlflow_run_id: str | None = Field(None, description="MLflow run of the shipped seed.")
    training_date: str = Field(..., description="UTC time the shipped weights were written (ISO 8601).")
    package_date: str = Field(..., description="UTC time the package was built (ISO 8601).")
    seed: int = Field(..., description="Shipped seed.")
    epoch: int = Field(..., description="Epoch of the shipped (best) weights.")
    best_metric: float | None = Field(..., description="Best smoothed validation metric of the seed.")
    best_metric_name: str = Field(METRIC, description="Name of best_metric.")
    trained_with: TrainedWith = Field(..., description="Training settings the weights depend on.")

    @model_validator(mode="after")
    def _commit_matches_its_source(self) -> RunMetadata:
        """A recorded source names a commit, and 'none' claims none (guide §10.1: never a guessed commit)."""
        if self.git_source == "none" and self.git_sha != UNKNOWN_COMMIT:
            raise ValueError(f"git_source is 'none' but git_sha is {self.git_sha!r}; expected {UNKNOWN_COMMIT!r}")
        if self.git_source in ("checkout", "image") and self.git_sha == UNKNOWN_COMMIT:
            raise ValueError(f"git_source is {self.git_source!r} but git_sha is {UNKNOWN_COMMIT!r}")
        return self


class PackageFile(BaseModel):
    name: str = Field(..., description="File name inside the package.")
    sha256: str = Field(..., description="sha256 of the file.")
    bytes: int = Field(..., ge=0, description="Size in bytes.")


class PackageInfo(BaseModel):
    """What :func:`build_package` built."""

    path: str = Field(..., description="The published package directory.")
    seed: int = Field(..., description="Shipped seed.")
    files: list[PackageFile] = Field(..., description="Every file of the package (SHA256SUMS last).")


# --------------------------------------------------------------------------- SHA256SUMS and the package's identity
def sums_text(files: Iterable[tuple[str, str]]) -> str:
    """The text of ``SHA256SUMS`` (``sha256sum -c`` format): one ``<sha256>  <name>`` line per (name, sha256), in
    the order given. What ``rts package build`` writes and what :func:`package_sha256` hashes: one spelling, so an
    intact built package's identity is exactly the sha256 of its ``SHA256SUMS`` file."""
    return "".join(f"{sha256}  {name}\n" for name, sha256 in files)


def package_sha256(package_dir: Path) -> str:
    """The package's identity: the sha256 of its ``SHA256SUMS`` as ``rts package build`` writes it (one
    ``<sha256>  <file>`` line per other file, by name; hidden files aside), recomputed from the files' content. A
    built, intact package gets the sha256 of its ``SHA256SUMS`` file; an edited file changes the identity even when
    ``SHA256SUMS`` was not regenerated, and a package without ``SHA256SUMS`` has one too. What a mapping campaign
    records a package by (docs/mapping.md, "Package identity")."""
    files = sorted(p for p in package_dir.iterdir() if p.is_file() and p.name != SUMS and not p.name.startswith("."))
    return hashlib.sha256(sums_text((p.name, sha256_file(p)) for p in files).encode()).hexdigest()


def package_holding(path: str | Path) -> Path | None:
    """The deployment package directory that ``path`` is or lies inside (the nearest of ``path``, resolved, and
    its ancestors that holds a package's ``SHA256SUMS`` and ``weights.pth``); None when there is none."""
    p = Path(path).expanduser().resolve()
    return next((d for d in (p, *p.parents) if (d / SUMS).is_file() and (d / WEIGHTS).is_file()), None)


def refuse_output_in_package(output: str | Path, package: str | Path | None = None, *, what: str = "output") -> None:
    """Refuse an output directory that is ``package`` or lies inside it, or inside any other deployment package
    (:func:`package_holding`): a package holds exactly the files of its ``SHA256SUMS``, so maps or reports written
    into it would make it fail ``rts package verify`` and every later load.

    Raises:
        PackageError: naming the output (``what``: the option or argument it came from) and the package.
    """
    out = Path(output).expanduser().resolve()
    pkg = Path(package).expanduser().resolve() if package is not None else None
    holder = pkg if pkg is not None and (out == pkg or pkg in out.parents) else package_holding(out)
    if holder is not None:
        raise PackageError(
            f"{what} {output} is inside the deployment package {holder}: files written there would make the package "
            "fail rts package verify (it holds exactly the files of its SHA256SUMS); write them outside the package"
        )


class Check(BaseModel):
    name: str = Field(..., description="What was checked.")
    ok: bool = Field(..., description="Whether it passed.")
    detail: str = Field("", description="What was found; on failure, the file and the problem.")


class VerifyReport(BaseModel):
    """Result of :func:`verify_package`: every check, in order."""

    path: str = Field(..., description="The package directory.")
    ok: bool = Field(..., description="True when every check passed.")
    checks: list[Check] = Field(default_factory=list, description="The checks, audit first, then load/forward.")

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]
