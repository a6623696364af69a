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
TORCH_INDEX = "https://download.pytorch.org/whl/"
# Kernels in the torch wheels per CUDA build (TORCH_CUDA_ARCH_LIST of the wheel builds: pytorch/builder
# manywheel/build_cuda.sh for 11.7/11.8, pytorch .ci/manywheel/build_cuda.sh after; 13.0 drops Volta, sm_70).
WHEEL_ARCHES = {
    "11.7": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"],
    "11.8": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.1": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.4": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.6": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.8": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "12.9": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
    # 13.0 as PyPI's torch 2.13.0+cu130 holds it (read from a real build, matrixbench.build.facts): no PTX
    "13.0": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
}
# The CUDA builds a fix names, in order of preference: 12.8 runs on every driver from 525 on (CUDA's
# minor-version compatibility) and has kernels from Volta to Blackwell; 12.6 adds Pascal; 11.8 old drivers.
SUGGESTED_CUDA = ("12.8", "12.6", "11.8")


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


def driver_runs(build_cuda, driver_cuda):
    """Whether a driver supporting CUDA up to ``driver_cuda`` ("12.4") runs a ``build_cuda`` ("12.8")
    build: any older CUDA, and a newer minor of its own major (minor-version compatibility, 12.x
    from driver 525 on); never a newer major (13.x needs driver 580)."""
    return int(build_cuda.split(".")[0]) <= int(driver_cuda.split(".")[0])


def suggested_cuda(capability, driver_cuda=None):
    """The CUDA build to suggest for a GPU of ``capability`` under a driver of ``driver_cuda`` (None:
    unknown); None when no suggested build fits."""
    for cuda in SUGGESTED_CUDA:
        if any(runs_on(arch, capability) for arch in WHEEL_ARCHES[cuda]) and (
                driver_cuda is None or driver_runs(cuda, driver_cuda)):
            return cuda
    return None


def index_url(cuda):
    """The torch download server's index of a CUDA build: "12.8" -> .../whl/cu128."""
    return f"{TORCH_INDEX}cu{cuda.replace('.', '')}"


def arch_problem(arch_list, capability, gpu_name, torch_version, image_name=None):
    """Why this torch build cannot run on this GPU (a message naming the image and the fix),
    or None. An empty arch list (a CPU build) is a different problem: None here."""
    if not arch_list or any(runs_on(arch, capability) for arch in arch_list):
        return None
    major, minor = capability
    where = f"image {image_name!r}" if image_name else "this environment"
    cuda = suggested_cuda(capability)
    build = (f"set its index_url to {index_url(cuda)} (CUDA {cuda} builds carry sm_{major}{minor} kernels)"
             if cuda else "use a torch build that carries kernels for it")
    return (f"{where}: torch {torch_version} has kernels for {' '.join(arch_list)}, none of which runs "
            f"on {gpu_name} (compute capability {major}.{minor}, sm_{major}{minor}). Every cell would fail "
            f"or fall back to the CPU. Fix: give the image a torch build for this GPU: {build}, with a torch "
            f"version served there, and rebuild it (`matrixbench build --images {image_name or 'NAME'}`)")


def bf16_problem(capability, gpu_name):
    """Why a bfloat16 cell must not run on this GPU (no native bfloat16), or None."""
    if tuple(capability) >= BF16_MIN_CAPABILITY:
        return None
    major, minor = capability
    return (f"dtype bfloat16 refused on {gpu_name} (compute capability {major}.{minor}): bfloat16 needs "
            f"{BF16_MIN_CAPABILITY[0]}.{BF16_MIN_CAPABILITY[1]} (Ampere) or newer for native support; below "
            "that it is emulated and its latency says nothing about bfloat16. Use float16 on this GPU")


# Triton 2.0 (torch 2.0's) cannot compile Inductor's matmul templates for capability 9.0 (Hopper):
# max-autotune benchmarks them and the process dies with SIGABRT. 2.1 (torch 2.1's) compiles them.
HOPPER = (9, 0)
TRITON_HOPPER_TEMPLATES = (2, 1)


def triton_problem(triton_version, capability, gpu_name, mode):
    """Why a ``mode`` cell must not run with this Triton on this GPU (max-autotune on Hopper with
    Triton 2.0), or None."""
    if mode != "max-autotune" or tuple(capability) < HOPPER or not triton_version:
        return None
    numbers = re.match(r"(\d+)\.(\d+)", triton_version)
    if numbers is None or (int(numbers.group(1)), int(numbers.group(2))) >= TRITON_HOPPER_TEMPLATES:
        return None
    major, minor = capability
    return (f"mode max-autotune refused on {gpu_name} (compute capability {major}.{minor}): Triton "
            f"{triton_version} cannot compile Inductor's matmul templates for it, and the process would die "
            "with SIGABRT while autotuning. Use an image whose torch ships Triton 2.1 or newer (torch 2.1+), "
            "or drop max-autotune for this image")
