"""The pipeline config's training sections: balanced curriculum sampling (``sampling``, guide §7), the loss
(``loss``, §5), the loop (``training``: devices, precision, epochs, seeds, early stopping, checkpoints; §9.1), the
optimizer, the LR schedule and the EMA of the weights. :class:`~rtscore.config.pipeline.PipelineConfig` holds
them and checks them against the other sections (precision parity, the schedule against max_epochs)."""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rtscore.config.base import StrictModel
from rtscore.config.deployment import Precision


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
        "processes with device cpu); auto = every visible GPU (1 without). Each rank takes training.batch_size "
        "tiles a step, so one optimizer step sees batch_size x N tiles (the guide's effective batch, §9.1).",
    )
    precision: Precision = Field("bf16", description="Autocast precision; must equal deployment.precision.")
    batch_size: int = Field(
        32,
        ge=1,
        description="Tiles per device (per rank) per optimizer step (guide §9.1: 32 per GPU); the effective batch of "
        "a step is batch_size x the ranks of training.devices.",
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

    @field_validator("devices")
    @classmethod
    def _at_least_one_device(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"training.devices must be >= 1 or auto; got {v}")
        return v

    def effective_batch_size(self, ranks: int) -> int:
        """Tiles of one optimizer step on ``ranks`` ranks: ``batch_size`` per rank, ``batch_size x ranks`` in all
        (guide §9.1's effective batch)."""
        return self.batch_size * ranks


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
