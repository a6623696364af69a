"""Explicit attention implementations (the stable -> latest transformers confound), tiny models on CPU."""
from pathlib import Path

import pytest
import torch

from runner.models import ModelError, build
from runner_cells import tiny_cell


@pytest.mark.parametrize("model, attention, used", [
    ("vit", "eager", "eager"), ("vit", "sdpa", "sdpa"),
    ("owlvit", "eager", "eager"),
    ("resnet", "sdpa", "eager"),        # no attention to speak of: SDPA refused, eager recorded
    ("mask2former", "sdpa", "eager"),   # no SDPA path in this transformers: eager, and the record says so
])
def test_the_model_uses_the_attention_asked_for_or_says_which(model, attention, used):
    built = build(tiny_cell(model, attention=attention), "cpu", torch.float32)
    assert built.attention == used
    assert built.model.config._attn_implementation == used


def test_default_is_eager_the_one_every_image_can_run():
    assert build(tiny_cell("vit"), "cpu", torch.float32).attention == "eager"   # a cell naming none


def test_the_setting_reaches_every_cell_and_is_checked(tmp_path):
    from matrixbench.matrix import Overrides, expand_cells, load_matrix
    from runner.cells_file import CellsFileError, validate_cell

    matrix_path = Path(__file__).resolve().parents[1] / "matrix.yaml"
    assert {cell.attention for cell in expand_cells(load_matrix(matrix_path))} == {"eager"}
    sdpa = load_matrix(matrix_path, Overrides(attention="sdpa"))
    assert {cell.attention for cell in expand_cells(sdpa)} == {"sdpa"}
    with pytest.raises(CellsFileError, match="'attention' must be one of"):
        validate_cell(dict(tiny_cell("vit").to_dict(), attention="flash"), "cells[0]")


def test_auto_is_transformers_own_choice_and_a_bad_name_is_refused():
    auto = build(tiny_cell("vit", attention="auto"), "cpu", torch.float32).attention
    assert auto in ("eager", "sdpa")   # sdpa with transformers 5.23 on torch 2.13; eager on 4.43.4 + torch 2.0.1
    with pytest.raises(ModelError, match="attention='flash'"):
        build(tiny_cell("vit", attention="flash"), "cpu", torch.float32)


def test_the_record_says_which_attention_ran():
    from runner import records
    from runner.cell import run_cell
    from runner_cells import settings

    job = {"cell": tiny_cell("vit"), "settings": settings(iterations=2), "device": "cpu", "environment": None,
           "precision": {}, "started_at": records.utc_now(), "start_clock": records.clock()}
    record = run_cell(job)
    assert record.status == "ok", record.error
    assert record.attention == {"requested": "eager", "used": "eager"}
    assert record.to_dict()["attention"] == {"requested": "eager", "used": "eager"}
