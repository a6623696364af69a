# make test    create .venv if needed, install, run every test (Docker/browser/GPU ones skip
#              themselves where those are absent)
# make matrix  build, run and report the default matrix, or the CPU smoke matrix without a GPU,
#              with the local backend without Docker; one banner says which and why
.PHONY: test matrix help

PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
MB := $(VENV)/bin/matrixbench
STAMP := $(VENV)/.installed

help:
	@sed -n '1,5p' Makefile

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet torch==2.13.0
	$(VPY) -m pip install --quiet -e '.[test,runner]'
	touch $(STAMP)

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(VPY) -m pytest

# --- make matrix: what to run, and why ---------------------------------------------------
HAS_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo yes || echo no)
HAS_DOCKER := $(shell docker info >/dev/null 2>&1 && echo yes || echo no)

ifeq ($(HAS_GPU),yes)
  MATRIX_FILE := matrix.yaml
  RUN := default
  DEVICE := cuda
  WHAT := the default matrix (matrix.yaml) on the NVIDIA GPU
else
  MATRIX_FILE := matrix-cpu-smoke.yaml
  RUN := cpu-smoke
  DEVICE := cpu
  WHAT := the CPU smoke matrix (matrix-cpu-smoke.yaml: tiny models, batch 1, eager and default) because nvidia-smi finds no NVIDIA GPU; its numbers say nothing about GPU speed-ups
endif

ifeq ($(HAS_DOCKER),yes)
  BACKEND := docker
  IMAGES :=
  HOW := one Docker container per image
else
  BACKEND := local
  IMAGES := --images latest
  HOW := the local backend (this interpreter's torch, as image 'latest' only) because docker info fails (no Docker daemon)
endif

NOTE := make matrix ran $(WHAT), with $(HOW).

matrix: $(STAMP)
	@echo "================================================================================"
	@echo "$(NOTE)"
	@echo "Results: results/$(RUN)/   Report: report/"
	@echo "================================================================================"
ifeq ($(HAS_DOCKER),yes)
	$(MB) build --matrix $(MATRIX_FILE)
endif
	$(MB) run --matrix $(MATRIX_FILE) $(IMAGES) --run $(RUN) --backend $(BACKEND) --device $(DEVICE) --note "$(NOTE)"
	$(MB) report results/$(RUN) --out report
