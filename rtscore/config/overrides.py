"""Dotted-key overrides of a pipeline config file (``loss.boundary_handling: ignore``): how a sweep's variants and
``--overrides`` of every command derive a config from a base file, before it is validated.

An override sets one key of the file's YAML mapping, creating the sections it passes through; the result is then
validated as any config file is (unknown keys, types and cross-field rules refused with their key paths), and
paths in it (a generation config) resolve against the base file's folder, as the file's own do.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from rtscore.config.base import ConfigError

# A key path: sections and fields of letters, digits and underscores, joined by dots.
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

Overrides = Mapping[str, Any]


def check_override_keys(overrides: Overrides, where: str = "override") -> None:
    """Every key is a dotted key path (``loss.boundary_handling``), and no key lies inside another's section.

    Raises:
        ConfigError: naming each key that is not a key path, or the first two keys that overlap: ``loss`` and
            ``loss.focal_gamma`` would both set ``loss.focal_gamma``, and the one applied last would silently win.
    """
    prefix = f"{where}: " if where else ""
    bad = [k for k in overrides if not isinstance(k, str) or not _KEY.fullmatch(k)]
    if bad:
        raise ConfigError(
            f"{prefix}{', '.join(map(repr, bad))} is not a dotted config key (e.g. loss.boundary_handling)"
        )
    keys = sorted(overrides)
    for section in keys:
        inner = next((k for k in keys if k.startswith(section + ".")), None)
        if inner is not None:
            raise ConfigError(
                f"{prefix}{inner} is given twice: by itself and inside the section {section}, which is set too "
                f"(one would silently replace the other); set it once, either as {inner} or inside {section}"
            )


def apply_overrides(data: Mapping[str, Any], overrides: Overrides, where: str = "override") -> dict[str, Any]:
    """A copy of the config mapping ``data`` with each dotted key set to its value (sections created as needed).

    Raises:
        ConfigError: a key is not a key path, or passes through a value that is not a section (naming it).
    """
    check_override_keys(overrides, where)
    out: dict[str, Any] = copy.deepcopy(dict(data))
    for key, value in overrides.items():
        parts = key.split(".")
        at = out
        for i, part in enumerate(parts[:-1]):
            nxt = at.get(part)
            if nxt is None:
                nxt = at[part] = {}
            if not isinstance(nxt, dict):
                above = ".".join(parts[: i + 1])
                raise ConfigError(f"{where} {key}: {above} is a value ({nxt!r}), not a section with keys")
            at = nxt
        at[parts[-1]] = copy.deepcopy(value)
    return out


def describe(overrides: Overrides) -> str:
    """``loss.boundary_handling=ignore, loss.gamma=1.5`` (for names, logs and reports); ``(none)`` when empty."""
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "(none)"


__all__ = ["Overrides", "apply_overrides", "check_override_keys", "describe"]
