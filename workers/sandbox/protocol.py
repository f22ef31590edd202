"""The worker's side of the pipe protocol with a sandboxed trainer.

A message is a 4-byte big-endian length, a JSON object, then ``n_raw`` raw
frames (each length-prefixed) for bytes such as a training state. Everything
read from the child is untrusted: sizes are capped, reads have a deadline, and
replies are checked for shape before anything else looks at them.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

from workers.trainers.contract import Metrics, clean_metrics

_LEN = struct.Struct(">I")
MAX_HEADER_BYTES = 1 << 20
"""A reply's JSON part: metrics for one step batch fit easily in a MiB."""
MAX_RAW_FRAMES = 1


class ProtocolError(Exception):
    """The child sent something that is not a valid reply."""


class DeadlineExceeded(Exception):
    """The child did not answer in time."""


def encode(header: dict[str, Any], raws: tuple[bytes, ...] = ()) -> bytes:
    body = json.dumps({**header, "n_raw": len(raws)}).encode()
    parts = [_LEN.pack(len(body)), body]
    for raw in raws:
        parts += [_LEN.pack(len(raw)), raw]
    return b"".join(parts)


def write_all(fd: int, data: bytes, deadline: float) -> None:
    """Write ``data`` to a non-blocking ``fd`` before ``deadline`` (monotonic)."""
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded
        _, writable, _ = select.select([], [fd], [], remaining)
        if not writable:
            continue
        try:
            sent = os.write(fd, view[: 1 << 20])
        except BlockingIOError:
            continue
        except BrokenPipeError as exc:
            raise EOFError("the trainer process closed its pipe") from exc
        view = view[sent:]


class Reader:
    """Reads frames from a non-blocking fd with a deadline and size caps."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.last_header_bytes = 0
        """The size of the last reply's JSON part (step batches are sized by it)."""

    def _fill(self, need: int, deadline: float) -> None:
        while len(self.buffer) < need:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded
            readable, _, _ = select.select([self.fd], [], [], remaining)
            if not readable:
                continue
            try:
                chunk = os.read(self.fd, max(need - len(self.buffer), 1 << 16))
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError("the trainer process closed its pipe")
            self.buffer += chunk

    def _take(self, size: int, deadline: float) -> bytes:
        self._fill(size, deadline)
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out

    def frame(self, cap: int, what: str, deadline: float) -> bytes:
        (size,) = _LEN.unpack(self._take(4, deadline))
        if size > cap:
            raise ProtocolError(f"{what} of {size} bytes is over the {cap}-byte limit")
        return self._take(size, deadline)

    def message(self, raw_cap: int, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        body = self.frame(MAX_HEADER_BYTES, "reply", deadline)
        self.last_header_bytes = len(body)
        try:
            header = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"reply is not JSON ({exc})") from exc
        if not isinstance(header, dict) or not isinstance(header.get("ok"), bool):
            raise ProtocolError("reply is not an object with a boolean 'ok'")
        n_raw = header.get("n_raw", 0)
        if (not isinstance(n_raw, int) or isinstance(n_raw, bool)
                or not 0 <= n_raw <= MAX_RAW_FRAMES):
            raise ProtocolError(f"reply announces {n_raw!r} raw frames")
        raws = [self.frame(raw_cap, "state", deadline) for _ in range(n_raw)]
        return header, raws


def error_text(header: dict[str, Any]) -> str:
    """The readable reason of an ``ok: false`` reply, bounded."""
    error = header.get("error")
    where = header.get("where")
    text = error if isinstance(error, str) and error else "unknown error"
    if isinstance(where, str) and where:
        text = f"{text} (at {where})"
    return text[:2000]


def step_metrics(header: dict[str, Any], n: int) -> list[Metrics]:
    raw = header.get("metrics")
    if not isinstance(raw, list):
        raise ProtocolError("step reply has no metrics list")
    if len(raw) != n:
        raise ProtocolError(f"step({n}) returned {len(raw)} metrics dicts, expected {n}")
    out: list[Metrics] = []
    for index, item in enumerate(raw):
        try:
            metrics = clean_metrics(item, where=f"step metrics {index}")
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        if "loss" not in metrics:
            raise ProtocolError(f"step metrics {index} have no 'loss'")
        out.append(metrics)
    return out


def eval_metrics(header: dict[str, Any]) -> Metrics:
    try:
        return clean_metrics(header.get("metrics"), where="evaluate")
    except ValueError as exc:
        raise ProtocolError(str(exc)) from exc

