"""A trainer's pydantic ``Params`` model as the catalogue and the API see it.

The catalogue keeps the flat shape the submit form and CLI read (name, type,
default, range, choices, help, log_scale), derived from the model so that one
declaration drives the form, the REST validation and the trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from workers.trainers.contract import TrainerParams


class ParamsError(ValueError):
    """Parameters a trainer refused: ``problems`` maps a field to a readable message."""

    def __init__(self, owner: str, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(message for _, message in problems))
        self.owner = owner
        self.problems = problems


def params_catalog(model: type[TrainerParams]) -> list[dict[str, Any]]:
    """One entry per field, in declaration order."""
    properties = model.model_json_schema().get("properties", {})
    entries = []
    for name, field in model.model_fields.items():
        prop = properties.get(name, {})
        choices = [str(c) for c in prop.get("enum", [])]
        kind = "choice" if choices else {"integer": "int", "boolean": "bool"}.get(
            prop.get("type", ""), "float")
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        entry = {
            "name": name,
            "type": kind,
            "default": field.get_default(call_default_factory=True),
            "minimum": prop.get("minimum", prop.get("exclusiveMinimum")),
            "maximum": prop.get("maximum", prop.get("exclusiveMaximum")),
            "choices": choices,
            "help": field.description or "",
            "log_scale": bool(extra.get("log_scale", False)),
        }
        # Only strict bounds say so, which keeps the common entry small.
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in prop:
                entry[bound] = True
        entries.append(entry)
    return entries


def validate_params(
    model: type[TrainerParams], raw: Mapping[str, Any] | None, owner: str
) -> TrainerParams:
    """The validated model, or ParamsError with one readable message per bad field."""
    try:
        return model.model_validate(dict(raw or {}))
    except ValidationError as exc:
        known = ", ".join(model.model_fields) or "none"
        problems = [_message(error, owner, known) for error in exc.errors()]
        raise ParamsError(owner, problems) from None


def _message(error: Any, owner: str, known: str) -> tuple[str, str]:
    loc = error.get("loc") or ()
    field = str(loc[0]) if loc else ""
    kind, ctx, given = error.get("type", ""), error.get("ctx") or {}, error.get("input")
    if kind == "extra_forbidden":
        return field, f"unknown parameter {field!r} for {owner}; known: {known}"
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        sign, key = bounds[kind]
        return field, f"{field} must be {sign} {ctx.get(key)}; got {given!r}"
    if kind == "literal_error":
        return field, f"{field} must be one of {ctx.get('expected')}; got {given!r}"
    if kind == "value_error" and ctx.get("error"):
        # Raised by our validators, whose messages already name the field.
        return field, str(ctx["error"])
    return field, f"{field}: {error.get('msg', 'invalid')}"
