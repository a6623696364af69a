"""What a build really holds, asked of its own python once it is built: torch's version, the CUDA it
was built for ("cpu" when none: a CPU or ROCm build) and the GPU architectures it carries kernels for.

An image's matrix entry only says what was asked for (``cuda_builds.image_cuda`` infers the CUDA
from its index URL); a base image, a wheelhouse or an index may serve another build (a venv asked
for the CPU index got PyPI's CUDA wheel from the wheelhouse). The facts are kept with the build: a
Docker image's label ``LABEL``, a venv's marker file; and ``cuda_builds`` checks them against the
driver and GPUs. The probe runs in the build's python and needs only torch and the stdlib; the
architectures come from ``torch._C._cuda_getArchFlags`` (the build's compile-time list, known
without a GPU: ``torch.cuda.get_arch_list()`` is empty without one before torch 2.1 or so).
"""
import json
import os
import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from matrixbench.errors import BuildError

CPU = "cpu"
LABEL = "matrixbench.build_facts"   # a built Docker image's facts, one JSON label
PROBE = (
    "import json, torch\n"
    "flags = getattr(torch._C, '_cuda_getArchFlags', None) if torch.version.cuda else None\n"
    "arches = (flags() or '').split() if flags else list(torch.cuda.get_arch_list())\n"
    "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda or 'cpu', 'arch_list': arches}))\n"
)


@dataclass(frozen=True)
class BuildFacts:
    torch: str                  # torch.__version__, "2.8.0+cu128"
    cuda: str                   # torch.version.cuda, "12.8"; "cpu" for a build without CUDA
    arch_list: Tuple[str, ...]  # "sm_80", "compute_90", ...; () for a CPU build

    @property
    def is_cpu(self) -> bool:
        return self.cuda == CPU

    def describe(self) -> str:
        if self.is_cpu:
            return f"torch {self.torch}, a CPU build (torch.version.cuda is None)"
        return f"torch {self.torch}, CUDA {self.cuda} ({' '.join(self.arch_list) or 'no arch list'})"

    def to_dict(self) -> dict:
        return {"torch": self.torch, "cuda": self.cuda, "arch_list": list(self.arch_list)}

    def to_label(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def from_dict(data) -> Optional[BuildFacts]:
    """The facts of a marker's or label's dict; None when absent or malformed (a build made before
    builds recorded them: the caller falls back to the inference and says so)."""
    if not isinstance(data, dict):
        return None
    torch, cuda, arches = data.get("torch"), data.get("cuda"), data.get("arch_list")
    if not (isinstance(torch, str) and isinstance(cuda, str) and isinstance(arches, list)
            and all(isinstance(arch, str) for arch in arches)):
        return None
    return BuildFacts(torch, cuda, tuple(arches))


def from_labels(labels: Mapping[str, str]) -> Optional[BuildFacts]:
    try:
        return from_dict(json.loads(labels.get(LABEL) or "null"))
    except ValueError:
        return None


def parse_probe(output: str, where: str) -> BuildFacts:
    """The probe's last output line as facts; BuildError naming ``where`` when it is not one."""
    lines = output.strip().splitlines()
    try:
        facts = from_dict(json.loads(lines[-1])) if lines else None
    except ValueError:
        facts = None
    if facts is None:
        raise BuildError(f"{where}: asking its torch for its CUDA build gave no answer "
                         f"({(lines or ['no output'])[-1][:200]!r}); rebuild it")
    return facts


def probe_python(python_bin, where: str) -> BuildFacts:
    """Ask ``python_bin`` (a venv's interpreter) what its torch build is."""
    done = subprocess.run([str(python_bin), "-c", PROBE], capture_output=True, text=True, check=False,
                          env={"PATH": os.defpath})
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"{where}: asking its torch for its CUDA build failed ({tail}); rebuild it")
    return parse_probe(done.stdout, where)
