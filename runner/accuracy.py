"""Compiled vs eager outputs on the same inputs, judged relative to each output's scale.

Outputs are Hugging Face ModelOutputs (dict-like, possibly nested, with tuples of
tensors): ``flatten`` walks them into a list of tensors in a fixed order. Per output
tensor the record keeps the max abs difference, the reference's max abs value, their
ratio (``rel_error``) and the cosine similarity. An absolute tolerance means nothing
across these models: output magnitudes range from ~1e-22 (MobileNet) through ~64
(ResNet logits) to ~2600 (OwlViT logits). So the criterion is relative: a cell passes
when every tensor's ``rel_error`` = max|compiled - eager| / max|eager| is within the
tolerance (``runner.tolerance.default_tolerance`` unless the settings give one). A compiled output with
NaN or Inf where eager had a finite value is ``nan`` (torch 2.0.1's Inductor gives
all-NaN Mask2Former outputs on CPU).

The tolerance and its defaults, with how PyTorch's own benchmark runner decides: runner.tolerance.
"""
import math
from collections.abc import Mapping

import torch

from runner.tolerance import CRITERION

MAX_OUTPUTS = 64        # per-tensor rows kept in a record


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
    return _result("skipped", None, [])


def compare(reference, output, tolerance):
    """Accuracy of ``output`` against ``reference`` (a list from ``to_cpu``)."""
    actual = to_cpu(output)
    if len(actual) != len(reference):
        return _result("fail", tolerance, [])
    rows = [tensor_stats(expected, got) for expected, got in zip(reference, actual)]
    return _result(_status(rows, tolerance), tolerance, rows)


def _status(rows, tolerance):
    flags = {row["flag"] for row in rows}
    if "nan" in flags:
        return "nan"
    if flags & {"fail", "shape"} or any(row["rel_error"] > tolerance for row in rows):
        return "fail"
    return "pass"


def _result(status, tolerance, rows):
    def worst(key, pick):
        values = [row[key] for row in rows if row[key] is not None]
        return pick(values) if values else None

    return {"status": status, "tolerance": tolerance, "criterion": CRITERION,
            "max_abs_diff": worst("max_abs_diff", max), "max_rel_error": worst("rel_error", max),
            "min_cosine": worst("cosine", min), "outputs": rows[:MAX_OUTPUTS]}


def tensor_stats(expected, got):
    """One output tensor's comparison, over the elements finite in both.

    flag "shape": shapes differ; "nan": got is NaN/Inf where expected is not; "fail":
    expected is NaN/Inf where got is finite; None otherwise.
    """
    row = {"shape": list(expected.shape), "max_abs_diff": None, "ref_max_abs": None,
           "rel_error": None, "cosine": None, "flag": None}
    if expected.shape != got.shape:
        return dict(row, flag="shape")
    expected, got = expected.double(), got.double()
    both_finite = torch.isfinite(expected) & torch.isfinite(got)
    e, g = expected[both_finite], got[both_finite]
    diff = (e - g).abs().max().item() if e.numel() else 0.0
    scale = e.abs().max().item() if e.numel() else 0.0
    row.update(max_abs_diff=diff, ref_max_abs=scale, rel_error=_ratio(diff, scale), cosine=cosine(e, g))
    return dict(row, flag=_nonfinite_flag(expected, got))


def cosine(expected, got):
    """Cosine similarity of two flat float64 tensors; 1.0 when both are all zeros."""
    norms = expected.norm().item() * got.norm().item()
    if norms == 0.0:
        both_zero = expected.norm().item() == got.norm().item() == 0.0
        return 1.0 if both_zero else 0.0
    return min(1.0, (expected * got).sum().item() / norms)


def _ratio(diff, scale):
    if diff == 0.0:
        return 0.0
    return diff / scale if scale > 0.0 else math.inf


def _nonfinite_flag(expected, got):
    same = (expected == got) | (torch.isnan(expected) & torch.isnan(got))
    if bool((~torch.isfinite(got) & ~same).any()):
        return "nan"
    if bool((~torch.isfinite(expected) & ~same).any()):
        return "fail"
    return None
