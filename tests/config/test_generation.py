"""Generation configs (rtscore/config/generation.py): a GeoTIFF source refuses the keys only the synthetic
renderer reads, and the test-positives rule has one key (splits.min_test_positives of the pipeline config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rtscore.config import ConfigError, GenerationConfig, load_config, load_pipeline_config, parse_config
from rtscore.config.base import read_yaml
from rtscore.config.generation import GeotiffSourceConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _geotiff(**extra: Any) -> dict[str, Any]:
    return {"split": "train", "source": "geotiff", "geotiff": {"data_root": "tiles"}, **extra}


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"seed": 7}, "seed"),
        ({"seed": 42}, "seed"),  # the default value too: given is given
        ({"processing": {"augmentation": {"rotations": True}}}, "processing.augmentation.rotations"),
        ({"processing": {"augmentation": {"rotations": False}}}, "processing.augmentation.rotations"),
        ({"store": {"write_noisy_labels": True}}, "store.write_noisy_labels"),
        ({"synthetic": {"n_positive": 1, "n_negative": 1, "regions": ["a"]}}, "synthetic"),
    ],
)
def test_geotiff_source_refuses_synthetic_only_keys(extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"source 'geotiff' does not read the synthetic-only keys {key} \("):
        parse_config(GenerationConfig, _geotiff(**extra))


def test_geotiff_source_keeps_the_keys_it_reads() -> None:
    cfg = parse_config(
        GenerationConfig,
        _geotiff(processing={"num_workers": 2}, store={"shard_tiles": 8, "clevel": 5}, dataset_version="v2"),
    )
    assert (cfg.processing.num_workers, cfg.store.shard_tiles, cfg.store.clevel) == (2, 8, 5)


def test_synthetic_source_still_takes_them() -> None:
    cfg = parse_config(
        GenerationConfig,
        {
            "split": "train",
            "seed": 7,
            "synthetic": {"n_positive": 1, "n_negative": 1, "regions": ["a"]},
            "processing": {"augmentation": {"rotations": True}},
            "store": {"write_noisy_labels": False},
        },
    )
    assert cfg.seed == 7 and cfg.rotations == 4 and not cfg.store.write_noisy_labels


def test_a_geotiff_config_written_out_loads_back(tmp_path: Path) -> None:
    """The resolved config (and a store's recorded config) omit what a GeoTIFF source does not read."""
    cfg = parse_config(GenerationConfig, _geotiff())
    dumped = cfg.model_dump(mode="json")
    assert "seed" not in dumped and "write_noisy_labels" not in dumped["store"]
    assert "augmentation" not in dumped["processing"]
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(dumped))
    assert load_config(GenerationConfig, tmp_path / "g.yaml") == cfg
    pipeline = load_pipeline_config(CONFIGS / "quickstart_geotiff.yaml")
    from rtscore.config import dump_yaml

    dump_yaml(pipeline, tmp_path / "resolved.yaml")
    assert load_pipeline_config(tmp_path / "resolved.yaml") == pipeline


def test_geotiff_min_test_positives_points_to_the_splits_section() -> None:
    with pytest.raises(ConfigError, match=r"geotiff: min_test_positives moved to splits\.min_test_positives"):
        parse_config(GenerationConfig, {**_geotiff(), "geotiff": {"data_root": "x", "min_test_positives": 5}})
    assert "min_test_positives" not in GeotiffSourceConfig.model_fields


def test_inline_geotiff_generation_in_a_pipeline_config_names_the_split(tmp_path: Path) -> None:
    doc = read_yaml(CONFIGS / "quickstart_geotiff.yaml")
    doc["data"]["generation"]["val"]["seed"] = 43
    (tmp_path / "data").mkdir()
    path = tmp_path / "configs" / "p.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"data\.generation\.val: source 'geotiff' does not read .*seed"):
        load_pipeline_config(path)
