"""Cells and checks shared by the runner's tests (not a test module)."""
import json
import tempfile
from pathlib import Path

import jsonschema
import torch

from runner.core import Cell
from runner.faults import FAULTS_VARIABLE
from runner.schema import RECORD_SCHEMA

# Inductor's cache for the tests that compile: shared across cells and test runs (warm
# compiles after the first run), one per torch version. The runner itself compiles cold.
COMPILE_CACHE = Path(tempfile.gettempdir()) / f"matrixbench-test-compile-cache-{torch.__version__}"


def tiny_cell(model="resnet", mode="eager", **overrides):
    from runner.models import SEED_MODELS

    spec = SEED_MODELS[model]
    cell = {"model": model, "model_id": spec.model_id, "config_path": None, "task": spec.task,
            "weights": "random", "size": "tiny", "batch_size": 1, "mode": mode, "fullgraph": False,
            "dtype": "float32"}
    return Cell(**dict(cell, **overrides))


def inject_faults(monkeypatch, faults):
    """Make the runner inject ``faults`` ({cell: fault name}) the test-only way."""
    monkeypatch.setenv(FAULTS_VARIABLE, json.dumps({cell.id: fault for cell, fault in faults.items()}))


def settings(**overrides):
    base = {"iterations": 5, "warmup": 3, "timeout_s": 600, "device": "cpu",
            "accuracy_tolerance": None, "cv_threshold": 0.1}
    return dict(base, **overrides)


def assert_valid(record):
    """``record``: a dict as on disk, or a Record."""
    data = record if isinstance(record, dict) else record.to_dict()
    jsonschema.Draft202012Validator(RECORD_SCHEMA).validate(data)
