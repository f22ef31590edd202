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


def test_an_unknown_command_names_every_command() -> None:
    # Issue 38: "slaq stauts" listed only the server commands.
    done = subprocess.run([sys.executable, "-m", "backend.cli", "stauts"], capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert "unknown command 'stauts'" in done.stderr
    listed = done.stderr.split("the commands are:", 1)[1]
    for command in ("run", "worker", "simulate", *COMMANDS):
        assert f" {command}," in listed or f" {command}\n" in listed, command
