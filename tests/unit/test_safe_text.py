"""Tenant text made storable: literal strings in, exact strings out."""

from __future__ import annotations

import json

import pytest

from backend.core.safe_text import REPLACEMENT, is_storable, storable, storable_or_none


@pytest.mark.parametrize(("raw", "stored"), [
    # Lone surrogates (high, low, a low before a high) become U+FFFD.
    ("bad \ud800 name", f"bad {REPLACEMENT} name"),
    ("\udc00", REPLACEMENT),
    ("x\udc00\ud800y", f"x{REPLACEMENT}{REPLACEMENT}y"),
    # NUL, ESC sequences, BEL, carriage return, DEL and C1 CSI are escaped, visibly.
    ("a\x00b", "a\\x00b"),
    ("\x1b[2J\x1b[31mred\x1b[0m", "\\x1b[2J\\x1b[31mred\\x1b[0m"),
    ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),
    ("line\rover", "line\\x0dover"),
    ("del\x7f", "del\\x7f"),
    ("\x9b31m", "\\x9b31m"),
])
def test_unsafe_characters_are_replaced_or_escaped(raw: str, stored: str) -> None:
    assert storable(raw) == stored
    assert is_storable(stored)
    assert not is_storable(raw)
    # The result is what the databases and terminals need: encodable, no NUL.
    stored.encode("utf-8")
    assert "\x00" not in stored and "\x1b" not in stored


@pytest.mark.parametrize("text", [
    "Traceback (most recent call last):\n\tFile \"x.py\", line 3\nValueError: boom",
    "", "plain", "unicode stays: é ü 日本 😀 \u202f", "a backslash \\x00 already escaped",
])
def test_readable_text_with_newlines_and_tabs_is_kept_as_it_is(text: str) -> None:
    assert storable(text) == text
    assert is_storable(text)


def test_a_valid_surrogate_pair_from_json_is_one_character_and_kept() -> None:
    joined = json.loads('"\\ud83d\\ude00"')
    assert joined == "😀" and storable(joined) == joined


def test_optional_text() -> None:
    assert storable_or_none(None) is None
    assert storable_or_none("\x00") == "\\x00"
