"""model.architecture dpt: smp's DPT over a DINOv3 ViT from timm, its encoder weights from a pretrained tag on the
hub or a local file, loaded by timm's own key conversion with the patch embedding adapted to the input channels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtscore.config.pipeline import ChannelsConfig, ModelConfig, dinov3_tags
from rtscore.models.errors import ModelConfigError
from rtscore.models.weights import hub_weights_file, read_state_dict

if TYPE_CHECKING:
    import torch


def build_dpt(cfg: ModelConfig, channels: ChannelsConfig) -> torch.nn.Module:
    """smp's DPT over a DINOv3 ViT from timm: 4 blocks read (smp's default), the class token concatenated to
    each patch token (``readout='cat'``), one logit at the input resolution."""
    import segmentation_models_pytorch as smp

    kwargs: dict[str, Any] = {}
    if cfg.decoder_channels is not None:
        kwargs["decoder_intermediate_channels"] = tuple(cfg.decoder_channels)
        kwargs["decoder_fusion_channels"] = cfg.decoder_channels[0]
    model = smp.DPT(
        encoder_name=cfg.backbone,
        encoder_weights=None,  # never timm's own download: weights come from _dinov3_weights_file below
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
    return hub_weights_file(f"timm/{name}.{weights}", None, f"DINOv3 weights {weights} for {backbone}")


def _load_vit_weights(vit: torch.nn.Module, path: Path, backbone: str, in_channels: int) -> None:
    """Load a ViT state dict into the timm model: timm's own key conversion (Meta's original DINOv3 checkpoints
    load too), the RGB patch embedding adapted to ``in_channels`` by timm's recipe (RGB filters reused
    cyclically, scaled by 3 / in_channels, as smp does for CNN encoders); a file that does not fit is refused."""
    from timm.models._manipulate import adapt_input_conv
    from timm.models.eva import checkpoint_filter_fn

    state = read_state_dict(path)
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
