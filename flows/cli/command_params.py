"""The parameters of the library commands (`rts generate`, `stats`, `predict`, ...): one model per command, the
single source of its options, their help and their checks (flows/cli/options.py derives the options).

The pipeline commands take the flows' own parameter models (flows/params/). Light to import: `rts --help`
builds every command's options from these models.
"""

from __future__ import annotations

import argparse
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator

from flows.fields import Cli, data_root_location, local_file, local_output, local_path, local_run_dir
from flows.form import FormModel
from flows.params import Overrides, Split
from rtscore.config.binding import RasterBandMap
from rtscore.config.pipeline import NormalizationConfig
from rtscore.data.inventory.arts import DateError, parse_date, parse_date_range

__all__ = [
    "ArtsCheckParams",
    "ArtsExportParams",
    "DriftParams",
    "GenerateStoreParams",
    "GpuCheckParams",
    "ImportNpzParams",
    "NoiseFloorParams",
    "PredictParams",
    "ProfileBatchParams",
    "ReviewServeParams",
    "StatsParams",
    "SynthGeotiffParams",
    "ValidateParams",
    "VerifyParams",
    "WarpParams",
]

LocalPath = Annotated[str, Cli(parse=local_path)]
LocalOutput = Annotated[str, Cli(parse=local_output)]


def rgb_bands(value: str) -> RasterBandMap:
    """``r,g,b[,alpha]`` (0-based band indexes) -> a RasterBandMap."""
    try:
        bands = [int(v) for v in value.split(",")]
    except ValueError:
        bands = []
    if len(bands) not in (3, 4):
        raise argparse.ArgumentTypeError(f"{value!r}: expected r,g,b or r,g,b,alpha (0-based band indexes)")
    try:
        return RasterBandMap(rgb=bands[:3], alpha=bands[3] if len(bands) == 4 else None)
    except ValidationError as err:
        raise argparse.ArgumentTypeError(f"{value!r}: {err.errors()[0]['msg']}") from None


RgbBands = Annotated[RasterBandMap | None, Cli(parse=rgb_bands, metavar="R,G,B[,ALPHA]")]
RGB_BANDS_HELP = (
    "0-based bands of R, G, B (and alpha) of input files laid out unlike the training rasters, e.g. 2,1,0 for "
    "Planet's B,G,R,NIR (NoData from a mask or the RGB nodata) or 2,1,0,3. Empty: the package's (by colour "
    "interpretation)."
)


class WarpParams(FormModel):
    """`rts warp`: scenes put on the tile grid of the tiling config the training data was cut with, for `rts
    predict` and `rts map`: per scene <stem>.tif (R, G, B, alpha) and <stem>_extra.tif (the config's extra bands)
    in --output, their pixels those `rts tile` cuts (NDVI included). The config's polygons, regions and splits are
    not read. Every scene (and --package) is checked before anything is written; a re-run skips the scenes
    already warped with the same settings."""

    config: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="The tiling config the training data was cut with (its scenes, rgb_bands, extra, grid, "
        "resampling); the paths inside it are relative to the file.",
    )
    output: LocalOutput = Field(
        ..., description="Directory for <stem>.tif, <stem>_extra.tif and <stem>_warp.json of every scene."
    )
    scenes: list[str] | None = Field(
        None,
        description="Scenes to warp instead of the config's: GeoTIFF paths or glob patterns (relative to the "
        "working directory). Empty: the config's scenes.",
    )
    package: Annotated[str | None, Cli(parse=local_path)] = Field(
        None,
        description="Deployment package the scenes are for: the grid's CRS and pixel size are checked against its "
        "raster contract and the config's extra against its EXTRA channels before anything is written.",
    )


class GenerateStoreParams(FormModel):
    """`rts generate`: one split's tile store from a generation config. The store is written in a staging
    directory and appears under its final name only once complete; an interrupted generation resumes, keeping
    the shards it had finished."""

    source: Literal["synthetic", "geotiff"] | None = Field(None, description="Data source. Empty: the config's source.")
    config: LocalPath = Field(..., description="Generation config YAML (configs/generation/...).")
    output: LocalOutput = Field(..., description="Output store, e.g. datasets/train.zarr.")
    workers: int | None = Field(None, ge=1, description="Worker processes. Empty: processing.num_workers.")
    overwrite: bool = Field(False, description="Replace an existing store.")
    restart: bool = Field(False, description="Discard an interrupted generation instead of resuming.")
    data_root: Annotated[str | None, Cli(parse=data_root_location)] = Field(
        None,
        description="--source geotiff: the data root (PLANET-RGB/, EXTRA/, labels/, metadata.csv), a local "
        "directory or gs://bucket/prefix. Empty: geotiff.data_root of the config.",
    )


class SynthGeotiffParams(FormModel):
    """`rts synth-geotiff`: the synthetic scenes of a generation config (one split) or of a pipeline config (all
    its splits) written as a GeoTIFF data root."""

    config: LocalPath = Field(..., description="A generation config (one split) or a pipeline config (all splits).")
    output: LocalOutput = Field(..., description="Data root to create (PLANET-RGB/, EXTRA/, labels/, ...).")
    overwrite: bool = Field(False, description="Replace an existing data root.")


class StatsParams(FormModel):
    """`rts stats`: per-channel normalization stats of a train store (the train split only), one streamed pass
    over the valid (alpha > 0) pixels."""

    dataset: LocalPath = Field(..., description="The train store (.zarr).")
    config: Annotated[str | None, Cli(parse=local_path)] = Field(
        None, description="Pipeline config: selects channels.extra and the clipping."
    )
    clip: Annotated[tuple[float, float] | None, Cli(metavar="LOW HIGH")] = Field(
        None,
        description="Percentile clipping, 0 <= LOW < HIGH <= 100 (the rule of normalization.clip_percentiles). "
        "Empty: normalization.clip_percentiles of --config.",
    )
    output: Annotated[str | None, Cli(parse=local_output)] = Field(
        None, description="Stats file. Empty: normalization_stats.json next to the store."
    )

    @field_validator("clip")
    @classmethod
    def _clip_rule(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        """Checked by the rule of normalization.clip_percentiles (one rule, one place)."""
        if v is None:
            return None
        try:
            return NormalizationConfig(clip_percentiles=v).clip_percentiles
        except ValidationError as err:
            why = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
            raise ValueError(f"{v[0]:g} {v[1]:g}: {why} (the rule of normalization.clip_percentiles)") from None


class ValidateParams(FormModel):
    """`rts validate`: pre-training checks through the real DataLoader, a report in the output directory."""

    dataset: LocalPath = Field(..., description="A directory with the split stores (train.zarr, ...), or one store.")
    config: LocalPath = Field(..., description="Pipeline config YAML.")
    stats: Annotated[str | None, Cli(parse=local_path)] = Field(
        None,
        description="Normalization stats JSON; one that does not exist is refused. Empty: normalization_stats.json "
        "next to the datasets, else in their parent directory (the run directory).",
    )
    output: Annotated[str | None, Cli(parse=local_output)] = Field(
        None, description="Report directory. Empty: validation/ in the dataset directory."
    )
    max_batches: int | None = Field(None, ge=1, description="Check at most this many batches per split.")
    workers: int = Field(0, ge=0, description="DataLoader workers.")


class ImportNpzParams(FormModel):
    """`rts import-npz`: a legacy batched .npz dataset (batch_NNN.npz files with a metadata.json, directly in
    --input or in its exact_masks/) converted into a Zarr tile store."""

    input: LocalPath = Field(..., description="Legacy dataset directory (with exact_masks/ or metadata.json).")
    output: LocalOutput = Field(..., description="Output store (.zarr).")
    split: Split = Field(..., description="Split the data belongs to.")
    shard_tiles: int = Field(32, ge=1, description="Tiles per shard.")
    overwrite: bool = Field(False, description="Replace an existing store.")


class NoiseFloorParams(FormModel):
    """`rts noise-floor`: guide §10.1 on one seed's best checkpoint: the std of PR-AUC at metrics.ratios[0] (1:200)
    over repeated validations and min_delta = 2 x std, ~0 by construction under exact re-weighting, so beside it the
    std under random negative subsets (the sweep's margin) and the tile-bootstrap std."""

    config: LocalPath = Field(..., description="Pipeline config YAML.")
    run_dir: Annotated[str, Cli(flag="--run", parse=local_run_dir)] = Field(
        ..., description="Run directory with the trained seed."
    )
    seed: int | None = Field(
        None, ge=0, description="Which seed's best checkpoint. Empty: training.seed of the config."
    )
    repeats: int = Field(5, ge=1, description="Validation passes on the same checkpoint (guide §10.1: 5).")
    draws: int = Field(4, ge=1, description="Random negative subsets per pass (the old method).")


def device_count(value: str) -> int | str:
    """``auto`` or a device count of at least 1."""
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a device count of at least 1, or auto")
    return n


Devices = Annotated[int | Literal["auto"] | None, Cli(parse=device_count, metavar="N")]
DEVICES_HELP = (
    "Devices N, each holding training.batch_size (per device; a step's effective batch is N x it): the profile "
    "is per device and adds DDP's gradient buckets when N > 1; auto: every visible GPU (1 with training.device "
    "cpu); more GPUs than visible are refused, as training refuses them. Empty: training.devices of the config "
    "(1 where it has none)."
)
MAX_MEMORY_HELP = (
    "Treat a peak above this many GiB as out of memory: per GPU, or on CPU for all ranks together (a CPU rank's "
    "peak: its RSS growth during a trial plus the model's weights)."
)


class ProfileBatchParams(FormModel):
    """`rts profile-batch`: the largest batch size that fits what training holds (model, gradients, AdamW,
    EMA, the configured loss, a validation pass) for the configured model, tile size and precision on this device,
    per device of N."""

    config: LocalPath = Field(..., description="Pipeline config YAML (model, tile size, precision, loss, EMA).")
    devices: Devices = Field(None, description=DEVICES_HELP)
    max_memory_gb: float | None = Field(None, gt=0, description=MAX_MEMORY_HELP)
    max_batch: int = Field(512, ge=1, description="Stop the search at this batch size per device.")
    steps: int = Field(2, ge=1, description="Timed training steps per batch size.")
    output: Annotated[str | None, Cli(parse=local_output)] = Field(
        None, description="Also write the markdown report here."
    )


class GpuCheckParams(FormModel):
    """`rts gpu-check`: check a (GPU) machine with the batched-dataset notes' validation sequence: generate a
    train and a val store (4k + 1k with configs/baseline.yaml), their normalization stats, profile the batch
    size, train one seed briefly with a validation pass every epoch, and report each step's figures."""

    config: LocalPath = Field(..., description="Pipeline config YAML with synthetic train and val generation.")
    work_dir: Annotated[str, Cli(flag="--dir", parse=local_output)] = Field(
        "artifacts/gpu-check", description="Run directory the stores and the seed are written to."
    )
    report: Annotated[str | None, Cli(parse=local_output)] = Field(
        None, description="The JSON report. Empty: gpu_check.json in the run directory."
    )
    overrides: Overrides = Field(
        default_factory=dict,
        description='Dotted config keys set over the config file, as a JSON object, e.g. {"model.backbone": '
        '"resnet18"}.',
    )
    train_tiles: int | None = Field(
        None, ge=2, description="Tiles of the train store, in the config's proportions. Empty: the config's."
    )
    val_tiles: int | None = Field(None, ge=2, description="Tiles of the val store. Empty: the config's.")
    workers: int | None = Field(None, ge=1, description="Generation worker processes. Empty: the configs'.")
    devices: Devices = Field(None, description=DEVICES_HELP)
    max_batch: int = Field(512, ge=1, description="The profile's search limit (batch per device).")
    profile_steps: int = Field(2, ge=1, description="Timed training steps per batch size of the profile.")
    max_memory_gb: float | None = Field(None, gt=0, description=MAX_MEMORY_HELP)
    batch_size: int | None = Field(
        None,
        ge=1,
        description="Batch per device of the short training (training.batch_size). Empty: training.batch_size if "
        "the profile finds it fits, else the recommended one.",
    )
    epochs: int = Field(2, ge=1, description="Epochs of the short training (the backbone unfrozen from epoch 2).")
    steps_per_epoch: int = Field(20, ge=1, description="Training steps per epoch of the short training.")


class PredictParams(FormModel):
    """`rts predict`: probability and mask COGs of GeoTIFFs from a deployment package. The package is loaded
    through the checks of `rts package verify` that need no forward pass, and every input is checked against
    its raster contract before the first is predicted: a mismatch is one error naming the file, nothing
    written."""

    package: LocalPath = Field(..., description="Deployment package directory (rts package build).")
    input: LocalPath = Field(
        ..., description="A GeoTIFF (R, G, B [, alpha]), a directory of them, or a data root with PLANET-RGB/."
    )
    output: LocalOutput = Field(
        ..., description="Directory for <name>_prob.tif, <name>_mask.tif and <name>_predict.json."
    )
    stride: int | None = Field(None, ge=1, description="Window stride in pixels. Empty: half a tile.")
    extra: Annotated[str | None, Cli(parse=local_path)] = Field(
        None, description="EXTRA raster of a single input. Empty: <name>_extra.tif next to each input."
    )
    device: str = Field(
        "auto", description="auto (the GPU when there is one, as calibration ran), cpu, cuda or cuda:N."
    )
    rgb_bands: RgbBands = Field(None, description=RGB_BANDS_HELP)


class DriftParams(FormModel):
    """`rts drift`: new imagery compared with the package's normalization stats (guide §4.1); exit status 1 on a
    deployment blocker."""

    package: LocalPath = Field(..., description="Deployment package directory.")
    input: LocalPath = Field(
        ..., description="A GeoTIFF, a directory of them (<name>_extra.tif siblings), or a data root."
    )
    output: LocalOutput = Field(..., description="Directory for drift_report.json and drift_report.md.")
    rgb_bands: RgbBands = Field(None, description=RGB_BANDS_HELP)


class VerifyParams(FormModel):
    """`rts package verify`: audit a deployment package without unpickling anything, then load it and run one
    tile; exit status 1 when a check fails."""

    dir: Annotated[str, Cli(positional=True, parse=local_path)] = Field(..., description="Package directory.")
    device: str = Field("cpu", description="Device for the one-tile forward pass.")
    allow_fallback_threshold: bool = Field(
        False,
        description="Accept a max-F1 fallback threshold (deployment threshold_source: max_f1_fallback) instead "
        "of failing.",
    )


class ReviewServeParams(FormModel):
    """`rts review serve`: the review page over http on this machine, for a browser or tool that refuses pages
    opened from the file system (the page itself needs no server). Stops with Ctrl-C or SIGTERM."""

    review: Annotated[str, Cli(positional=True, parse=local_path)] = Field(
        ..., description="The review directory (rts review export's output, copied here if it is in a bucket)."
    )
    host: str = Field("127.0.0.1", description="Address to listen on (this machine only by default).")
    port: int = Field(8765, ge=0, le=65535, description="Port (0: any free port).")


def parse_base_map_date(value: str) -> str:
    """An ARTS BaseMapDate: ``YYYY-MM-DD`` or two such dates separated by a comma (checked strictly, as the ARTS
    check reads it)."""
    try:
        return parse_date_range(value, strict=True).text()
    except DateError as err:
        raise argparse.ArgumentTypeError(f"{err}; expected YYYY-MM-DD or YYYY-MM-DD,YYYY-MM-DD") from None


def parse_arts_date(value: str) -> str:
    """One ``YYYY-MM-DD`` date (checked strictly)."""
    try:
        return parse_date(value, strict=True).isoformat()
    except DateError as err:
        raise argparse.ArgumentTypeError(f"{err}; expected YYYY-MM-DD") from None


class ArtsCheckParams(FormModel):
    """`rts arts check`: every rule of the ARTS format a file breaks (required fields, types and ranges, dates,
    class and label-type values, the centroid against the geometry, the UID recomputed, unique UIDs, relationship
    UIDs, geometry and CRS), listed at once, one line each naming the feature, the field, what is wrong and what is
    expected; exit status 2 on any problem, 0 with a one-line summary otherwise."""

    file: Annotated[str, Cli(positional=True, parse=local_file)] = Field(
        ..., description="The ARTS file: GeoJSON, or a shapefile (full or abbreviated field names)."
    )


class ArtsExportParams(FormModel):
    """`rts arts export`: a campaign's objects as an ARTS contribution GeoJSON in EPSG:3413, every required field
    filled; with --verdicts, rts -> Positive, not_rts -> Negative, unsure left out; unreviewed objects only with
    --include-unreviewed. With --prior, the prior features each new one overlaps are proposed in
    UnknownRelationship and <output stem>_relationships.csv, for a person to sort. The file is checked with the
    ARTS check before it is renamed into place."""

    campaign: LocalPath = Field(
        ..., description="The campaign's output (rts map --output): objects.gpkg, index.geojson."
    )
    output: LocalOutput = Field(..., description="The contribution file to write (.geojson).")
    creator: str = Field(..., min_length=1, description="CreatorLab of every feature: the lab contributing.")
    source: str = Field(
        ..., min_length=1, description="BaseMapSource of every feature: the imagery's sensor, e.g. PlanetScope."
    )
    region: str | None = Field(
        None,
        min_length=1,
        description="RegionName of every feature. Empty: the objects layer's RegionName or region column, else the "
        "review's region of each object (--review).",
    )
    verdicts: Annotated[str | None, Cli(parse=local_path)] = Field(
        None, description="The review's verdict file (the review page's GeoJSON or a Label Studio JSON export)."
    )
    review: Annotated[str | None, Cli(parse=local_path)] = Field(
        None,
        description="The review directory the verdicts belong to: checked against them; gives each object's region "
        "and the inventory ids it overlaps (into Notes).",
    )
    include_unreviewed: bool = Field(
        False, description="Export the objects without a verdict too, as Positive, Notes saying they are unreviewed."
    )
    scene_list: Annotated[str | None, Cli(parse=local_path)] = Field(
        None, description="The scene list CSV the campaign mapped: its date column gives the scenes' dates."
    )
    base_map_date: Annotated[str | None, Cli(parse=parse_base_map_date, metavar="DATE[,DATE]")] = Field(
        None, description="BaseMapDate of every feature. Empty: the dates of each object's scenes."
    )
    resolution: float | None = Field(
        None, gt=0, description="BaseMapResolution (m) of every feature. Empty: the ground pixel size of the scenes."
    )
    contribution_date: Annotated[str | None, Cli(parse=parse_arts_date, metavar="YYYY-MM-DD")] = Field(
        None, description="ContributionDate (a fixed one makes the file reproducible). Empty: today."
    )
    prior: Annotated[str | None, Cli(parse=local_path)] = Field(
        None, description="A prior ARTS file (the main file): overlaps proposed in UnknownRelationship and a CSV."
    )
