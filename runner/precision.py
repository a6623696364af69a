"""Numeric precision flags, set identically in every cell of every image, and recorded.

The values are torch 2.0.1's defaults, the seed benchmark's settings: full-precision
float32 matmuls (no TF32), cuDNN convolutions allowed to use TF32. Newer torch versions
keep the same defaults, but setting them explicitly keeps images comparable.

Inductor warns at every compile on a TF32-capable GPU that TF32 is available but not enabled
(torch._inductor.compile_fx); with these flags that is by choice, so ``apply_precision`` silences
exactly that warning (``TF32_NOTICE``) in the runner's process, and the report says in one line
that TF32 was off. Other warnings (fuse_attention's, which names a pattern it skips) stay.
"""
import re
import warnings

import torch

TF32_MIN_CAPABILITY = (8, 0)   # Ampere: V100 (7.0) and T4 (7.5) have no TF32
FLOAT32_MATMUL_PRECISION = "highest"
CUDA_MATMUL_ALLOW_TF32 = False
CUDNN_ALLOW_TF32 = True
# The start of Inductor's warning (compile_fx._warn_tf32_disabled), as a warnings filter's message regex.
TF32_NOTICE = re.escape("TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled. "
                        "Consider setting")


def silence_tf32_notice():
    """Ignore Inductor's "TF32 available but not enabled" warning, and no other."""
    warnings.filterwarnings("ignore", message=TF32_NOTICE, category=UserWarning)


def apply_precision():
    """Set the flags (touches no GPU), silence the warning they cause (``silence_tf32_notice``) and
    return what torch reports back."""
    silence_tf32_notice()
    torch.set_float32_matmul_precision(FLOAT32_MATMUL_PRECISION)
    torch.backends.cuda.matmul.allow_tf32 = CUDA_MATMUL_ALLOW_TF32
    torch.backends.cudnn.allow_tf32 = CUDNN_ALLOW_TF32
    return read_precision()


def read_precision():
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
    }


def with_tf32_availability(precision, device, cuda=None):
    """``precision`` plus ``tf32_available``: whether the TF32 flags can act on this device (a GPU
    of compute capability 8.0 or newer), so the accuracy tolerance gives no TF32 allowance where
    there is no TF32. Touches CUDA: call it in the probe, after the device is resolved."""
    if device != "cuda":
        return dict(precision, tf32_available=False)
    cuda = cuda or torch.cuda
    return dict(precision, tf32_available=tuple(cuda.get_device_capability(0)) >= TF32_MIN_CAPABILITY)
