"""What a service raises when it refuses a request: one hierarchy, no HTTP.

Services say *what* went wrong; the API maps each kind to a status in one
exception handler (:mod:`backend.api.errors`), found along the class
hierarchy as starlette looks handlers up, so a service never knows a status
code and a route never catches a service error:

* :class:`NotFound` -- the thing asked for does not exist (for the caller);
* :class:`Conflict` -- it exists, but its state or a name clash refuses the action;
* :class:`Invalid` -- the request itself is wrong, at ``field`` when one is named;
* :class:`Forbidden` -- the caller may not do this;
* :class:`TooLarge` -- the request is over a size limit.

The response body is ``{"detail": error.detail()}``: the message, or, for an
:class:`Invalid` that names where it is wrong, FastAPI's own shape
(``[{"loc": [...], "msg": ..., "type": "value_error"}]``), so clients read
one format for every invalid request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ServiceError(Exception):
    """A request a service refused; ``message`` says what to fix."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def detail(self) -> Any:
        """The response's ``detail``: the message, for a person to read."""
        return self.message


class NotFound(ServiceError):
    """The thing asked for does not exist, or not for this caller."""


class Conflict(ServiceError):
    """The thing's state (or a name taken already) refuses the action."""


class Forbidden(ServiceError):
    """The caller may not do this."""


class TooLarge(ServiceError):
    """The request is over a size limit."""


class Invalid(ServiceError):
    """The request is wrong at ``field`` (in the body; ``loc`` gives the whole
    path where it is elsewhere, e.g. ``("query", "sort")``, and ``value`` the
    input refused there). Without either, the detail is the message alone."""

    def __init__(self, message: str, field: str | None = None, *,
                 loc: Sequence[str | int] | None = None, value: Any = None) -> None:
        super().__init__(message, field)
        self.loc: tuple[str | int, ...] | None = (
            tuple(loc) if loc is not None else ("body", field) if field is not None else None)
        self.value = value

    def detail(self) -> Any:
        if self.loc is None:
            return self.message
        entry: dict[str, Any] = {"loc": list(self.loc), "msg": self.message,
                                 "type": "value_error"}
        if self.value is not None:
            entry["input"] = self.value
        return [entry]
