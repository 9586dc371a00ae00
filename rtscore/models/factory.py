"""smp model factory: architecture x encoder from config (UNet++/Unet/SegFormer, and DPT over a DINOv3 ViT from
timm: :mod:`rtscore.models.dpt`), in_channels from channels, one logit out; the config checked before any
training step, and the encoder / decoder parameter groups the optimiser sees."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtscore.config.pipeline import ChannelsConfig, ModelConfig, dinov3_tags
from rtscore.models.dpt import build_dpt
from rtscore.models.errors import ModelConfigError
from rtscore.models.weights import imagenet_weights_file, read_state_dict

if TYPE_CHECKING:
    import torch

ARCHITECTURES = {"unetplusplus": "UnetPlusPlus", "unet": "Unet", "segformer": "Segformer", "dpt": "DPT"}


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


def build_model(cfg: ModelConfig, channels: ChannelsConfig) -> torch.nn.Module:
    """UNet++/Unet/SegFormer/DPT with ``3 + len(channels.extra)`` inputs and one logit channel (no activation)."""
    import segmentation_models_pytorch as smp
    import torch

    check_model_config(cfg)
    if cfg.architecture == "dpt":
        model = build_dpt(cfg, channels)
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
        path = imagenet_weights_file(cfg.backbone) if cfg.encoder_weights == "imagenet" else Path(cfg.encoder_weights)
        state = read_state_dict(path)
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


def unused_parameters(cfg: ModelConfig, channels: ChannelsConfig, tile_size: int) -> list[str]:
    """Names of the parameters of :func:`build_model`'s model that a training step never reaches: smp's EfficientNet
    encoders (``efficientnet-b*``, ``timm-efficientnet-*``) keep the ImageNet classifier's head conv and batch norm,
    which their forward skips. DDP must be told of them (it waits for their gradients otherwise).

    Found by one training forward and backward of the model built on the meta device (no memory, no weights read;
    torch's CPU random state restored), on one RGB tile of ``tile_size`` (extra channels widen the first conv alone,
    which every step uses; smp widens it off the meta device). A model that cannot be built there (mit_b*
    reads a tensor while it is built) is taken to use every parameter, as those the factory builds do; should one
    not, DDP's own error names the parameters at the second step.
    """
    import logging

    import torch

    meta_cfg = cfg.model_copy(update={"encoder_weights": None})
    rgb = channels.model_copy(update={"extra": []})
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            model = build_model(meta_cfg, rgb).train()
            model(torch.empty(1, rgb.count, tile_size, tile_size)).sum().backward()
    except (RuntimeError, NotImplementedError) as err:  # an operation the meta device does not implement
        logging.getLogger(__name__).debug(f"unused parameters of {cfg.backbone} not probed: {err}")
        return []
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
