"""Service errors as HTTP responses: one handler for the whole hierarchy.

A service raises a :class:`~backend.services.errors.ServiceError` kind and
never knows a status; this maps each kind to its status, looked up along the
error's class hierarchy (the nearest kind wins), and answers
``{"detail": error.detail()}``. Routes do not catch service errors.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from backend.services.errors import Conflict, Forbidden, Invalid, NotFound, ServiceError, TooLarge

STATUS: dict[type[ServiceError], int] = {
    NotFound: 404,
    Conflict: 409,
    Invalid: 422,
    Forbidden: 403,
    TooLarge: 413,
}
"""The status of each kind of service error."""


def status_of(error: ServiceError) -> int:
    """The status of ``error``'s nearest kind; 400 for a bare ServiceError."""
    for kind in type(error).__mro__:
        found = STATUS.get(kind)
        if found is not None:
            return found
    return 400


async def service_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return JSONResponse(status_code=status_of(exc), content={"detail": exc.detail()})


def install(app: FastAPI) -> None:
    """Answer every service error raised by a route (or a dependency)."""
    app.add_exception_handler(ServiceError, service_error)
