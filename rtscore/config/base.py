"""Base model, YAML loading with key-path errors, and stable config hashing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from rtscore.errors import PipelineError

SCHEMA_VERSION: Final = 1


class ConfigError(PipelineError, ValueError):
    """A configuration file or value is invalid; the message names the key path (a ValueError too: callers
    and pydantic validators catch it as one)."""


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


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
        else:
            found = e.get("input")
            found_s = repr(found) if not isinstance(found, dict | list) else type(found).__name__
            lines.append(f"  {path}: {e['msg']}; got {found_s}")
    return "\n".join(lines)


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


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file, naming the file (and line) on syntax errors."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {p} is not valid YAML: {err}") from None


def load_config(model: type[M], path: str | Path) -> M:
    """Load and validate a YAML config file."""
    return parse_config(model, read_yaml(path), source=str(path))


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the input of every config hash."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def config_hash(model: BaseModel) -> str:
    """Stable sha256 of a resolved config (independent of key order and YAML formatting)."""
    return hashlib.sha256(canonical_json(model.model_dump(mode="json")).encode()).hexdigest()


def dump_yaml(model: BaseModel, path: str | Path) -> None:
    """Write a resolved config as YAML (atomically)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False))
    tmp.replace(p)
