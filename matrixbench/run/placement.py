"""Slots: where each concurrent runner of a run goes (a GPU, a disjoint set of CPU cores, a NUMA node).

Host side, no torch. ``plan_slots`` splits the cores this process may use
(``os.sched_getaffinity(0)``) into disjoint slots. On a GPU host there is one slot per chosen GPU
(``--gpu 0,3``, indices or UUIDs, restricts), its cores taken from that GPU's NUMA node: first
from sysfs (the GPU's PCI bus id from nvidia-smi, ``/sys/bus/pci/devices/<bus id>/numa_node``, that
node's ``/sys/devices/system/node/node<N>/cpulist``), else as ``nvidia-smi topo -m`` reports it (its
``CPU Affinity`` and ``NUMA Affinity`` columns); when neither can be read, the cores are split
evenly and the plan says so. On a CPU host the slots split the
cores: ``--slots 2`` on a 2-core machine gives each slot one core.

GPUs are listed by ``matrixbench.gpu`` (the doctor's query and parser too); commands run
through a ``run(argv) -> (exit code or None, stdout)`` seam so tests replay recorded outputs.
"""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from matrixbench.errors import RunError
from matrixbench.gpu import Runner, bus_ids, compute_apps, host_gpus, run_command

AUTO = "auto"
SYSFS = Path("/sys")


class NoHostGpusError(RunError):
    """Slots on GPUs, but the host's nvidia-smi lists none."""


@dataclass(frozen=True)
class Slot:
    """One runner's share of the host: its cores, and its GPU and NUMA node where known."""

    index: int
    cores: Tuple[int, ...]
    gpu_index: Optional[int] = None
    gpu_uuid: Optional[str] = None
    numa_node: Optional[int] = None

    @property
    def cpuset(self) -> str:
        """The cores as a cpuset list ("0-3,8"), as Docker's cpuset_cpus takes them."""
        return format_cpulist(self.cores)

    def to_dict(self) -> dict:
        return {"slot": self.index, "cores": list(self.cores), "gpu_index": self.gpu_index,
                "gpu_uuid": self.gpu_uuid, "numa_node": self.numa_node}


@dataclass(frozen=True)
class SlotPlan:
    slots: Tuple[Slot, ...]
    notes: Tuple[str, ...] = ()

    def describe(self) -> str:
        lines = [f"{len(self.slots)} slot(s):"]
        for slot in self.slots:
            gpu = f"GPU {slot.gpu_index} ({slot.gpu_uuid}), " if slot.gpu_uuid else ""
            numa = f", NUMA node {slot.numa_node}" if slot.numa_node is not None else ""
            lines.append(f"  slot {slot.index}: {gpu}cores {slot.cpuset}{numa}")
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


def parse_cpulist(text: str) -> Tuple[int, ...]:
    """ "0-3,8,10-11" -> (0, 1, 2, 3, 8, 10, 11); "" or "N/A" -> ()."""
    cores: List[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        first, _, last = part.partition("-")
        cores += range(int(first), int(last or first) + 1)
    return tuple(sorted(set(cores)))


def format_cpulist(cores: Sequence[int]) -> str:
    """(0, 1, 2, 3, 8) -> "0-3,8"."""
    ranges: List[List[int]] = []
    for core in sorted(cores):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def usable_cores() -> Tuple[Tuple[int, ...], Optional[str]]:
    """The cores this process may run on, and a note when they could not be read."""
    try:
        return tuple(sorted(os.sched_getaffinity(0))), None
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
        return tuple(range(count)), (f"this process's CPU affinity cannot be read (no sched_getaffinity): "
                                     f"cores 0-{count - 1} assumed usable")


def split_evenly(cores: Sequence[int], n: int) -> List[Tuple[int, ...]]:
    """``cores`` in ``n`` disjoint, contiguous, near-equal parts (the first ones one larger)."""
    if n < 1 or n > len(cores):
        raise RunError(f"--slots {n}: {len(cores)} usable core(s) cannot give {n} slot(s) a core each")
    size, extra = divmod(len(cores), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(tuple(cores[start:end]))
        start = end
    return parts


@dataclass(frozen=True)
class GpuPlace:
    """A GPU's position from ``nvidia-smi topo -m``: the CPUs and NUMA node it is close to."""

    cpus: Tuple[int, ...]
    numa_node: Optional[int]


def parse_topology(text: str) -> Dict[int, GpuPlace]:
    """``nvidia-smi topo -m``'s matrix -> GPU index -> GpuPlace ({} when the columns are absent).

    The header row names the columns (GPU0 ... GPUn, NICs, ``CPU Affinity``, ``NUMA Affinity``,
    newer drivers ``GPU NUMA ID``), tab-separated; each ``GPU<i>`` row gives them in that order.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if "CPU Affinity" in line), None)
    if header is None:
        return {}
    columns = [c.strip() for c in header.split("\t")]
    cpu_at = columns.index("CPU Affinity")
    numa_at = columns.index("NUMA Affinity") if "NUMA Affinity" in columns else None
    places = {}
    for line in lines:
        values = [v.strip() for v in line.split("\t")]   # the columns after NUMA Affinity may hold extra tabs
        name = values[0]
        if not (name.startswith("GPU") and name[3:].isdigit()) or len(values) <= cpu_at:
            continue
        numa = values[numa_at] if numa_at is not None and len(values) > numa_at else ""
        places[int(name[3:])] = GpuPlace(parse_cpulist(values[cpu_at]), int(numa) if numa.isdigit() else None)
    return places


def sysfs_bus_id(bus_id: str) -> str:
    """nvidia-smi's "00000000:1B:00.0" (8-digit domain, upper case) as sysfs names the device:
    "0000:1b:00.0" (4-digit domain, lower case)."""
    domain, _, rest = bus_id.strip().partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def sysfs_place(bus_id: str, root: Path = SYSFS) -> Optional[GpuPlace]:
    """A GPU's NUMA node and that node's CPUs from sysfs; None when the node is unknown (-1, no file)."""
    device = root / "bus" / "pci" / "devices" / sysfs_bus_id(bus_id)
    node = _read(device / "numa_node")
    if node is None or not node.isdigit():
        return None
    cpus = parse_cpulist(_read(root / "devices" / "system" / "node" / f"node{node}" / "cpulist")
                         or _read(device / "local_cpulist") or "")
    return GpuPlace(cpus, int(node)) if cpus else None


def sysfs_topology(bus_ids: Dict[int, str], root: Path = SYSFS) -> Dict[int, GpuPlace]:
    """GPU index -> GpuPlace for every GPU whose NUMA node sysfs knows."""
    places = {index: sysfs_place(bus_id, root) for index, bus_id in bus_ids.items()}
    return {index: place for index, place in places.items() if place is not None}


def read_topology(gpus, run: Runner, root: Path = SYSFS) -> Tuple[Dict[int, GpuPlace], str]:
    """Where each GPU sits: from sysfs when it knows every GPU's node, else ``nvidia-smi topo -m``;
    and which source said so ("sysfs", "nvidia-smi topo -m", or "" for neither)."""
    places = sysfs_topology(bus_ids(run), root)
    if all(int(gpu.index) in places for gpu in gpus):
        return places, "sysfs"
    code, text = run(["nvidia-smi", "topo", "-m"])
    places = parse_topology(text) if code == 0 else {}
    return places, "nvidia-smi topo -m" if all(int(gpu.index) in places for gpu in gpus) else ""


def choose_gpus(gpus, chosen: Sequence[str]):
    """The GPUs ``--gpu`` names (indices or UUIDs), in its order; all when it names none."""
    if not chosen:
        return list(gpus)
    by_key = {key: gpu for gpu in gpus for key in (gpu.index, gpu.uuid)}
    unknown = [key for key in chosen if key not in by_key]
    if unknown:
        raise RunError(f"--gpu {','.join(chosen)}: no GPU {', '.join(unknown)} on this host "
                       f"(nvidia-smi lists {', '.join(g.index for g in gpus)})")
    return [by_key[key] for key in chosen]


def chosen_gpus(gpu_choice: Sequence[str], run: Optional[Runner] = None):
    """The host's GPUs (nvidia-smi) that ``--gpu`` (else CUDA_VISIBLE_DEVICES: ``gpu_choice``) chooses: what a
    GPU run's slots are made of, and what the bill counts as runners at once."""
    return choose_gpus(host_gpus(run), gpu_choice)


def gpu_slots(gpus, topology: Dict[int, GpuPlace], cores: Sequence[int]) -> Tuple[List[Slot], List[str]]:
    """One slot per GPU; each NUMA node's usable cores split among that node's GPUs."""
    found = [topology.get(int(gpu.index)) for gpu in gpus]
    places = [place for place in found if place is not None and set(place.cpus) & set(cores)]
    if len(places) < len(gpus):
        parts = split_evenly(cores, len(gpus))
        note = ("the GPUs' NUMA affinity cannot be read (sysfs numa_node, nvidia-smi topo -m): "
                "cores split evenly among the GPUs, whatever their NUMA node")
        return [Slot(i, part, int(gpu.index), gpu.uuid) for i, (gpu, part) in enumerate(zip(gpus, parts))], [note]
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for i, place in enumerate(places):
        groups.setdefault(place.cpus, []).append(i)
    slots: Dict[int, Slot] = {}
    for cpus, members in groups.items():
        near = [core for core in cores if core in set(cpus)]
        for i, part in zip(members, split_evenly(near, len(members))):
            slots[i] = Slot(i, part, int(gpus[i].index), gpus[i].uuid, places[i].numa_node)
    return [slots[i] for i in range(len(gpus))], []


def plan_slots(slots, use_gpus: bool, gpu_choice: Sequence[str] = (), run: Optional[Runner] = None,
               cores: Optional[Sequence[int]] = None, sysfs: Path = SYSFS) -> SlotPlan:
    """The slots of a run: ``slots`` is "auto" or a count; ``use_gpus``: the cells run on GPUs.

    auto is one slot per chosen GPU on a GPU run, one slot of every core on a CPU run. ``run`` and
    ``sysfs`` (the root sysfs is mounted at) are seams for recorded outputs.
    """
    run = run or run_command
    notes: List[str] = []
    if cores is None:
        cores, note = usable_cores()
        notes += [note] if note else []
    cores = sorted(cores)
    if not use_gpus:
        count = 1 if slots == AUTO else int(slots)
        return SlotPlan(tuple(Slot(i, part) for i, part in enumerate(split_evenly(cores, count))), tuple(notes))
    gpus = chosen_gpus(gpu_choice, run)
    if not gpus:
        raise NoHostGpusError("slots on GPUs: the host's nvidia-smi lists no GPU to place")
    if slots != AUTO:
        if int(slots) > len(gpus):
            raise RunError(f"--slots {slots}: only {len(gpus)} GPU(s) to give them (one GPU per slot)")
        gpus = gpus[:int(slots)]
    topology, source = read_topology(gpus, run, sysfs)
    made, more = gpu_slots(gpus, topology, cores)
    said = [f"NUMA affinity of the GPUs from {source}"] if source and not more else []
    return SlotPlan(tuple(made), tuple(notes + more + said))


def busy_gpu_apps(slot_plan: SlotPlan, run: Optional[Runner] = None) -> List[str]:
    """Other processes on the slots' GPUs, as ``nvidia-smi --query-compute-apps`` lines
    (pid, process name, memory, GPU UUID). Asked of the host: a container sees none of them."""
    uuids = {slot.gpu_uuid for slot in slot_plan.slots if slot.gpu_uuid}
    return [line for line in compute_apps(run or run_command) if line.rsplit(",", 1)[-1].strip() in uuids]


def check_gpus_free(slot_plan: SlotPlan, allow: bool = False, note: Callable[[str], None] = print,
                    run: Optional[Runner] = None) -> None:
    """Refuse slots on GPUs another process uses (its work would disturb the timings), unless
    ``allow`` (--allow-busy-gpus), which says so and goes on."""
    apps = busy_gpu_apps(slot_plan, run)
    if not apps:
        return
    listing = "; ".join(apps)
    if allow:
        note(f"--allow-busy-gpus: running beside other processes on the slots' GPUs ({listing})")
        return
    pids = " ".join(app.split(",")[0] for app in apps)
    raise RunError(f"{len(apps)} other process(es) use the slots' GPUs: {listing}. Stop them (`kill {pids}`), "
                   "choose free GPUs with --gpu, or run anyway with --allow-busy-gpus")
