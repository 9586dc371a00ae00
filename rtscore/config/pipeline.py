"""The training/pipeline config (`configs/baseline.yaml`): every section the training guide cites."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from rtscore.config.augmentation import AugmentationConfig
from rtscore.config.base import (
    SCHEMA_VERSION,
    ConfigError,
    StrictModel,
    format_validation_error,
    read_yaml,
)
from rtscore.config.binding import RGB_NAMES, ExtraChannel, InputBinding, binding_conflicts, check_extra_channels
from rtscore.config.deployment import DeploymentConfig, Precision
from rtscore.config.generation import GenerationConfig, with_absolute_data_root
from rtscore.config.overrides import apply_overrides, describe
from rtscore.config.post_training import CalibrationConfig, EvaluationConfig, PackageConfig


# --------------------------------------------------------------------------- data
class LoaderConfig(StrictModel):
    """DataLoader settings (guide §9.1, Data Loading)."""

    num_workers: int = Field(8, ge=0, le=128, description="DataLoader worker processes (per GPU).")
    pin_memory: bool = Field(True, description="Pin host memory for faster host-to-GPU copies.")
    prefetch_factor: int = Field(2, ge=1, le=64, description="Batches prefetched per worker.")
    persistent_workers: bool = Field(True, description="Keep workers alive across epochs.")
    drop_last: bool = Field(
        True,
        description="Drop the last incomplete training batch: the positives (or, unbalanced, the tiles) of an "
        "epoch that do not fill a whole batch wait for the next epoch. false: they go in one smaller last batch "
        "with negatives in the epoch's proportion. No effect when training.steps_per_epoch is set (every batch "
        "is whole); validation and evaluation never drop tiles.",
    )


class GenerationRefs(StrictModel):
    """Generation config per split: a path (relative to this config file) or an inline mapping."""

    train: GenerationConfig | None = Field(None, description="Generation config of the train split.")
    val: GenerationConfig | None = Field(None, description="Generation config of the validation split.")
    test: GenerationConfig | None = Field(None, description="Generation config of the test split.")

    @field_validator("train", "val", "test", mode="before")
    @classmethod
    def _load_path(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, str):
            base = Path((info.context or {}).get("base_dir", "."))
            path = (base / v).resolve()
            data = read_yaml(path)
            if not isinstance(data, dict):
                raise ValueError(f"generation config {path} must be a mapping")
            try:
                return with_absolute_data_root(GenerationConfig.model_validate(data), path.parent)
            except ValidationError as err:  # re-raised with the file and the inner key paths named
                raise ValueError(format_validation_error(err, str(path))) from None
        if isinstance(v, dict) and isinstance(v.get("geotiff"), dict):
            base = Path((info.context or {}).get("base_dir", "."))
            return with_absolute_data_root(GenerationConfig.model_validate(v), base)
        return v

    def items(self) -> list[tuple[str, GenerationConfig]]:
        return [(s, g) for s in ("train", "val", "test") if (g := getattr(self, s)) is not None]


class DataConfig(StrictModel):
    """Which datasets the run uses and how they are read."""

    generation: GenerationRefs = Field(default_factory=GenerationRefs, description="Per-split generation configs.")
    tile_size: int = Field(512, ge=32, le=4096, description="Model input size; must match the stores.")
    mask_type: Literal["exact", "noisy"] = Field("exact", description="Which label variant trains the model.")
    nodata_handling: bool = Field(
        True,
        description="Alpha-keyed NoData: alpha-0 pixels get label 255 and the channel's training mean "
        "(never keyed off zero-valued pixels, guide §4.4 caveat).",
    )
    exclude_full_nodata: bool = Field(True, description="Skip tiles that are entirely NoData (guide §4.4).")
    skip_generation: bool = Field(False, description="Use existing stores in the run directory; do not generate.")
    additional_roots: list[str] = Field(
        default_factory=list, description="Extra train stores (e.g. a 0.5x context-expanded store) joined to train."
    )
    loader: LoaderConfig = Field(default_factory=LoaderConfig, description="DataLoader settings.")


class ChannelsConfig(StrictModel):
    """Input channels: RGB always, then the listed EXTRA bands (early fusion)."""

    extra: list[ExtraChannel] = Field(
        default_factory=list,
        description="Auxiliary channels appended after RGB, each bound to a 0-based band of the EXTRA raster; the "
        "one binding the stores, stats, package, predict and drift read (docs/geotiff.md).",
    )

    @field_validator("extra")
    @classmethod
    def _unique(cls, v: list[ExtraChannel]) -> list[ExtraChannel]:
        return check_extra_channels(v)

    @property
    def names(self) -> list[str]:
        return [*RGB_NAMES, *(c.name for c in self.extra)]

    @property
    def binding(self) -> InputBinding:
        """R, G, B and these EXTRA channels bound to their raster bands."""
        return InputBinding.of_extra(self.extra)

    @property
    def count(self) -> int:
        return 3 + len(self.extra)


class SplitsConfig(StrictModel):
    """Spatial blocking: region names per split (whole regions go to one split)."""

    train: list[str] | None = Field(None, description="Regions of the train split (None: take from the data).")
    val: list[str] | None = Field(None, description="Regions of the validation split.")
    test: list[str] | None = Field(None, description="Regions of the test split.")
    min_test_positives: int = Field(
        100,
        ge=0,
        description="Least positive tiles the test split must hold: a split derived for a GeoTIFF root without "
        "splits.yaml must meet it; validate-data warns when a test store holds fewer. The one key of this rule "
        "(generation configs have none).",
    )
    min_val_regions: int = Field(
        2,
        ge=1,
        description="Least regions the validation split must span: a derived split must meet it and "
        "validate-data fails a val store that spans fewer.",
    )
    min_val_positives: int = Field(
        20,
        ge=0,
        description="Least positive tiles the validation split should hold: val PR-AUC drives early stopping and "
        "the choice of the best checkpoint, and on fewer than 20 positive tiles one tile moves tile recall by 5 "
        "points or more and its standard error (~0.1 at recall 0.7) swamps the epoch-to-epoch changes those "
        "decisions compare. A warning, not a failure (a thin val still trains): a derived split prefers one that "
        "meets it and lists it in its warnings; validate-data warns when a val store holds fewer (0: never).",
    )
    min_distance_m: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="Ground metres every train tile must keep from every val and test tile (spatial blocking by "
        "geometry, guide §10.1), measured between the tiles' footprints (GeoTIFF stores record them). 0: footprints "
        "may touch (adjacent regions on one grid) but not overlap. validate-data fails a train tile closer than "
        "this, naming both tiles; stores without footprints (synthetic) are checked by region and tile id only.",
    )

    @model_validator(mode="after")
    def _check_disjoint(self) -> SplitsConfig:
        seen: dict[str, str] = {}
        for split in ("train", "val", "test"):
            for region in getattr(self, split) or []:
                if region in seen:
                    raise ValueError(f"region {region!r} is in splits.{seen[region]} and splits.{split}")
                seen[region] = split
        return self


class NormalizationConfig(StrictModel):
    """Per-channel statistics from the train split only (guide §4.1, §4.5)."""

    clip_percentiles: tuple[float, float] | None = Field(
        None, description="Clip values to these percentiles before computing mean/std (null: no clipping)."
    )
    max_tiles: int | None = Field(None, ge=1, description="Use at most this many train tiles (null: all).")

    @field_validator("clip_percentiles")
    @classmethod
    def _pct(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0.0 <= v[0] < v[1] <= 100.0:
            raise ValueError(f"expected 0 <= low < high <= 100; got {v}")
        return v


# --------------------------------------------------------------------------- sampling
class CurriculumStage(StrictModel):
    """Negatives per positive for an inclusive 1-based epoch range."""

    start_epoch: int = Field(..., ge=1, description="First epoch of the stage (1-based, inclusive).")
    end_epoch: int | None = Field(..., description="Last epoch (inclusive); null = until training ends.")
    neg_per_pos: float = Field(..., ge=0.0, description="Negative tiles per positive tile in the epoch.")


def _default_curriculum() -> list[CurriculumStage]:
    rows = [(1, 10, 1.0), (11, 30, 5.0), (31, 50, 10.0), (51, 100, 15.0), (101, None, 20.0)]
    return [CurriculumStage(start_epoch=a, end_epoch=b, neg_per_pos=r) for a, b, r in rows]


class SamplingConfig(StrictModel):
    """Balanced batch sampling and the negative-ratio curriculum (guide §7)."""

    balanced: bool = Field(True, description="Compose batches from positive and negative tiles.")
    positive_fraction: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="Share of positive tiles per batch in the balanced phase: the epochs of curriculum stages at "
        "1:1 (neg_per_pos 1; the guide's epochs 1-10). Every other stage's batches hold exactly its own odds, "
        "1 / (1 + neg_per_pos) positives (1:20 -> 1 in 21), whatever this is (guide §7.3).",
    )
    curriculum_schedule: list[CurriculumStage] = Field(
        default_factory=_default_curriculum, description="Step-wise epoch ranges of neg:pos (guide §7.3)."
    )

    @field_validator("curriculum_schedule")
    @classmethod
    def _contiguous(cls, v: list[CurriculumStage]) -> list[CurriculumStage]:
        if not v:
            raise ValueError("needs at least one stage")
        if v[0].start_epoch != 1:
            raise ValueError(f"the first stage must start at epoch 1; got {v[0].start_epoch}")
        for i, (a, b) in enumerate(pairwise(v)):
            if a.end_epoch is None:
                raise ValueError(f"stage [{i}] is open-ended (end_epoch null) but stage [{i + 1}] follows")
            if a.end_epoch < a.start_epoch:
                raise ValueError(f"stage [{i}] ends ({a.end_epoch}) before it starts ({a.start_epoch})")
            if b.start_epoch != a.end_epoch + 1:
                kind = "gap" if b.start_epoch > a.end_epoch + 1 else "overlap"
                raise ValueError(
                    f"{kind} between stage [{i}] (ends {a.end_epoch}) and [{i + 1}] (starts {b.start_epoch})"
                )
        last = v[-1]
        if last.end_epoch is not None and last.end_epoch < last.start_epoch:
            raise ValueError(f"last stage ends ({last.end_epoch}) before it starts ({last.start_epoch})")
        return v

    @model_validator(mode="after")
    def _positive_fraction_has_a_phase(self) -> SamplingConfig:
        """A positive_fraction other than the curriculum's own 1:1 share must have a balanced phase to act in."""
        balanced_phase = any(s.neg_per_pos == 1.0 for s in self.curriculum_schedule)
        if self.balanced and self.positive_fraction != 0.5 and not balanced_phase:
            raise ValueError(
                f"sampling.positive_fraction ({self.positive_fraction}) sets the batches of the balanced phase "
                "(curriculum stages at neg_per_pos 1), but sampling.curriculum_schedule has no such stage: it "
                "would have no effect; add a 1:1 stage or remove positive_fraction"
            )
        return self


# --------------------------------------------------------------------------- loss
class LossConfig(StrictModel):
    """Loss on logits (guide §5); ignore index 255 always honoured."""

    name: Literal["focal", "bce", "dice", "tversky", "compound", "class_balanced_ce"] = Field(
        "focal", description="Loss family."
    )
    focal_gamma: float = Field(2.0, ge=0.0, le=10.0, description="Focal gamma.")
    focal_alpha: float = Field(0.25, gt=0.0, lt=1.0, description="Focal alpha (weight of the positive class).")
    tversky_alpha: float = Field(0.3, gt=0.0, lt=1.0, description="Tversky weight on false negatives.")
    tversky_beta: float = Field(0.7, gt=0.0, lt=1.0, description="Tversky weight on false positives.")
    compound_focal_weight: float = Field(1.0, ge=0.0, description="lambda_1 of focal + dice.")
    compound_dice_weight: float = Field(1.0, ge=0.0, description="lambda_2 of focal + dice.")
    class_weighting: Literal["linear", "sqrt", "log"] = Field(
        "sqrt",
        description="Class-balanced CE positive weight f(n_bg / n_rts) from the train split's pixel counts, computed "
        "once per run from the stores' tile metadata (guide §5.4).",
    )
    boundary_handling: Literal["none", "ignore", "soft_labels"] = Field(
        "none", description="Label-boundary treatment (guide §5.5)."
    )
    boundary_ignore_width: int = Field(
        2, ge=0, le=64, description="Pixels each side of a label boundary set to ignore (or softened, soft_labels)."
    )
    soft_label_value: float = Field(0.05, ge=0.0, lt=0.5, description="Soft target near boundaries (bg side).")


# --------------------------------------------------------------------------- training
class EarlyStoppingConfig(StrictModel):
    metric: Literal["val_realistic_pr_auc_geomean"] = Field(
        "val_realistic_pr_auc_geomean",
        description="Geometric mean of the Val-Realistic PR-AUC over metrics.ratios: the guide's 1:200, 1:500 and "
        "1:1000 (§9.1) with the default ratios; other ratios redefine it.",
    )
    patience: int = Field(8, ge=1, description="Validation events without improvement before stopping.")
    min_delta: float = Field(0.005, ge=0.0, description="Least improvement of the smoothed metric that counts.")
    start_epoch: int = Field(101, ge=1, description="Stopping is disabled before this epoch.")
    smoothing_window: int = Field(3, ge=1, description="Moving average over this many validations.")


class CheckpointConfig(StrictModel):
    save_every_n_epochs: int = Field(10, ge=1, description="Write resume_latest.pth every N epochs.")
    keep_last_n: int = Field(3, ge=1, description="Rotating resume checkpoints kept.")


class TrainingConfig(StrictModel):
    """Loop settings (guide §9.1)."""

    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available.")
    devices: int | Literal["auto"] = Field(
        1,
        description="Ranks one seed trains on (torch DDP, launched by torch's elastic agent): 1; N GPUs (N CPU "
        "processes with device cpu); auto = every visible GPU (1 without). batch_size stays the global batch: "
        "each rank takes batch_size / N, so one step sees the same batch as on one device.",
    )
    precision: Precision = Field("bf16", description="Autocast precision; must equal deployment.precision.")
    batch_size: int = Field(
        32, ge=1, description="Global (effective) batch size of one optimizer step, over every device of the seed."
    )
    max_epochs: int = Field(300, ge=1, description="Upper bound on epochs.")
    steps_per_epoch: int | None = Field(
        None, ge=1, description="Batches per epoch (null: as many as the curriculum's epoch pool gives)."
    )
    val_frequency: int = Field(5, ge=1, description="Validate every N epochs.")
    seed: int = Field(42, ge=0, description="Seed of a single-seed run.")
    seeds: list[int] = Field(default_factory=lambda: [42, 43, 44], description="Seeds of the final multi-seed run.")
    deterministic: bool = Field(True, description="cudnn.deterministic, no benchmark, deterministic algorithms.")
    torch_compile: bool = Field(False, description="Compile the model with torch.compile.")
    channels_last: bool = Field(
        True, description="channels_last memory format (CUDA and CPU: 1.7x faster quickstart training on 2 cores)."
    )
    grad_clip_norm: float = Field(1.0, gt=0.0, description="Gradient clipping max norm.")
    early_stopping: EarlyStoppingConfig = Field(default_factory=EarlyStoppingConfig, description="Early stopping.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Resume checkpoints.")

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v) or any(s < 0 for s in v):
            raise ValueError(f"expected a non-empty list of distinct non-negative seeds; got {v}")
        return v

    @model_validator(mode="after")
    def _devices_divide_the_batch(self) -> TrainingConfig:
        if isinstance(self.devices, int) and self.devices < 1:
            raise ValueError(f"training.devices must be >= 1 or auto; got {self.devices}")
        if isinstance(self.devices, int) and self.batch_size % self.devices:
            raise ValueError(
                f"training.batch_size {self.batch_size} (the global batch) does not divide among "
                f"training.devices={self.devices}: each rank takes batch_size / devices tiles"
            )
        return self


class OptimizerConfig(StrictModel):
    name: Literal["adamw"] = Field("adamw", description="Optimizer.")
    weight_decay: float = Field(1e-2, ge=0.0, description="Decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam betas.")


class LRScheduleConfig(StrictModel):
    """Frozen phase at frozen_lr, then warmup + cosine (guide §9.1)."""

    frozen_lr: float = Field(1e-3, gt=0.0, description="Constant LR while the backbone is frozen.")
    base_lr: float = Field(1e-4, gt=0.0, description="Peak LR after unfreezing (decoder).")
    backbone_lr_multiplier: float = Field(0.1, gt=0.0, le=1.0, description="Encoder LR = base_lr x this.")
    freeze_backbone_epochs: int = Field(10, ge=0, description="Epochs with the encoder frozen.")
    warmup_epochs: int = Field(5, ge=0, description="Linear warmup epochs after unfreezing.")
    warmup_start_lr: float = Field(1e-6, gt=0.0, description="LR at the start of warmup.")
    min_lr: float = Field(1e-6, ge=0.0, description="Floor of the cosine.")


class EMAConfig(StrictModel):
    """EMA of the weights (guide §9.1: enabled, constant decay 0.999, used for validation and shipped)."""

    enabled: bool = Field(True, description="Keep an EMA of the weights; validate and ship it.")
    decay: float = Field(0.999, gt=0.0, lt=1.0, description="EMA decay per optimizer step.")
    warmup: bool = Field(
        False,
        description="Ramp the decay as min(decay, (1 + n) / (10 + n)) over the first updates (timm's recipe). "
        "Off by default: the guide's decay is a constant 0.999. Turn it on only for runs too short for a constant "
        "0.999 to forget the initialisation (a few hundred steps, e.g. the quickstart).",
    )


ArchitectureName = Literal["unetplusplus", "unet", "segformer", "dpt"]

# The DINOv3 ViTs timm ships (timm 1.0.31) and the pretrained tags of each (``timm/<name>.<tag>`` on the hub):
# the encoders `model.architecture: dpt` takes (guide §3.2, third candidate), as ``tu-<name>``. A test keeps this
# table equal to timm's own lists; written out here so a config loads without importing timm.
DINOV3_VITS: dict[str, tuple[str, ...]] = {
    "vit_small_patch16_dinov3": ("lvd1689m",),
    "vit_small_patch16_dinov3_qkvb": ("lvd1689m", "eupe_lvd1689m"),
    "vit_small_plus_patch16_dinov3": ("lvd1689m",),
    "vit_small_plus_patch16_dinov3_qkvb": ("lvd1689m",),
    "vit_tiny_patch16_dinov3_qkvb": ("eupe_lvd1689m",),
    "vit_base_patch16_dinov3": ("lvd1689m",),
    "vit_base_patch16_dinov3_qkvb": ("lvd1689m", "eupe_lvd1689m"),
    "vit_large_patch16_dinov3": ("lvd1689m", "sat493m"),
    "vit_large_patch16_dinov3_qkvb": ("lvd1689m", "sat493m"),
    "vit_huge_plus_patch16_dinov3": ("lvd1689m",),
    "vit_huge_plus_patch16_dinov3_qkvb": ("lvd1689m",),
    "vit_7b_patch16_dinov3": ("lvd1689m", "sat493m"),
}
DPT_BACKBONES = tuple(f"tu-{name}" for name in DINOV3_VITS)
VIT_PATCH_SIZE = 16
# DPT reassembles the ViT's patch grid at 4x, 2x, 1x and 1/2x and adds them up pairwise: the grid must be even.
DPT_TILE_MULTIPLE = 2 * VIT_PATCH_SIZE
DPT_DECODER_LEVELS = 4


def dinov3_tags(backbone: str) -> tuple[str, ...]:
    """The timm pretrained tags of a dpt backbone (``tu-<DINOv3 ViT>``); () for any other name."""
    return DINOV3_VITS.get(backbone.removeprefix("tu-"), ()) if backbone.startswith("tu-") else ()


def nearest_multiples(n: int, m: int) -> list[int]:
    """The multiples of ``m`` around ``n`` (the one below only when it is at least ``m``)."""
    below, above = n // m * m, (n // m + 1) * m
    return [v for v in (below, above) if v >= m]


class ModelConfig(StrictModel):
    architecture: ArchitectureName = Field(
        "unetplusplus",
        description="smp architecture. dpt: a DINOv3 ViT encoder from timm with smp's DPT dense head (guide §3.2, "
        "third candidate); data.tile_size a multiple of 32.",
    )
    backbone: str = Field(
        "efficientnet-b5",
        min_length=1,
        description="smp encoder name; for dpt a DINOv3 ViT as tu-<timm name> (tu-vit_small_patch16_dinov3, ...).",
    )
    encoder_weights: str | None = Field(
        "imagenet",
        description="'imagenet', null (random init) or a local weights file; for dpt a timm pretrained tag of the "
        "backbone (lvd1689m; sat493m for the large and 7b ViTs) instead of 'imagenet'.",
    )
    decoder_channels: list[int] | None = Field(
        None,
        description="Decoder widths (null: smp's default for the architecture; small values for CPU runs). dpt: the "
        "4 reassemble widths (smp's default [256, 512, 1024, 1024]), the first also the fusion width.",
    )
    head_prior: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="Initial RTS probability of the output layer (RetinaNet prior init, e.g. 0.01: stabilises "
        "focal-loss training from scratch); null = PyTorch's default init.",
    )

    @model_validator(mode="after")
    def _check_dpt(self) -> ModelConfig:
        """DPT takes the DINOv3 ViTs and nothing else takes them; weights and decoder widths in DPT's terms."""
        if self.architecture != "dpt":
            if self.backbone in DPT_BACKBONES:
                raise ValueError(
                    f"model.backbone {self.backbone!r} is a ViT, which only model.architecture dpt takes; got "
                    f"architecture {self.architecture!r}"
                )
            return self
        if self.backbone not in DPT_BACKBONES:
            name, _, tag = self.backbone.partition(".")
            hint = (
                f"; the pretrained tag goes in model.encoder_weights ({name!r} with encoder_weights {tag!r})"
                if tag and name in DPT_BACKBONES
                else ""
            )
            raise ValueError(
                f"model.backbone {self.backbone!r} is not an encoder model.architecture dpt takes: a DINOv3 ViT "
                f"from timm, one of {list(DPT_BACKBONES)}{hint}"
            )
        tags = dinov3_tags(self.backbone)
        if self.encoder_weights == "imagenet":
            raise ValueError(
                f"model.encoder_weights 'imagenet': {self.backbone} has no ImageNet weights; set it to a pretrained "
                f"tag of the backbone {list(tags)} (downloaded from the hub), a local weights file, or null (random "
                "initialisation)"
            )
        if self.decoder_channels is not None and (
            len(self.decoder_channels) != DPT_DECODER_LEVELS or min(self.decoder_channels) < 1
        ):
            raise ValueError(
                f"model.decoder_channels for dpt: {DPT_DECODER_LEVELS} positive widths, one per ViT block DPT "
                f"reads (smp's default [256, 512, 1024, 1024]; the first is also the fusion width); got "
                f"{self.decoder_channels}"
            )
        return self


# Default of metrics.min_object_area_m2 (and of packages that record none): 16 px at the synthetic 4.77 m ground
# pixel are 364 m²; 350 m² converts to those same 16 px there (ceil(350 / 22.75) = 16), so synthetic runs keep their
# results, and is a sixth of the smallest RTS the guide describes (~50 m across, ~2,000 m²): speckle goes, no RTS.
DEFAULT_MIN_OBJECT_AREA_M2 = 350.0


def min_blob_size_renamed(px: Any) -> str:
    """The message of a config that still sets ``metrics.min_blob_size_px``: the new key and the conversion."""
    n = px if isinstance(px, int | float) and not isinstance(px, bool) and px > 0 else 16
    return (
        "min_blob_size_px was replaced by min_object_area_m2: object sizes are ground areas, the same at every pixel "
        "size and in `rts map` (a size in pixels dropped every object under 1.4 km² at 300 m). Write "
        f"metrics.min_object_area_m2 in m²: {n:g} px x the ground area of one pixel of your tiles ({n:g} px at 4.77 m "
        f"= {n * 4.77**2:,.0f} m², at 300 m = {n * 300.0**2:,.0f} m²; default {DEFAULT_MIN_OBJECT_AREA_M2:g} m², 16 px "
        "at 4.77 m), and delete min_blob_size_px"
    )


class MetricsConfig(StrictModel):
    ratios: list[int] = Field(
        default_factory=lambda: [200, 500, 1000],
        description="Val/Test-Realistic prevalences 1:N, as N negatives per positive tile (distinct, >= 1; guide "
        "§10.3: 200, 500, 1000). training.early_stopping.metric is the geometric mean of the Val-Realistic "
        "PR-AUC over exactly these ratios.",
    )
    reporting_threshold: float = Field(0.5, gt=0.0, lt=1.0, description="In-training reference threshold.")
    object_iou_thresholds: list[float] = Field(
        default_factory=lambda: [0.1, 0.3, 0.5],
        description="IoU thresholds for object matching (distinct, in (0, 1]; guide §6.2: 0.1, 0.3, 0.5).",
    )
    min_object_area_m2: float = Field(
        DEFAULT_MIN_OBJECT_AREA_M2,
        ge=0.0,
        allow_inf_nan=False,
        description="Objects (connected components, predicted and ground truth) under this ground area are dropped, in "
        "evaluation (per tile: at least 1 px, the tile's own pixel area from its transform) and in `rts map` (each "
        "object's ground area; the package records the value). 350 m²: 16 px at the synthetic 4.77 m pixel, a sixth "
        "of the smallest RTS (~50 m across, ~2,000 m²); 1 px at 300 m. 0 keeps every component.",
    )
    pr_bins: int = Field(
        2048,
        ge=64,
        le=65536,
        multiple_of=2,
        description="Uniform logit-histogram bins over [-16, 16) for streaming PR-AUC, thresholds and temperature "
        "(1/64 logit at 2048). Geometric tails out to ±512 (per octave, the largest power of two <= pr_bins/16) "
        "and an overflow bin on each side are added: 3330 bins in all at 2048 (see rtscore/metrics/histograms.py).",
    )
    bootstrap_samples: int = Field(200, ge=0, description="Bootstrap resamples for PR-AUC intervals.")

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "min_blob_size_px" in data:
            raise ValueError(min_blob_size_renamed(data["min_blob_size_px"]))
        return data

    @field_validator("ratios")
    @classmethod
    def _ratios(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError(
                "needs at least one prevalence 1:N (the guide's Val-Realistic: [200, 500, 1000]): the early-stopping "
                "metric is the geometric mean of the PR-AUC over these ratios"
            )
        if any(r < 1 for r in v) or len(set(v)) != len(v):
            raise ValueError(f"expected distinct ratios N >= 1 (1:N negatives per positive, e.g. 200); got {v}")
        return v

    @field_validator("object_iou_thresholds")
    @classmethod
    def _iou_thresholds(cls, v: list[float]) -> list[float]:
        if not v or any(not 0.0 < t <= 1.0 for t in v) or len(set(v)) != len(v):
            raise ValueError(f"expected a non-empty list of distinct IoU thresholds in (0, 1]; got {v}")
        return v


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
