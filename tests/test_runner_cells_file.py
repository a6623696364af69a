import json

import jsonschema
import pytest

from runner.cells_file import (
    DEFAULT_SETTINGS,
    CellsFileError,
    cells_file_from_dict,
    load_cells_file,
    validate_cell,
    validate_settings,
)


def cell(**overrides):
    base = {"model": "vit", "task": "image-classification", "weights": "random", "size": "tiny",
            "batch_size": 1, "mode": "eager", "fullgraph": False, "dtype": "float32"}
    return dict(base, **overrides)


def test_validate_cell_fills_optional_keys():
    checked = validate_cell(cell())
    assert checked.model_id is None and checked.config_path is None


@pytest.mark.parametrize("field", ["model", "task", "weights", "size", "batch_size", "mode", "fullgraph", "dtype"])
def test_missing_required_field_is_named(field):
    broken = cell()
    del broken[field]
    with pytest.raises(CellsFileError, match=f"missing required keys \\['{field}'\\]"):
        validate_cell(broken, "cells[3]")


@pytest.mark.parametrize("field, value", [
    ("mode", "fast"), ("dtype", "float64"), ("batch_size", 0), ("batch_size", True),
    ("fullgraph", "yes"), ("task", "captioning"), ("model_id", 3),
])
def test_bad_value_names_the_field(field, value):
    with pytest.raises(CellsFileError, match=f"cells\\[0\\]: '{field}'"):
        validate_cell(cell(**{field: value}), "cells[0]")


def test_a_fault_is_no_cell_key():
    """Fault injection is a test-only environment variable (runner.faults), not part of a cell."""
    with pytest.raises(CellsFileError, match="unknown keys \\['fault'\\]"):
        validate_cell(cell(fault="crash"))


def test_unknown_cell_key_is_refused_with_valid_keys():
    with pytest.raises(CellsFileError, match="unknown keys \\['batchsize'\\]; valid: .*batch_size"):
        validate_cell(cell(batchsize=2))


def test_settings_defaults_and_overrides():
    settings = validate_settings({"iterations": 5})
    assert settings == dict(DEFAULT_SETTINGS, iterations=5)


@pytest.mark.parametrize("settings, field", [
    ({"iterations": 0}, "iterations"), ({"warmup": -1}, "warmup"), ({"timeout_s": 0}, "timeout_s"),
    ({"device": "tpu"}, "device"), ({"accuracy_tolerance": -1}, "accuracy_tolerance"),
])
def test_bad_settings_name_the_field(settings, field):
    with pytest.raises(CellsFileError, match=f"'{field}'"):
        validate_settings(settings)


def test_unknown_setting_is_refused():
    with pytest.raises(CellsFileError, match="unknown settings \\['iteration'\\]"):
        validate_settings({"iteration": 3})


@pytest.mark.parametrize("version", [None, 0, 6, "1"])
def test_a_cells_file_of_an_unknown_version_is_refused(tmp_path, version):
    path = tmp_path / "cells.json"
    data = {"settings": {}, "cells": [cell()]}
    if version is not None:
        data["schema_version"] = version
    path.write_text(json.dumps(data))
    with pytest.raises(CellsFileError,
                       match="schema_version .* is not supported; this runner reads versions \\[1, 2, 3, 4, 5\\]"):
        load_cells_file(path)


def test_the_hosts_cells_file_is_what_cells_schema_says_and_the_runner_reads_it(tmp_path):
    from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
    from matrixbench.run.runner_input import write_cells_file
    from runner.core import Cell
    from runner.schema import CELLS_SCHEMA
    from runner.settings import DEFAULT_SETTINGS as settings

    request = RunRequest(ImageRef("stable"), Work([Cell.from_dict(cell())], dict(settings)), Paths(tmp_path))
    path = write_cells_file(request, "sha256:abc")
    jsonschema.validate(json.loads(path.read_text()), CELLS_SCHEMA)
    assert load_cells_file(path).cells == request.work.cells


def test_load_plan_reads_the_host_format(tmp_path):
    path = tmp_path / "cells.json"
    path.write_text(json.dumps({"schema_version": 1, "settings": {"iterations": 7}, "image_name": "stable",
                                "image_id": "sha256:abc", "cells": [cell(), cell(mode="default")]}))
    plan = load_cells_file(path)
    assert [c.mode for c in plan.cells] == ["eager", "default"]
    assert plan.settings["iterations"] == 7 and plan.settings["warmup"] == DEFAULT_SETTINGS["warmup"]
    assert (plan.image_name, plan.image_id) == ("stable", "sha256:abc")


def test_load_plan_reports_bad_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CellsFileError, match="not valid JSON"):
        load_cells_file(bad)
    with pytest.raises(CellsFileError, match="cannot read it"):
        load_cells_file(tmp_path / "missing.json")


def test_plan_needs_cells():
    with pytest.raises(CellsFileError, match="'cells' must be a non-empty list"):
        cells_file_from_dict({"settings": {}, "cells": []})
    with pytest.raises(CellsFileError, match="unknown top-level keys \\['cell'\\]"):
        cells_file_from_dict({"cell": [cell()]})
