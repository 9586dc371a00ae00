"""Dotted-key overrides of a pipeline config file: set over the file's mapping (sections created on the way), then
validated as the file is (errors name the key path and say "with overrides"), paths resolved against the file's
folder; every command takes them as ``--overrides '{"loss.boundary_handling": "ignore"}'``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.cli.main import parse
from flows.cli.options import ParameterError
from flows.common import load_config
from flows.params import RunParams
from rtscore.config.base import ConfigError, parse_config
from rtscore.config.overrides import apply_overrides, check_override_keys, describe
from rtscore.config.pipeline import load_pipeline_config
from rtscore.sweep.config import SweepConfig
from tests.flows.configs import tiny_training_config, write_config


def _base(tmp_path: Path, data: dict[str, Any] | None = None) -> Path:
    return write_config(tmp_path / "configs" / "pipeline.yaml", data or tiny_training_config())


# ----------------------------------------------------------------------------------------------- apply_overrides
def test_an_override_sets_a_nested_key_and_leaves_the_input_alone() -> None:
    data: dict[str, Any] = {"loss": {"focal_gamma": 2.0, "boundary_handling": "none"}, "training": {"seeds": [1, 2]}}
    out = apply_overrides(data, {"loss.boundary_handling": "ignore", "training.seeds": [3]})
    assert out == {"loss": {"focal_gamma": 2.0, "boundary_handling": "ignore"}, "training": {"seeds": [3]}}
    assert data["loss"]["boundary_handling"] == "none" and data["training"]["seeds"] == [1, 2], "a copy is changed"


def test_an_override_creates_the_sections_it_passes_through() -> None:
    out = apply_overrides({"loss": {}}, {"augmentation.geometric.rotate90": False, "top": 1})
    assert out == {"loss": {}, "augmentation": {"geometric": {"rotate90": False}}, "top": 1}
    # A section given as null in the file (`augmentation:` with nothing under it) is a section too.
    assert apply_overrides({"augmentation": None}, {"augmentation.p": 0.5}) == {"augmentation": {"p": 0.5}}


def test_an_overridden_value_is_a_copy_of_the_override() -> None:
    value = {"n_positive": 3}
    out = apply_overrides({}, {"data.generation.train.synthetic": value})
    value["n_positive"] = 99
    assert out["data"]["generation"]["train"]["synthetic"] == {"n_positive": 3}


def test_a_key_through_a_value_is_refused_naming_it() -> None:
    data = {"data": {"tile_size": 64}, "channels": {"extra": [{"name": "ndvi", "band": 0}]}}
    with pytest.raises(ConfigError, match=r"variant v data\.tile_size\.x: data\.tile_size is a value \(64\)"):
        apply_overrides(data, {"data.tile_size.x": 3}, "variant v")
    with pytest.raises(ConfigError, match=r"channels\.extra\.name: channels\.extra is a value \(\[\{"):
        apply_overrides(data, {"channels.extra.name": "slope"})


@pytest.mark.parametrize("key", ["bad key", "loss..gamma", ".loss", "loss.", "loss.gamma-1", "1loss.x", ""])
def test_a_key_that_is_not_a_key_path_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^variant v: {key!r} is not a dotted config key"):
        apply_overrides({}, {key: 1}, "variant v")
    with pytest.raises(ConfigError, match="is not a dotted config key"):
        check_override_keys({"loss.ok": 1, key: 1})


@pytest.mark.parametrize(
    "overrides",
    [
        {"loss": {"focal_gamma": 1.0}, "loss.focal_gamma": 3.0},
        {"loss.focal_gamma": 3.0, "loss": {"boundary_handling": "ignore"}},
        {"data.generation.train": "gen.yaml", "data.generation.train.synthetic.n_positive": 2},
    ],
)
def test_a_setting_given_twice_through_a_section_is_refused_naming_both(overrides: dict[str, Any]) -> None:
    """A key and a section holding it: whichever is applied last would silently win over the other."""
    inner = max(overrides, key=len)
    section = min(overrides, key=len)
    with pytest.raises(ConfigError, match=rf"^variant v: {inner} is given twice: .* section {section}, which is set"):
        apply_overrides({}, overrides, "variant v")
    with pytest.raises(ConfigError, match=rf"(?s)sweep\.yaml.*variants: variant v: {inner} is given twice"):
        parse_config(SweepConfig, {"base": "b.yaml", "variants": {"v": overrides}}, source="sweep.yaml")


def test_describe_lists_the_overrides() -> None:
    assert describe({"loss.boundary_handling": "ignore", "loss.focal_gamma": 1.5}) == (
        "loss.boundary_handling=ignore, loss.focal_gamma=1.5"
    )
    assert describe({}) == "(none)"


# ----------------------------------------------------------------------------------------------- load_pipeline_config
def test_overrides_are_validated_as_the_file_is(tmp_path: Path) -> None:
    base = _base(tmp_path)
    cfg = load_pipeline_config(base, {"loss.boundary_handling": "ignore", "loss.focal_gamma": 1.0})
    assert (cfg.loss.boundary_handling, cfg.loss.focal_gamma) == ("ignore", 1.0)
    plain = load_pipeline_config(base)
    assert load_pipeline_config(base, {}) == plain and plain.loss.boundary_handling != "ignore"


def test_an_unknown_key_is_refused_naming_its_path_with_overrides(tmp_path: Path) -> None:
    base = _base(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_pipeline_config(base, {"loss.boundary_handlin": "ignore"})
    text = str(err.value)
    assert f"{base} with overrides loss.boundary_handlin=ignore" in text
    assert "loss.boundary_handlin: unknown key" in text


def test_a_value_of_the_wrong_type_is_refused_naming_its_path(tmp_path: Path) -> None:
    base = _base(tmp_path)
    with pytest.raises(ConfigError, match=r"(?s)with overrides loss\.focal_gamma=steep.*loss\.focal_gamma: .*number"):
        load_pipeline_config(base, {"loss.focal_gamma": "steep"})
    with pytest.raises(ConfigError, match=r"(?s)with overrides.*loss\.boundary_handling"):
        load_pipeline_config(base, {"loss.boundary_handling": "sometimes"})


def test_an_override_through_a_value_names_the_file(tmp_path: Path) -> None:
    base = _base(tmp_path)
    with pytest.raises(ConfigError, match=rf"override of {base} data\.tile_size\.x: data\.tile_size is a value"):
        load_pipeline_config(base, {"data.tile_size.x": 1})


def test_a_path_in_an_override_resolves_against_the_base_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_training_config()
    base = _base(tmp_path, data)
    gen = data["data"]["generation"]["train"]
    gen["synthetic"]["n_positive"] = 5
    (base.parent / "generation").mkdir()
    (base.parent / "generation" / "train_small.yaml").write_text(yaml.safe_dump(gen))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the base file's folder: the path must not resolve against the cwd
    cfg = load_pipeline_config(base, {"data.generation.train": "generation/train_small.yaml"})
    assert cfg.data.generation.train is not None and cfg.data.generation.train.synthetic is not None
    assert cfg.data.generation.train.synthetic.n_positive == 5
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_pipeline_config(base, {"data.generation.train": "generation/missing.yaml"})


# ----------------------------------------------------------------------------------------------- --overrides
def test_every_command_takes_overrides_as_a_json_object(tmp_path: Path) -> None:
    base = _base(tmp_path)
    argv = ["--config", str(base), "--run", str(tmp_path / "run")]
    _, params = parse(["train", *argv, "--overrides", '{"loss.boundary_handling": "ignore"}'])
    assert isinstance(params, RunParams) and params.overrides == {"loss.boundary_handling": "ignore"}
    assert load_config(params).loss.boundary_handling == "ignore"
    _, plain = parse(["train", *argv])
    assert isinstance(plain, RunParams) and plain.overrides == {}
    assert load_config(plain).loss.boundary_handling != "ignore"


def test_a_bad_override_key_is_a_parameter_error_naming_the_option(tmp_path: Path) -> None:
    base = _base(tmp_path)
    with pytest.raises(ParameterError, match=r"^--overrides: .*'loss\.boundary handling' is not a dotted config key"):
        parse(["data", "--config", str(base), "--overrides", '{"loss.boundary handling": "ignore"}'])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--overrides", '{"loss.focal_gamma": 1.0, "loss.focal_gamma": 3.0}'],
            "key 'loss.focal_gamma' is given twice",
        ),
        (["--overrides", '{"loss": {"focal_gamma": 1.0, "focal_gamma": 3.0}}'], "key 'focal_gamma' is given twice"),
        (["--overrides", '{"loss.focal_gamma": 1.0}', "--overrides", '{"loss.focal_gamma": 3.0}'], "given twice"),
    ],
)
def test_a_key_or_the_option_given_twice_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """json.loads keeps the last of two equal keys and argparse the last of two options, silently; a config file
    with a key twice is refused, and so is the command line."""
    base = _base(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        parse(["train", "--config", str(base), "--run", str(tmp_path / "run"), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --overrides: " in err and said in err, err
    assert not (tmp_path / "run").exists()


def test_a_setting_given_twice_through_a_section_is_a_parameter_error(tmp_path: Path) -> None:
    base = _base(tmp_path)
    with pytest.raises(ParameterError, match=r"^--overrides: loss\.focal_gamma is given twice"):
        parse(["data", "--config", str(base), "--overrides", '{"loss": {"focal_gamma": 1.0}, "loss.focal_gamma": 3}'])


def test_an_unknown_override_key_is_refused_when_the_config_is_loaded(tmp_path: Path) -> None:
    base = _base(tmp_path)
    _, params = parse(["train", "--config", str(base), "--overrides", '{"loss.nonsense": 1}'])
    assert isinstance(params, RunParams)
    with pytest.raises(ConfigError, match=r"(?s)with overrides loss\.nonsense=1.*loss\.nonsense: unknown key"):
        load_config(params)
