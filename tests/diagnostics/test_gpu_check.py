"""`rts gpu-check`: the batched-dataset notes' GPU validation sequence (generate, profile, train and validate,
report), small enough to run on CPU."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.cli.command_params import GpuCheckParams
from flows.cli.commands import gpu_check_options
from flows.cli.main import main
from rtscore.diagnostics.gpu_check import (
    GpuCheckOptions,
    GpuCheckReport,
    _scaled,
    check_config,
    render_gpu_check,
    training_config,
)
from rtscore.stages.generate import wants_context
from tests.helpers import tiny_pipeline_config
from tests.train.conftest import tiny_train_config
from tests.train.test_profile import PROFILE_DOC


def test_the_stores_keep_the_configs_proportions() -> None:
    assert _scaled(2000, 1980, 20, 4000) == {"n_positive": 2000, "n_negative": 1980, "n_full_nodata": 20}
    assert _scaled(100, 895, 5, 40) == {"n_positive": 4, "n_negative": 36, "n_full_nodata": 0}
    assert _scaled(8, 8, 1, 2) == {"n_positive": 1, "n_negative": 1, "n_full_nodata": 0}
    cfg = check_config(tiny_train_config(), GpuCheckOptions(train_tiles=34, val_tiles=26, workers=1))
    train, val = cfg.data.generation.train, cfg.data.generation.val
    assert train is not None and val is not None and train.synthetic is not None and val.synthetic is not None
    assert (train.synthetic.n_positive, train.synthetic.n_negative, train.synthetic.n_full_nodata) == (16, 16, 2)
    assert val.synthetic.n_positive + val.synthetic.n_negative + val.synthetic.n_full_nodata == 26
    assert train.processing.num_workers == 1 and not cfg.mlflow.enabled
    assert not wants_context(cfg, "val")  # no 0.5x context store: the check trains and validates at 1x


def test_the_short_training_runs_both_phases_and_validates_every_epoch() -> None:
    cfg = training_config(tiny_train_config(), GpuCheckOptions(epochs=3, steps_per_epoch=5), batch_size=8, devices=1)
    t = cfg.training
    assert (t.batch_size, t.max_epochs, t.steps_per_epoch, t.val_frequency) == (8, 3, 5, 1)
    assert cfg.lr_schedule.freeze_backbone_epochs == 1 and cfg.lr_schedule.warmup_epochs == 0
    assert t.early_stopping.start_epoch > 3


def test_the_command_hands_every_option_over_by_its_name() -> None:
    """GpuCheckOptions is named as `rts gpu-check` names its options: the command passes each field by its name."""
    sizes = {"train_tiles": 34, "val_tiles": 26, "workers": 1, "devices": 2, "max_batch": 8, "profile_steps": 1}
    sizes |= {"max_memory_gb": 3.5, "batch_size": 4, "epochs": 3, "steps_per_epoch": 5}
    assert {f.name for f in fields(GpuCheckOptions)} == set(sizes) <= set(GpuCheckParams.model_fields)
    assert gpu_check_options(GpuCheckParams(config="c.yaml", **sizes)) == GpuCheckOptions(**sizes)


@pytest.mark.slow  # ~60 s on 2 busy cores: generation, a profile and two epochs
def test_gpu_check_runs_the_sequence_on_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tiny_pipeline_config()
    data["model"] = {"architecture": "unet", "backbone": "mobilenet_v2", "encoder_weights": None}
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(data))
    report = tmp_path / "out" / "check.json"
    args = ["gpu-check", "--config", str(config), "--dir", str(tmp_path / "run"), "--report", str(report)]
    args += ["--train-tiles", "10", "--val-tiles", "6", "--workers", "1", "--max-batch", "2", "--profile-steps", "1"]
    args += ["--epochs", "2", "--steps-per-epoch", "1", "--batch-size", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    for step in ("[1/5] generate train: 10 tiles", "[2/5] generate val: 6 tiles", "[3/5]", "[4/5]", "[5/5]"):
        assert step in out
    assert "Largest batch that fits" in out and "| train and validate |" in out
    r = json.loads(report.read_text())
    assert r["ok"] and "error" not in r
    assert [s["step"] for s in r["steps"]] == [
        "generate train",
        "generate val",
        "normalization stats",
        "profile",
        "train and validate",
    ]
    assert r["profile"]["largest_fitting"] == 2 and r["profile"]["held_gib"]["ema"] > 0
    train = r["training"]
    assert train["batch_size"] == train["effective_batch_size"] == 2 and [e["epoch"] for e in train["epochs"]] == [1, 2]
    assert all(e["val_realistic_pr_auc_geomean"] is not None for e in train["epochs"])  # validated every epoch
    assert train["train_samples_per_s"] > 0
    assert not list(report.parent.glob(".*.tmp"))  # written atomically


# A failed check's report as the code before GpuCheckReport wrote it (a dict: every step, the profile, the training,
# the error) and its steps table: the typed report keeps both, byte for byte (issue 34).
REPORT_DOC: dict[str, Any] = {
    "ok": False,
    "work_dir": "/srv/gpu-check",
    "options": {
        "train_tiles": 10,
        "val_tiles": 6,
        "devices": None,
        "epochs": 2,
        "steps_per_epoch": 1,
        "batch_size": None,
        "max_batch": 8,
        "profile_steps": 1,
        "max_memory_gb": None,
        "workers": 1,
    },
    "device": {
        "torch": "2.14.1+cu130",
        "cuda": "13.0",
        "cuda_available": True,
        "bf16_supported": True,
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.19, "capability": "9.0"}],
        "cpu_cores": 16,
        "platform": "Linux-x86_64",
    },
    "steps": [
        {
            "step": "generate train",
            "seconds": 0.37,
            "tiles": 10,
            "positive": 5,
            "tiles_per_s": 27.027027027027028,
            "store_mib": 0.19755935668945312,
        },
        {
            "step": "generate val",
            "seconds": 1.85,
            "tiles": 6,
            "positive": 1,
            "tiles_per_s": 3.243243243243243,
            "store_mib": 0.13770675659179688,
        },
        {"step": "normalization stats", "seconds": 3.33},
        {"step": "profile", "seconds": 4.81, "training_batch_size": 4, "devices": 1},
        {"step": "train and validate", "seconds": 6.29, "batch_size": 4},
    ],
    "profile": PROFILE_DOC,
    "training": {
        "batch_size": 4,
        "devices": 1,
        "effective_batch_size": 4,
        "seed": 42,
        "seconds": 6.289999999999999,
        "train_samples_per_s": 13.333333333333332,
        "val_seconds": 3.9,
        "peak_memory_gib": 3.25,
        "epochs": [
            {
                "epoch": 1,
                "train_loss": 0.5,
                "train_samples_per_s": 10.0,
                "train_batches": 2.0,
                "epoch_seconds": 4.0,
                "val_loss": None,
                "val_realistic_pr_auc_geomean": 0.1,
            },
            {
                "epoch": 2,
                "train_loss": 0.25,
                "train_samples_per_s": 20.0,
                "train_batches": 2.0,
                "epoch_seconds": 5.0,
                "val_loss": 0.2,
                "val_realistic_pr_auc_geomean": 0.2,
            },
        ],
    },
    "error": "RuntimeError: no disk",
}

REPORT_MD = (
    "| step | seconds | figures |\n"
    "|---|---:|---|\n"
    "| generate train | 0.4 | tiles 10, positive 5, tiles_per_s 27, store_mib 0.198 |\n"
    "| generate val | 1.9 | tiles 6, positive 1, tiles_per_s 3.24, store_mib 0.138 |\n"
    "| normalization stats | 3.3 |  |\n"
    "| profile | 4.8 | training_batch_size 4, devices 1 |\n"
    "| train and validate | 6.3 | batch_size 4 |\n"
)


def test_the_typed_report_keeps_its_json_and_its_table() -> None:
    report = GpuCheckReport.model_validate(REPORT_DOC)
    assert report.to_json() == json.dumps(REPORT_DOC, indent=2, default=str) + "\n"  # keys, order, values
    assert render_gpu_check(report) == REPORT_MD
    assert report.steps[0].figures == {
        "tiles": 10,
        "positive": 5,
        "tiles_per_s": 27.027027027027028,
        "store_mib": 0.19755935668945312,
    }


def test_a_report_holds_what_is_known_so_far() -> None:
    """Written after each step: profile, training and error appear once known, in that order after the steps."""
    first = {k: REPORT_DOC[k] for k in ("ok", "work_dir", "options", "device")} | {"steps": REPORT_DOC["steps"][:1]}
    report = GpuCheckReport.model_validate(first)
    assert report.to_json() == json.dumps(first, indent=2) + "\n"
    report.error = "RuntimeError: no disk"
    assert list(json.loads(report.to_json())) == ["ok", "work_dir", "options", "device", "steps", "error"]
