# make test    create .venv if needed, install, lint, run every test (Docker/browser/GPU ones skip
#              themselves where those are absent)
# make lint    ruff (style, imports, bugbear, complexity) and mypy (strict on the typed core)
# make matrix  build, run and report the default matrix, or the CPU smoke matrix without a GPU,
#              with the local backend without Docker; one banner says which and why.
#              Overrides: make matrix HAS_GPU=no HAS_DOCKER=no (force the fallbacks),
#              BUILD_OPTS='--base-image ... --index-url ...', RUN_OPTS='--cold --models vit'
.PHONY: test lint matrix help

PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
MB := $(VENV)/bin/matrixbench
STAMP := $(VENV)/.installed

help:
	@sed -n '1,6p' Makefile

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet torch==2.13.0
	$(VPY) -m pip install --quiet -e '.[test,runner]'
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	HF_HUB_OFFLINE=1 $(VPY) -m pytest

# --- make matrix: what to run, and why ---------------------------------------------------
BUILD_OPTS ?=
RUN_OPTS ?=
HAS_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo yes || echo no)
HAS_DOCKER := $(shell docker info >/dev/null 2>&1 && echo yes || echo no)

LOCAL_HOW := the local backend (this interpreter's torch, recorded as image 'latest')

ifeq ($(HAS_GPU),yes)
  MATRIX_FILE := matrix.yaml
  RUN := default
  DEVICE := cuda
  WHAT := the default matrix (matrix.yaml) on the NVIDIA GPU
  WHY_DEVICE :=
else
  MATRIX_FILE := matrix-cpu-smoke.yaml
  RUN := cpu-smoke
  DEVICE := cpu
  WHAT := the CPU smoke matrix (matrix-cpu-smoke.yaml: tiny models, batch 1, eager and default) on the CPU
  WHY_DEVICE := nvidia-smi finds no NVIDIA GPU, so these numbers say nothing about GPU speed-ups.
endif

ifeq ($(HAS_DOCKER),yes)
  BACKEND := docker
  IMAGES :=
  HOW := one Docker container per image
  WHY_BACKEND :=
else
  BACKEND := local
  IMAGES := --images latest
  HOW := $(LOCAL_HOW)
  WHY_BACKEND := Docker is not available (docker info fails), so the images' torch versions are not compared.
endif

NOTE := $(strip make matrix ran $(WHAT), with $(HOW). $(WHY_DEVICE) $(WHY_BACKEND))
FALLBACK_NOTE := $(strip make matrix ran $(WHAT), with $(LOCAL_HOW). $(WHY_DEVICE) Docker runs, but the image build failed (see above: no registry or package index reachable?), so the images' torch versions are not compared.)

matrix: $(STAMP)
	@echo "================================================================================"
	@echo "$(NOTE)"
	@echo "Results: results/$(RUN)/   Report: report/"
	@echo "================================================================================"
	@set -e; backend=$(BACKEND); images="$(IMAGES)"; note="$(NOTE)"; \
	if [ "$(HAS_GPU)" = yes ]; then $(MB) doctor --matrix $(MATRIX_FILE); fi; \
	if [ "$$backend" = docker ] && ! $(MB) build --matrix $(MATRIX_FILE) $(BUILD_OPTS); then \
	  if [ "$(HAS_GPU)" = yes ]; then exit 1; fi; \
	  backend=local; images="--images latest"; \
	  note="$(FALLBACK_NOTE)"; \
	  echo "================================================================================"; \
	  echo "$$note"; \
	  echo "================================================================================"; \
	fi; \
	$(MB) run --matrix $(MATRIX_FILE) $$images --run $(RUN) --backend $$backend --device $(DEVICE) --note "$$note" $(RUN_OPTS)
	$(MB) report results/$(RUN) --out report
