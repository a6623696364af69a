# make test    create .venv if needed, install, lint, run every test (Docker/browser/GPU ones skip
#              themselves where those are absent), TEST_WORKERS pytest-xdist workers, the 25 slowest shown
# make test-quick  the edit loop (under 5 minutes): unit, report and runner tests on tiny models; no Docker,
#              venv builds, Ray cluster, browser, wheel or torch.compile tests (make test runs those)
# make lint    ruff (style, imports, bugbear, complexity) and mypy (strict on the typed core)
# make matrix  build, run and report the default matrix, or the CPU smoke matrix without a GPU,
#              in Docker, else in venvs, else with the local backend (run --backend auto); a banner says
#              which and why.
#              Overrides: make matrix HAS_GPU=no HAS_DOCKER=no TRY_VENV=no (force the fallbacks),
#              RUN_OPTS='--cold --models vit --set index_url=https://mirror/simple' (build settings:
#              index_url, extra_index_urls, base_image, ca_bundle in matrix.yaml or --set; docs/cli.md)
.PHONY: test test-quick lint matrix help

PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
MB := $(VENV)/bin/matrixbench
STAMP := $(VENV)/.installed

help:
	@sed -n '1,11p' Makefile

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet torch==2.13.0
	$(VPY) -m pip install --quiet -e '.[test,runner,ray]'
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Workers: the docker, venv, venv-seed-era and ray-docker groups each hold one worker for most of the run, mostly waiting on
# containers, pip and the registry, so two more than those run the pure-Python tests (tests/conftest.py: the groups).
TEST_WORKERS ?= 6
PYTEST_XDIST := -n $(TEST_WORKERS) --dist loadgroup
QUICK_TESTS := not (docker or venv or ray or browser or wheel or gpu or slow)
# test-quick has no groups (its tests are all pure Python, CPU-bound): one worker a core (each worker imports torch,
# matplotlib and scipy, about 15 s of CPU), and a test module's tests on one worker, so a module-scoped fixture is
# built once, not once a worker (docs/test-suite-time.md, "test-quick").
QUICK_WORKERS ?= 2
QUICK_XDIST := -n $(QUICK_WORKERS) --dist loadscope

test: lint
	HF_HUB_OFFLINE=1 $(VPY) -m pytest $(PYTEST_XDIST) --durations=25

test-quick: $(STAMP)
	HF_HUB_OFFLINE=1 $(VPY) -m pytest $(QUICK_XDIST) -m "$(QUICK_TESTS)" --durations=10

# --- make matrix: what to run, and why ---------------------------------------------------
# The matrix follows the GPU (nvidia-smi); which backend runs it is `run --backend auto`'s policy
# (matrixbench/environments/auto.py: docker, else venv, else local, with the note that says why).
RUN_OPTS ?=
BUILD_OPTS_GONE := BUILD_OPTS is gone: the build settings are matrix.yaml keys (index_url, extra_index_urls, \
  base_image, ca_bundle); give them in the matrix or as RUN_OPTS='--set index_url=https://mirror/simple' (docs/cli.md)
HAS_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo yes || echo no)
HAS_DOCKER ?= auto
COMMA := ,
TRY_VENV ?= yes
EMPTY :=
AUTO_SKIP := $(subst $(EMPTY) $(EMPTY),$(COMMA),$(strip $(if $(filter no,$(HAS_GPU)),gpu,) $(if $(filter no,$(HAS_DOCKER)),docker,) $(if $(filter no,$(TRY_VENV)),venv,)))

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
RULE := ================================================================================

matrix: $(STAMP)
	$(if $(strip $(BUILD_OPTS)),$(error $(BUILD_OPTS_GONE)))
	@echo "$(RULE)"
	@echo "make matrix: $(WHAT); backends tried in order: docker, venv, local"
	@echo "Results: results/$(RUN)/   Report: report/"
	@echo "$(RULE)"
	@if [ "$(HAS_GPU)" = yes ]; then MATRIXBENCH_AUTO_SKIP="$(AUTO_SKIP)" $(MB) doctor --matrix $(MATRIX_FILE); fi
	@if [ "$(HAS_GPU)" = yes ]; then $(MB) selftest --run $(RUN); fi
	MATRIXBENCH_AUTO_SKIP="$(AUTO_SKIP)" $(MB) run --matrix $(MATRIX_FILE) --run $(RUN) --backend auto \
	  --device $(DEVICE) --note "$(strip make matrix ran $(WHAT). $(WHY_DEVICE))" $(RUN_OPTS)
	$(MB) report results/$(RUN) --out report
