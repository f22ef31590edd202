"""Blocking read routes served with one thread-pool hop and one serialisation.

FastAPI runs a plain ``def`` route on the thread pool, then validates what it
returned against the response model on the thread pool again, then encodes
it: two hops and a second validation of a model the route has just built.
:func:`json_in_one_hop` runs the route and the encoding in one hop and hands
FastAPI finished JSON. The route keeps its signature, its dependencies and
its ``response_model`` (the OpenAPI schema); HTTP errors raised inside it
answer as before.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, get_type_hints

from fastapi import Response
from fastapi.concurrency import run_in_threadpool
from pydantic import TypeAdapter

P = ParamSpec("P")


def json_in_one_hop(route: Callable[P, Any]) -> Callable[P, Awaitable[Response]]:
    """Serve ``route`` (annotated with the model it returns) from the thread
    pool as JSON, status 200. Only for routes that answer 200."""
    adapter: TypeAdapter[Any] = TypeAdapter(get_type_hints(route)["return"])

    def answer(*args: P.args, **kwargs: P.kwargs) -> Response:
        body = adapter.dump_json(route(*args, **kwargs), by_alias=True)
        return Response(body, media_type="application/json")

    @functools.wraps(route)
    async def endpoint(*args: P.args, **kwargs: P.kwargs) -> Response:
        return await run_in_threadpool(answer, *args, **kwargs)

    return endpoint
