# make test    create .venv if needed, install, lint, run every test (Docker/browser/GPU ones skip
#              themselves where those are absent)
# make lint    ruff (style, imports, bugbear, complexity) and mypy (strict on the typed core)
# make matrix  build, run and report the default matrix, or the CPU smoke matrix without a GPU,
#              in Docker, else in venvs, else with the local backend; a banner says which and why.
#              Overrides: make matrix HAS_GPU=no HAS_DOCKER=no TRY_VENV=no (force the fallbacks),
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
	$(VPY) -m pip install --quiet -e '.[test,runner,ray]'
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
TRY_VENV ?= yes

DOCKER_HOW := one Docker container per image
VENV_HOW := one virtual environment per image, built from its pins under ~/.cache/matrixbench/venvs
LOCAL_HOW := the local backend (this interpreter's torch, recorded as image 'latest')
NO_DOCKER := Docker is not available (docker info fails)
DOCKER_FAILED := Docker runs, but the image build failed (see above: no registry or package index reachable?)
VENV_FAILED := the venv build failed (see above: no Python of an image's version, or no package index reachable?)

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

# Backends are tried in this order: docker (when docker info answers), venv, local. The note
# (banner, run.json, report) says which ran and why each earlier one did not. With a GPU and
# Docker, failed builds stop it: the local backend would not compare the images' torch versions.
DOCKER_NOTE := $(strip make matrix ran $(WHAT), with $(DOCKER_HOW). $(WHY_DEVICE))
VENV_NOTE := $(strip make matrix ran $(WHAT), with $(VENV_HOW). $(WHY_DEVICE) Not Docker:)
LOCAL_NOTE := $(strip make matrix ran $(WHAT), with $(LOCAL_HOW). $(WHY_DEVICE) Not Docker:)
RULE := ================================================================================

matrix: $(STAMP)
	@echo "$(RULE)"
	@echo "make matrix: $(WHAT); backends tried in order: docker, venv, local"
	@echo "Results: results/$(RUN)/   Report: report/"
	@echo "$(RULE)"
	@set -e; backend=none; why="$(NO_DOCKER)"; vwhy="venvs were not tried (TRY_VENV=no)"; images=""; \
	if [ "$(HAS_GPU)" = yes ]; then $(MB) doctor --matrix $(MATRIX_FILE); fi; \
	if [ "$(HAS_GPU)" = yes ]; then $(MB) selftest --run $(RUN); fi; \
	if [ "$(HAS_DOCKER)" = yes ]; then \
	  if $(MB) build --matrix $(MATRIX_FILE) $(BUILD_OPTS); then backend=docker; else why="$(DOCKER_FAILED)"; fi; \
	fi; \
	if [ $$backend = none ] && [ "$(TRY_VENV)" = yes ]; then \
	  if $(MB) build --backend venv --matrix $(MATRIX_FILE) $(BUILD_OPTS); then backend=venv; else vwhy="$(VENV_FAILED)"; fi; \
	fi; \
	case $$backend in \
	  docker) note="$(DOCKER_NOTE)";; \
	  venv) note="$(VENV_NOTE) $$why.";; \
	  *) if [ "$(HAS_GPU)" = yes ] && [ "$(HAS_DOCKER)" = yes ]; then \
	       echo "make matrix: not Docker: $$why; not venvs: $$vwhy. With a GPU and Docker, fix a build: the local backend would not compare torch versions." >&2; exit 1; \
	     fi; \
	     backend=local; images="--images latest"; \
	     note="$(LOCAL_NOTE) $$why. Not venvs: $$vwhy. So the images' torch versions are not compared.";; \
	esac; \
	echo "$(RULE)"; echo "$$note"; echo "$(RULE)"; \
	$(MB) run --matrix $(MATRIX_FILE) $$images --run $(RUN) --backend $$backend --device $(DEVICE) --note "$$note" $(RUN_OPTS)
	$(MB) report results/$(RUN) --out report
