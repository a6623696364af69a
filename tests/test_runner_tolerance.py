"""The relative tolerance against the real outputs of the 12 shipped models (tiny, on CPU).

For each model: the eager output is the reference; the same model with every weight and
input rounded to TF32 (10 mantissa bits, round to nearest) stands in for a GPU run with
TF32 convolutions (an upper bound: the GPU rounds only convolution operands). The default
float32-on-GPU tolerance must pass it, and an error a broken kernel makes (one output off
by 5% of its scale) must fail, at every model's own output magnitudes.
"""
import pytest
import torch

from runner import accuracy
from runner.models import SEED_MODELS, build
from runner.tolerance import DEFAULT_TOLERANCES, TF32_TOLERANCE, default_tolerance
from runner_cells import tiny_cell

GPU_PRECISION = {"float32_matmul_precision": "highest", "cuda_matmul_allow_tf32": False,
                 "cudnn_allow_tf32": True}


def round_to_tf32(tensor):
    """float32 with the low 13 of 23 mantissa bits rounded away (TF32's 10 remain)."""
    if tensor.dtype != torch.float32:
        return tensor
    bits = tensor.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def tf32_run(built):
    with torch.no_grad():
        reference = accuracy.to_cpu(built.model(**built.inputs))
        for parameter in built.model.parameters():
            parameter.copy_(round_to_tf32(parameter))
        inputs = {k: round_to_tf32(v) if isinstance(v, torch.Tensor) else v for k, v in built.inputs.items()}
        return reference, built.model(**inputs)


def test_defaults():
    assert default_tolerance("float32", "cuda", GPU_PRECISION) == TF32_TOLERANCE
    assert default_tolerance("float32", "cpu", GPU_PRECISION) == DEFAULT_TOLERANCES["float32"]
    assert default_tolerance("bfloat16", "cuda", GPU_PRECISION) == DEFAULT_TOLERANCES["bfloat16"]


@pytest.mark.parametrize("model", sorted(SEED_MODELS))
def test_tf32_noise_passes_and_a_real_error_fails(model):
    torch.manual_seed(0)
    reference, tf32_output = tf32_run(build(tiny_cell(model), "cpu", torch.float32))
    tolerance = default_tolerance("float32", "cuda", GPU_PRECISION)
    result = accuracy.compare(reference, tf32_output, tolerance)
    assert result["status"] == "pass", result["outputs"]
    assert result["min_cosine"] > 0.9999
    assert all(row["ref_max_abs"] > 0 for row in result["outputs"])
    broken = [t.clone() for t in reference]
    worst = max(range(len(broken)), key=lambda i: broken[i].abs().max().item())
    index = broken[worst].abs().argmax()
    broken[worst].view(-1)[index] *= 1.05   # one element 5% off: a wrong kernel, not rounding
    assert accuracy.compare(reference, broken, tolerance)["status"] == "fail"


def test_output_magnitudes_span_orders_of_magnitude():
    """Why one absolute tolerance cannot serve: the models' output scales differ by > 1e20."""
    scales = []
    for model in ("mobilenet", "resnet", "owlvit"):
        torch.manual_seed(0)
        built = build(tiny_cell(model), "cpu", torch.float32)
        with torch.no_grad():
            scales.append(max(t.abs().max().item() for t in accuracy.to_cpu(built.model(**built.inputs))))
    assert scales[0] < 1e-20 < 1e-1 < scales[1] < scales[2]
