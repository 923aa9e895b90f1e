# Set-up and everyday tasks. Every target creates .venv and installs what is missing.
#   make setup              torch pinned (torch==2.13.0) from pip's configured indexes
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
#                           the same pin from PyTorch's CPU index: the small CPU build
#   make setup TORCH=torch  the default PyPI build of torch, which on Linux is the CUDA build
PYTHON ?= python3
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   ?= ../shared/data/multi30k

.PHONY: setup test lint demo bench gpu-check gpu-run clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)") "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@# A set of versions that resolves can still fail to import (a half-finished upgrade): fail here.
	$(BIN)/python -m pip check
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_optional_imports.py -k "integration_imports or import_check"
	touch $(STAMP)

# The fast tier: every test but those marked slow (pyproject.toml); SLOW=1, as .ci/run gives, runs all.
# JOBS test processes (pytest-xdist; JOBS=0: this one alone), a test file's tests in one process, so
# that a module's server or model is made once: many tests wait on a child process or a server.
JOBS ?= 2
test: $(STAMP)
	@# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: pytest keeps its rewritten test
	@# and plugin modules only so (each test process rewrote them all), and each of the nmt processes
	@# the tests start would compile the package again.
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile $(if $(filter 1,$(SLOW)),,-m "not slow")

lint: $(STAMP)
	$(BIN)/ruff check nmt_cli tests bench
	$(BIN)/ruff format --check nmt_cli tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

demo: $(STAMP)
	$(BIN)/python -m nmt_cli.demo --out demo

bench: $(STAMP)
	$(BIN)/python bench/run_all.py --data $(DATA)

# The GPU tests (skipped without CUDA), then the figures; the exit status fails if either did.
gpu-check: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m gpu tests/gpu; tests=$$?; \
	$(BIN)/python bench/gpu_check.py && exit $$tests

# The figures of a lent GPU against their targets in <= 8 minutes (a CPU dry run without CUDA).
# No .venv is made: a GPU machine runs it with its own python3 and torch (`bash bench/gpu_run.sh`
# there, fairseq's wheels included); here .venv's python runs it where it exists.
GPU_RUN_PYTHON := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
gpu-run:
	PYTHONPATH=".$${PYTHONPATH:+:$$PYTHONPATH}" $(GPU_RUN_PYTHON) bench/gpu_run.py

clean:
	rm -rf $(VENV) demo bench/results bench/work .pytest_cache
	find nmt_cli tests bench -name __pycache__ -type d -prune -exec rm -rf {} +
