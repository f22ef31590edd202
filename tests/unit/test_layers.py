"""The layer rules of docs/architecture.md hold: the import-linter contracts
in pyproject.toml are kept (the same check as ``make lint``, here so that
``make test`` and CI fail on an import that breaks a rule)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    beside = Path(sys.executable).parent / "lint-imports"
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    assert found, "lint-imports is missing: install the dev extra (pip install -e '.[dev]')"
    return found


def test_every_layer_contract_is_kept() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"a layer rule is broken:\n{result.stdout}{result.stderr}"
    assert "0 broken" in result.stdout
