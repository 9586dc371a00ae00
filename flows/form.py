"""The base of every flow's parameter model: what the Prefect UI form and the `rts` options are built from.

The UI's form is drawn from the JSON schema of the model, which Prefect stores with each deployment. Two things
pydantic writes there are not what the form can show, so :class:`FormModel` rewrites them for every field of every
subclass (:func:`form_schema`), without touching the field definitions:

- a placeholder in the help (``<run_dir>/datasets/``, ``log/chunk-<k>-<run>.jsonl``) is read as an HTML tag by the
  form's markdown renderer and vanishes: it is written ``‹run_dir›``; any other ``<`` as ``&lt;``;
- an optional field (``bool | None = None``) is ``anyOf: [{type: boolean}, {type: null}]`` with ``default: null``:
  the form preselects the null alternative and shows ``Property is type "None"``. It becomes the plain type with
  no default: the form shows the field empty (omitted when left empty, so the model's ``None`` applies), and a
  ``null`` sent from code (``run_deployment``, ``prefect deployment run --params``) is still accepted, because
  Prefect's server lets a non-required field without a default be null when it validates a run's parameters.
  An optional boolean becomes a choice of ``true``, ``false`` and ``None`` (a toggle cannot be empty: it would
  send ``false``, overriding e.g. the config's ``training.deterministic``).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

_PLACEHOLDER = re.compile(r"<([^<>\s][^<>]*)>")  # <run_dir>, <flow name>, <k>
NULL = {"type": "null"}


def plain_text(text: str) -> str:
    """``text`` with no ``<`` a markdown renderer could take for HTML: ``<name>`` placeholders as ``‹name›``."""
    return _PLACEHOLDER.sub(r"‹\1›", text).replace("<", "&lt;")


def form_field(prop: dict[str, Any]) -> dict[str, Any]:
    """A property of a model's JSON schema as the UI form can show it: the null alternative of an optional
    field dropped (and its ``default: null``), the help without HTML-like placeholders."""
    prop = dict(prop)
    alternatives = prop.get("anyOf")
    if isinstance(alternatives, list) and NULL in alternatives:
        rest = [a for a in alternatives if a != NULL]
        del prop["anyOf"]
        if rest == [{"type": "boolean"}]:
            prop["enum"] = [True, False, None]  # a toggle cannot be empty: a choice of true, false, None (empty)
        elif len(rest) == 1:
            prop = {**rest[0], **prop}  # the field's own title, description and default win over the type's
        else:
            prop["anyOf"] = rest
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    if isinstance(prop.get("description"), str):
        prop["description"] = plain_text(prop["description"])
    return prop


def form_schema(schema: dict[str, Any], cls: type[BaseModel] | None = None) -> None:
    """pydantic's ``json_schema_extra`` hook of :class:`FormModel`: rewrite a model's schema in place
    (:func:`form_field` for each property, the model's own help as plain text)."""
    if isinstance(schema.get("description"), str):
        schema["description"] = plain_text(schema["description"])
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, prop in props.items():
            props[name] = form_field(prop)


class FormModel(BaseModel):
    """A flow's (or command's) parameters: unknown fields are refused, every field has a description; the JSON
    schema is the one the Prefect UI form can show (:func:`form_schema`)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=form_schema)
