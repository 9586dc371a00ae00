"""Models: the smp model factory (:mod:`~rtscore.models.factory`), DPT over a DINOv3 ViT
(:mod:`~rtscore.models.dpt`), pretrained encoder weights (:mod:`~rtscore.models.weights`), and trained weights
read back (:mod:`~rtscore.models.checkpoint`: :func:`load_model`, :func:`load_checkpoint`).

The public names are re-exported here, so that callers import them from ``rtscore.models``; each submodule
imports torch, smp and timm inside its functions only, so importing this package stays as light as a config."""

from __future__ import annotations

from rtscore.models.checkpoint import Architecture, CheckpointError, load_checkpoint, load_model
from rtscore.models.errors import ModelConfigError
from rtscore.models.factory import (
    ARCHITECTURES,
    build_model,
    check_model_config,
    decoder_parameters,
    encoder_parameters,
    known_encoders,
    unused_parameters,
)

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "CheckpointError",
    "ModelConfigError",
    "build_model",
    "check_model_config",
    "decoder_parameters",
    "encoder_parameters",
    "known_encoders",
    "load_checkpoint",
    "load_model",
    "unused_parameters",
]
