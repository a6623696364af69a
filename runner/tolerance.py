"""The accuracy tolerance: relative to each output's scale, with defaults per dtype.

A cell passes when, for every output tensor, max|compiled - eager| / max|eager| is within
the tolerance (runner.accuracy). Stdlib only: the parent process builds records too.

How PyTorch's own benchmark runner decides (benchmarks/dynamo/common.py ``check_accuracy``
with the suites' ``get_tolerance_and_cosine_flag``, and ``torch._dynamo.utils.same``):
``torch.allclose(ref, res, atol=tol, rtol=tol)`` with tol 1e-3 for inference in
huggingface.py and timm_models.py, 1e-4 for float32 in torchbench.py (1e-3 for float16,
1e-2 for the models listed as needing more in fp16/bf16); failing that, an RMSE test
against a float64 run of the model (``res_error <= multiplier * ref_error + tol / 10``),
or with ``--cosine`` a cosine similarity >= 0.99. We do both in that order: the relative
tolerance below first (the float64 run is costly), and an output beyond it is judged against
a float64 run of the eager model (runner.accuracy.fp64_judgement), so that TF32, float16 and
bfloat16 rounding that eager itself shows is never a failure. The tolerances, from what the
12 shipped models do on CPU at tiny size (tests/test_runner_tolerance.py recomputes it):
- float32 1e-3, PyTorch's inference tolerance (Inductor's reordered reductions are ~1e-6
  relative on CPU);
- float32 where TF32 runs (cuDNN convolutions on Ampere and later, never on V100/T4; runner.precision keeps
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
TF32_TOLERANCE = 1e-2   # float32 where TF32 runs (a GPU of compute capability 8.0 or newer)
CRITERION = ("max_abs_diff / max_abs(reference) per output tensor; beyond it, the float64 reference: "
             "RMSE and max abs error vs float64 within multiplier x eager's + tolerance/10 of the scale")
# PyTorch's multipliers (torch._dynamo.utils.same): 2 for float32, 3 for half types and tensors under
# 1000 elements, and (its use_larger_multiplier_for_smaller_tensor, on here: the error of a few dozen
# logits is a noisy estimate) 8 up to 500 elements and 10 up to 10.
FP64_MULTIPLIER = 2.0
FP64_MULTIPLIER_LOOSE = 3.0
FP64_SMALL_TENSOR = 1000
FP64_SMALLER = ((10, 10.0), (500, 8.0))   # (at most this many elements, multiplier)


def default_tolerance(dtype, device, precision):
    """The relative tolerance for a cell that gives none: by dtype, looser for float32 where TF32
    runs: TF32 flags on and a GPU that has TF32 (``precision["tf32_available"]``; records without
    it are taken to have it). A V100 or T4 gets the plain float32 tolerance."""
    precision = precision or {}
    flags = bool(precision.get("cudnn_allow_tf32") or precision.get("cuda_matmul_allow_tf32"))
    tf32 = device == "cuda" and flags and precision.get("tf32_available", True) is not False
    if dtype == "float32" and tf32:
        return TF32_TOLERANCE
    return DEFAULT_TOLERANCES[dtype]


def fp64_multiplier(dtype, numel):
    """How many times eager's distance from float64 a compiled output may be (PyTorch's rule)."""
    for elements, multiplier in FP64_SMALLER:
        if numel <= elements:
            return multiplier
    half = str(dtype).rsplit(".", 1)[-1] in ("float16", "bfloat16")
    return FP64_MULTIPLIER_LOOSE if half or numel < FP64_SMALL_TENSOR else FP64_MULTIPLIER
