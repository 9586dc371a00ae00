"""Pretrained encoder weights as files: smp's ImageNet weights and timm's hub weights from the HF cache, else a
bounded download, else a clear error naming what to do offline; and a weights file read as a state dict on the
CPU (``weights_only=True``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rtscore.models.errors import ModelConfigError

_DOWNLOAD_TIMEOUT_S = "15"


def imagenet_weights_file(backbone: str) -> Path:
    """Local path of smp's ImageNet weights: from the HF cache, else a bounded download, else a clear error."""
    from segmentation_models_pytorch.encoders import encoders

    settings = encoders[backbone]["pretrained_settings"].get("imagenet")
    if settings is None:
        raise ModelConfigError(f"smp has no ImageNet weights for model.backbone {backbone!r}")
    return hub_weights_file(settings["repo_id"], settings["revision"], f"ImageNet weights for {backbone}")


def hub_weights_file(repo: str, rev: str | None, what: str) -> Path:
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


def read_state_dict(path: Path) -> dict[str, Any]:
    """Encoder weights as the hub publishes them (``.safetensors``) or as torch saved them (a state dict, or a
    mapping holding one under ``state_dict``): read on the CPU, never unpickling code."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path), device="cpu"))
    import torch

    obj = torch.load(path, map_location="cpu", weights_only=True)
    return obj.get("state_dict", obj) if isinstance(obj, dict) else obj
