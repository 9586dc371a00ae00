"""The training/pipeline config (`configs/baseline.yaml`): every section the training guide cites.

The sections are models of their own modules (data, channels, splits and normalization in
:mod:`rtscore.config.data`; sampling, loss, training, optimizer, LR schedule and EMA in
:mod:`rtscore.config.training`; :mod:`rtscore.config.model`; :mod:`rtscore.config.metrics`; deployment,
calibration, evaluation and package in :mod:`rtscore.config.deployment` and :mod:`rtscore.config.post_training`);
:class:`PipelineConfig` holds them with the checks that span sections, and is loaded here. The rest of the code
imports every section's model from this module."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from rtscore.config.augmentation import AugmentationConfig
from rtscore.config.base import (
    SCHEMA_VERSION,
    ConfigError,
    StrictModel,
    format_validation_error,
    read_yaml,
)
from rtscore.config.binding import ExtraChannel, binding_conflicts
from rtscore.config.data import (
    ChannelsConfig,
    DataConfig,
    GenerationRefs,
    LoaderConfig,
    NormalizationConfig,
    SplitsConfig,
)
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.metrics import DEFAULT_MIN_OBJECT_AREA_M2, MetricsConfig, min_blob_size_renamed
from rtscore.config.model import (
    DINOV3_VITS,
    DPT_BACKBONES,
    DPT_DECODER_LEVELS,
    DPT_TILE_MULTIPLE,
    VIT_PATCH_SIZE,
    ArchitectureName,
    ModelConfig,
    dinov3_tags,
    nearest_multiples,
)
from rtscore.config.overrides import apply_overrides, describe
from rtscore.config.post_training import CalibrationConfig, EvaluationConfig, PackageConfig
from rtscore.config.training import (
    CheckpointConfig,
    CurriculumStage,
    EarlyStoppingConfig,
    EMAConfig,
    LossConfig,
    LRScheduleConfig,
    OptimizerConfig,
    SamplingConfig,
    TrainingConfig,
)

__all__ = [
    "DEFAULT_MIN_OBJECT_AREA_M2",
    "DINOV3_VITS",
    "DPT_BACKBONES",
    "DPT_DECODER_LEVELS",
    "DPT_TILE_MULTIPLE",
    "VIT_PATCH_SIZE",
    "ArchitectureName",
    "AugmentationConfig",
    "CalibrationConfig",
    "ChannelsConfig",
    "CheckpointConfig",
    "CurriculumStage",
    "DataConfig",
    "DeploymentConfig",
    "EMAConfig",
    "EarlyStoppingConfig",
    "EvaluationConfig",
    "ExtraChannel",
    "GenerationRefs",
    "LRScheduleConfig",
    "LoaderConfig",
    "LossConfig",
    "MLflowConfig",
    "MetricsConfig",
    "ModelConfig",
    "NormalizationConfig",
    "OptimizerConfig",
    "PackageConfig",
    "PipelineConfig",
    "SamplingConfig",
    "SplitsConfig",
    "TrainingConfig",
    "dinov3_tags",
    "load_pipeline_config",
    "min_blob_size_renamed",
    "nearest_multiples",
    "parse_pipeline_config",
]


class MLflowConfig(StrictModel):
    enabled: bool = Field(True, description="Track runs in MLflow.")
    tracking_uri: str | None = Field(None, description="Tracking URI; null = SQLite under the artifact root.")
    experiment_name: str = Field("rts-segmentation", min_length=1, description="MLflow experiment.")


class PipelineConfig(StrictModel):
    """The whole run: data stages, training, calibration inputs (one YAML, guide's baseline.yaml)."""

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Config schema version.")
    data: DataConfig = Field(default_factory=DataConfig, description="Datasets and loading.")
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig, description="Input channels.")
    splits: SplitsConfig = Field(default_factory=SplitsConfig, description="Spatial blocking.")
    normalization: NormalizationConfig = Field(default_factory=NormalizationConfig, description="Stats.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Balanced curriculum sampling.")
    augmentation: AugmentationConfig = Field(default_factory=AugmentationConfig, description="Augmentation.")
    loss: LossConfig = Field(default_factory=LossConfig, description="Loss.")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="Training loop.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer.")
    lr_schedule: LRScheduleConfig = Field(default_factory=LRScheduleConfig, description="LR schedule.")
    ema: EMAConfig = Field(default_factory=EMAConfig, description="EMA.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Model.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="Metrics.")
    mlflow: MLflowConfig = Field(default_factory=MLflowConfig, description="Tracking.")
    deployment: DeploymentConfig = Field(default_factory=DeploymentConfig, description="Deployment numerics.")
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig, description="Gates and calibration.")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig, description="Test evaluation.")
    package: PackageConfig = Field(default_factory=PackageConfig, description="Deployment package.")

    @model_validator(mode="after")
    def check_precision_parity(self) -> PipelineConfig:
        if self.training.precision != self.deployment.precision:
            raise ValueError(
                f"training.precision ({self.training.precision}) must equal deployment.precision "
                f"({self.deployment.precision}) (guide §4.6, calibration-deployment parity)"
            )
        return self

    @model_validator(mode="after")
    def check_tile_sizes(self) -> PipelineConfig:
        for split, gen in self.data.generation.items():
            if gen.tile_size != self.data.tile_size:
                raise ValueError(
                    f"data.generation.{split}.tile_size ({gen.tile_size}) differs from data.tile_size "
                    f"({self.data.tile_size})"
                )
            if gen.split != split:
                raise ValueError(f"data.generation.{split} generates split {gen.split!r}, expected {split!r}")
        return self

    @model_validator(mode="after")
    def check_model_input_size(self) -> PipelineConfig:
        """dpt: the tile (the model's input in training, calibration, the 0.5x context pass and predict) is cut
        into 16-px patches and DPT halves the patch grid once: data.tile_size a multiple of 32."""
        size = self.data.tile_size
        if self.model.architecture == "dpt" and size % DPT_TILE_MULTIPLE:
            raise ValueError(
                f"data.tile_size ({size}) must be a multiple of {DPT_TILE_MULTIPLE} for model.architecture dpt "
                f"(the ViT reads {VIT_PATCH_SIZE}-px patches and DPT's coarsest level halves the patch grid); "
                f"nearest valid sizes: {nearest_multiples(size, DPT_TILE_MULTIPLE)}"
            )
        return self

    @model_validator(mode="after")
    def check_schedule(self) -> PipelineConfig:
        lr = self.lr_schedule
        if self.training.max_epochs <= lr.freeze_backbone_epochs + lr.warmup_epochs:
            raise ValueError(
                f"training.max_epochs ({self.training.max_epochs}) must exceed lr_schedule.freeze_backbone_epochs "
                f"+ lr_schedule.warmup_epochs ({lr.freeze_backbone_epochs + lr.warmup_epochs}): cosine T_max <= 0"
            )
        return self

    @model_validator(mode="after")
    def check_extra_channels_generated(self) -> PipelineConfig:
        """Every channels.extra entry is stored by each split's generation, from the same EXTRA band."""
        names = [c.name for c in self.channels.extra]
        for split, gen in self.data.generation.items():
            missing = [n for n in names if n not in gen.extra_channels]
            if missing:
                raise ValueError(
                    f"channels.extra names {missing} are not generated by data.generation.{split} "
                    f"(extra_channels: {gen.extra_channels})"
                )
            conflicts = binding_conflicts(self.channels.extra, gen.input_binding.bands_by_name())
            if conflicts:
                key = "geotiff.extra_channels" if gen.source == "geotiff" else "synthetic.extra_channels (by position)"
                raise ValueError(
                    f"channels.extra and data.generation.{split}.{key} bind channels to different EXTRA bands: "
                    f"{'; '.join(conflicts)}. Training would read one band and predict/drift another: make the "
                    "two bindings equal"
                )
        return self

    @model_validator(mode="after")
    def check_calibration_candidates(self) -> PipelineConfig:
        cal, dep = self.calibration, self.deployment
        if dep.tta not in cal.tta_candidates:
            raise ValueError(
                f"deployment.tta ({dep.tta!r}) is not among calibration.tta_candidates {cal.tta_candidates}: "
                "calibration could not measure the configuration it is asked to calibrate"
            )
        missing = [s for s in dep.scales if s not in cal.scale_candidates]
        if missing:
            raise ValueError(
                f"deployment.scales {dep.scales} holds {missing}, not among calibration.scale_candidates "
                f"{cal.scale_candidates}"
            )
        if len(dep.scales) > 1 and dep.fusion not in cal.fusion_candidates:
            raise ValueError(
                f"deployment.fusion ({dep.fusion!r}) is not among calibration.fusion_candidates {cal.fusion_candidates}"
            )
        return self

    @model_validator(mode="after")
    def check_half_scale_input(self) -> PipelineConfig:
        """Shipping 0.5x (guide §8.3: each tile's 2x field of view, downsampled) needs the val and test tiles' 0.5x
        input, which only the synthetic source writes (its context stores): a GeoTIFF val or test split is refused
        here, when the config loads, instead of at the logit cache after training. The scale gate itself may stay
        on: it reports the 0.5x candidate as not evaluated."""
        cal, dep = self.calibration, self.deployment
        asks = [f"deployment.scales is {dep.scales}"] if any(s != 1.0 for s in dep.scales) else []
        asks += ["calibration.allow_multiscale_deployment is true"] if cal.allow_multiscale_deployment else []
        geotiff = [s for s, gen in self.data.generation.items() if s in ("val", "test") and gen.source == "geotiff"]
        if asks and geotiff:
            splits = " and ".join(f"data.generation.{s}" for s in geotiff)
            raise ValueError(
                f"{' and '.join(asks)}, but {splits} read a GeoTIFF data root: the 0.5x input (each tile's 2x field "
                "of view, downsampled; guide §8.3) is built only for the synthetic source, so calibration and the "
                "test report could not measure a multi-scale deployment. hint: set deployment.scales: [1.0] and "
                "calibration.allow_multiscale_deployment: false (the scale gate then reports 0.5x as not evaluated)"
            )
        return self


def load_pipeline_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> PipelineConfig:
    """Load a pipeline config, resolving generation-config paths relative to the file.

    ``overrides`` sets dotted keys of the file's mapping before it is validated (:mod:`rtscore.config.overrides`);
    an error then says the config is the file with those overrides."""
    p = Path(path)
    data = read_yaml(p)
    if data is None or not isinstance(data, dict):
        raise ConfigError(f"invalid config {p}: expected a mapping at the top level")
    source = str(p)
    if overrides:
        data = apply_overrides(data, overrides, f"override of {p}")
        source = f"{p} with overrides {describe(overrides)}"
    try:
        return PipelineConfig.model_validate(data, context={"base_dir": str(p.resolve().parent)})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def parse_pipeline_config(data: dict[str, Any], base_dir: str | Path = ".") -> PipelineConfig:
    """Validate an in-memory pipeline config (paths resolved against ``base_dir``)."""
    try:
        return PipelineConfig.model_validate(data, context={"base_dir": str(base_dir)})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, "<dict>")) from None
