"""Options derived from a parameter model: the model's defaults stay the model's (an option not given is not
copied in), its checks name the option, nested models and every field type the commands use have a form."""

from __future__ import annotations

import argparse
from typing import Annotated, Literal

import pytest
from pydantic import Field, JsonValue

from flows.cli.options import ParameterError, add_options, options, params_from
from flows.fields import Cli
from flows.form import FormModel
from flows.params import PipelineParams, TrainParams


class Inner(FormModel):
    attempts: int = Field(3, ge=1, description="Attempts.")
    extra: dict[str, JsonValue] = Field(default_factory=dict, description="A JSON object.")


class Model(FormModel):
    """A model with every kind of field."""

    path: Annotated[str, Cli(flag="--where")] = Field(..., description="Where (100% sure).")
    mode: Literal["a", "b"] = Field("a", description="Mode.")
    seeds: list[int] | None = Field(None, description="Seeds.")
    clip: Annotated[tuple[float, float] | None, Cli(metavar="LOW HIGH")] = Field(None, description="Clip.")
    flag: bool = Field(False, description="A switch.")
    maybe: bool | None = Field(None, description="Three states.")
    inner: Inner = Field(default_factory=Inner, description="Nested.")


def _parse(argv: list[str]) -> Model:
    p = argparse.ArgumentParser(prog="t")
    add_options(p, Model)
    return params_from(Model, p.parse_args(argv))


def test_each_kind_of_field_has_its_command_line_form() -> None:
    nested = ["--inner.attempts", "5", "--inner.extra", '{"env": {"A": "1"}}']
    m = _parse(
        ["--where", "x", "--mode", "b", "--seeds", "1", "2", "--clip", "1", "99", "--flag", "--no-maybe", *nested]
    )
    assert (m.path, m.mode, m.seeds, m.clip, m.flag, m.maybe) == ("x", "b", [1, 2], (1.0, 99.0), True, False)
    assert m.inner == Inner(attempts=5, extra={"env": {"A": "1"}})
    assert [o.flag for o in options(Model)][-2:] == ["--inner.attempts", "--inner.extra"]


def test_an_option_not_given_leaves_the_model_default() -> None:
    m = _parse(["--where", "x"])
    assert m == Model(path="x"), "no default copied into the parser: the model's own apply"
    assert m.maybe is None and m.inner.attempts == 3


def test_a_value_the_model_refuses_names_the_option() -> None:
    with pytest.raises(ParameterError, match=r"^--inner.attempts: Input should be greater than or equal to 1$"):
        _parse(["--where", "x", "--inner.attempts", "0"])
    with pytest.raises(ParameterError, match="^--seed and --seeds: give one"):
        params_from(TrainParams, argparse.Namespace(config="c.yaml", seed=1, seeds=[2, 3]))


def test_parse_time_errors_are_argparse_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--where", "x", "--mode", "c"], ["--where", "x", "--inner.extra", "[1]"], []):
        with pytest.raises(SystemExit) as exit_:
            _parse(argv)
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'c'" in err and "expected a JSON object" in err and "required: --where" in err


def test_help_is_the_description_with_the_default() -> None:
    p = argparse.ArgumentParser(prog="t")
    add_options(p, Model)
    text = " ".join(p.format_help().split())
    assert "Where (100% sure)." in text and "Mode. (default: a)" in text and "--clip LOW HIGH" in text


def test_the_pipeline_run_dir_defaults_to_the_config_name() -> None:
    assert PipelineParams(config="configs/quickstart.yaml").run_dir == "artifacts/quickstart"
    assert PipelineParams(config="c.yaml", run_dir="gs://b/r").run_dir == "gs://b/r"
