"""Can this torch build run on this GPU? Checked before any cell runs, never by trying.

A torch wheel carries kernels for the architectures in ``torch.cuda.get_arch_list()``:
``sm_XY`` machine code (cubins) and ``compute_XY`` PTX. Which run on a GPU of compute
capability M.N follows CUDA's compatibility rules: a cubin for X.Y runs on X.Z with Z >= Y
(same major only; an ``a`` suffix, e.g. sm_90a, runs on exactly X.Y), and PTX for X.Y is
compiled by the driver for any capability >= X.Y. torch applies the same rules in
``torch/cuda/__init__.py`` (``_check_capability``/``_check_cubins``), but only warns:
``torch.cuda.is_available()`` stays True, and the first kernel fails ("no kernel image is
available for execution on the device"). Stdlib only.
"""
import re

ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")
BF16_MIN_CAPABILITY = (8, 0)   # Ampere: native bfloat16 (T4 is 7.5, V100 7.0)
NEWER_INDEX_URL = "https://download.pytorch.org/whl/cu128"


def parse_arch(name):
    """("sm" | "compute", major, minor, suffix) for "sm_86", "compute_90", "sm_90a"; None if odd."""
    match = ARCH.match(name)
    if match is None:
        return None
    kind, digits, suffix = match.groups()
    return kind, int(digits) // 10, int(digits) % 10, suffix


def runs_on(arch, capability):
    """Whether code built for ``arch`` (an arch-list entry) runs on ``capability`` (major, minor)."""
    parsed = parse_arch(arch)
    if parsed is None:
        return False
    kind, major, minor, suffix = parsed
    if suffix == "a":
        return (major, minor) == tuple(capability)
    if kind == "compute":
        return (major, minor) <= tuple(capability)
    return major == capability[0] and minor <= capability[1]


def arch_problem(arch_list, capability, gpu_name, torch_version, image_name=None):
    """Why this torch build cannot run on this GPU (a message naming the image and the fix),
    or None. An empty arch list (a CPU build) is a different problem: None here."""
    if not arch_list or any(runs_on(arch, capability) for arch in arch_list):
        return None
    major, minor = capability
    where = f"image {image_name!r}" if image_name else "this environment"
    return (f"{where}: torch {torch_version} has kernels for {' '.join(arch_list)}, none of which runs "
            f"on {gpu_name} (compute capability {major}.{minor}, sm_{major}{minor}). Every cell would fail "
            f"or fall back to the CPU. Fix: give the image a torch build for this GPU, e.g. set its "
            f"index_url to a newer CUDA build ({NEWER_INDEX_URL}) with a torch version that has one, "
            f"and rebuild it (`matrixbench build --images {image_name or 'NAME'}`)")


def bf16_problem(capability, gpu_name):
    """Why a bfloat16 cell must not run on this GPU (no native bfloat16), or None."""
    if tuple(capability) >= BF16_MIN_CAPABILITY:
        return None
    major, minor = capability
    return (f"dtype bfloat16 refused on {gpu_name} (compute capability {major}.{minor}): bfloat16 needs "
            f"{BF16_MIN_CAPABILITY[0]}.{BF16_MIN_CAPABILITY[1]} (Ampere) or newer for native support; below "
            "that it is emulated and its latency says nothing about bfloat16. Use float16 on this GPU")
