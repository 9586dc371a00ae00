"""Augmentation config (guide §9.2): geometric on all channels and the mask, colour on RGB only."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from rtscore.config.base import StrictModel


class ProbOnly(StrictModel):
    p: float = Field(0.5, ge=0.0, le=1.0, description="Probability of applying the transform.")


class AffineAug(StrictModel):
    """Shift-scale-rotate as one Affine (ShiftScaleRotate is deprecated in albumentations 2)."""

    p: float = Field(0.5, ge=0.0, le=1.0, description="Probability.")
    shift: float = Field(0.1, ge=0.0, le=0.5, description="Max translation as a fraction of the tile.")
    scale: float = Field(0.2, ge=0.0, le=0.9, description="Max relative scale change (1 +- scale).")
    rotate: float = Field(45.0, ge=0.0, le=180.0, description="Max rotation in degrees.")


class ShearAug(StrictModel):
    p: float = Field(0.3, ge=0.0, le=1.0, description="Probability.")
    shear: float = Field(10.0, ge=0.0, le=45.0, description="Max shear in degrees (both axes).")


class ElasticAug(StrictModel):
    p: float = Field(0.3, ge=0.0, le=1.0, description="Probability.")
    alpha: float = Field(120.0, ge=0.0, description="Displacement magnitude.")
    sigma: float = Field(6.0, gt=0.0, description="Gaussian smoothing of the displacement field.")


class JitterAug(StrictModel):
    """One radiometric jitter: a factor drawn uniformly from [1 - limit, 1 + limit] (torchvision's ColorJitter)."""

    p: float = Field(0.5, ge=0.0, le=1.0, description="Probability, drawn independently of the other jitters.")
    limit: float = Field(0.2, ge=0.0, le=1.0, description="Largest relative change (+-); 0.2 = factor in [0.8, 1.2].")


_JITTERS = ("brightness", "contrast", "saturation")


class ColorAug(StrictModel):
    """Brightness, contrast and saturation as three independent transforms (guide §9.2: one row each, p 0.5
    each), RGB only. One joint ColorJitter at p 0.5 would jitter all three together or none of them."""

    brightness: JitterAug = Field(default_factory=JitterAug, description="Brightness jitter (+-0.2, p 0.5).")
    contrast: JitterAug = Field(default_factory=JitterAug, description="Contrast jitter (+-0.2, p 0.5).")
    saturation: JitterAug = Field(default_factory=JitterAug, description="Saturation jitter (+-0.2, p 0.5).")

    @model_validator(mode="before")
    @classmethod
    def _refuse_joint_form(cls, data: Any) -> Any:
        """The earlier joint form (`p` next to float limits) names its replacement instead of 'unknown key'."""
        if isinstance(data, dict) and ("p" in data or any(isinstance(data.get(k), int | float) for k in _JITTERS)):
            raise ValueError(
                "the joint ColorJitter form {p, brightness, contrast, saturation} was replaced by independent "
                "transforms (guide §9.2): write brightness/contrast/saturation as {p: 0.5, limit: 0.2} each"
            )
        return data


class NoiseAug(StrictModel):
    p: float = Field(0.3, ge=0.0, le=1.0, description="Probability.")
    std_range: tuple[float, float] = Field(
        (0.012, 0.028),
        description="Noise std as a fraction of 255 (the guide's var_limit (10, 50) is std 3.2-7.1 of 255).",
    )


class ClaheAug(StrictModel):
    p: float = Field(0.2, ge=0.0, le=1.0, description="Probability.")
    clip_limit: float = Field(4.0, gt=0.0, description="CLAHE clip limit.")
    tile_grid_size: int = Field(8, ge=1, le=64, description="CLAHE grid (square).")


class RandomScaleAug(StrictModel):
    p: float = Field(0.3, ge=0.0, le=1.0, description="Probability.")
    scale_range: tuple[float, float] = Field((0.5, 1.0), description="Scale factors; padded areas become ignore.")

    @field_validator("scale_range")
    @classmethod
    def _range(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 < v[0] <= v[1] <= 4.0:
            raise ValueError(f"expected 0 < low <= high <= 4; got {v}")
        return v


class AugmentationConfig(StrictModel):
    """On-the-fly augmentation (guide §9.2); geometric on all channels + mask, colour on RGB only."""

    enabled: bool = Field(True, description="Master switch (validation and evaluation never augment).")
    rotate90: ProbOnly = Field(default_factory=lambda: ProbOnly(p=0.5), description="Random 90-degree rotation.")
    hflip: ProbOnly = Field(default_factory=lambda: ProbOnly(p=0.5), description="Horizontal flip.")
    vflip: ProbOnly = Field(default_factory=lambda: ProbOnly(p=0.5), description="Vertical flip.")
    affine: AffineAug = Field(default_factory=AffineAug, description="Shift-scale-rotate.")
    elastic: ElasticAug = Field(default_factory=ElasticAug, description="Elastic transform.")
    shear: ShearAug = Field(default_factory=ShearAug, description="Affine shear.")
    color: ColorAug = Field(
        default_factory=ColorAug, description="Independent brightness, contrast and saturation jitters (RGB only)."
    )
    gauss_noise: NoiseAug = Field(default_factory=NoiseAug, description="Gaussian noise (RGB only).")
    clahe: ClaheAug = Field(default_factory=ClaheAug, description="CLAHE (RGB only).")
    random_scale: RandomScaleAug = Field(default_factory=RandomScaleAug, description="RandomScale + pad/crop.")
