"""The host's NVIDIA GPUs, asked of nvidia-smi, never of torch (the host has none).

The one place that queries the host's GPUs: ``query_gpus`` (``nvidia-smi --query-gpu``, its
documented CSV format) for the doctor, the slots' placement and the local/venv backends
(``host_gpus``), ``compute_apps`` for the processes on them, ``bus_ids`` for their PCI bus ids. Commands run through a
``run(argv) -> (exit code or None, stdout)`` seam (``run_command``) so tests replay recorded
outputs. ``LIST_GPUS``/``gpu_lines`` are ``nvidia-smi -L``, which the docker client runs inside
a container to see what Docker gives.
"""
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from matrixbench.errors import RunError

# `nvidia-smi -L`: one "GPU 0: NAME (UUID: GPU-...)" line per GPU, on the host or in a container.
LIST_GPUS = ("nvidia-smi", "-L")
GPU_QUERY = ("index,name,uuid,driver_version,compute_cap,persistence_mode,"
             "clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem")
GPU_FIELDS = GPU_QUERY.split(",")
APPS_QUERY = "pid,process_name,used_memory,gpu_uuid"
BUS_QUERY = "index,pci.bus_id"
QUERY_GPUS = ("nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits")
QUERY_APPS = ("nvidia-smi", f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader")
QUERY_BUS_IDS = ("nvidia-smi", f"--query-gpu={BUS_QUERY}", "--format=csv,noheader")
COMMAND_TIMEOUT_S = 60

Runner = Callable[[List[str]], Tuple[Optional[int], str]]


@dataclass(frozen=True)
class Gpu:
    index: str
    name: str
    uuid: str
    driver: str
    capability: Optional[Tuple[int, int]]
    persistence: str
    sm_clock: str
    sm_clock_max: str
    mem_clock: str
    mem_clock_max: str


class GpusUnreachableError(RunError):
    """The host has NVIDIA GPUs the chosen backend cannot hand to its runners."""


def run_command(argv: List[str]) -> Tuple[Optional[int], str]:
    """(exit code, stdout) of ``argv``; (None, "") when its program is not installed or cannot run."""
    if shutil.which(argv[0]) is None:
        return None, ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None, ""
    return done.returncode, done.stdout


def parse_gpus(csv_text: str) -> List[Gpu]:
    """``nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits`` lines as Gpus."""
    gpus = []
    for line in csv_text.strip().splitlines():
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(GPU_FIELDS):
            continue
        index, name, uuid, driver, cap, persistence, sm, sm_max, mem, mem_max = values
        major, _, minor = cap.partition(".")
        capability = (int(major), int(minor or 0)) if major.isdigit() else None
        gpus.append(Gpu(index, name, uuid, driver, capability, persistence, sm, sm_max, mem, mem_max))
    return gpus


def query_gpus(run: Optional[Runner] = None) -> Optional[List[Gpu]]:
    """The host's GPUs; None when nvidia-smi is not installed, [] when it lists none or fails."""
    code, text = (run or run_command)(list(QUERY_GPUS))
    if code is None:
        return None
    return parse_gpus(text) if code == 0 else []


def host_gpus(run: Optional[Runner] = None) -> List[Gpu]:
    """The host's GPUs; [] when there is none or no driver."""
    return query_gpus(run) or []


def compute_apps(run: Optional[Runner] = None) -> List[str]:
    """The processes on the host's GPUs, one ``pid, process_name, used_memory, gpu_uuid`` line
    each (``nvidia-smi --query-compute-apps``); [] when there is none or nvidia-smi fails."""
    code, text = (run or run_command)(list(QUERY_APPS))
    if code != 0:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def bus_ids(run: Optional[Runner] = None) -> Dict[int, str]:
    """GPU index -> PCI bus id ("00000000:1B:00.0") of the host's GPUs; {} when nvidia-smi fails."""
    code, text = (run or run_command)(list(QUERY_BUS_IDS))
    return parse_bus_ids(text) if code == 0 else {}


def parse_bus_ids(text: str) -> Dict[int, str]:
    """``nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader`` -> GPU index -> bus id."""
    found = {}
    for line in text.splitlines():
        index, _, bus_id = (part.strip() for part in line.partition(","))
        if index.isdigit() and bus_id:
            found[int(index)] = bus_id
    return found


def gpu_lines(listing: str) -> List[str]:
    """The GPU lines of ``nvidia-smi -L`` output, stripped."""
    return [line.strip() for line in listing.splitlines() if line.startswith("GPU ")]
