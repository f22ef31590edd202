# The two commands a new user needs: `make run` and `make test`.
.PHONY: run test lint bench setup

setup:
	@bash scripts/bootstrap.sh

run: setup
	.venv/bin/slaq run

test: setup
	@bash scripts/test-services.sh
	.venv/bin/python -m pytest -q -p no:cacheprovider

# The layer rules (docs/architecture.md) are import-linter contracts in
# pyproject.toml; tests/unit/test_layers.py runs the same check under `make test`.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy backend workers tests
	.venv/bin/lint-imports

# Benchmarks print figures and ratios; none asserts a time (see docs/scheduling.md).
bench: setup
	mkdir -p artifacts
	.venv/bin/python -m tests.bench.prediction
	.venv/bin/python -m tests.bench.cost
	.venv/bin/python -m tests.bench.quality --procs 2 --report artifacts/quality.html
	.venv/bin/python -m tests.bench.guard --procs 2
	.venv/bin/python -m tests.bench.live_compare
	.venv/bin/python -m tests.bench.chunk_overhead
	.venv/bin/python -m tests.bench.chart_latency
	.venv/bin/python -m tests.bench.sweeps
