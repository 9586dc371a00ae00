"""The pipeline config's ``model`` section: the architecture, its encoder (a DINOv3 ViT from timm for dpt, whose
names and pretrained tags are listed here so a config loads without importing timm) and the decoder. What the
tile size must be for dpt needs ``data`` too: :class:`~rtscore.config.pipeline.PipelineConfig` checks it with
:data:`DPT_TILE_MULTIPLE`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rtscore.config.base import StrictModel

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
