"""Compiled vs eager outputs on the same inputs: max abs difference, pass/fail/nan.

Outputs are Hugging Face ModelOutputs (dict-like, possibly nested, with tuples of
tensors): ``flatten`` walks them into a list of tensors in a fixed order. A compiled
output with NaN or Inf where eager had a finite value is ``nan`` (torch 2.0.1's Inductor
gives all-NaN Mask2Former outputs on CPU). Otherwise ``pass`` when the largest absolute
difference over all elements is within the tolerance (records.DEFAULT_TOLERANCES
unless the settings give one).
"""
from collections.abc import Mapping

import torch


def flatten(output):
    """Every tensor in a (nested) model output, in a stable order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        return [t for key in output.keys() for t in flatten(output[key])]
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in flatten(item)]
    return []


def to_cpu(output):
    """A detached CPU copy of every tensor in the output, for comparing later."""
    return [t.detach().to("cpu", copy=True) for t in flatten(output)]


def skipped():
    return {"max_abs_diff": None, "tolerance": None, "status": "skipped"}


def compare(reference, output, tolerance):
    """Accuracy of ``output`` against ``reference`` (a list from ``to_cpu``)."""
    actual = to_cpu(output)
    if len(actual) != len(reference):
        return {"max_abs_diff": None, "tolerance": tolerance, "status": "fail"}
    diffs = [_tensor_diff(expected, got) for expected, got in zip(reference, actual)]
    if any(diff is None for diff, _ in diffs):
        return {"max_abs_diff": None, "tolerance": tolerance, "status": "fail"}
    worst = max((diff for diff, _ in diffs), default=0.0)
    flags = {flag for _, flag in diffs}
    status = "nan" if "nan" in flags else "fail" if "fail" in flags or worst > tolerance else "pass"
    return {"max_abs_diff": worst, "tolerance": tolerance, "status": status}


def _tensor_diff(expected, got):
    """(max abs diff over the elements finite in both, flag); diff None if shapes differ.

    flag "nan": got is NaN/Inf where expected is not; "fail": expected is NaN/Inf where got
    is finite; None otherwise.
    """
    if expected.shape != got.shape:
        return None, None
    expected, got = expected.double(), got.double()
    finite_expected, finite_got = torch.isfinite(expected), torch.isfinite(got)
    same = (expected == got) | (torch.isnan(expected) & torch.isnan(got))
    both_finite = finite_expected & finite_got
    diff = (expected[both_finite] - got[both_finite]).abs().max().item() if both_finite.any() else 0.0
    if bool((~finite_got & ~same).any()):
        return diff, "nan"
    if bool((~finite_expected & ~same).any()):
        return diff, "fail"
    return diff, None
