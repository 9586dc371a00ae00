"""The pipeline config's ``metrics`` section: the prevalence ratios every metric and the early-stopping metric are
taken at, object matching and its minimum ground area, and the logit histograms' bins (``rtscore.metrics``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rtscore.config.base import StrictModel

# Default of package.min_object_area_m2 (the smallest object `rts map` writes) and of packages that record none: 16 px
# at the synthetic 4.77 m ground pixel are 364 m²; 350 m² converts to those same 16 px there (ceil(350 / 22.75) = 16),
# and is a sixth of the smallest RTS the guide describes (~50 m across, ~2,000 m²): speckle goes, no RTS. Evaluation
# applies no such filter unless metrics.min_object_area_m2 is set (guide §6.2: every connected component counts).
DEFAULT_MIN_OBJECT_AREA_M2 = 350.0
# metrics.object_matching (rtscore.metrics.objects.match_objects): "guide", guide §6.2 step 4, or "best_unmatched".
ObjectMatching = Literal["guide", "best_unmatched"]


def min_blob_size_renamed(px: Any) -> str:
    """The message of a config that still sets ``metrics.min_blob_size_px``: the new key and the conversion."""
    n = px if isinstance(px, int | float) and not isinstance(px, bool) and px > 0 else 16
    return (
        "min_blob_size_px was replaced by min_object_area_m2: object sizes are ground areas, the same at every pixel "
        "size and in `rts map` (a size in pixels dropped every object under 1.4 km² at 300 m). Write "
        f"metrics.min_object_area_m2 in m²: {n:g} px x the ground area of one pixel of your tiles ({n:g} px at 4.77 m "
        f"= {n * 4.77**2:,.0f} m², at 300 m = {n * 300.0**2:,.0f} m²; default null: every connected component counts, "
        "guide §6.2), and delete min_blob_size_px; the smallest object `rts map` writes is package.min_object_area_m2"
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
    object_matching: ObjectMatching = Field(
        "guide",
        description="Greedy 1-to-1 object matching, predictions by mean probability (highest first). 'guide' (guide "
        "§6.2 step 4): each prediction is matched to its highest-IoU ground-truth object, only if that IoU reaches "
        "the threshold and that object is unmatched; otherwise it is a false positive. 'best_unmatched' (the rule "
        "before issue 35, not the guide's): each prediction takes its highest-IoU ground-truth object among the "
        "still unmatched ones, so a second prediction on a matched object can match a neighbour instead of "
        "counting as a false positive.",
    )
    min_object_area_m2: float | None = Field(
        None,
        ge=0.0,
        allow_inf_nan=False,
        description="Opt-in size filter of the object metrics (validation, calibration, test evaluation and its "
        "recall by area): objects (connected components, predicted and ground truth) under this ground area are "
        "dropped, per tile at least 1 px of the tile's own pixel area from its transform. Null or 0 (default, the "
        "guide's rule, §6.2): every connected component is an object. Not the smallest object `rts map` writes: "
        "that is package.min_object_area_m2.",
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
