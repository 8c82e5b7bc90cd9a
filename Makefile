# The two commands of the README: `make demo` (install + run the main job) and `make test` (install + checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo up test lint unit integration bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,offline-embeddings]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/mcpeval demo

up: install
	$(BIN)/mcpeval up

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -m unit

integration: install
	$(BIN)/pytest -m integration

test: lint
	$(BIN)/pytest

bench: install
	$(BIN)/python tests/benchmarks/bench_create_server.py
	$(BIN)/python tests/benchmarks/bench_similarity.py

clean:
	rm -rf $(VENV) .mcpeval .mypy_cache .ruff_cache .pytest_cache
