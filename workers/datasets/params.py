"""The datasets' generator parameters: one ``ParamSpec`` per knob.

The REST catalogue, the submit-time validation and the workers read the same
specs, so they agree on names, ranges and defaults. (Trainers declare theirs
as a pydantic ``Params`` model instead: ``workers.trainers.params_schema``.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ParamType = Literal["int", "float", "choice"]
ParamValue = int | float | str


@dataclass(frozen=True)
class ParamSpec:
    """One hyper-parameter: its type, default, allowed range and help text."""

    name: str
    type: ParamType
    default: ParamValue
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    help: str = ""
    # A UI hint: sliders/random search should sample this on a log axis.
    log_scale: bool = False

    def to_json(self) -> dict[str, Any]:
        """The catalogue form served by the REST API."""
        return {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "choices": list(self.choices),
            "help": self.help,
            "log_scale": self.log_scale,
        }

    def coerce(self, value: Any) -> ParamValue:
        """Return ``value`` converted to this parameter's type, or raise ValueError.

        JSON clients send ``5.0`` for integers and ``"0.1"`` from form fields, so
        integral floats and numeric strings are accepted; booleans are not,
        because ``True`` silently becoming 1 hides client bugs.
        """
        if self.type == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(
                    f"{self.name} must be one of {', '.join(self.choices)}; got {value!r}"
                )
            return value
        if isinstance(value, bool):
            raise ValueError(f"{self.name} must be a number, not a boolean")
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ValueError(f"{self.name} must be a number; got {value!r}") from None
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{self.name} must be a finite number; got {value!r}")
        number: ParamValue
        if self.type == "int":
            if float(value) != int(value):
                raise ValueError(f"{self.name} must be an integer; got {value!r}")
            number = int(value)
        else:
            number = float(value)
        if self.minimum is not None and number < self.minimum:
            raise ValueError(f"{self.name} must be >= {self.minimum}; got {number}")
        if self.maximum is not None and number > self.maximum:
            raise ValueError(f"{self.name} must be <= {self.maximum}; got {number}")
        return number


def fill_params(
    specs: tuple[ParamSpec, ...], params: Mapping[str, Any] | None, owner: str
) -> dict[str, ParamValue]:
    """Validate ``params`` against ``specs`` and fill in defaults for missing ones.

    Unknown names are rejected rather than ignored: a typo such as
    ``learning_rat`` would otherwise run a job with the default and waste
    cluster time without the user noticing. ``owner`` names the dataset in
    error messages.
    """
    given = dict(params or {})
    known = {spec.name for spec in specs}
    unknown = sorted(set(given) - known)
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ValueError(
            f"unknown parameter(s) for {owner}: {', '.join(unknown)} (allowed: {allowed})"
        )
    filled: dict[str, ParamValue] = {}
    for spec in specs:
        raw = given.get(spec.name, spec.default)
        filled[spec.name] = spec.coerce(raw)
    return filled


def seed_spec(help_text: str = "Random seed; the same seed gives the same data.") -> ParamSpec:
    """The ``seed`` parameter every synthetic dataset takes."""
    return ParamSpec("seed", "int", 0, 0, 2**31 - 1, help=help_text)
