from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtscore.config import parse_pipeline_config
from rtscore.config.pipeline import PipelineConfig
from tests.helpers import copy_run, make_data_run, tiny_pipeline_config


def tiny_train_config(**training: Any) -> PipelineConfig:
    data = tiny_pipeline_config()
    data["training"].update(
        {
            "max_epochs": 4,
            "val_frequency": 1,
            "batch_size": 4,
            "steps_per_epoch": 3,
            "checkpoint": {"save_every_n_epochs": 1, "keep_last_n": 2},
            **training,
        }
    )
    data["lr_schedule"] = {"freeze_backbone_epochs": 1, "warmup_epochs": 1, "frozen_lr": 1e-3, "base_lr": 1e-3}
    data["model"] = {
        "architecture": "unet",
        "backbone": "mobilenet_v2",
        "encoder_weights": None,
        "decoder_channels": [16, 16, 8, 8, 8],
    }
    data["sampling"] = {
        "curriculum_schedule": [
            {"start_epoch": 1, "end_epoch": 2, "neg_per_pos": 1},
            {"start_epoch": 3, "end_epoch": None, "neg_per_pos": 2},
        ]
    }
    data["mlflow"] = {"enabled": False}
    data["deployment"] = {"precision": data["training"]["precision"]}
    data["metrics"] = {"bootstrap_samples": 20, "min_object_area_m2": 80.0}  # 4 px of 4.77 m
    return parse_pipeline_config(data)


@pytest.fixture(scope="session")
def data_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with the data stages done (tiny synthetic splits)."""
    return make_data_run(tmp_path_factory.mktemp("train") / "run", tiny_train_config())


@pytest.fixture
def run_copy(data_run: Path, tmp_path: Path) -> Path:
    """A private copy of the data run (training writes into it)."""
    return copy_run(data_run, tmp_path / "run")
