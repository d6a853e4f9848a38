# Developer commands. `make setup` is idempotent: it reinstalls only when pyproject.toml changed.
#   make setup      create .venv with torch 2.13.0 (CPU) and this project (+ dev tools), editable
#   make test       setup if needed, then the whole test suite (what CI runs)
#   make test-fast  the suite without tests marked slow
#   make lint       ruff check + format check
#   make bench      the grader benchmark (table printed; see README "Grader speed")
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup test test-fast lint format bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: setup
	$(PY) scripts/bench/grader_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
