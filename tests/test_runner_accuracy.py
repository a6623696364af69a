import math

import pytest
import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from runner.accuracy import compare, cosine, flatten, skipped, tensor_stats, to_cpu


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


def test_relative_criterion_per_tensor():
    reference = to_cpu({"logits": torch.tensor([10.0, 20.0]), "boxes": torch.tensor([0.5, 0.25])})
    close = compare(reference, {"logits": torch.tensor([10.0, 20.01]), "boxes": torch.tensor([0.5, 0.2501])}, 1e-3)
    assert close["status"] == "pass"
    assert close["max_abs_diff"] == pytest.approx(0.01, rel=1e-4)        # the logits' difference
    assert close["max_rel_error"] == pytest.approx(0.0005, rel=1e-3)     # 0.01 / 20 and 1e-4 / 0.5
    logits, boxes = close["outputs"]
    assert logits["ref_max_abs"] == 20.0 and boxes["ref_max_abs"] == 0.5
    # The same absolute difference on the small boxes is 2% of their scale: a failure.
    far = compare(reference, {"logits": torch.tensor([10.0, 20.0]), "boxes": torch.tensor([0.5, 0.26])}, 1e-3)
    assert far["status"] == "fail" and far["max_rel_error"] == pytest.approx(0.02, rel=1e-4)
    assert far["tolerance"] == 1e-3


def test_tiny_outputs_are_judged_at_their_own_scale():
    """MobileNet's random-weight outputs are ~1e-22: an absolute 1e-2 passes anything there."""
    reference = to_cpu(torch.tensor([3e-22, -1e-22]))
    assert compare(reference, torch.tensor([3.0003e-22, -1e-22]), 1e-3)["status"] == "pass"
    assert compare(reference, torch.tensor([1e-22, -1e-22]), 1e-3)["status"] == "fail"


def test_cosine_similarity():
    a = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert cosine(a, a) == pytest.approx(1.0)
    assert cosine(a, -a) == pytest.approx(-1.0)
    assert cosine(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)) == 1.0
    assert cosine(torch.zeros(3, dtype=torch.float64), a) == 0.0


def test_zero_reference_with_a_difference_is_infinitely_off():
    row = tensor_stats(torch.zeros(2), torch.tensor([0.0, 1e-30]))
    assert row["rel_error"] == math.inf


def test_nan_in_compiled_output_is_nan_status():
    reference = to_cpu((torch.tensor([1.0, 2.0]),))
    result = compare(reference, (torch.tensor([math.nan, math.nan]),), tolerance=0.01)
    assert result["status"] == "nan"


def test_nan_in_both_at_the_same_place_is_not_a_difference():
    reference = to_cpu((torch.tensor([math.nan, 2.0]),))
    result = compare(reference, (torch.tensor([math.nan, 2.0]),), tolerance=0.01)
    assert result["status"] == "pass" and result["max_abs_diff"] == 0.0 and result["max_rel_error"] == 0.0


def test_eager_nonfinite_where_compiled_is_finite_fails():
    reference = to_cpu((torch.tensor([math.inf, 2.0]),))
    assert compare(reference, (torch.tensor([1.0, 2.0]),), tolerance=0.01)["status"] == "fail"


def test_structure_or_shape_mismatch_fails():
    reference = to_cpu((torch.zeros(2), torch.zeros(3)))
    assert compare(reference, (torch.zeros(2),), 0.01)["status"] == "fail"
    mismatch = compare(reference, (torch.zeros(2), torch.zeros(4)), 0.01)
    assert mismatch["status"] == "fail" and mismatch["outputs"][1]["flag"] == "shape"


def test_half_precision_outputs_are_compared_in_double():
    reference = to_cpu(torch.tensor([1.0, 2.0], dtype=torch.bfloat16))
    result = compare(reference, torch.tensor([1.0, 2.015625], dtype=torch.bfloat16), tolerance=0.04)
    assert result["status"] == "pass" and result["max_abs_diff"] == pytest.approx(0.015625)


def test_skipped():
    result = skipped()
    assert result["status"] == "skipped" and result["max_rel_error"] is None and result["outputs"] == []
