"""`slaq --help` lists every command, portal operation and client alike."""

from __future__ import annotations

import subprocess
import sys

from backend.client.cli import COMMANDS


def test_help_lists_every_command_with_a_description() -> None:
    out = subprocess.run([sys.executable, "-m", "backend.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    portal, _, client = out.partition("talk to a running portal")
    for command in ("run", "api", "scheduler", "worker", "migrate", "seed", "reset-password",
                    "simulate", "record-trace"):
        assert f"    {command}" in portal, command
    assert COMMANDS
    for command in COMMANDS:
        line = next((ln for ln in client.splitlines() if ln.split()[:1] == [command]), "")
        assert len(line.split()) > 2, f"{command} has no description: {line!r}"
