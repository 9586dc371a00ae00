"""Trained weights read back: the one way a checkpoint file is read (:func:`load_checkpoint`,
``weights_only=True``) and the one way trained weights are loaded into their architecture (:func:`load_model`),
described by a pipeline config or by a deployment package's ``model_config.yaml``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rtscore.config.binding import ExtraChannel
from rtscore.config.pipeline import ArchitectureName, ChannelsConfig, ModelConfig, PipelineConfig
from rtscore.errors import PipelineError
from rtscore.models.factory import build_model

if TYPE_CHECKING:
    import torch


class CheckpointError(PipelineError):
    """A checkpoint is missing, unreadable, or belongs to another configuration."""


class _ExtraChannels(Protocol):
    @property
    def extra(self) -> list[ExtraChannel]: ...


class Architecture(Protocol):
    """An architecture described without a pipeline config: a deployment package's ``model_config.yaml``
    (:class:`rtscore.package.format.PackagedModelConfig`)."""

    @property
    def architecture(self) -> ArchitectureName: ...

    @property
    def backbone(self) -> str: ...

    @property
    def decoder_channels(self) -> list[int] | None: ...

    @property
    def channels(self) -> _ExtraChannels: ...


def load_checkpoint(path: Path) -> Any:
    """Load with ``weights_only=True``: checkpoints may come from elsewhere, so never unpickle code."""
    import torch

    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(f"cannot load checkpoint {path}: {type(err).__name__}: {err}") from None


def load_model(weights: Path, config: PipelineConfig | Architecture, device: torch.device | str) -> torch.nn.Module:
    """The architecture ``weights`` were trained as, with them loaded (``weights_only=True``, strict), on
    ``device`` in eval mode.

    ``config`` is the pipeline config (its ``model`` and ``channels``) or a package's ``model_config.yaml``;
    encoder weights are never fetched, the state_dict replaces every parameter.

    Raises:
        CheckpointError: ``weights`` is missing or does not load with ``weights_only=True``.
        TypeError: ``weights`` holds no state_dict (a mapping of parameter names to tensors).
        RuntimeError: The state_dict does not fit the architecture (missing or unexpected keys, shapes).
    """
    import torch

    state = load_checkpoint(weights)
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise TypeError("not a state_dict (a mapping of parameter names to tensors)")
    model = build_model(*_architecture(config))
    model.load_state_dict(state, strict=True)
    return model.to(device).eval()


def _architecture(config: PipelineConfig | Architecture) -> tuple[ModelConfig, ChannelsConfig]:
    """The model and input channels a config describes, without encoder weights to fetch."""
    if isinstance(config, PipelineConfig):
        return config.model.model_copy(update={"encoder_weights": None}), config.channels
    model = ModelConfig(
        architecture=config.architecture,
        backbone=config.backbone,
        encoder_weights=None,
        decoder_channels=config.decoder_channels,
        head_prior=None,
    )
    return model, ChannelsConfig(extra=config.channels.extra)
