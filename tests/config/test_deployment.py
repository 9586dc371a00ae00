"""deployment_config.yaml: the calibrated-numerics record and its one parity check, removed keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rtscore.config import parse_pipeline_config
from rtscore.config.base import ConfigError, load_config
from rtscore.config.deployment import DeploymentConfig, DeploymentParityError, require_calibrated
from tests.helpers import calibrated_deployment, tiny_pipeline_config


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ({"precision": "bf16"}, "precision: 'bf16' in the file, calibrated with 'fp32'"),
        ({"torch_compile": True}, "torch_compile: True in the file, calibrated with False"),
        ({"tta": "full"}, "tta: 'full' in the file, calibrated with 'none'"),
        ({"scales": [1.0, 0.5]}, "scales: [1.0, 0.5] in the file, calibrated with [1.0]"),
    ],
)
def test_numerics_edited_after_calibration_are_refused_naming_each_difference(
    tmp_path: Path, edit: dict[str, object], named: str
) -> None:
    path = tmp_path / "deployment_config.yaml"
    data = calibrated_deployment(precision="fp32").model_dump(mode="json") | edit
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(DeploymentParityError) as err:
        require_calibrated(load_config(DeploymentConfig, path), str(path))
    assert named in str(err.value) and str(path) in str(err.value) and "§4.6" in str(err.value)


def test_the_calibrated_config_passes_and_a_config_without_the_record_is_refused() -> None:
    dep = calibrated_deployment(precision="fp32", tta="minimal")
    assert require_calibrated(dep, "x") is dep
    bare = dep.model_copy(update={"calibrated_with": None})
    with pytest.raises(DeploymentParityError, match="calibrated_with is missing"):
        require_calibrated(bare, "x")
    with pytest.raises(DeploymentParityError, match="threshold_source null"):
        require_calibrated(dep.model_copy(update={"threshold_source": None}), "x")


def test_fusion_counts_only_for_multiscale() -> None:
    dep = calibrated_deployment(precision="fp32")
    assert require_calibrated(dep.model_copy(update={"fusion": "max"}), "x")  # one scale: fusion unused


def test_per_region_threshold_keys_are_refused_saying_they_were_removed_and_why(tmp_path: Path) -> None:
    data = tiny_pipeline_config()
    data["calibration"] = {"per_region_thresholds": True}
    with pytest.raises(ConfigError) as err:
        parse_pipeline_config(data)
    assert "calibration: per_region_thresholds: per-region thresholds were removed" in str(err.value)
    assert "spatial blocking" in str(err.value)
    data = tiny_pipeline_config()
    data["deployment"] = {"precision": "fp32", "region_thresholds": {"va": 0.4}}
    with pytest.raises(ConfigError, match="deployment: region_thresholds: per-region thresholds were removed"):
        parse_pipeline_config(data)
    old = tmp_path / "deployment_config.yaml"  # a package's file written before the removal
    old.write_text(yaml.safe_dump({"threshold": 0.5, "temperature": 1.0, "region_thresholds": {"va": 0.4}}))
    with pytest.raises(ConfigError, match="region_thresholds: per-region thresholds were removed"):
        load_config(DeploymentConfig, old)
