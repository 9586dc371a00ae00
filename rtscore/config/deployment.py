"""`deployment_config.yaml`: the numerics shared by calibration and inference (guide §4.6)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rtscore.config.base import StrictModel

Precision = Literal["bf16", "fp16", "fp32"]
TTAMode = Literal["none", "minimal", "standard", "full"]
Fusion = Literal["weighted_mean", "max", "consensus"]


class DeploymentConfig(StrictModel):
    """Threshold and temperature are written by calibration; the rest is fixed before it."""

    threshold: float | None = Field(
        None, gt=0.0, lt=1.0, description="Operating probability threshold (null until calibrated)."
    )
    temperature: float | None = Field(
        None, gt=0.0, le=100.0, description="Logit temperature T: p = sigmoid(logit / T) (null until calibrated)."
    )
    tta: TTAMode = Field(
        "none", description="Test-time augmentation: none | minimal (id+hflip) | standard (4) | full (D4, 8)."
    )
    precision: Precision = Field("bf16", description="Inference autocast precision; must equal training.precision.")
    torch_compile: bool = Field(False, description="Whether inference runs the model through torch.compile.")
    scales: list[float] = Field(default_factory=lambda: [1.0], description="Inference scales, 1.0 first.")
    fusion: Fusion = Field("weighted_mean", description="How multi-scale probabilities are fused.")
    region_thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="Optional per-region thresholds (guide §6.4), written by calibration when enabled; "
        "regions not listed use `threshold`.",
    )

    @field_validator("region_thresholds")
    @classmethod
    def _region_thresholds(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: t for k, t in v.items() if not 0.0 < t < 1.0}
        if bad:
            raise ValueError(f"thresholds must be in (0, 1); got {bad}")
        return v

    @field_validator("scales")
    @classmethod
    def _scales(cls, v: list[float]) -> list[float]:
        if not v or v[0] != 1.0:
            raise ValueError(f"must start with 1.0 (native resolution); got {v}")
        if any(not 0.0 < s <= 2.0 for s in v) or len(set(v)) != len(v):
            raise ValueError(f"scales must be distinct and in (0, 2]; got {v}")
        return v
