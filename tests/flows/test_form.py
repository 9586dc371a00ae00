"""The Prefect UI form of every flow, as the JSON schema Prefect stores with each deployment: help without
HTML-like placeholders (the form's markdown renderer swallows ``<run_dir>``), no null alternative (the form
preselects it and shows ``Property is type "None"``), a widget for every field in the new UI (an enum holding null
is an empty JSON editor there), nested sections under their field's title (not ``DistributedParams``), help that
names form fields (not ``--min-prob``), no field only the command line has, and the values code sends still valid."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools.validation import validate

from flows.form import form_field, plain_text
from flows.params import PipelineParams, TrainSeedParams
from flows.params.mapping import MapChunkParams
from flows.params.sweep import SweepParams

ROOT = Path(__file__).resolve().parents[2]
AS_IN_CONFIG = "config"  # an optional switch left to the config, as the form shows it (flows.form.AS_IN_CONFIG)
ENTRYPOINTS = sorted({d["entrypoint"] for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]})


def _schema(entrypoint: str) -> dict[str, Any]:
    path, func = entrypoint.split(":")
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), func)
    return parameter_schema(flow.fn).model_dump(exclude_none=True)


def _walk(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield where, node
        for k, v in node.items():
            yield from _walk(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{where}[{i}]")


@pytest.mark.parametrize("entrypoint", ENTRYPOINTS)
def test_every_flow_form_shows_its_help_and_no_null_alternative(entrypoint: str) -> None:
    schema = _schema(entrypoint)
    assert schema["definitions"], entrypoint  # the params model is there
    for where, node in _walk(schema):
        assert "<" not in node.get("description", ""), f"{entrypoint}{where}: {node['description']}"
        assert node.get("type") != "null", f"{entrypoint}{where}: a null alternative the form cannot render"
        for alt in node.get("anyOf", []):
            assert alt.get("type") != "null", f"{entrypoint}{where}: a null alternative"
    for model in schema["definitions"].values():
        for name, prop in model.get("properties", {}).items():
            assert "default" not in prop or prop["default"] is not None, f"{entrypoint}: {name} preselects null"


def test_placeholders_read_as_text() -> None:
    assert plain_text("Adopt the stores in <run_dir>/datasets/.") == "Adopt the stores in ‹run_dir›/datasets/."
    assert plain_text("log/chunk-<k>-<run>.jsonl; 1 < 2") == "log/chunk-‹k›-‹run›.jsonl; 1 &lt; 2"
    schema = _schema("flows/pipeline.py:pipeline")["definitions"]
    assert "‹run_dir›/datasets/" in schema["PipelineParams"]["properties"]["skip_generation"]["description"]
    assert "'‹flow name›/‹deployment name›'" in schema["DistributedParams"]["properties"]["deployment"]["description"]


def test_an_optional_field_is_its_plain_type_and_an_optional_switch_a_choice_with_a_default() -> None:
    import flows.form

    props = _schema("flows/pipeline.py:pipeline")["definitions"]["PipelineParams"]["properties"]
    assert {k: props["seeds"][k] for k in ("type", "items")} == {"type": "array", "items": {"type": "integer"}}
    assert props["deterministic"]["enum"] == [AS_IN_CONFIG, True, False] and "type" not in props["deterministic"]
    assert props["deterministic"]["default"] == AS_IN_CONFIG
    assert props["skip_generation"]["type"] == "boolean" and props["skip_generation"]["default"] is False
    # "config" is the config's own setting: None in Python (and on the command line), "config" in a run's JSON.
    assert getattr(flows.form, "AS_IN_CONFIG", None) == AS_IN_CONFIG
    assert PipelineParams(config="c", deterministic=AS_IN_CONFIG).deterministic is None
    assert PipelineParams(config="c").model_dump(mode="json")["deterministic"] == AS_IN_CONFIG
    assert PipelineParams(config="c", deterministic=False).model_dump(mode="json")["deterministic"] is False
    assert PipelineParams.model_validate_json('{"config": "c", "deterministic": "config"}').deterministic is None
    # Two real alternatives stay a choice, less the null one.
    prop = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "default": None, "title": "X"}
    assert form_field(prop) == {"anyOf": [{"type": "string"}, {"type": "integer"}], "title": "X"}


@pytest.mark.parametrize(
    ("entrypoint", "params"),
    [
        ("flows/pipeline.py:pipeline", PipelineParams(config="c.yaml", run_dir="r")),
        ("flows/pipeline.py:pipeline", PipelineParams(config="c.yaml", run_dir="r", deterministic=True, seeds=[1])),
        ("flows/train.py:train_seed", TrainSeedParams(config="c.yaml", run_dir="r")),
        ("flows/mapping.py:map_chunk", MapChunkParams(package="p", input="i", output="o", chunk=0, scene_ids=["a"])),
    ],
)
def test_what_code_sends_still_validates_on_the_server(entrypoint: str, params: Any) -> None:
    """A fan-out sends ``model_dump(mode="json")``, None included: the server validates it against this schema."""
    schema = _schema(entrypoint)
    assert validate({"params": params.model_dump(mode="json")}, schema, raise_on_error=True) == []
    bad = {"params": {**params.model_dump(mode="json"), "deterministic": "yes"}}
    if "deterministic" in type(params).model_fields:
        with pytest.raises(Exception, match="deterministic"):
            validate(bad, schema, raise_on_error=True)


def _properties(entrypoint: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(model, field, property) of every field of every model a flow's form shows."""
    for model, schema in _schema(entrypoint)["definitions"].items():
        for name, prop in schema.get("properties", {}).items():
            yield model, name, prop


def _widget(prop: dict[str, Any]) -> bool:
    """Whether the new UI (Prefect 3's default) draws a widget for the property: a typed field, a nested model, a
    choice; an enum holding anything but strings, numbers and booleans (null) is drawn as a JSON editor."""
    if "enum" in prop:
        return all(isinstance(v, str | int | float | bool) for v in prop["enum"])
    return any(k in prop for k in ("type", "$ref", "anyOf", "allOf"))


@pytest.mark.parametrize("entrypoint", ENTRYPOINTS)
def test_every_field_is_a_widget_and_every_nested_section_has_its_fields_title(entrypoint: str) -> None:
    """Issue 38: `deterministic` was an empty JSON editor in the new UI (its enum held null), and a nested section was
    titled `DistributedParams` (pydantic gives a field holding a model no title; the form then shows the model's)."""
    classes = set(_schema(entrypoint)["definitions"])
    for model, name, prop in _properties(entrypoint):
        assert _widget(prop), f"{entrypoint}: {model}.{name} is drawn as a JSON editor: {prop}"
        assert prop.get("title") and prop["title"] not in classes, f"{entrypoint}: {model}.{name} titled {prop}"
    titles = {name: prop["title"] for model, name, prop in _properties(entrypoint) if model.endswith("Params")}
    if "distributed" in titles:
        assert titles["distributed"] == "Distributed execution"


@pytest.mark.parametrize("entrypoint", ENTRYPOINTS)
def test_the_forms_help_names_form_fields_not_command_line_options(entrypoint: str) -> None:
    """Issue 38: review-export's help said `--min-prob` and `--n`; a form has no options: a help names the form's own
    field, as the form titles it (the command line's help keeps the option)."""
    for where, node in _walk(_schema(entrypoint)):
        text = node.get("description", "")
        assert not re.search(r"(?<![\w-])--[a-z]", text), f"{entrypoint}{where}: {text}"
    if entrypoint == "flows/review.py:review_export":
        select = _schema(entrypoint)["definitions"]["ReviewExportParams"]["properties"]["select"]["description"]
        assert "prob_max at least Min Prob" in select and "stratified (N objects" in select


def test_the_sweep_form_has_no_status_field_the_command_line_keeps_it(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: the sweep form showed `status`, which only `rts sweep --status` acts on (it prints and exits)."""
    assert "status" not in _schema("flows/sweep.py:sweep")["definitions"]["SweepParams"]["properties"]
    assert "status" not in SweepParams.model_fields
    from flows.cli.main import main
    from flows.params.sweep import SweepCommandParams

    cli = SweepCommandParams(sweep="s.yaml", status=True)
    assert cli.status and cli.flow_params() == SweepParams(sweep="s.yaml", sweep_dir=cli.sweep_dir)
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "--status" in capsys.readouterr().out
