"""Config loading (rtscore/config/base.py): duplicate YAML keys, strict scalar types, YAML number forms."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtscore.config import ConfigError, GenerationConfig, PipelineConfig, load_config, load_pipeline_config
from rtscore.config.base import read_yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _write(tmp: Path, text: str, name: str = "cfg.yaml") -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def test_duplicate_key_names_file_line_and_key(tmp_path: Path) -> None:
    p = _write(tmp_path, "training:\n  batch_size: 8\n  max_epochs: 20\n  batch_size: 16\n")
    with pytest.raises(ConfigError) as err:
        load_pipeline_config(p)
    msg = str(err.value)
    assert str(p) in msg and "line 4" in msg and "'batch_size'" in msg and "line 2" in msg


def test_duplicate_key_in_a_generation_config_named_by_path_is_refused(tmp_path: Path) -> None:
    """Generation configs named by a pipeline config go through the same loader."""
    gen = "split: train\nseed: 1\nseed: 2\nsynthetic: {n_positive: 1, n_negative: 1, regions: [a]}\n"
    _write(tmp_path, gen, "g.yaml")
    p = _write(tmp_path, "data:\n  generation:\n    train: g.yaml\n")
    with pytest.raises(ConfigError, match=r"g\.yaml, line 3: key 'seed' is given twice"):
        load_pipeline_config(p)


def test_duplicate_top_level_section_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, "split: train\nsynthetic: {n_positive: 1, n_negative: 1, regions: [a]}\nsplit: val\n")
    with pytest.raises(ConfigError, match=r"line 3: key 'split' is given twice"):
        load_config(GenerationConfig, p)


def test_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    p = _write(tmp_path, "a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  p: 5\n")
    assert read_yaml(p) == {"a": {"p": 1, "q": 2}, "b": {"p": 5, "q": 2}}


@pytest.mark.parametrize(
    ("yaml_text", "path"),
    [
        ("training:\n  batch_size: true\n", "training.batch_size"),
        ("training:\n  seed: false\n", "training.seed"),
        ("training:\n  max_epochs: '20'\n", "training.max_epochs"),
        ("training:\n  max_epochs: 20.0\n", "training.max_epochs"),
        ("lr_schedule:\n  base_lr: '1e-4x'\n", "lr_schedule.base_lr"),
        ("lr_schedule:\n  base_lr: true\n", "lr_schedule.base_lr"),
        ("training:\n  deterministic: 1\n", "training.deterministic"),
        ("mlflow:\n  experiment_name: 12\n", "mlflow.experiment_name"),
        ("metrics:\n  ratios: [200, true]\n", "metrics.ratios[1]"),
        ("normalization:\n  clip_percentiles: [true, 99]\n", "normalization.clip_percentiles[0]"),
    ],
)
def test_scalar_types_are_strict(tmp_path: Path, yaml_text: str, path: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(path) + r": .*got"):
        load_pipeline_config(_write(tmp_path, yaml_text))


def test_yaml_ints_for_floats_and_lists_for_tuples_still_load(tmp_path: Path) -> None:
    text = (
        "lr_schedule: {base_lr: 1, frozen_lr: 1e-3, min_lr: 0}\n"
        "normalization: {clip_percentiles: [1, 99]}\n"
        "optimizer: {betas: [0.9, 0.99]}\n"
        "sampling:\n  curriculum_schedule: [{start_epoch: 1, end_epoch: null, neg_per_pos: 5}]\n"
    )
    cfg = load_pipeline_config(_write(tmp_path, text))
    assert cfg.lr_schedule.base_lr == 1.0 and isinstance(cfg.lr_schedule.base_lr, float)
    assert cfg.lr_schedule.frozen_lr == 1e-3  # YAML 1.1 alone reads 1e-3 (no dot) as a string
    assert cfg.normalization.clip_percentiles == (1.0, 99.0)
    assert cfg.optimizer.betas == (0.9, 0.99)
    assert cfg.sampling.curriculum_schedule[0].neg_per_pos == 5.0


def test_ratio_written_as_1_colon_n_is_refused_not_read_as_base_60(tmp_path: Path) -> None:
    """YAML 1.1 reads 1:20 as the base-60 integer 80 (1 x 60 + 20); the config loader keeps it a string."""
    assert read_yaml(_write(tmp_path, "r: 1:20\n", "r.yaml")) == {"r": "1:20"}
    with pytest.raises(ConfigError, match=r"metrics\.ratios\[0\]: .*got '1:50'"):
        load_pipeline_config(_write(tmp_path, "metrics:\n  ratios: [1:50, 500]\n"))


def test_every_shipped_config_loads_strictly() -> None:
    for p in sorted(CONFIGS.glob("*.yaml")):
        assert isinstance(load_pipeline_config(p), PipelineConfig), p
    for p in sorted((CONFIGS / "generation").glob("*.yaml")):
        assert isinstance(load_config(GenerationConfig, p), GenerationConfig), p
    from rtscore.config.tiling import TilingConfig, load_tiling_config

    for p in sorted((CONFIGS / "tiling").glob("*.yaml")):
        assert isinstance(load_tiling_config(p), TilingConfig), p


def test_test_configs_load_strictly() -> None:
    from rtscore.config import parse_pipeline_config
    from tests.flows.configs import tiny_training_config
    from tests.helpers import tiny_pipeline_config

    for data in (tiny_pipeline_config(), tiny_training_config()):
        assert isinstance(parse_pipeline_config(data), PipelineConfig)


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    from rtscore.config import dump_yaml

    cfg = load_pipeline_config(CONFIGS / "quickstart.yaml")
    dump_yaml(cfg, tmp_path / "resolved.yaml")
    assert PipelineConfig.model_validate(read_yaml(tmp_path / "resolved.yaml")) == cfg
