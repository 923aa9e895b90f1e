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

.PHONY: setup test lint demo bench gpu-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)") "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The fast tier: every test but those marked slow (pyproject.toml); SLOW=1, as .ci/run gives, runs all.
test: $(STAMP)
	$(BIN)/python -m pytest -q $(if $(filter 1,$(SLOW)),,-m "not slow")

lint: $(STAMP)
	$(BIN)/ruff check nmt_cli tests bench
	$(BIN)/ruff format --check nmt_cli tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

demo: $(STAMP)
	$(BIN)/python -m nmt_cli.demo --out demo

bench: $(STAMP)
	$(BIN)/python bench/run_all.py --data $(DATA)

gpu-check: $(STAMP)
	$(BIN)/python bench/gpu_check.py

clean:
	rm -rf $(VENV) demo bench/results bench/work .pytest_cache
