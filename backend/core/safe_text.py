"""Text from tenant code made safe to store and to print.

A tenant's trainer chooses its exception messages, its printed output and its
metric names. Three things in such text break the portal or its users:

- a lone surrogate (``"\\ud800"``, easy to make from JSON) cannot be encoded
  as UTF-8, so the database driver refuses the whole commit;
- NUL is refused in text by PostgreSQL (psycopg raises before sending);
- ESC and the other control characters are stored fine but rewrite the
  terminal of whoever prints them (``slaq status``): colours, cursor moves,
  window titles, cleared screens.

:func:`storable` replaces lone surrogates with U+FFFD and writes every control
character except newline and tab as a visible ``\\xNN`` escape, so what the
tenant meant stays readable and nothing in it acts.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
"""What a lone surrogate becomes: Unicode's own mark for an unreadable character."""

# C0 controls but tab (\x09) and newline (\x0a), DEL, the C1 controls (\x9b is
# a one-byte CSI to some terminals), and every surrogate code point: Python
# joins a valid \\ud83d\\ude00 pair from JSON into one character, so any
# surrogate left in a str is unpaired for UTF-8.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _replace(match: re.Match[str]) -> str:
    char = match.group()
    if "\ud800" <= char <= "\udfff":
        return REPLACEMENT
    return f"\\x{ord(char):02x}"


def storable(text: str) -> str:
    """``text`` with lone surrogates replaced and control characters other
    than newline and tab escaped; text without them is returned unchanged."""
    return _UNSAFE.sub(_replace, text)


def storable_or_none(text: str | None) -> str | None:
    """:func:`storable` for an optional column."""
    return None if text is None else storable(text)


def is_storable(text: str) -> bool:
    """Whether ``text`` holds nothing :func:`storable` would change."""
    return _UNSAFE.search(text) is None
