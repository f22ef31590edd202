"""The worker's checks on what a sandboxed child sends, over real pipes."""

from __future__ import annotations

import json
import math
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.services.code_uploads import CodeUploadError, check_name, check_source
from workers.sandbox import protocol


@pytest.fixture
def pipe() -> Iterator[tuple[protocol.Reader, int]]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    try:
        yield protocol.Reader(read_fd), write_fd
    finally:
        os.close(read_fd)
        os.close(write_fd)


def _soon() -> float:
    return time.monotonic() + 2


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_round_trip_with_a_raw_frame(pipe: tuple[protocol.Reader, int]) -> None:
    reader, fd = pipe
    os.write(fd, protocol.encode({"ok": True, "x": 1}, (b"\x00state",)))
    header, raws = reader.message(1024, _soon())
    assert header == {"ok": True, "x": 1, "n_raw": 1}
    assert raws == [b"\x00state"]


@pytest.mark.parametrize(("data", "words"), [
    (_frame(b"not json"), "not JSON"),
    (_frame(b"[1, 2]"), "boolean 'ok'"),
    (_frame(b'{"ok": "yes"}'), "boolean 'ok'"),
    (_frame(b'{"ok": true, "n_raw": 5}'), "raw frames"),
    (_frame(b'{"ok": true, "n_raw": true}'), "raw frames"),
    (_frame(b"\xff\xfe"), "not JSON"),
    (struct.pack(">I", protocol.MAX_HEADER_BYTES + 1), "over the"),
    (_frame(b'{"ok": true, "n_raw": 1}') + struct.pack(">I", 4096), "state of 4096 bytes"),
])
def test_garbage_is_a_protocol_error(pipe: tuple[protocol.Reader, int], data: bytes,
                                     words: str) -> None:
    reader, fd = pipe
    os.write(fd, data)
    with pytest.raises(protocol.ProtocolError, match=words):
        reader.message(1024, _soon())


def test_silence_hits_the_deadline(pipe: tuple[protocol.Reader, int]) -> None:
    reader, fd = pipe
    os.write(fd, b"\x00\x00")  # half a length prefix, then nothing
    started = time.monotonic()
    with pytest.raises(protocol.DeadlineExceeded):
        reader.message(1024, time.monotonic() + 0.3)
    assert time.monotonic() - started >= 0.3


def test_a_closed_pipe_is_eof() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.close(write_fd)
    try:
        with pytest.raises(EOFError):
            protocol.Reader(read_fd).message(1024, _soon())
    finally:
        os.close(read_fd)


def test_step_metrics_are_checked() -> None:
    good = {"metrics": [{"loss": 1, "accuracy": 0.5}, {"loss": math.nan}]}
    cleaned = protocol.step_metrics(good, 2)
    assert cleaned[0] == {"loss": 1.0, "accuracy": 0.5}
    assert math.isnan(cleaned[1]["loss"])
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"metrics": [{"loss": 1}]}, 2, "returned 1 metrics dicts, expected 2"),
        ({"metrics": "lots"}, 1, "no metrics list"),
        ({}, 1, "no metrics list"),
        ({"metrics": [{"accuracy": 1}]}, 1, "no 'loss'"),
        ({"metrics": [{"loss": "low"}]}, 1, "must be a number"),
        ({"metrics": [{"loss": True}]}, 1, "must be a number"),
        ({"metrics": [{"x" * 65: 1, "loss": 1}]}, 1, "metric names"),
        ({"metrics": [[1, 2]]}, 1, "must be a dict"),
    ]
    for reply, n, words in cases:
        with pytest.raises(protocol.ProtocolError, match=words):
            protocol.step_metrics(reply, n)


def test_eval_metrics_and_error_text() -> None:
    assert protocol.eval_metrics({"metrics": {"val_loss": 2}}) == {"val_loss": 2.0}
    with pytest.raises(protocol.ProtocolError):
        protocol.eval_metrics({"metrics": None})
    text = protocol.error_text({"ok": False, "error": "ValueError: " + "x" * 5000,
                                "where": "tenant_trainer.py:3 in step"})
    assert text.startswith("ValueError: x") and len(text) == 2000
    assert protocol.error_text({"ok": False, "error": 3}) == "unknown error"
    assert protocol.error_text(json.loads('{"ok": false, "error": "E: m", "where": "f:1"}')) \
        == "E: m (at f:1)"


def test_uploaded_source_is_compiled_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\nclass T:\n    pass\n"
    assert check_source("t.py", source.encode()) == source
    assert not marker.exists()


@pytest.mark.parametrize(("filename", "raw", "words"), [
    ("t.txt", b"x = 1\n", "ends in .py"),
    ("t.py", b"def f(:\n", "syntax error at line 1"),
    ("t.py", b"x = 1\n\nif x\n", "syntax error at line 3"),
    ("t.py", b"x = '\xff'\n", "not UTF-8"),
    ("t.py", b"x = 1\x00\n", "not valid Python"),
    ("t.py", b"  \n", "empty"),
    ("t.py", b"#" * (256 * 1024 + 1), "256 KiB"),
])
def test_bad_sources_are_refused(filename: str, raw: bytes, words: str) -> None:
    with pytest.raises(CodeUploadError, match=words):
        check_source(filename, raw)


def test_names_are_checked() -> None:
    assert check_name("  my trainer_1.v2 ") == "my trainer_1.v2"
    for bad in ("", "../x", "a/b", "x" * 65, "-x"):
        with pytest.raises(CodeUploadError):
            check_name(bad)
