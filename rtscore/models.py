"""smp model factory: architecture x encoder from config (UNet++/Unet/SegFormer, and DPT over a DINOv3 ViT from
timm), in_channels from channels, one logit out; the one way
trained weights are loaded back into their architecture (:func:`load_model`), and the one way a checkpoint file is
read (:func:`load_checkpoint`, ``weights_only=True``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rtscore.config.binding import ExtraChannel
from rtscore.config.pipeline import ArchitectureName, ChannelsConfig, ModelConfig, PipelineConfig, dinov3_tags
from rtscore.errors import PipelineError

if TYPE_CHECKING:
    import torch

ARCHITECTURES = {"unetplusplus": "UnetPlusPlus", "unet": "Unet", "segformer": "Segformer", "dpt": "DPT"}
_DOWNLOAD_TIMEOUT_S = "15"


class ModelConfigError(PipelineError, ValueError):
    """The model cannot be built as configured (unknown backbone, weights unavailable, ...)."""


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


def known_encoders() -> list[str]:
    from segmentation_models_pytorch.encoders import get_encoder_names

    return list(get_encoder_names())


def check_model_config(cfg: ModelConfig) -> None:
    """Fail before any training step on a backbone smp does not know or an incompatible pairing."""
    w = cfg.encoder_weights
    if cfg.architecture == "dpt":  # the backbone and 'imagenet' were checked when the config loaded
        tags = dinov3_tags(cfg.backbone)
        if w is not None and w not in tags and not Path(w).is_file():
            raise ModelConfigError(
                f"model.encoder_weights for {cfg.backbone} must be a pretrained tag {list(tags)}, null or an "
                f"existing file; got {w!r}"
            )
        return
    names = known_encoders()
    if cfg.backbone not in names and not cfg.backbone.startswith("tu-"):
        close = [n for n in names if cfg.backbone.split("-")[0] in n][:8]
        raise ModelConfigError(
            f"model.backbone {cfg.backbone!r} is not an smp encoder"
            + (f"; similar: {close}" if close else "")
            + " (see segmentation_models_pytorch.encoders.get_encoder_names())"
        )
    if cfg.architecture == "segformer" and not cfg.backbone.startswith("mit_b"):
        raise ModelConfigError(f"model.architecture segformer expects a mit_b* backbone; got {cfg.backbone!r}")
    if w not in (None, "imagenet") and not Path(w).is_file():
        raise ModelConfigError(f"model.encoder_weights must be 'imagenet', null or an existing file; got {w!r}")


def _imagenet_weights_file(backbone: str) -> Path:
    """Local path of smp's ImageNet weights: from the HF cache, else a bounded download, else a clear error."""
    from segmentation_models_pytorch.encoders import encoders

    settings = encoders[backbone]["pretrained_settings"].get("imagenet")
    if settings is None:
        raise ModelConfigError(f"smp has no ImageNet weights for model.backbone {backbone!r}")
    return _hub_weights_file(settings["repo_id"], settings["revision"], f"ImageNet weights for {backbone}")


def _hub_weights_file(repo: str, rev: str | None, what: str) -> Path:
    """``model.safetensors`` of a hub repo: from the HF cache, else a bounded download, else a clear error."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(repo, "model.safetensors", revision=rev)
    if isinstance(cached, str):
        return Path(cached)
    # Bounded network attempt: never hang (or sit in the hub client's retry loop) on a machine without network.
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", _DOWNLOAD_TIMEOUT_S)
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", _DOWNLOAD_TIMEOUT_S)
    try:
        _check_hub_reachable()
        return Path(hf_hub_download(repo, filename="model.safetensors", revision=rev))
    except Exception as err:  # offline, DNS failure, proxy, ...: all the same to the user
        revision = f" --revision {rev}" if rev else ""
        raise ModelConfigError(
            f"{what} ({repo}) are not in the local cache and could not be downloaded "
            f"({type(err).__name__}). On a machine with network run "
            f"`huggingface-cli download {repo}{revision}`, or set model.encoder_weights to a local "
            "weights file, or to null for random initialisation."
        ) from None


def _check_hub_reachable(timeout_s: float = 3.0) -> None:
    """One TCP connect to the hub (or HF_ENDPOINT): fails in seconds where the hub client would retry for ~30 s."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise ConnectionError("HF_HUB_OFFLINE is set")
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
        pass


def _load_state_dict(path: Path) -> dict[str, Any]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path), device="cpu"))
    import torch

    obj = torch.load(path, map_location="cpu", weights_only=True)
    return obj.get("state_dict", obj) if isinstance(obj, dict) else obj


def build_model(cfg: ModelConfig, channels: ChannelsConfig) -> torch.nn.Module:
    """UNet++/Unet/SegFormer/DPT with ``3 + len(channels.extra)`` inputs and one logit channel (no activation)."""
    import segmentation_models_pytorch as smp
    import torch

    check_model_config(cfg)
    if cfg.architecture == "dpt":
        model = _build_dpt(cfg, channels)
        if cfg.head_prior is not None:
            _init_head_prior(model, cfg.head_prior)
        return model
    cls = getattr(smp, ARCHITECTURES[cfg.architecture])
    kwargs: dict[str, Any] = {}
    if cfg.decoder_channels is not None:
        if cfg.architecture == "segformer":
            raise ModelConfigError("model.decoder_channels applies to unet/unetplusplus, not segformer")
        kwargs["decoder_channels"] = tuple(cfg.decoder_channels)
    model = cls(encoder_name=cfg.backbone, encoder_weights=None, in_channels=3, classes=1, activation=None, **kwargs)
    if cfg.encoder_weights is not None:
        path = _imagenet_weights_file(cfg.backbone) if cfg.encoder_weights == "imagenet" else Path(cfg.encoder_weights)
        state = _load_state_dict(path)
        state = {k.removeprefix("encoder."): v for k, v in state.items()}
        # nn.Module.load_state_dict: smp encoders override it (dropping classifier keys) and return None.
        missing, unexpected = torch.nn.Module.load_state_dict(model.encoder, state, strict=False)
        if missing:
            raise ModelConfigError(
                f"encoder weights {path} do not fit {cfg.backbone}: {len(missing)} missing keys, e.g. {missing[:3]}"
            )
        del unexpected  # classifier heads of ImageNet checkpoints are expected extras
    if channels.count != 3:
        # smp's own recipe: pretrained RGB filters reused cyclically for extra bands, random init otherwise.
        model.encoder.set_in_channels(channels.count, pretrained=cfg.encoder_weights is not None)
    if cfg.head_prior is not None:
        _init_head_prior(model, cfg.head_prior)
    return model


def _build_dpt(cfg: ModelConfig, channels: ChannelsConfig) -> torch.nn.Module:
    """smp's DPT over a DINOv3 ViT from timm: 4 blocks read (smp's default), the class token concatenated to
    each patch token (``readout='cat'``), one logit at the input resolution."""
    import segmentation_models_pytorch as smp

    kwargs: dict[str, Any] = {}
    if cfg.decoder_channels is not None:
        kwargs["decoder_intermediate_channels"] = tuple(cfg.decoder_channels)
        kwargs["decoder_fusion_channels"] = cfg.decoder_channels[0]
    model = smp.DPT(
        encoder_name=cfg.backbone,
        encoder_weights=None,  # never timm's own download: weights come from _dinov3_weights below
        in_channels=channels.count,
        classes=1,
        activation=None,
        **kwargs,
    )
    if cfg.encoder_weights is not None:
        path = _dinov3_weights_file(cfg.backbone, cfg.encoder_weights)
        _load_vit_weights(model.encoder.model, path, cfg.backbone, channels.count)
    return model


def _dinov3_weights_file(backbone: str, weights: str) -> Path:
    """A pretrained tag's file from the hub (``timm/<name>.<tag>``, cached or a bounded download), else the
    local file ``weights``."""
    if weights not in dinov3_tags(backbone):
        return Path(weights)
    name = backbone.removeprefix("tu-")
    return _hub_weights_file(f"timm/{name}.{weights}", None, f"DINOv3 weights {weights} for {backbone}")


def _load_vit_weights(vit: torch.nn.Module, path: Path, backbone: str, in_channels: int) -> None:
    """Load a ViT state dict into the timm model: timm's own key conversion (Meta's original DINOv3 checkpoints
    load too), the RGB patch embedding adapted to ``in_channels`` by timm's recipe (RGB filters reused
    cyclically, scaled by 3 / in_channels, as smp does for CNN encoders); a file that does not fit is refused."""
    from timm.models._manipulate import adapt_input_conv
    from timm.models.eva import checkpoint_filter_fn

    state = _load_state_dict(path)
    for prefix in ("encoder.model.", "model."):  # a DPT's or an smp encoder's state dict
        if state and all(k.startswith(prefix) for k in state):
            state = {k.removeprefix(prefix): v for k, v in state.items()}
    try:
        state = checkpoint_filter_fn(state, vit)
        key = "patch_embed.proj.weight"
        if key in state and state[key].shape[1] != in_channels:
            state[key] = adapt_input_conv(in_channels, state[key])
        missing, _unexpected = vit.load_state_dict(state, strict=False)
    except Exception as err:  # shape mismatches, a patch embedding of another layout, ...
        raise ModelConfigError(
            f"encoder weights {path} do not fit {backbone}: {type(err).__name__}: {str(err)[:300]}"
        ) from None
    if missing:
        raise ModelConfigError(
            f"encoder weights {path} do not fit {backbone}: {len(missing)} missing keys, e.g. {missing[:3]}"
        )


def _init_head_prior(model: torch.nn.Module, prior: float) -> None:
    """RetinaNet's prior init: the output conv starts at p = `prior` everywhere (bias logit(prior), small weights).

    With focal loss and rare positives a default-initialised head starts near p = 0.5, and the first steps are
    spent pushing every pixel down; some seeds then collapse to "all background" and never recover.
    """
    import math

    import torch

    head = getattr(model, "segmentation_head", None)
    # The output conv: the only conv of smp's SegmentationHead, the last of DPT's (conv-BN-ReLU-dropout-conv).
    convs = [m for m in head.modules() if isinstance(m, torch.nn.Conv2d)] if head is not None else []
    conv = convs[-1] if convs else None
    if conv is None or conv.bias is None:
        raise ModelConfigError(f"model.head_prior: {type(model).__name__} has no conv segmentation head with a bias")
    with torch.no_grad():
        torch.nn.init.normal_(conv.weight, std=0.01)
        conv.bias.fill_(math.log(prior / (1.0 - prior)))


def encoder_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list(model.encoder.parameters())  # type: ignore[union-attr]


def decoder_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    enc = {id(p) for p in encoder_parameters(model)}
    return [p for p in model.parameters() if id(p) not in enc]


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
