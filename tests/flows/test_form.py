"""The Prefect UI form of every flow, as the JSON schema Prefect stores with each deployment: help without
HTML-like placeholders (the form's markdown renderer swallows ``<run_dir>``), no null alternative (the form
preselects it and shows ``Property is type "None"``), and the values code sends (``None`` included) still valid."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools.validation import validate

from flows.form import form_field, plain_text
from flows.params import MapChunkParams, PipelineParams, TrainSeedParams

ROOT = Path(__file__).resolve().parents[2]
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


def test_an_optional_field_is_its_plain_type_and_an_optional_boolean_a_choice() -> None:
    props = _schema("flows/pipeline.py:pipeline")["definitions"]["PipelineParams"]["properties"]
    assert {k: props["seeds"][k] for k in ("type", "items")} == {"type": "array", "items": {"type": "integer"}}
    assert props["deterministic"]["enum"] == [True, False, None] and "type" not in props["deterministic"]
    assert props["skip_generation"]["type"] == "boolean" and props["skip_generation"]["default"] is False
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
