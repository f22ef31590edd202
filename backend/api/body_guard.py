"""Refuse JSON bodies that no route should ever see, in one place.

Python's JSON parser accepts what JSON itself does not: ``NaN``,
``Infinity``, ``-Infinity``, numbers too large for a float (``1e999`` becomes
``inf``) and, from ``\\ud800`` escapes, lone surrogates that cannot be encoded
again. A NUL character is valid JSON but no name or email should hold one.
Let any of these through and they are stored (a target loss of ``inf`` ends a
job at once), or they break the error response itself and the client gets a
500; so does a body nested deeper than Python's recursion limit. So every
JSON body is checked before routing and refused with a 422 that names the
field, in the shape FastAPI uses for validation errors.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_JSON_BYTES = 1 << 20
"""Largest JSON body accepted; file uploads are multipart and bounded elsewhere."""
MAX_STRING_CHARS = 10_000
"""Longest string anywhere in a JSON body; fields set tighter limits of their own."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted; real specs nest a few levels.
Deeper bodies would exhaust Python's recursion limit in the parser or in the
validation after it (a 500), so they are refused first."""


class BadValue(ValueError):
    def __init__(self, loc: list[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


class _NonFinite:
    """Stands in for a non-finite number while parsing, so the walk that
    follows can name the field it was in."""

    def __init__(self, text: str) -> None:
        self.text = text


def _float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _check_string(text: str, loc: list[str | int]) -> None:
    if "\x00" in text:
        raise BadValue(loc, "must not contain a NUL character")
    if len(text) > MAX_STRING_CHARS:
        raise BadValue(loc, f"is too long ({len(text)} characters; at most {MAX_STRING_CHARS})")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadValue(loc, "is not valid Unicode text (a lone surrogate escape such as "
                            "\\ud800)") from None


def check_value(value: Any, loc: list[str | int]) -> None:
    """Raise ``BadValue`` for the first unacceptable number or string under ``value``."""
    if len(loc) > MAX_JSON_DEPTH:
        raise BadValue(loc[:2], f"is nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, _NonFinite):
        raise BadValue(loc, f"must be a finite number, not {value.text}")
    if isinstance(value, str):
        _check_string(value, loc)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_string(key, [*loc, key])
            check_value(item, [*loc, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_value(item, [*loc, index])


def check_json(body: bytes) -> None:
    """Raise ``BadValue`` if ``body`` is JSON holding a value we refuse.
    Malformed JSON passes: FastAPI answers it with its own 422."""
    try:
        document = json.loads(body, parse_constant=_NonFinite, parse_float=_float)
    except ValueError:
        return
    except RecursionError:  # nested deeper than the parser can follow
        raise BadValue(["body"], f"is nested more than {MAX_JSON_DEPTH} levels deep") from None
    check_value(document, ["body"])


def json_safe(value: Any) -> Any:
    """``value`` with whatever JSON cannot carry (non-finite floats, bytes,
    unencodable strings, other objects) replaced by readable text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json_safe(str(value))


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return True  # FastAPI reads a body with no content type as JSON


class JsonBodyGuard:
    """Pure ASGI middleware: buffer a JSON request body, check it, replay it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS") \
                or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([], message, receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_JSON_BYTES:
                await _error(send, 413, [], f"a JSON body may hold at most {MAX_JSON_BYTES} "
                             "bytes; upload files as multipart form data")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            try:
                check_json(body)
            except BadValue as exc:
                await _error(send, 422, exc.loc, exc.message)
                return
        await self.app(scope, _replay([body], None, receive), send)


def _replay(bodies: list[bytes], pending: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that first hands back what the guard already read."""
    queue: list[Message] = [{"type": "http.request", "body": b, "more_body": False}
                            for b in bodies]
    if pending is not None:
        queue.append(pending)

    async def _receive() -> Message:
        if queue:
            return queue.pop(0)
        return await receive()

    return _receive


async def _error(send: Send, status: int, loc: list[str | int], message: str) -> None:
    field = ".".join(str(part) for part in loc[1:]) or "body"
    detail = [{"loc": loc or ["body"], "msg": f"{field}: {message}", "type": "value_error"}]
    payload = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
