"""Post-training config: calibration gates and fits, test evaluation, the package (guide §10.4, §11-§13)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from pydantic import Field, field_validator, model_validator

from rtscore.config.base import StrictModel, reject_removed_key
from rtscore.config.deployment import REGION_THRESHOLDS_REMOVED, Fusion, TTAMode
from rtscore.config.metrics import DEFAULT_MIN_OBJECT_AREA_M2


def _guide_tta_modes() -> list[TTAMode]:
    """Guide §11.1: "Use Minimal first, use Standard only if necessary": 'full' (8 passes) is not offered unless
    a config lists it."""
    return ["none", "minimal", "standard"]


def _all_fusions() -> list[Fusion]:
    return ["weighted_mean", "max", "consensus"]


class CalibrationConfig(StrictModel):
    """Post-training decisions on Val-Realistic (guide §10.4 steps 2-5, §11, §12), all from one cached pass."""

    ratio: int = Field(
        200, ge=1, description="Prevalence 1:N at which gates are judged and the operating threshold is chosen."
    )
    target_precision: float = Field(0.8, gt=0.0, le=1.0, description="Precision the operating threshold must reach.")
    tta_candidates: list[TTAMode] = Field(
        default_factory=_guide_tta_modes,
        description="TTA configurations cached and offered to the gate ('none' is required). The gate tries them "
        "cheapest first (none, minimal, standard, full) and ships the first that passes, so a costlier one ships "
        "only if every cheaper one failed. Default: none, minimal, standard (guide §11.1); add 'full' explicitly.",
    )
    tta_gate: bool = Field(True, description="Choose deployment.tta by the gate (false: keep deployment.tta).")
    tta_min_pr_auc_gain: float = Field(
        0.01, ge=0.0, description="Relative PR-AUC gain over 'none' a TTA configuration must bring (0.01 = 1%)."
    )
    tta_max_precision_drop: float = Field(
        0.005, ge=0.0, description="Largest relative drop of precision at the baseline threshold (0.005 = 0.5%)."
    )
    scale_candidates: list[float] = Field(
        default_factory=lambda: [1.0, 0.5], description="Scales cached; the gate compares [1.0] with all of them."
    )
    fusion_candidates: list[Fusion] = Field(default_factory=_all_fusions, description="Multi-scale fusions offered.")
    scale_gate: bool = Field(
        True,
        description="Run the scale gate (guide §8.3) and report its verdict; it changes deployment.scales/fusion only "
        "with allow_multiscale_deployment (false: keep them, no verdict).",
    )
    allow_multiscale_deployment: bool = Field(
        False,
        description="Ship the scale gate's multi-scale verdict ([1.0, 0.5] and its fusion). Off by default: guide "
        "§8.3, 'deploy default stays scales: [1.0]; shipping [1.0, 0.5] remains a separate decision'.",
    )
    scale_min_large_pr_auc_gain: float = Field(
        0.02, ge=0.0, description="Relative large-RTS PR-AUC gain multi-scale must bring (0.02 = 2%)."
    )
    scale_max_fp_rate_increase: float = Field(
        0.10, ge=0.0, description="Largest relative rise of the global pixel FP rate at the baseline threshold."
    )
    large_rts_bbox_m: float = Field(
        500.0, gt=0.0, description="An RTS is 'large' when its bounding box's longer side exceeds this (metres)."
    )
    allow_max_f1_fallback: bool = Field(
        False,
        description="When no threshold reaches target_precision at `ratio`, ship the max-F1 threshold (recorded as "
        "deployment threshold_source: max_f1_fallback, flagged by `rts package verify` and the test report) "
        "instead of stopping calibration with the best precision reached.",
    )
    object_prob_floor: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="Full-resolution logits are cached only for tiles with GT objects or a pixel whose (uncalibrated) "
        "probability reaches this floor; object metrics are exact for operating thresholds at or above it. At 0.5 "
        "that holds for every calibrated threshold >= 0.5 whatever the temperature (logit 0 stays 0 under T).",
    )
    temperature_bounds: tuple[float, float] = Field(
        (0.05, 20.0), description="Search interval of the temperature T (guide: typically 1-3)."
    )
    ece_bins: int = Field(15, ge=2, le=100, description="Probability bins of the ECE and the reliability diagram.")

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        return reject_removed_key(data, "per_region_thresholds", REGION_THRESHOLDS_REMOVED)

    @field_validator("tta_candidates")
    @classmethod
    def _tta_has_none(cls, v: list[str]) -> list[str]:
        if "none" not in v or len(set(v)) != len(v):
            raise ValueError(f"must be distinct and include 'none' (the baseline); got {v}")
        return v

    @field_validator("temperature_bounds")
    @classmethod
    def _temperature_bounds(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 < v[0] < v[1]:
            raise ValueError(f"expected 0 < low < high; got {v}")
        return v

    @field_validator("scale_candidates")
    @classmethod
    def _scales(cls, v: list[float]) -> list[float]:
        if not v or v[0] != 1.0 or len(set(v)) != len(v) or any(not 0.0 < s <= 1.0 for s in v):
            raise ValueError(f"must start with 1.0 and hold distinct scales in (0, 1]; got {v}")
        return v


class EvaluationConfig(StrictModel):
    """Test-Realistic evaluation with the frozen deployment config (guide §10.4 step 6, §13)."""

    size_bins_m2: list[float] = Field(
        default_factory=lambda: [0.0, 2_000.0, 10_000.0, 50_000.0, 1.0e12],
        description="Edges of the RTS area bins (m²) for object recall by size (at least 2, increasing, >= 0).",
    )
    latitude_bands: list[float] = Field(
        default_factory=lambda: [60.0, 64.0, 68.0, 72.0, 74.0],
        description="Edges of the latitude bands (degrees north) of the test report's per-band table (guide §8.3, "
        "Phase 3): [60, 64, 68, 72, 74] gives 60-64, 64-68, 68-72 and 72-74 °N, each band from its lower edge up "
        "to its upper (the last one's included); test tiles outside every band are counted in an 'outside bands' "
        "row. At least 2 strictly increasing edges in [-90, 90].",
    )
    min_group_positive_tiles: int = Field(
        5,
        ge=1,
        description="Positive test tiles a region or latitude band needs before its PR-AUC and object recall are "
        "reported; a group with fewer is listed with its counts and marked not measured. 5: on fewer positive "
        "tiles one tile's slumps decide the group's figures (one missed tile of 4 moves its object recall by a "
        "quarter or more), too little to tell one group from another.",
    )

    @field_validator("size_bins_m2")
    @classmethod
    def _edges(cls, v: list[float]) -> list[float]:
        if len(v) < 2 or v[0] < 0.0 or any(b <= a for a, b in pairwise(v)):
            raise ValueError(f"expected at least 2 strictly increasing non-negative edges; got {v}")
        return v

    @field_validator("latitude_bands")
    @classmethod
    def _bands(cls, v: list[float]) -> list[float]:
        if len(v) < 2 or v[0] < -90.0 or v[-1] > 90.0 or any(b <= a for a, b in pairwise(v)):
            raise ValueError(f"expected at least 2 strictly increasing edges in [-90, 90] degrees north; got {v}")
        return v


class PackageConfig(StrictModel):
    """Deployment package (guide §4.3)."""

    seed: int | None = Field(None, description="Seed that ships; null = the best seed by the validation metric.")
    min_object_area_m2: float = Field(
        DEFAULT_MIN_OBJECT_AREA_M2,
        ge=0.0,
        allow_inf_nan=False,
        description="The smallest object `rts map` writes (ground m², each merged object's ground area; recorded in "
        "the package's model_config.yaml): specks under it are left out of the objects layer, and so of review "
        "exports. A mapping product rule, not an evaluation one: the object metrics count every connected "
        "component unless metrics.min_object_area_m2 is set. 350 m²: 16 px at the synthetic 4.77 m pixel, a sixth "
        "of the smallest RTS (~50 m across, ~2,000 m²); under one pixel at 30 m. 0 writes every object.",
    )
