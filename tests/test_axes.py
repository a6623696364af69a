"""runner.axes: the one declaration of the cell space, and what derives from it."""
import dataclasses

import pytest

from runner import axes
from runner.cells_file import CellsFileError, validate_cell
from runner.core import Cell
from runner.schema import CELL_SCHEMA


def _cell(**changes):
    base = dict(model="vit", task="image-classification", weights="random", size="full", batch_size=1,
                mode="default", fullgraph=False, dtype="float32")
    return Cell(**{**base, **changes})


def test_every_cell_field_is_one_declared_axis():
    assert {f.name for f in dataclasses.fields(Cell)} == set(axes.BY_NAME)
    assert all(axis.role in axes.ROLES for axis in axes.AXES)


@pytest.mark.parametrize("changes, expected", [
    ({}, "vit_bs1_default_float32"),
    ({"size": "tiny", "batch_size": 4, "mode": "max-autotune", "fullgraph": True, "dtype": "float16"},
     "vit-tiny_bs4_max-autotune_fullgraph_float16"),
    ({"attention": "sdpa", "model_id": "org/vit", "weights": "pretrained"}, "vit_bs1_default_float32"),
])
def test_the_cell_id_is_as_before(changes, expected):
    cell = _cell(**changes)
    assert cell.id == expected == axes.cell_id(cell.to_dict())


def test_the_record_schema_cell_is_as_before():
    properties = CELL_SCHEMA["properties"]
    assert list(properties)[:11] == ["model", "model_id", "config_path", "task", "weights", "size", "batch_size",
                                     "mode", "fullgraph", "dtype", "attention"]
    assert properties["batch_size"] == {"type": "integer", "minimum": 1, "maximum": 4096}
    assert properties["model"] == {"type": "string", "minLength": 1}
    assert properties["model_id"] == {"type": ["string", "null"]}
    assert properties["fullgraph"] == {"type": "boolean"}
    assert properties["attention"]["enum"][-1] is None
    assert set(CELL_SCHEMA["required"]) == {"model", "task", "weights", "size", "batch_size", "mode", "fullgraph",
                                            "dtype"}


@pytest.mark.parametrize("field, value, message", [
    ("dtype", "float64", "'dtype' must be one of"), ("batch_size", 0, "'batch_size' must be an integer >= 1"),
    ("fullgraph", "yes", "'fullgraph' must be true or false"), ("model", "", "'model' must be a non-empty string"),
    ("model_id", 3, "'model_id' must be a string or null"), ("attention", "flash", "'attention' must be one of"),
])
def test_the_cells_file_checks_each_axis_by_its_declaration(field, value, message):
    with pytest.raises(CellsFileError, match=message):
        validate_cell(dict(_cell().to_dict(), **{field: value}))


def test_row_key_labels_and_mode_label():
    cell = _cell(size="tiny", dtype="bfloat16", mode="reduce-overhead", fullgraph=True)
    assert axes.row_key(cell) == "vit-tiny bfloat16" and axes.row_words(cell) == ["tiny", "bfloat16"]
    assert axes.mode_label(cell) == "reduce-overhead fullgraph" and axes.mode_label(_cell()) == "default"
    assert axes.row_key(_cell()) == "vit" and axes.row_words(_cell()) == []


def test_baselines_decided_once():
    compiled = _cell(mode="max-autotune", fullgraph=True, dtype="float16")
    assert axes.speedup_baseline(compiled) == _cell(mode="eager", fullgraph=False, dtype="float16")
    assert axes.mode_change_baseline(compiled) == _cell(mode="default", fullgraph=True, dtype="float16")
    assert axes.mode_change_baseline(_cell(fullgraph=True)) is None
    assert axes.speedup_baseline(_cell(mode="eager")) is None and axes.mode_change_baseline(_cell(mode="eager")) is None
    # records' dicts work as cells do
    assert axes.speedup_baseline(compiled.to_dict()) == _cell(mode="eager", dtype="float16").to_dict()


def test_cross_product_keeps_compile_options_off_eager_cells():
    models = [{"model": "vit", "task": "image-classification", "weights": "random"}]
    values = {"dtypes": ["float32", "float16"], "batch_sizes": [1, 8], "modes": ["eager", "default"], "size": "full",
              "fullgraph": True, "attention": "eager", "tf32": False}
    cells = axes.cross_product(models, values)
    assert len(cells) == 8 and len(set(cells)) == 8
    assert [(c.dtype, c.batch_size, c.mode) for c in cells[:3]] == [("float32", 1, "eager"), ("float32", 1, "default"),
                                                                   ("float32", 8, "eager")]
    assert {c.fullgraph for c in cells if c.mode == "eager"} == {False}
    assert {c.fullgraph for c in cells if c.mode == "default"} == {True}


def test_published_cells():
    assert axes.published(_cell()) and axes.published({"size": "full", "dtype": "float32", "fullgraph": None})
    for changes in ({"size": "tiny"}, {"dtype": "float16"}, {"fullgraph": True}):
        assert not axes.published(_cell(**changes))
