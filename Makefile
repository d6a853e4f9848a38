# Developer commands. `make setup` is idempotent: it reinstalls only when pyproject.toml changed.
#   make setup      create .venv with torch 2.13.0 (CPU) and this project (+ dev tools), editable
#   make test       setup if needed, then the whole test suite (what CI runs)
#   make test-fast  the suite without tests marked slow
#   make lint       ruff check + format check
#   make bench      the grader benchmark (table printed; see README "Grader speed")
#   make demo       ~5 GRPO steps through verl's real trainer on the CPU (MODEL=tiny | smollm2_135m)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup test test-fast lint format bench demo clean

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
	$(PY) -m pytest -m "not slow and not e2e" $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: setup
	$(PY) scripts/bench/grader_bench.py

MODEL ?= tiny
DEMO_EXPERIMENT_tiny := demo_cpu
DEMO_EXPERIMENT_smollm2_135m := demo_cpu_smollm2
demo: setup
	@test -n "$(DEMO_EXPERIMENT_$(MODEL))" || { echo "MODEL must be tiny or smollm2_135m" >&2; exit 2; }
	$(PY) -m recipes.train experiment=$(DEMO_EXPERIMENT_$(MODEL))

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
