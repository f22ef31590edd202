"""Literal CSV text for the upload and CSV-import tests."""

from __future__ import annotations

import io
from collections.abc import Callable


def csv_file(text: str) -> io.BytesIO:
    """``text`` as the file object an upload hands to the parser."""
    return io.BytesIO(text.encode())


def csv_table(rows: int = 12, header: str | None = "a,b,label",
              label: Callable[[int], object] = lambda i: i % 2) -> str:
    """Two numeric columns and a label column, ``rows`` rows."""
    lines = [header] if header else []
    for i in range(rows):
        lines.append(f"{i},{i * 0.5},{label(i)}")
    return "\n".join(lines) + "\n"
