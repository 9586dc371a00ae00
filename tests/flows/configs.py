"""Configs of the flow tests: the tiny synthetic data of tests.helpers plus seconds-long training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers import tiny_pipeline_config


def tiny_training_config(seeds: list[int] | None = None) -> dict[str, Any]:
    """Tiny data, 3 epochs of 2 steps, a UNet/MobileNetV2 with a tiny decoder: the whole pipeline in seconds."""
    data = tiny_pipeline_config()
    data["training"].update({"max_epochs": 3, "val_frequency": 1, "steps_per_epoch": 2, "seeds": seeds or [1, 2]})
    data["lr_schedule"] = {"freeze_backbone_epochs": 1, "warmup_epochs": 1}
    data["model"] = {
        "architecture": "unet",
        "backbone": "mobilenet_v2",
        "encoder_weights": None,
        "decoder_channels": [16, 16, 8, 8, 8],
    }
    data["metrics"] = {"bootstrap_samples": 10}
    data["mlflow"] = {"experiment_name": "flow-test"}
    return data


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path
