from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rtscore.config import parse_pipeline_config
from rtscore.config.pipeline import PipelineConfig
from rtscore.train.result import SeedResult
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


REF_SEED = 7
REF_EPOCHS = 3  # enough for what the trained run shows: a frozen then unfrozen backbone, both curriculum ratios,
# keep_last_n 2 pruning the first checkpoint, and a resume (after epoch 2) with an epoch left to train


@dataclass(frozen=True)
class TrainedRun:
    """The data run with :data:`REF_SEED` trained uninterrupted, and what training returned."""

    run: Path
    result: SeedResult

    @property
    def seed_dir(self) -> Path:
        return self.run / "seeds" / f"seed_{REF_SEED}"


@pytest.fixture(scope="session")
def trained_run(data_run: Path, tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The data run with seed 7 trained uninterrupted by the loop (``tiny_train_config(max_epochs=3)``), trained
    once per worker: the reference every resumed run must equal bit for bit, and the trained seed the output and
    noise-floor checks read. Read only: copy it (``copy_run``) to write; its seed directory keeps the resume
    checkpoints of epochs 2 and 3 (keep_last_n 2)."""
    from rtscore.train.loop import train_seed

    run = copy_run(data_run, tmp_path_factory.mktemp("trained") / "run")
    result = train_seed(tiny_train_config(max_epochs=REF_EPOCHS), run, REF_SEED)
    return TrainedRun(run, result)
