"""The base of every flow's parameter model: what the Prefect UI form and the `rts` options are built from.

The UI's form is drawn from the JSON schema of the model, which Prefect stores with each deployment. Some things
pydantic writes there are not what the form can show, so :class:`FormModel` rewrites them for every field of every
subclass (:func:`form_schema`), without touching the field definitions:

- a placeholder in the help (``<run_dir>/datasets/``, ``log/chunk-<k>-<run>.jsonl``) is read as an HTML tag by the
  form's markdown renderer and vanishes: it is written ``‹run_dir›``; any other ``<`` as ``&lt;``;
- a help that names another field's option (``--min-prob``) names that field as the form titles it (``Min Prob``):
  one description serves both the command line and the form;
- a field holding a nested model (``distributed``) has no title of its own in pydantic's schema, and the form then
  titles its section with the model's class name (``DistributedParams``): it gets the field's title (its ``Field``
  title, else its name as pydantic titles a field);
- an optional field (``str | None = None``) is ``anyOf: [{type: string}, {type: null}]`` with ``default: null``:
  the form preselects the null alternative and shows ``Property is type "None"``. It becomes the plain type with
  no default: the form shows the field empty (omitted when left empty, so the model's ``None`` applies), and a
  ``null`` sent from code (``run_deployment``, ``prefect deployment run --params``) is still accepted, because
  Prefect's server lets a non-required field without a default be null when it validates a run's parameters.

An optional switch (``deterministic``: true, false, or as the config says) is :data:`OptionalSwitch`: the form
shows a choice of ``config`` (its default), ``true`` and ``false``. An enum holding ``null`` is not a choice to the
new UI (it shows an empty JSON editor), and a toggle cannot be empty (it would send ``false``, overriding the
config), so "as in the config" is the value ``config`` in the form and in the JSON a flow run's parameters are sent
as; in Python and on the command line it stays ``None`` (``--deterministic`` / ``--no-deterministic`` / neither).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from flows.fields import cli_of, flag_of

_PLACEHOLDER = re.compile(r"<([^<>\s][^<>]*)>")  # <run_dir>, <flow name>, <k>
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*")  # --min-prob, --distributed.max-attempts
NULL = {"type": "null"}
AS_IN_CONFIG = "config"  # an OptionalSwitch left to the config, as the form and a run's JSON parameters hold it


def _as_in_config(value: Any) -> Any:
    return None if value == AS_IN_CONFIG else value


def _switch_json(value: bool | None) -> bool | str:
    return AS_IN_CONFIG if value is None else value


OptionalSwitch = Annotated[
    bool | None,
    BeforeValidator(_as_in_config),
    PlainSerializer(_switch_json, when_used="json"),
    WithJsonSchema({"enum": [AS_IN_CONFIG, True, False]}),
    Field(json_schema_extra={"default": AS_IN_CONFIG}),
]


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
        if len(rest) == 1:
            prop = {**rest[0], **prop}  # the field's own title, description and default win over the type's
        else:
            prop["anyOf"] = rest
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    if isinstance(prop.get("description"), str):
        prop["description"] = plain_text(prop["description"])
    return prop


def _by_title(text: str, titles: dict[str, str]) -> str:
    """``text`` with each option of ``titles`` (``--min-prob``) named by its field's form title (``Min Prob``)."""
    return _FLAG.sub(lambda m: titles.get(m.group(0), m.group(0)), text)


def form_schema(schema: dict[str, Any], cls: type[BaseModel] | None = None) -> None:
    """pydantic's ``json_schema_extra`` hook of :class:`FormModel`: rewrite a model's schema in place
    (:func:`form_field` for each property, a title for a nested model's section, the help as the form reads it)."""
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    fields = cls.model_fields if cls is not None else {}
    for name, prop in props.items():
        field = fields.get(name)
        if "title" not in prop:
            prop["title"] = (field.title if field is not None else None) or name.replace("_", " ").title()
    titles = {
        flag_of((name,), field): props[name]["title"]
        for name, field in fields.items()
        if name in props and not cli_of(field).positional
    }
    if isinstance(schema.get("description"), str):
        schema["description"] = plain_text(_by_title(schema["description"], titles))
    for name, prop in props.items():
        if isinstance(prop.get("description"), str):
            prop["description"] = _by_title(prop["description"], titles)
        props[name] = form_field(prop)


class FormModel(BaseModel):
    """A flow's (or command's) parameters: unknown fields are refused, every field has a description; the JSON
    schema is the one the Prefect UI form can show (:func:`form_schema`)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=form_schema)
