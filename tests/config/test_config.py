from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rtscore.config import (
    ConfigError,
    GenerationConfig,
    PipelineConfig,
    config_hash,
    load_config,
    load_pipeline_config,
    parse_pipeline_config,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    "name", ["quickstart.yaml", "quickstart_geotiff.yaml", "baseline.yaml", "baseline_geotiff.yaml"]
)
def test_shipped_pipeline_configs_load(name: str) -> None:
    cfg = load_pipeline_config(CONFIGS / name)
    assert cfg.data.generation.train is not None and cfg.data.generation.test is not None
    assert cfg.training.precision == cfg.deployment.precision


def test_baseline_matches_guide_defaults() -> None:
    cfg = load_pipeline_config(CONFIGS / "baseline.yaml")
    assert (cfg.model.architecture, cfg.model.backbone, cfg.data.tile_size) == ("unetplusplus", "efficientnet-b5", 512)
    assert (cfg.loss.name, cfg.loss.focal_gamma, cfg.loss.focal_alpha) == ("focal", 2.0, 0.25)
    assert (cfg.training.batch_size, cfg.training.max_epochs, cfg.training.early_stopping.start_epoch) == (32, 300, 101)
    assert [s.neg_per_pos for s in cfg.sampling.curriculum_schedule] == [1, 5, 10, 15, 20]
    assert cfg.ema.decay == 0.999 and cfg.training.seeds == [42, 43, 44]


def test_every_field_is_described() -> None:
    """Descriptions become the Prefect UI's parameter help."""
    from pydantic import BaseModel

    def walk(model: type[BaseModel], seen: set[type]) -> list[str]:
        missing = []
        if model in seen:
            return missing
        seen.add(model)
        for name, f in model.model_fields.items():
            if not f.description and name != "schema_version":
                missing.append(f"{model.__name__}.{name}")
            ann = f.annotation
            for sub in getattr(ann, "__args__", (ann,)):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    missing += walk(sub, seen)
        return missing

    assert walk(PipelineConfig, set()) == []


def _write(tmp: Path, data: dict, name: str = "cfg.yaml") -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_unknown_key_names_the_path(tmp_path: Path) -> None:
    p = _write(tmp_path, {"training": {"early_stopping": {"patiense": 3}}})
    with pytest.raises(ConfigError, match=r"training\.early_stopping\.patiense: unknown key"):
        load_pipeline_config(p)


def test_wrong_type_names_the_path_and_value(tmp_path: Path) -> None:
    p = _write(tmp_path, {"training": {"batch_size": "many"}})
    with pytest.raises(ConfigError, match=r"training\.batch_size: .*got 'many'"):
        load_pipeline_config(p)


def test_misplaced_key_is_an_error(tmp_path: Path) -> None:
    p = _write(tmp_path, {"loss": {"patience": 3}})
    with pytest.raises(ConfigError, match=r"loss\.patience: unknown key"):
        load_pipeline_config(p)


def test_yaml_syntax_error_names_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("training: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml is not valid YAML"):
        load_pipeline_config(p)


def test_missing_file_is_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_pipeline_config(tmp_path / "nope.yaml")


def test_generation_paths_resolve_relative_to_file_and_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "gen").mkdir()
    gen = {"split": "train", "tile_size": 64, "synthetic": {"n_positive": 1, "n_negative": 1, "regions": ["a"]}}
    _write(tmp_path / "gen", gen, "train.yaml")
    p = _write(tmp_path, {"data": {"tile_size": 64, "generation": {"train": "gen/train.yaml"}}})
    cfg = load_pipeline_config(p)
    assert cfg.data.generation.train is not None and cfg.data.generation.train.synthetic.regions == ["a"]
    gen["synthetic"]["colour"] = 1
    _write(tmp_path / "gen", gen, "train.yaml")
    with pytest.raises(
        ConfigError, match=r"(?s)data\.generation\.train: .*gen/train\.yaml.*synthetic\.colour: unknown key"
    ):
        load_pipeline_config(p)


def test_cross_field_errors_name_both_fields() -> None:
    with pytest.raises(ConfigError, match=r"training\.precision \(fp16\) must equal deployment\.precision \(bf16\)"):
        parse_pipeline_config({"training": {"precision": "fp16"}})
    gen = {"split": "train", "tile_size": 64, "synthetic": {"n_positive": 1, "n_negative": 1, "regions": ["a"]}}
    with pytest.raises(ConfigError, match=r"data\.generation\.train\.tile_size \(64\) differs from data\.tile_size"):
        parse_pipeline_config({"data": {"generation": {"train": gen}}})
    with pytest.raises(ConfigError, match="region 'a' is in splits.train and splits.test"):
        parse_pipeline_config({"splits": {"train": ["a"], "test": ["a"]}})


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (
            [
                {"start_epoch": 1, "end_epoch": 5, "neg_per_pos": 1},
                {"start_epoch": 7, "end_epoch": None, "neg_per_pos": 5},
            ],
            "gap",
        ),
        (
            [
                {"start_epoch": 1, "end_epoch": 5, "neg_per_pos": 1},
                {"start_epoch": 5, "end_epoch": None, "neg_per_pos": 5},
            ],
            "overlap",
        ),
        ([{"start_epoch": 2, "end_epoch": None, "neg_per_pos": 1}], "must start at epoch 1"),
        (
            [
                {"start_epoch": 1, "end_epoch": None, "neg_per_pos": 1},
                {"start_epoch": 2, "end_epoch": None, "neg_per_pos": 5},
            ],
            "open-ended",
        ),
    ],
)
def test_curriculum_gaps_and_overlaps_are_errors(schedule: list, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"sampling\.curriculum_schedule: .*{message}"):
        parse_pipeline_config({"sampling": {"curriculum_schedule": schedule}})


def test_extra_channels_must_exist_in_generation() -> None:
    gen = {"split": "train", "tile_size": 512, "synthetic": {"n_positive": 1, "n_negative": 1, "regions": ["a"]}}
    with pytest.raises(ConfigError, match=r"channels.extra names \['ndvi'\] are not generated"):
        parse_pipeline_config(
            {"data": {"generation": {"train": gen}}, "channels": {"extra": [{"name": "ndvi", "band": 0}]}}
        )


def test_hash_is_stable_across_key_order_and_formatting(tmp_path: Path) -> None:
    a = _write(tmp_path, {"training": {"batch_size": 8, "seed": 1}, "loss": {"name": "dice"}}, "a.yaml")
    b = tmp_path / "b.yaml"
    b.write_text("loss:\n    name: 'dice'\ntraining: {seed: 1, batch_size: 8}\n")
    assert config_hash(load_pipeline_config(a)) == config_hash(load_pipeline_config(b))
    assert config_hash(load_pipeline_config(a)) != config_hash(parse_pipeline_config({"training": {"batch_size": 9}}))


def test_generation_config_validation(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        {"split": "train", "tile_size": 100, "synthetic": {"n_positive": 1, "n_negative": 0, "regions": ["a"]}},
    )
    with pytest.raises(ConfigError, match="tile_size: .*multiple of 32"):
        load_config(GenerationConfig, p)
    p = _write(tmp_path, {"split": "train", "synthetic": {"n_positive": 0, "n_negative": 0, "regions": ["a"]}})
    with pytest.raises(ConfigError, match="split would be empty"):
        load_config(GenerationConfig, p)
    p = _write(tmp_path, {"split": "train", "synthetic": {"n_positive": 1, "n_negative": 0, "regions": ["a", "a"]}})
    with pytest.raises(ConfigError, match="repeated"):
        load_config(GenerationConfig, p)


def test_negative_boundary_width_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"loss\.boundary_ignore_width: .*greater than or equal to 0; got -1"):
        parse_pipeline_config({"loss": {"boundary_ignore_width": -1}})
