"""Typed flow parameters: one pydantic model per flow, so the Prefect UI shows a form with field help.

Every flow takes a single ``params`` argument. From Python pass a model (``pipeline(PipelineParams(...))``);
from a deployment, the UI, ``prefect deployment run --params`` or ``run_deployment`` pass the same fields as
a JSON object under ``params`` (``{"params": {"config": "configs/quickstart.yaml", "run_dir": "..."}}``):
Prefect validates it into the model before the flow starts.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import AfterValidator, BaseModel, Field, JsonValue, model_validator

from flows.fields import Cli, data_root_location, local_file, local_output, run_location
from flows.form import FormModel, OptionalSwitch
from rtscore.config import PipelineConfig
from rtscore.config.overrides import check_override_keys
from rtscore.mapping import DEFAULT_CHUNK_SIZE

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")

# The deployments a distributed pipeline fans out to (`<flow name>/<deployment name>`, prefect.yaml; gpu pool).
TRAIN_SEED_DEPLOYMENT = "train-seed/stage-train-seed"
LOGIT_CACHE_DEPLOYMENT = "logit-cache/stage-logit-cache"
EVALUATE_TEST_DEPLOYMENT = "evaluate-test/stage-evaluate-test"


def _seeds(v: list[int] | None) -> list[int] | None:
    if v is not None and (not v or len(set(v)) != len(v) or any(s < 0 for s in v)):
        raise ValueError(f"expected a non-empty list of distinct non-negative seeds; got {v}")
    return v


# The type and check of every `seeds` field, declared once: each model says whose seeds they are (its description).
Seeds = Annotated[list[int] | None, AfterValidator(_seeds)]
TRAIN_SEEDS_HELP = "Seeds to train. Empty: training.seeds of the config."


def _dotted_keys(v: dict[str, JsonValue]) -> dict[str, JsonValue]:
    check_override_keys(v, "")  # the option's name prefixes the message
    return v


# Dotted config keys set over a config file (a run's, a command's): one type, one check, each model its own help.
Overrides = Annotated[dict[str, JsonValue], AfterValidator(_dotted_keys)]

P = TypeVar("P", bound=BaseModel)


def derived(model: type[P], source: BaseModel, **values: Any) -> P:
    """``model`` (a sub-flow's or a child run's parameters) from ``source`` (the calling flow's): every field of
    ``model`` that ``source`` has too, as ``source`` has it, and ``values`` (what the sub-flow is given instead or
    besides). Driven by ``model``'s own fields, so a field added to a model both derive from (``RunParams``,
    ``StageParams``, ``MapCampaignParams``) reaches every sub-flow without a builder to update."""
    shared = type(source).model_fields
    taken = {name: getattr(source, name) for name in model.model_fields if name in shared and name not in values}
    return model(**taken, **values)


def default_run_dir(data: dict[str, Any]) -> str:
    """``artifacts/<config file name>``: the run directory of a config when none is given."""
    return str(Path("artifacts") / Path(str(data.get("config", "run"))).stem)


class RunParams(FormModel):
    """What every flow needs: the pipeline config and the run directory it reads and writes."""

    config: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="Pipeline config YAML on the worker: absolute, or relative to the project directory "
        "(e.g. configs/quickstart.yaml).",
    )
    run_dir: Annotated[str, Cli(flag="--run", parse=run_location)] = Field(
        default_factory=default_run_dir,
        description="Run directory (artifact root of this run): a local path, relative to the project "
        "directory or absolute, or gs://bucket/prefix/run. Every stage of a run must see the same one. "
        "Empty: artifacts/<config file name>.",
    )
    deterministic: OptionalSwitch = Field(
        None,
        description="Deterministic training (cudnn.deterministic, no benchmark, deterministic algorithms) on or off, "
        "over training.deterministic of the config; unset (config): as the config says. Part of every stage's cache "
        "key, so pass the same value when re-running a single stage of a pipeline run.",
    )
    overrides: Overrides = Field(
        default_factory=dict,
        description="Dotted config keys set over the config file before it is validated, as a JSON object, e.g. "
        '{"loss.boundary_handling": "ignore"} (a sweep variant\'s overrides). Part of every stage\'s cache key '
        "through the config they yield, so pass the same ones when re-running a single stage of such a run.",
    )


class StageParams(RunParams):
    """A cached stage over a run directory."""

    refresh: bool = Field(False, description="Recompute even if a cached result with intact artifacts exists.")


class DataParams(StageParams):
    """The data pipeline: generate-dataset (train/val/test) -> normalization-stats -> validate-data."""

    skip_generation: bool = Field(
        False, description="Adopt the tile stores already in <run_dir>/datasets/ instead of generating them."
    )


class GenerateParams(DataParams):
    """generate-dataset: the tile store of each split."""

    splits: list[Split] = Field(list(SPLITS), description="Splits to generate (or adopt).")


class TileParams(FormModel):
    """tile-scenes: scenes or quads and an RTS polygon inventory -> the tile layout of docs/geotiff.md."""

    config: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="Tiling config YAML on the worker (e.g. configs/tiling/example.yaml): absolute, or relative to the "
        "project directory; the paths inside it are relative to the file.",
    )
    output: Annotated[str | None, Cli(parse=local_output)] = Field(
        None, description="Data root to write (a local path). Empty: `output` of the config. A re-run resumes."
    )
    overwrite: bool = Field(
        False,
        description="Delete an earlier run's tiles and start over. Without it a re-run resumes, and a run of other "
        "code, settings or inputs is set aside (.rts-tile/set_aside/) before tiling afresh.",
    )


class TrainSeedParams(RunParams):
    """train-seed: one seed, resumed from resume_latest.pth unless fresh."""

    def seed_of(self, cfg: PipelineConfig) -> int:
        """The seed to train: this run's ``seed``, else ``training.seed`` of the config."""
        return self.seed if self.seed is not None else cfg.training.seed

    seed: int | None = Field(
        None, ge=0, description="Training seed. Empty: training.seed of the config (the guide's 42 by default)."
    )
    fresh: bool = Field(False, description="Start over instead of resuming (and ignore a cached result).")
    parent_run_id: str | None = Field(
        None, description="MLflow run the seed's run nests under (set by a multi-seed or pipeline run)."
    )


class MultiSeedParams(RunParams):
    """multi-seed-train: every seed in sequence under one parent MLflow run."""

    seeds: Seeds = Field(None, description=TRAIN_SEEDS_HELP)
    fresh: bool = Field(False, description="Start every seed over instead of resuming.")
    parent_run_id: str | None = Field(
        None, description="MLflow run the multi-seed parent run nests under (set by a sweep: its run per sweep)."
    )


class TrainParams(MultiSeedParams):
    """`rts train`: one seed (the train-seed flow: ``seed``, else training.seed of the config) or several in
    sequence under one parent MLflow run (the multi-seed-train flow: ``seeds``)."""

    seed: int | None = Field(
        None,
        ge=0,
        description="Seed of a single-seed run (train-seed flow); overrides training.seed of the config, which "
        "is the default.",
    )
    seeds: Seeds = Field(
        None, description="Train these seeds in sequence under one parent run (multi-seed-train flow)."
    )

    @model_validator(mode="after")
    def _one_of_seed_and_seeds(self) -> TrainParams:
        if self.seed is not None and self.seeds:
            raise ValueError("--seed and --seeds: give one (--seeds trains several seeds under one parent run)")
        return self

    def flow_params(self) -> TrainSeedParams | MultiSeedParams:
        """The parameters of the flow that trains what was asked: every option that flow takes (``parent_run_id``
        included: the MLflow run the seed's or the multi-seed parent run nests under)."""
        if self.seeds:
            return derived(MultiSeedParams, self)
        return derived(TrainSeedParams, self)


class SeedStageParams(StageParams):
    """A stage over the trained seeds (calibrate, evaluate-test, package)."""

    seeds: Seeds = Field(
        None,
        description="Trained seeds to use. Empty: calibrate takes every seed trained in the run, evaluate-test "
        "and package the seeds of the last calibration.",
    )


class LogitCacheParams(StageParams):
    """logit-cache: one seed's Val-Realistic logit statistics (calibration/seed_<n>/logit_cache.zarr)."""

    seed: int = Field(..., ge=0, description="Trained seed whose logit cache to build.")


# What flows/fanout.py reads of a fan-out's settings, typed, bounded and defaulted once; each fan-out (a pipeline's
# stages, a campaign's chunks) words the help for its own runs. A setting fan_out comes to read is added to
# FanOutSettings, and mypy then names every settings model that lacks it.
MaxAttempts = Annotated[int, Field(ge=1)]
FanOutTimeout = Annotated[float, Field(gt=0)]
PollInterval = Annotated[float, Field(gt=0)]
JobVariables = dict[str, JsonValue]
MAX_ATTEMPTS = 3
FAN_OUT_TIMEOUT_S = 7 * 24 * 3600.0
POLL_INTERVAL_S = 10.0


@runtime_checkable
class FanOutSettings(Protocol):
    """A fan-out's settings as flows/fanout.py reads them (DistributedParams, MapDistributedParams)."""

    @property
    def max_attempts(self) -> int: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def poll_interval_s(self) -> float: ...
    @property
    def job_variables(self) -> JobVariables: ...


class DistributedParams(FormModel):
    """How a distributed pipeline runs its GPU stages: one train-seed and one logit-cache flow run per seed and
    one evaluate-test flow run, each on its deployment's (GPU) work pool; the parent only decides and packages."""

    deployment: Annotated[str, Cli(flag="--train-deployment")] = Field(
        TRAIN_SEED_DEPLOYMENT,
        description="Training: deployment started once per seed, as '<flow name>/<deployment name>'; its work "
        "pool decides where training runs (prefect.yaml: stage-train-seed on the 'gpu' pool).",
    )
    logit_cache_deployment: str = Field(
        LOGIT_CACHE_DEPLOYMENT,
        description="Calibration logit caches: deployment started once per seed (prefect.yaml: stage-logit-cache on "
        "the 'gpu' pool); the pipeline run itself then decides TTA, scales, temperature and threshold.",
    )
    evaluate_test_deployment: str = Field(
        EVALUATE_TEST_DEPLOYMENT,
        description="Test evaluation: deployment started once over all seeds (prefect.yaml: stage-evaluate-test on "
        "the 'gpu' pool).",
    )
    max_attempts: MaxAttempts = Field(
        MAX_ATTEMPTS,
        description="Runs per seed (per stage) when its run crashes, i.e. its worker vanished (a pre-empted or "
        "killed machine): a crashed run is re-submitted until this many ran (a new training run resumes from the "
        "checkpoint recorded in the run directory). A run that failed (its code raised) is not re-submitted.",
    )
    timeout_s: FanOutTimeout = Field(
        FAN_OUT_TIMEOUT_S,
        description="Wait at most this long (seconds) for all runs of a stage; the pipeline then fails naming "
        "the runs still going (a retry of the pipeline re-attaches to them).",
    )
    poll_interval_s: PollInterval = Field(
        POLL_INTERVAL_S, description="Seconds between checks of the child runs' states."
    )
    job_variables: JobVariables = Field(
        default_factory=dict,
        description="Job variables for every child run, over the deployment's (e.g. "
        '{"env": {"CUDA_VISIBLE_DEVICES": "1"}} on a process pool, {"accelerator_count": 4} on Vertex AI: with '
        "training.devices auto, each seed then trains on the 4 GPUs of its machine).",
    )


class PipelineParams(DataParams):
    """The full pipeline: data -> multi-seed training -> calibrate -> evaluate-test -> package."""

    seeds: Seeds = Field(None, description=TRAIN_SEEDS_HELP)
    execution: Literal["local", "distributed"] = Field(
        "local",
        description="local: every stage runs inside this flow run. distributed: the GPU stages run as their own "
        "flow runs on the deployments below (a GPU pool): train-seed and logit-cache once per seed, evaluate-test "
        "once; this run waits for them, decides the calibration from the caches and packages.",
    )
    distributed: DistributedParams = Field(
        default_factory=DistributedParams,
        title="Distributed execution",
        description="Fan-out settings (used when execution is distributed).",
    )

    def data(self) -> DataParams:
        """The data pipeline's parameters: this run's (every DataParams field)."""
        return derived(DataParams, self)

    def stage(self, seeds: list[int]) -> SeedStageParams:
        """A stage over ``seeds`` of this run (calibrate, evaluate-test, package)."""
        return derived(SeedStageParams, self, seeds=seeds)

    def multi_seed(self) -> MultiSeedParams:
        """The training of this run's seeds; ``refresh`` starts them over (``fresh``)."""
        return derived(MultiSeedParams, self, fresh=self.refresh)


# ---------------------------------------------------------------------------------------------- mapping
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


# ---------------------------------------------------------------------------------------------- review
class ReviewExportParams(FormModel):
    """review-export: a campaign's objects chosen for review, each as a chip of the scene around it (read as
    inference reads it) with its outline, probability, scale bar and ground area, a review manifest, the review
    page (index.html: opens from the file system or a bucket) and Label Studio tasks. Resumes; docs/review.md."""

    campaign: Annotated[str, Cli(parse=data_root_location)] = Field(
        ...,
        description="The campaign's output root (rts map / map-region): objects.gpkg, index.geojson, summary.json; "
        "a local directory or gs://bucket/prefix.",
    )
    package: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="The deployment package that mapped the campaign (checked against its summary.json): its raster "
        "contract reads the chips as inference read the scenes.",
    )
    output: Annotated[str, Cli(parse=run_location)] = Field(
        ..., description="Review directory: a local directory or gs://bucket/prefix (the page opens from either)."
    )
    select: Literal["all", "min-prob", "stratified", "uncertain"] = Field(
        "all",
        description="Which objects: all; min-prob (prob_max at least --min-prob); stratified (--n objects spread "
        "over probability bin x size bin x region, seeded); uncertain (the --n objects whose mean probability is "
        "closest to the package's threshold).",
    )
    min_prob: float | None = Field(None, ge=0, le=1, description="select min-prob: least prob_max reviewed.")
    n: int | None = Field(None, ge=1, description="select stratified or uncertain: how many objects.")
    seed: int = Field(0, description="select stratified: the sample's seed (same seed, same objects).")
    tiling_config: Annotated[str | None, Cli(parse=local_file)] = Field(
        None,
        description="The tiling config the training data was cut with: each object's region and split (its grid "
        "cell's, by the config's regions and splits), a stratum of the stratified sample. Empty: no regions.",
    )
    context: float = Field(0.5, ge=0, le=4, description="Context around an object, a fraction of its size per side.")
    min_chip_px: int = Field(64, ge=16, le=4096, description="Least chip side (scene pixels, never resampled).")
    max_chip_px: int = Field(1024, ge=16, le=8192, description="Most chip side; a larger object is centred.")
    label_studio_image_root: str | None = Field(
        None,
        description="URL prefix of the chips in Label Studio tasks (e.g. gs://bucket/review/ with cloud storage). "
        "Empty: Label Studio's local-files form /data/local-files/?d=<review dir name>/.",
    )
    overwrite: bool = Field(
        False, description="Replace a review directory that holds another review (different selection or campaign)."
    )

    @model_validator(mode="after")
    def _selection_values(self) -> ReviewExportParams:
        if self.select == "min-prob" and self.min_prob is None:
            raise ValueError("select min-prob needs min_prob (--min-prob)")
        if self.select in ("stratified", "uncertain") and self.n is None:
            raise ValueError(f"select {self.select} needs n (--n)")
        return self


class ReviewIngestParams(FormModel):
    """review-ingest: reviewers' verdicts into the next dataset version: confirmed RTS join the polygon inventory,
    false positives become hard-negative tiles cut by rts tile from the same scenes, unsure ones are left out;
    regions keep their split (val/test never feed train). Everything is checked before anything is written;
    docs/review.md."""

    review: Annotated[str, Cli(parse=data_root_location)] = Field(
        ..., description="The review directory rts review export wrote (review.json, manifest.jsonl)."
    )
    verdicts: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="The verdict file: the GeoJSON the review page exports, or a Label Studio JSON export of the "
        "review's tasks.",
    )
    tiling_config: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="The tiling config of the current dataset (rts tile): its scenes, inventory, regions and splits "
        "are the parent of the next round's.",
    )
    output: Annotated[str, Cli(parse=local_output)] = Field(
        ..., description="The next round's data root (the tile layout, cut by rts tile; review/ records how)."
    )
    held_out: Literal["refuse", "skip", "add"] = Field(
        "refuse",
        description="Judged objects in a val or test region: refuse (nothing written, the objects named), skip (left "
        "out, recorded) or add (to their own split: the val/test set changes between rounds). Never train.",
    )
    new_regions: Literal["refuse", "train"] = Field(
        "refuse", description="Judged objects in a region of no split: refuse, or add that region to train."
    )
    campaign: Annotated[str | None, Cli(parse=data_root_location)] = Field(
        None, description="The campaign's output root when it moved since the export (default: the one recorded)."
    )
    version: str | None = Field(None, description="The new dataset version's name (default: the parent's + r<N>).")
    pipeline_config: Annotated[str | None, Cli(parse=local_file)] = Field(
        None,
        description="A pipeline config to retarget: written as <output>/review/pipeline.yaml with every GeoTIFF "
        "data_root pointing at --output, for `rts run` of the next round.",
    )
    min_distance_m: float = Field(
        0.0,
        ge=0,
        description="Ground metres every new train tile keeps from the val/test tiles (and every new val/test tile "
        "from train): the pipeline's splits.min_distance_m. 0: they may touch, never overlap. No new tile overlaps a "
        "tile of another split in any case, val and test included.",
    )


# ---------------------------------------------------------------------------------------------- sweeps
def default_sweep_dir(data: dict[str, Any]) -> str:
    """``artifacts/sweeps/<sweep file name>``: the sweep directory when none is given."""
    return str(Path("artifacts") / "sweeps" / Path(str(data.get("sweep", "sweep"))).stem)


class SweepParams(FormModel):
    """sweep: every variant of a sweep file trained over the same seeds, judged against the baseline within seed
    noise (docs/experiments.md); the chosen variant then runs the after-training stages."""

    sweep: Annotated[str, Cli(positional=True, parse=local_file)] = Field(
        ...,
        description="Sweep file YAML on the worker (e.g. configs/sweeps/quickstart.yaml): a base config, variants "
        "as dotted-key overrides, seeds, the deciding metric.",
    )
    sweep_dir: Annotated[str, Cli(flag="--dir", parse=run_location)] = Field(
        default_factory=default_sweep_dir,
        description="Sweep directory: plan.json, report.md/json/png and variants/<name>/ (a run directory per "
        "variant): a local path or gs://bucket/prefix. Empty: artifacts/sweeps/<sweep file name>.",
    )
    execution: Literal["local", "distributed"] = Field(
        "local",
        description="local: every variant x seed trains inside this flow run, one after another. distributed: one "
        "train-seed flow run per variant x seed on the training deployment (a GPU pool), all at once.",
    )
    distributed: DistributedParams = Field(
        default_factory=DistributedParams,
        title="Distributed execution",
        description="Fan-out settings (used when execution is distributed).",
    )
    until_decided: bool = Field(
        False,
        description="Add seeds to every undecided variant (and the baseline) until each is decided or reaches "
        "until_decided.max_seeds of the sweep file.",
    )
    deterministic: OptionalSwitch = Field(
        None,
        description="Deterministic training on or off for every variant, over training.deterministic of the "
        "config; unset (config): as the config says.",
    )


class SweepCommandParams(SweepParams):
    """sweep: every variant of a sweep file trained over the same seeds, judged against the baseline within seed
    noise (docs/experiments.md); the chosen variant then runs the after-training stages. `rts sweep --status` prints
    the table of a sweep instead (the command line only: the sweep flow's form has no such field)."""

    status: bool = Field(
        False, description="Print the table of a running or finished sweep from its directory, and exit (no work)."
    )

    def flow_params(self) -> SweepParams:
        """The sweep flow's parameters: every field but ``status``."""
        return derived(SweepParams, self)
