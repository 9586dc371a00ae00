"""Typed flow parameters: one pydantic model per flow, so the Prefect UI shows a form with field help.

This module holds what every flow's model builds on and the pipeline's stages (data, training, calibration, the
distributed fan-out); the mapping, review and sweep flows' models are in its submodules ``mapping``, ``review`` and
``sweep``.

Every flow takes a single ``params`` argument. From Python pass a model (``pipeline(PipelineParams(...))``);
from a deployment, the UI, ``prefect deployment run --params`` or ``run_deployment`` pass the same fields as
a JSON object under ``params`` (``{"params": {"config": "configs/quickstart.yaml", "run_dir": "..."}}``):
Prefect validates it into the model before the flow starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import AfterValidator, BaseModel, Field, JsonValue, model_validator

from flows.fields import Cli, local_file, local_output, run_location
from flows.form import FormModel, OptionalSwitch
from rtscore.config import PipelineConfig
from rtscore.config.overrides import check_override_keys

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
