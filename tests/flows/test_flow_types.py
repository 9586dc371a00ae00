"""Results typed end to end: no flow takes or returns an untyped ``dict[str, Any]`` (or a bare ``Any``), down to
the fields of the models it takes and returns."""

from __future__ import annotations

import importlib
import inspect
import typing
from pathlib import Path
from typing import Any

from prefect import Flow
from pydantic import BaseModel

FLOW_MODULES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "flows").glob("*.py"))


def _flows() -> dict[str, Flow[Any, Any]]:
    found: dict[str, Flow[Any, Any]] = {}
    for stem in FLOW_MODULES:
        module = importlib.import_module(f"flows.{stem}")
        for name, value in vars(module).items():
            if isinstance(value, Flow) and getattr(value.fn, "__module__", "") == module.__name__:
                found[f"flows.{stem}:{name}"] = value
    return found


def _untyped(annotation: Any, where: str, seen: set[type]) -> list[str]:
    """Where ``annotation`` holds ``Any`` (a dict of Any values, a list of Any, Any itself)."""
    if annotation is Any:
        return [where]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return []
        seen.add(annotation)
        return [
            problem
            for name, field in annotation.model_fields.items()
            for problem in _untyped(field.annotation, f"{where}.{name}", seen)
        ]
    return [p for arg in typing.get_args(annotation) for p in _untyped(arg, f"{where}[]", seen)]


def test_the_flows_are_found() -> None:
    names = {flow.name for flow in _flows().values()}
    assert {"rts-pipeline", "data-pipeline", "train-seed", "multi-seed-train", "calibrate", "map-region"} <= names


def test_no_flow_takes_or_returns_any() -> None:
    problems = []
    for where, flow in _flows().items():
        signature = inspect.signature(flow.fn, eval_str=True)
        for name, parameter in signature.parameters.items():
            problems += _untyped(parameter.annotation, f"{where}({name})", set())
        assert signature.return_annotation is not inspect.Signature.empty, f"{where} says what it returns"
        problems += _untyped(signature.return_annotation, f"{where} -> ", set())
    assert not problems, "untyped values crossing a flow's boundary:\n" + "\n".join(problems)
