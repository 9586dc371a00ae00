"""`deployment_config.yaml`: the numerics shared by calibration and inference (guide §4.6), and the one parity
check every consumer of a calibrated config runs (:func:`require_calibrated`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rtscore.config.base import ConfigError, StrictModel, reject_removed_key

Precision = Literal["bf16", "fp16", "fp32"]
TTAMode = Literal["none", "minimal", "standard", "full"]
Fusion = Literal["weighted_mean", "max", "consensus"]
# Where the operating threshold comes from: the lowest threshold reaching calibration.target_precision (guide
# §12.2), or, only when calibration.allow_max_f1_fallback opted in, the max-F1 threshold of a pool on which the
# target precision is unreachable.
ThresholdSource = Literal["target_precision", "max_f1_fallback"]

REGION_THRESHOLDS_REMOVED = (
    "per-region thresholds were removed: spatial blocking puts validation, test and deployment tiles in "
    "different regions, so a threshold calibrated per validation region never applies to a deployment tile; "
    "one global threshold is calibrated (guide §6.4: start with a global threshold)"
)


class DeploymentParityError(ConfigError):
    """A deployment config that calibration did not freeze, or whose numerics were changed after calibration."""


class CalibratedNumerics(StrictModel):
    """The numerics calibration measured the threshold and temperature with; written by calibration only."""

    precision: Precision = Field(..., description="Autocast precision of the calibration pass.")
    torch_compile: bool = Field(..., description="Whether the calibration pass ran the model through torch.compile.")
    tta: TTAMode = Field(..., description="TTA configuration calibrated.")
    scales: list[float] = Field(..., description="Scales calibrated.")
    fusion: Fusion = Field(..., description="Multi-scale fusion calibrated (meaningless for scales [1.0]).")


class DeploymentConfig(StrictModel):
    """Threshold, temperature, their source and the calibrated numerics are written by calibration; the rest
    is fixed before it."""

    threshold: float | None = Field(
        None, gt=0.0, lt=1.0, description="Operating probability threshold (null until calibrated)."
    )
    temperature: float | None = Field(
        None, gt=0.0, le=100.0, description="Logit temperature T: p = sigmoid(logit / T) (null until calibrated)."
    )
    threshold_source: ThresholdSource | None = Field(
        None,
        description="Written by calibration: 'target_precision' (the threshold reaches calibration.target_precision "
        "on Val-Realistic) or 'max_f1_fallback' (unreachable target, max-F1 threshold shipped because "
        "calibration.allow_max_f1_fallback opted in; flagged by `rts package verify` and the test report).",
    )
    tta: TTAMode = Field(
        "none", description="Test-time augmentation: none | minimal (id+hflip) | standard (4) | full (D4, 8)."
    )
    precision: Precision = Field("bf16", description="Inference autocast precision; must equal training.precision.")
    torch_compile: bool = Field(False, description="Whether inference runs the model through torch.compile.")
    scales: list[float] = Field(
        default_factory=lambda: [1.0],
        description="Inference scales, 1.0 first. 0.5 is the guide's 0.5x (§8.2): a 2x field of view centred on "
        "the tile, downsampled 2x (rtscore.inference.context).",
    )
    fusion: Fusion = Field("weighted_mean", description="How multi-scale probabilities are fused.")
    calibrated_with: CalibratedNumerics | None = Field(
        None,
        description="Written by calibration: the numerics threshold and temperature were fitted with. Evaluation, "
        "the package build, verify and predict refuse a config whose numerics differ from it (guide §4.6).",
    )

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        return reject_removed_key(data, "region_thresholds", REGION_THRESHOLDS_REMOVED)

    @field_validator("scales")
    @classmethod
    def _scales(cls, v: list[float]) -> list[float]:
        if not v or v[0] != 1.0:
            raise ValueError(f"must start with 1.0 (native resolution); got {v}")
        if any(not 0.0 < s <= 2.0 for s in v) or len(set(v)) != len(v):
            raise ValueError(f"scales must be distinct and in (0, 2]; got {v}")
        return v

    def numerics(self) -> CalibratedNumerics:
        """The numerics this config asks inference to run with."""
        return CalibratedNumerics(
            precision=self.precision,
            torch_compile=self.torch_compile,
            tta=self.tta,
            scales=self.scales,
            fusion=self.fusion,
        )

    def parity_problems(self) -> list[str]:
        """How this config's numerics differ from the ones it was calibrated with (empty: none)."""
        if self.calibrated_with is None:
            return ["calibrated_with is missing: the threshold and temperature were not written by calibration"]
        now, cal = self.numerics(), self.calibrated_with
        fields = ["precision", "torch_compile", "tta", "scales"] + (["fusion"] if len(now.scales) > 1 else [])
        return [
            f"{f}: {getattr(now, f)!r} in the file, calibrated with {getattr(cal, f)!r}"
            for f in fields
            if getattr(now, f) != getattr(cal, f)
        ]


def require_calibrated(dep: DeploymentConfig, source: str) -> DeploymentConfig:
    """``dep`` if calibration froze it and its numerics are still the calibrated ones (guide §4.6), else
    :class:`DeploymentParityError` naming ``source`` and every difference.

    The one parity check of the deployment numerics: test evaluation, the package build, ``rts package verify``
    and ``rts predict`` all call it, against the record calibration wrote (``calibrated_with``).
    """
    missing = [k for k in ("threshold", "temperature", "threshold_source") if getattr(dep, k) is None]
    if missing:
        raise DeploymentParityError(f"{source}: {', '.join(missing)} null (not calibrated); run calibrate first")
    problems = dep.parity_problems()
    if problems:
        raise DeploymentParityError(
            f"{source}: the deployment numerics differ from the ones calibration measured the threshold and "
            "temperature with (guide §4.6: a threshold is only valid for the numerics it was chosen with):\n  - "
            + "\n  - ".join(problems)
            + "\nhint: restore the calibrated values, or change deployment.* in the pipeline config and re-run "
            "logit-cache and calibrate"
        )
    return dep
