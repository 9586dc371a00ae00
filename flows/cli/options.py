"""Command-line options derived from a command's parameter model, so that the CLI cannot drift from it.

Every `rts` command has one pydantic parameter model (:class:`flows.form.FormModel`): the flows take it (the
Prefect UI builds its form from the same fields) and this module turns its fields into argparse options:
``run_dir`` becomes ``--run-dir`` (or the flag its :class:`Cli` metadata names), the field's description is the
option's help, a ``Literal`` its choices, a ``list`` takes several values, a ``bool`` is a switch (``--x`` /
``--no-x`` when its default is unset or true), a nested model's fields are options named ``--<field>.<name>``.
The option's default is not copied: an option not given leaves the field to the model's own default, and the
model validates what was given (an error names the option).

Why a generator of our own and not a library that builds CLIs from type hints (cyclopts, typer, pydantic-settings'
CLI): it keeps every spelling the docs and users' scripts already use (``--seeds 42 43``, ``--no-deterministic``,
``--clip LOW HIGH``, ``--rgb-bands 2,1,0``, a positional package directory), costs nothing at ``rts --help``
(argparse is in the standard library; the libraries add 0.1-0.4 s of imports), and is small enough to read.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from flows.fields import Cli, cli_of, flag_of
from rtscore.errors import PipelineError

M = TypeVar("M", bound=BaseModel)

__all__ = [
    "Cli",
    "Option",
    "ParameterError",
    "add_options",
    "options",
    "params_from",
]


class ParameterError(PipelineError):
    """A command's options break a rule of its parameter model; the message names the option."""


@dataclass(frozen=True)
class Option:
    """One command-line option and the field it sets (``path``: the field names down nested models)."""

    path: tuple[str, ...]
    flag: str
    field: FieldInfo
    cli: Cli

    @property
    def dest(self) -> str:
        return "__".join(self.path)


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``None``, whether ``None`` was allowed)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    base, _ = _without_none(annotation)
    return base if isinstance(base, type) and issubclass(base, BaseModel) else None


def options(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[Option]:
    """Every option of ``model``, nested models' fields as ``--<field>.<name>``."""
    for name, field in model.model_fields.items():
        cli = cli_of(field)
        nested = _nested_model(field.annotation)
        if nested is not None and cli.parse is None:
            yield from options(nested, (*prefix, name))
            continue
        yield Option((*prefix, name), flag_of((*prefix, name), field), field, cli)


def _default_text(field: FieldInfo) -> str:
    default = field.default
    if default is PydanticUndefined or default is None or default is False or field.default_factory is not None:
        return ""
    shown = ",".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
    return f" (default: {shown})"


def _help(field: FieldInfo) -> str:
    text = (field.description or "").strip()
    return (text + _default_text(field)).replace("%", "%%")


class _DuplicateKey(ValueError):
    """A JSON object with a key given twice (``json.loads`` would keep the last, silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _json_object(value: str) -> Any:
    try:
        parsed = json.loads(value, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{value!r} is not JSON ({err.msg})") from None
    except _DuplicateKey as err:
        raise argparse.ArgumentTypeError(
            f"{value!r}: key {err.args[0]!r} is given twice (the last would silently win); give each key once"
        ) from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"{value!r}: expected a JSON object")
    return parsed


class _Once(argparse.Action):
    """Store a JSON object option's value, refusing the option given twice: argparse would keep the last object
    and silently drop every key of the earlier ones."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        if hasattr(namespace, self.dest):  # the default is SUPPRESS: set only once the option was given
            raise argparse.ArgumentError(
                self, "given twice (the last would silently win); give every key in one JSON object"
            )
        setattr(namespace, self.dest, values)


def _kind(annotation: Any) -> dict[str, Any]:
    """argparse keywords for a value of type ``annotation`` (its choices, converter and arity)."""
    base, _ = _without_none(annotation)
    origin = typing.get_origin(base)
    if origin is Literal:
        values = typing.get_args(base)
        return {"choices": list(values), "type": type(values[0])}
    if origin is list:
        return {**_kind(typing.get_args(base)[0]), "nargs": "+"}
    if origin is tuple:
        args = typing.get_args(base)
        return {**_kind(args[0]), "nargs": len(args)}
    if origin is dict:
        return {"type": _json_object, "action": _Once}
    if base in (int, float, str):
        return {"type": base}
    raise TypeError(f"no command-line form for {annotation!r}: give the field Cli(parse=...)")


def add_options(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """The options of ``model`` on ``parser`` (the values land under each option's ``dest``)."""
    for opt in options(model):
        field, cli = opt.field, opt.cli
        base, optional = _without_none(field.annotation)
        kw: dict[str, Any] = {"help": _help(field), "default": argparse.SUPPRESS}
        if base is bool and cli.parse is None:
            switch = field.default is not False or optional
            kw["action"] = argparse.BooleanOptionalAction if switch else "store_true"
        else:
            kw.update(_kind(field.annotation) if cli.parse is None else {"type": cli.parse})
            if cli.metavar:
                kw["metavar"] = tuple(cli.metavar.split()) if kw.get("nargs", 1) not in (1, "+") else cli.metavar
            elif not cli.positional and "choices" not in kw:
                kw["metavar"] = opt.flag.rpartition(".")[2].lstrip("-").replace("-", "_").upper()
            if "choices" in kw and "metavar" not in kw and kw.get("nargs") is None:
                kw["metavar"] = "{" + ",".join(map(str, kw["choices"])) + "}"
        if cli.positional:
            kw.pop("default")
            parser.add_argument(opt.dest, **kw)
            continue
        if field.is_required():
            kw["required"] = True
        parser.add_argument(opt.flag, dest=opt.dest, **kw)


def params_from(model: type[M], namespace: argparse.Namespace) -> M:
    """The model from the options given (nested models rebuilt); a value it refuses is one line naming the
    option (:class:`ParameterError`)."""
    values: dict[str, Any] = {}
    for opt in options(model):
        if opt.dest not in vars(namespace):
            continue
        at = values
        for part in opt.path[:-1]:
            at = at.setdefault(part, {})
        at[opt.path[-1]] = getattr(namespace, opt.dest)
    return validated(model, values)


def validated(model: type[M], values: dict[str, Any]) -> M:
    """``model(**values)``; a ValidationError becomes one ParameterError line naming each option."""
    try:
        return model(**values)
    except ValidationError as err:
        flags = {opt.path: opt.flag for opt in options(model)}
        problems = []
        for e in err.errors():
            loc = tuple(str(part) for part in e["loc"])
            msg = e["msg"].removeprefix("Value error, ")
            flag = next((flags[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in flags), ".".join(loc))
            problems.append(f"{flag}: {msg}" if flag else msg)  # a rule over several fields names them itself
        raise ParameterError("; ".join(problems)) from None
