"""The accuracy tolerance: relative to each output's scale, with defaults per dtype.

A cell passes when, for every output tensor, max|compiled - eager| / max|eager| is within
the tolerance (runner.accuracy). Stdlib only: the parent process builds records too.

How PyTorch's own benchmark runner decides (benchmarks/dynamo/common.py ``check_accuracy``
with the suites' ``get_tolerance_and_cosine_flag``, and ``torch._dynamo.utils.same``):
``torch.allclose(ref, res, atol=tol, rtol=tol)`` with tol 1e-3 for inference in
huggingface.py and timm_models.py, 1e-4 for float32 in torchbench.py (1e-3 for float16,
1e-2 for the models listed as needing more in fp16/bf16); failing that, an RMSE test
against a float64 run of the model (``res_error <= multiplier * ref_error + tol / 10``),
or with ``--cosine`` a cosine similarity >= 0.99. We keep no float64 model (it would
double the cell's memory), so the tolerance is scaled to the output instead, from what the
12 shipped models do on CPU at tiny size (tests/test_runner_tolerance.py recomputes it):
- float32 1e-3, PyTorch's inference tolerance (Inductor's reordered reductions are ~1e-6
  relative on CPU);
- float32 where TF32 may run (cuDNN convolutions on Ampere and later; runner.precision keeps
  matmuls in full float32) 1e-2: operands rounded to TF32's 10 mantissa bits (round to
  nearest, every weight and input) move the outputs by up to 8.5e-3 relative (OwlViT; ResNet
  4e-4), an upper bound since the GPU rounds only convolutions and both sides round alike;
- float16 1e-2 and bfloat16 6e-2: the whole model cast to the half type differs from float32
  by up to 6.7e-3 (fp16, OwlViT; MobileNet's ~1e-26 outputs underflow to zero) and 5.7e-2
  (bf16, OwlViT; Mask2Former 0.36), again an upper bound for compiled vs eager in one dtype.
The cosine similarity is recorded beside it, for the reader who prefers PyTorch's cosine view.
"""

# Relative tolerance (max abs diff / max abs of the reference, per output tensor) by dtype.
DEFAULT_TOLERANCES = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 6e-2}
TF32_TOLERANCE = 1e-2   # float32 where TF32 may run
CRITERION = "max_abs_diff / max_abs(reference) per output tensor"


def default_tolerance(dtype, device, precision):
    """The relative tolerance for a cell that gives none: by dtype, looser for TF32 on GPU."""
    precision = precision or {}
    tf32 = device == "cuda" and bool(precision.get("cudnn_allow_tf32") or precision.get("cuda_matmul_allow_tf32"))
    if dtype == "float32" and tf32:
        return TF32_TOLERANCE
    return DEFAULT_TOLERANCES[dtype]
