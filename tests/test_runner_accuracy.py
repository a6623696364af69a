import math

import pytest
import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from runner.accuracy import compare, flatten, skipped, to_cpu


def nested_output(logits, hidden):
    inner = BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=hidden[:, 0])
    return {"logits": logits, "vision": inner, "extra": (hidden, [logits * 2]), "name": "ignored"}


def test_flatten_walks_model_outputs_tuples_and_lists_in_order():
    logits, hidden = torch.ones(2, 3), torch.zeros(2, 4, 5)
    tensors = flatten(nested_output(logits, hidden))
    assert [tuple(t.shape) for t in tensors] == [(2, 3), (2, 4, 5), (2, 5), (2, 4, 5), (2, 3)]


def test_model_output_skips_none_fields():
    output = ImageClassifierOutput(logits=torch.ones(1, 2), hidden_states=None)
    assert len(flatten(output)) == 1


def test_pass_within_tolerance_and_fail_beyond():
    reference = to_cpu({"logits": torch.tensor([1.0, 2.0])})
    close = compare(reference, {"logits": torch.tensor([1.0, 2.004])}, tolerance=0.01)
    assert close["status"] == "pass" and close["max_abs_diff"] == pytest.approx(0.004, abs=1e-6)
    far = compare(reference, {"logits": torch.tensor([1.5, 2.0])}, tolerance=0.01)
    assert far["status"] == "fail" and far["max_abs_diff"] == pytest.approx(0.5)
    assert far["tolerance"] == 0.01


def test_nan_in_compiled_output_is_nan_status():
    reference = to_cpu((torch.tensor([1.0, 2.0]),))
    result = compare(reference, (torch.tensor([math.nan, math.nan]),), tolerance=0.01)
    assert result["status"] == "nan"


def test_nan_in_both_at_the_same_place_is_not_a_difference():
    reference = to_cpu((torch.tensor([math.nan, 2.0]),))
    result = compare(reference, (torch.tensor([math.nan, 2.0]),), tolerance=0.01)
    assert result == {"max_abs_diff": 0.0, "tolerance": 0.01, "status": "pass"}


def test_eager_nonfinite_where_compiled_is_finite_fails():
    reference = to_cpu((torch.tensor([math.inf, 2.0]),))
    assert compare(reference, (torch.tensor([1.0, 2.0]),), tolerance=0.01)["status"] == "fail"


def test_structure_or_shape_mismatch_fails():
    reference = to_cpu((torch.zeros(2), torch.zeros(3)))
    assert compare(reference, (torch.zeros(2),), 0.01)["status"] == "fail"
    assert compare(reference, (torch.zeros(2), torch.zeros(4)), 0.01)["status"] == "fail"


def test_half_precision_outputs_are_compared_in_double():
    reference = to_cpu(torch.tensor([1.0, 2.0], dtype=torch.bfloat16))
    result = compare(reference, torch.tensor([1.0, 2.015625], dtype=torch.bfloat16), tolerance=0.25)
    assert result["status"] == "pass" and result["max_abs_diff"] == pytest.approx(0.015625)


def test_skipped():
    assert skipped()["status"] == "skipped"
