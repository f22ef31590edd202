#!/usr/bin/env bash
# Create .venv and install the project with its development tools and the
# PyTorch trainers' extra (a CPU-only machine skips the CUDA wheels with
# PIP_INDEX_URL=https://download.pytorch.org/whl/cpu
# PIP_EXTRA_INDEX_URL=https://pypi.org/simple).
# Idempotent: re-runs only pip when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# The example trainer plugin is installed too: the tests train it end to end.
plugin=examples/slaq-example-trainer
stamp=.venv/.installed-$(cat pyproject.toml "$plugin/pyproject.toml" | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q -e '.[dev,torch]' -e "$plugin"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
