"""Base model, YAML loading with key-path errors, and stable config hashing."""

from __future__ import annotations

import functools
import re
import types
import typing
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from rtscore.errors import PipelineError
from rtscore.identity.digest import digest

SCHEMA_VERSION: Final = 1


class ConfigError(PipelineError, ValueError):
    """A configuration file or value is invalid; the message names the key path (a ValueError too: callers
    and pydantic validators catch it as one)."""


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, values are validated on assignment, and types are
    strict: ``true`` is not an integer, ``"8"`` is not a number, ``1.0`` is not a string. A YAML integer is
    still accepted for a float field (``base_lr: 1`` means 1.0), and a YAML list for a tuple field (YAML has
    no tuples)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _lists_as_tuples(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = _tuple_fields(cls)
        if not any(isinstance(data.get(f), list) for f in fields):
            return data
        return {k: tuple(v) if k in fields and isinstance(v, list) else v for k, v in data.items()}


@functools.cache
def _tuple_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields of ``model`` typed as a tuple (or an optional tuple): strict mode would refuse a list there."""

    def is_tuple(ann: Any) -> bool:
        origin = typing.get_origin(ann)
        if origin is tuple:
            return True
        if origin in (typing.Union, types.UnionType):
            return any(is_tuple(a) for a in typing.get_args(ann))
        return False

    return frozenset(name for name, f in model.model_fields.items() if is_tuple(f.annotation))


M = TypeVar("M", bound=BaseModel)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def format_validation_error(err: ValidationError, source: str) -> str:
    """Turn a pydantic error into lines naming each key path, what was found and what is expected."""
    lines = [f"invalid config {source}:"]
    for e in err.errors():
        path = _format_loc(tuple(e["loc"]))
        kind = e["type"]
        if kind == "extra_forbidden":
            lines.append(f"  {path}: unknown key (check spelling and nesting; it is not a field here)")
        elif kind == "missing":
            lines.append(f"  {path}: required key is missing")
        elif not e["loc"] or (kind == "value_error" and isinstance(e.get("input"), dict)):
            lines.append(f"  {path}: {e['msg'].removeprefix('Value error, ')}")
        elif kind == "value_error":  # a validator's own message: it says what was expected (and usually found)
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"  {path}: {msg}" + ("" if "got " in msg else f"; got {_found(e.get('input'))}"))
        else:
            lines.append(f"  {path}: {e['msg']}; got {_found(e.get('input'))}")
    return "\n".join(lines)


def _found(value: Any) -> str:
    """A found value for an error line: its repr, or its type when that is long (a whole section, a long list)."""
    text = repr(value)
    return text if not isinstance(value, dict) and len(text) <= 80 else type(value).__name__


def parse_config(model: type[M], data: Any, source: str = "<dict>") -> M:
    """Validate a mapping into ``model`` raising :class:`ConfigError` with key paths."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level; got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


# Number patterns of YAML 1.1 (PyYAML's) with two traps removed: `1e-4` (no dot) would be the *string* '1e-4',
# which strict config types refuse, and a ratio `1:20` would be the base-60 integer 80 (write the ratio as 20).
_INT = re.compile(
    r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$",
)
_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class ConfigLoader(yaml.SafeLoader):
    """The loader of every config file: SafeLoader that refuses duplicate keys and reads `1e-4` as a float."""

    source = "<string>"  # the file named in errors (set per load by parse_yaml)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader reports it itself below
                continue
            if first is not None:
                raise ConfigError(
                    f"config file {self.source}, line {key_node.start_mark.line + 1}: key {key!r} is given twice in "
                    f"one mapping (first on line {first.line + 1}); YAML would keep only the last one, so remove "
                    "or rename one of them"
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _NUMBER_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text with :class:`ConfigLoader`; errors name ``source`` and the line."""
    loader = ConfigLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {source} is not valid YAML: {err}") from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> Any:
    """Read a YAML config file, naming the file (and line) on syntax errors and duplicate keys."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    return parse_yaml(p.read_text(), str(p))


def load_config(model: type[M], path: str | Path) -> M:
    """Load and validate a YAML config file."""
    return parse_config(model, read_yaml(path), source=str(path))


def config_hash(model: BaseModel) -> str:
    """Stable sha256 of a resolved config (independent of key order and YAML formatting):
    :func:`rtscore.identity.digest` of its JSON dump."""
    return digest(model.model_dump(mode="json"))


def dump_yaml(model: BaseModel, path: str | Path) -> None:
    """Write a resolved config as YAML (atomically)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False))
    tmp.replace(p)


def check_tile_size(v: int) -> int:
    """A tile size the encoders take: a multiple of 32 (five stride-2 stages)."""
    if v % 32:
        raise ValueError(f"must be a multiple of 32 (encoder strides); got {v}")
    return v


def reject_removed_key(data: Any, name: str, why: str) -> Any:
    """The check of a ``mode="before"`` model validator for a key that no longer exists: a config still holding
    ``name`` is refused with why it went and what to do (``<name>: <why>; delete the key``), where StrictModel
    alone would say only "extra inputs are not permitted". Returns ``data`` unchanged otherwise."""
    if isinstance(data, dict) and name in data:
        raise ValueError(f"{name}: {why}; delete the key")
    return data
