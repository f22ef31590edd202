# The two commands a new user needs: `make run` and `make test`.
.PHONY: run test lint bench setup

setup:
	@bash scripts/bootstrap.sh

run: setup
	.venv/bin/slaq run

test: setup
	@bash scripts/test-services.sh
	.venv/bin/python -m pytest -q -p no:cacheprovider

lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy backend workers

bench: setup
	.venv/bin/python -m tests.bench.run_all
