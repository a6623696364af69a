"""Explicit attention implementations (the stable -> latest transformers confound), tiny models on CPU in
this venv's torch and transformers; tests/test_venv_attention.py checks the other transformers versions."""
from pathlib import Path

import pytest
import torch

from attention_probe import sdpa_calls
from runner import models
from runner.models import ModelError, build
from runner_cells import settings, tiny_cell


@pytest.mark.parametrize("model, attention, used", [
    ("vit", "eager", "eager"), ("vit", "sdpa", "sdpa"),
    ("owlvit", "eager", "eager"), ("owlvit", "sdpa", "sdpa"),
    ("resnet", "sdpa", "eager"),        # no attention to speak of: SDPA refused, eager recorded
    ("mask2former", "sdpa", "eager"),   # no SDPA path in this transformers: eager, and the record says so
])
def test_the_model_uses_the_attention_asked_for_or_says_which(model, attention, used):
    built = build(tiny_cell(model, attention=attention), "cpu", torch.float32)
    assert built.attention == used
    assert (sdpa_calls(built) > 0) == (used == "sdpa")   # what a real forward runs, not a config string


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


def run_tiny_cell(cell):
    from runner import records
    from runner.cell import run_cell

    job = {"cell": cell, "settings": settings(iterations=2), "device": "cpu", "environment": None,
           "precision": {}, "started_at": records.utc_now(), "start_clock": records.clock()}
    return run_cell(job)


def test_the_record_says_which_attention_ran():
    record = run_tiny_cell(tiny_cell("vit"))
    assert record.status == "ok", record.error
    assert record.attention == {"requested": "eager", "used": "eager"}
    assert record.to_dict()["attention"] == {"requested": "eager", "used": "eager"}


def test_a_model_running_other_attention_than_asked_fails_its_cell(monkeypatch):
    # a transformers that ignores the request (4.43 ignored one set on the config): ViT runs SDPA
    monkeypatch.setattr(models, "attention_kwargs", lambda attention: {})
    record = run_tiny_cell(tiny_cell("vit", attention="eager"))
    assert record.status == "error"
    assert record.error.type.endswith("ModelError")
    assert "attention='eager'" in record.error.message and "'sdpa' attention" in record.error.message
    assert record.attention is None   # no claim about a model that was never measured


def test_auto_says_what_each_part_runs_and_sdpa_may_fall_back_to_eager():
    built = build(tiny_cell("mask2former", attention="auto"), "cpu", torch.float32)
    parts = built.attention.split("+")   # 5.23: "eager+sdpa", its Swin backbone has SDPA, its decoder not
    assert set(parts) <= {"eager", "sdpa"} and ("sdpa" in parts) == (sdpa_calls(built) > 0)
    eager = build(tiny_cell("vit", attention="eager"), "cpu", torch.float32).model
    assert models.checked_attention("sdpa", eager) == "eager"
    with pytest.raises(ModelError, match="attention='eager'"):
        models.checked_attention("eager", build(tiny_cell("vit", attention="sdpa"), "cpu", torch.float32).model)
