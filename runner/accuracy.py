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

An output that fails that test gets PyTorch's second chance (benchmarks/dynamo/common.py with
``torch._dynamo.utils.same``): a float64 run of the eager model (``fp64_reference``, once per
cell, on the cell's device or, out of memory there, the CPU) is the truth, and the compiled
output passes when it is not much further from it than eager itself is: its RMSE against float64
within ``multiplier`` x eager's RMSE + tolerance/10 of the output's scale (PyTorch's rule, scaled),
and, stricter than PyTorch so one wrong element cannot hide in a large tensor, the same for the
max abs error. TF32, float16 and bfloat16 rounding are judged by this one principle: whatever
eager's own rounding costs, the compiled output may cost about as much.

The tolerance and its defaults, with how PyTorch's own benchmark runner decides: runner.tolerance.
"""
import copy
import math
from collections.abc import Mapping

import torch

from runner.records import is_out_of_memory
from runner.tolerance import CRITERION, fp64_multiplier

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


def compare(reference, output, tolerance, fp64=None):
    """Accuracy of ``output`` against ``reference`` (a list from ``to_cpu``). ``fp64`` (a callable
    giving ``fp64_reference``'s list, or None) is called, once, only when an output is beyond the
    tolerance, and judges those outputs."""
    actual = to_cpu(output)
    if len(actual) != len(reference):
        return _result("fail", tolerance, [])
    rows = [tensor_stats(expected, got) for expected, got in zip(reference, actual)]
    beyond = [i for i, row in enumerate(rows) if row["flag"] is None and row["rel_error"] > tolerance]
    truths = fp64() if beyond and fp64 is not None else None
    if truths is not None and len(truths) == len(reference):
        for i in beyond:
            rows[i] = tensor_stats(reference[i], actual[i], truths[i], tolerance)
    return _result(_status(rows, tolerance), tolerance, rows)


def _status(rows, tolerance):
    flags = {row["flag"] for row in rows}
    if "nan" in flags:
        return "nan"
    if flags & {"fail", "shape"} or any(row["rel_error"] > tolerance and not row.get("fp64_pass") for row in rows):
        return "fail"
    return "pass"


def fp64_reference(model, inputs, device):
    """The eager model's outputs in float64 (a copy of the model and its floating inputs), as CPU
    tensors: on ``device``, or on the CPU when that runs out of memory; None when it cannot run."""
    for where in dict.fromkeys([device, "cpu"]):
        try:
            with torch.no_grad():
                model64 = copy.deepcopy(model).to(device=where, dtype=torch.float64)
                inputs64 = {name: _as_fp64(value, where) for name, value in inputs.items()}
                return [t.detach().to("cpu", torch.float64) for t in flatten(model64(**inputs64))]
        except Exception as exc:   # a model that cannot run in float64 keeps the plain tolerance
            if where == "cpu" or not is_out_of_memory(exc):
                return None
        finally:
            model64 = inputs64 = None
            if where == "cuda":
                torch.cuda.empty_cache()
    return None


def _as_fp64(value, device):
    if not isinstance(value, torch.Tensor):
        return value
    return value.to(device=device, dtype=torch.float64) if value.is_floating_point() else value.to(device)


def _result(status, tolerance, rows):
    def worst(key, pick):
        values = [row[key] for row in rows if row[key] is not None]
        return pick(values) if values else None

    return {"status": status, "tolerance": tolerance, "criterion": CRITERION,
            "max_abs_diff": worst("max_abs_diff", max), "max_rel_error": worst("rel_error", max),
            "min_cosine": worst("cosine", min), "outputs": rows[:MAX_OUTPUTS]}


def tensor_stats(expected, got, truth=None, tolerance=None):
    """One output tensor's comparison, over the elements finite in both; with ``truth`` (the
    float64 output) and ``tolerance``, the float64 judgement too (``fp64_judgement``).

    flag "shape": shapes differ; "nan": got is NaN/Inf where expected is not; "fail":
    expected is NaN/Inf where got is finite; None otherwise.
    """
    row = {"shape": list(expected.shape), "max_abs_diff": None, "ref_max_abs": None,
           "rel_error": None, "cosine": None, "flag": None}
    if expected.shape != got.shape:
        return dict(row, flag="shape")
    dtype = got.dtype
    expected, got = expected.double(), got.double()
    both_finite = torch.isfinite(expected) & torch.isfinite(got)
    e, g = expected[both_finite], got[both_finite]
    diff = (e - g).abs().max().item() if e.numel() else 0.0
    scale = e.abs().max().item() if e.numel() else 0.0
    row.update(max_abs_diff=diff, ref_max_abs=scale, rel_error=_ratio(diff, scale), cosine=cosine(e, g))
    if truth is not None and tolerance is not None and truth.shape == expected.shape:
        row.update(fp64_judgement(expected, got, truth.double(), tolerance, dtype))
    return dict(row, flag=_nonfinite_flag(expected, got))


def fp64_judgement(expected, got, truth, tolerance, dtype):
    """How far eager (``expected``) and compiled (``got``) are from the float64 ``truth``: RMSE and max
    abs error of each, and whether compiled passes (within multiplier x eager's + tolerance/10 of
    the scale, for both measures), over the elements finite in all three."""
    finite = torch.isfinite(expected) & torch.isfinite(got) & torch.isfinite(truth)
    t, e, g = truth[finite], expected[finite], got[finite]
    if not t.numel():
        return {}
    slack = tolerance / 10.0 * t.abs().max().item()
    multiplier = fp64_multiplier(dtype, t.numel())
    eager = (_rmse(t, e), (t - e).abs().max().item())
    compiled = (_rmse(t, g), (t - g).abs().max().item())
    passes = all(c <= multiplier * r + slack for c, r in zip(compiled, eager))
    return {"eager_rmse_fp64": eager[0], "compiled_rmse_fp64": compiled[0], "eager_max_fp64": eager[1],
            "compiled_max_fp64": compiled[1], "fp64_multiplier": multiplier, "fp64_pass": passes}


def _rmse(truth, other):
    return torch.sqrt(torch.mean(torch.square(truth - other))).item()


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
