"""Work units on a cluster (issue 16), without Ray: what a task carries, what it does on its node,
and what the driver writes when a unit is lost. ``matrixbench.executors.ray.executor`` moves these over Ray.

A task is one unit of the scheduler (``matrixbench.executors.scheduler.Unit``: one model at one batch size,
its pending repeats in every image) on one GPU type. It carries one RunRequest per image (the unit's repeats of
that image), made on the driver exactly as a local run makes it, minus run-time secrets (HF_TOKEN reaches the
node only when the task fetches it from the driver's Board actor as it starts) and minus the driver's paths;
on its node it runs them round by round (``executors.scheduler.rounds``) through the node's backend (local or
docker), in a scratch folder, pinned to the GPU ids Ray assigned, and hands back every record it finds there.
With ``turns`` the task carries the unit's image pairs too (``executors.turns.pairs_of``): its node starts both
runners of a pair at once (``executors.turns.steps_of`` and ``take_turns``, as one machine does), with the
baton folder in its scratch folder and their blocks on the last ``turns_cores`` cores of its share of the node.
"""
import functools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, TypedDict, TypeVar, Union

from matrixbench.environments.base import Backend, Paths, RunRequest, Turns
from matrixbench.environments.environment import RUNTIME_SECRETS, runtime_secrets
from matrixbench.errors import RunError
from matrixbench.executors import turns
from matrixbench.executors.scheduler import Part
from matrixbench.executors.threads import run_in_thread
from matrixbench.paths import cache_home, hf_cache_home
from matrixbench.redact import redact_text
from matrixbench.run.at_once import AtOnce
from matrixbench.run.launch import launch
from matrixbench.run.layout import LOG_FILENAME
from matrixbench.run.pending import ImageWork, image_label
from matrixbench.run.placement import Slot, format_cpulist, split_evenly, usable_cores
from runner.core import Cell, Record, Repeat, Status, repeat_stem
from runner.machine import fallback_environment
from runner.records import NO_PRECISION, fail, new_record, utc_now
from runner.schema import read_record, record_path, write_json_atomic, write_record

# Ray's resource for a node's accelerator type: "accelerator_type:A100" (ray._common.utils
# RESOURCE_CONSTRAINT_PREFIX); a task asks for a sliver of it, as Ray's own accelerator_type= does.
ACCELERATOR_PREFIX = "accelerator_type:"
ACCELERATOR_SHARE = 0.001
LOG_TAIL_CHARS = 20000
NODE_BACKENDS = ("docker", "local")   # --executor ray: what --backend runs the runner on a node
DEFAULT_NODE_BACKEND = "docker"        # the images, built on (or pulled to) every node
# What a record's placement says of a task's node (runner.schema RECORD_SCHEMA placement).
NODE_KEYS = ("node_id", "node_ip", "gpu_type", "ray_gpu_ids")
RecordData = Dict[str, object]   # a record as JSON (runner.schema.read_record)
R = TypeVar("R")


class Node(TypedDict, total=False):
    """What a task says of the node it runs on (``executor.node_task``); NODE_KEYS go into its records."""

    node_id: str
    node_ip: str
    gpu_type: Optional[str]
    ray_gpu_ids: List[str]
    node_gpus: float   # the node's GPUs (Ray's resources)
    busy: int          # units running on the node as this one started, itself included


class TaskValue(TypedDict):
    """What a unit's task returns to the driver: its node's facts (``placement_of``), its records, the tails of
    its runners' logs by image, and what it said on the node (the leftovers of a killed run it stopped)."""

    node: Dict[str, object]
    records: List[Tuple[str, RecordData]]
    logs: Dict[str, str]
    notes: List[str]


def record_stem(data: Mapping[str, object]) -> str:
    """The file stem of the record ``data`` (``repeat_stem`` of its cell id and repeat)."""
    repeat = data.get("repeat")
    return repeat_stem(str(data["cell_id"]), repeat if isinstance(repeat, int) else 0)


class UnknownGpuTypeError(RunError):
    """A GPU type asked for that no node of the cluster has: its tasks would wait forever."""


def cluster_gpu_types(resources: Mapping[str, float]) -> List[str]:
    """The GPU types of a cluster, from ``ray.cluster_resources()``'s ``accelerator_type:<T>`` keys."""
    return sorted(key[len(ACCELERATOR_PREFIX):] for key, value in resources.items()
                  if key.startswith(ACCELERATOR_PREFIX) and value > 0)


def check_gpu_types(asked: Sequence[str], resources: Mapping[str, float], address: str = "") -> None:
    """Refuse GPU types no node has, naming those the cluster has."""
    have = cluster_gpu_types(resources)
    missing = [gpu_type for gpu_type in asked if gpu_type not in have]
    if missing:
        where = f" at {address}" if address else ""
        raise UnknownGpuTypeError(
            f"--gpu-types: no node of the Ray cluster{where} has {', '.join(missing)}; its GPU types are "
            f"{', '.join(have) or 'none (no node was started with a GPU or an accelerator_type resource)'}. "
            "Start a node of that type (`ray start --address=HEAD:PORT`) or drop it from --gpu-types")


def check_one_type_a_node(nodes: Sequence[Mapping[str, object]], asked: Sequence[str]) -> None:
    """Refuse GPU types of which a live node (``ray.nodes()``'s) carries one beside another: Ray hands a task any GPU
    of the node it lands on (its GPU ids carry no type), so a unit of one type could run on the other type's GPU
    there and its records sit under the wrong type; and the bill would count that node's GPUs once per type."""
    for node in nodes:
        have = node.get("Resources")
        types = cluster_gpu_types(have) if node.get("Alive") and isinstance(have, Mapping) else []
        if len(types) > 1 and set(types) & set(asked):
            raise UnknownGpuTypeError(
                f"--gpu-types: node {node.get('NodeManagerAddress')} (id {str(node.get('NodeID'))[:12]}) has the GPU "
                f"types {', '.join(types)}: Ray gives a task any GPU of its node, so a unit of "
                f"{', '.join(t for t in types if t in asked)} could run on another type's GPU there. Start each node "
                "with one GPU type (CUDA_VISIBLE_DEVICES naming one type's GPUs, one accelerator_type in `ray start "
                "--resources`), or drop these types from --gpu-types")


def task_demand(gpu_type: Optional[str], gpus: bool) -> Dict[str, float]:
    """What a unit's task holds of its node's Ray resources while it runs: a CPU (Ray's default for a task: a node
    started with fewer CPUs than GPUs runs fewer units than it has GPUs) and, with a GPU type or GPUs, one GPU and a
    sliver of its type's ``accelerator_type:<T>`` resource."""
    if gpu_type is None and not gpus:
        return {"CPU": 1}
    return {"CPU": 1, "GPU": 1, **({f"{ACCELERATOR_PREFIX}{gpu_type}": ACCELERATOR_SHARE} if gpu_type else {})}


def task_resources(gpu_type: Optional[str], gpus: bool) -> Dict[str, Union[float, Dict[str, float]]]:
    """The Ray options of a unit's task (``task_demand``): one CPU, and one GPU (of its type) unless the run has
    neither a GPU type nor GPUs."""
    demand = task_demand(gpu_type, gpus)
    if "GPU" not in demand:
        return {"num_cpus": demand["CPU"]}
    custom = {name: amount for name, amount in demand.items() if name not in ("CPU", "GPU")}
    return {"num_cpus": demand["CPU"], "num_gpus": demand["GPU"], "resources": custom}


def cluster_at_once(nodes: Sequence[Mapping[str, object]], gpu_types: Sequence[str], gpus: bool,
                    where: str) -> AtOnce:
    """How many units the live ``nodes`` (``ray.nodes()``'s; the cluster at ``where``) run at once, for the run's
    bill, by GPU type (a type's units run only on nodes of that type; None: a run without types): on each node as
    many tasks as each resource a task holds (``task_demand``) fits in the node's, summed over the nodes."""
    def fits(node: Mapping[str, object], demand: Mapping[str, float]) -> int:
        have = node.get("Resources")
        held = have if isinstance(have, Mapping) else {}
        return min(int(float(held.get(name, 0) or 0) / amount + 1e-9) for name, amount in demand.items())

    alive = [node for node in nodes if node.get("Alive")]
    runners = {gpu_type: sum(fits(node, task_demand(gpu_type, gpus)) for node in alive)
               for gpu_type in (tuple(gpu_types) or (None,))}
    held = "a CPU and a GPU of its type" if gpu_types else ("a CPU and a GPU" if gpus else "a CPU")
    return AtOnce(runners, f"asked the Ray cluster at {where}: the units its {len(alive)} live node(s) run at once, "
                           f"a unit's task holding {held}")


@dataclass(frozen=True)
class UnitTask:
    """What a unit's task carries to its node: no driver path, no secret. ``requests``: one per image of the unit
    (``scheduler.Unit.parts``, in order), each with the unit's repeats of that image; ``pairs``: the images that
    take turns (``executors.turns.pairs_of``: (baseline, candidate) labels, both in the unit; none without
    ``turns``), their blocks pinned to the last ``turns_cores`` cores of the task's share of its node (0: not)."""

    name: str                       # "A100 vit bs=1", for logs, progress and crashed records
    gpu_type: Optional[str]
    requests: Tuple[RunRequest, ...]
    node_backend: str               # one of NODE_BACKENDS
    run_name: str = "default"
    pairs: Tuple[Tuple[str, str], ...] = ()
    turns_cores: int = 0


@dataclass(frozen=True)
class NodeWork:
    """One image's part of a unit on its node, as ``executors.turns`` pairs it: the driver's label for it
    (``pending.image_label``: "A100/stable") and its shipped request (its image's name: the partner's)."""

    label: str
    request: RunRequest

    @property
    def image_name(self) -> str:
        return self.request.image.name


def node_parts(task: UnitTask, done: Sequence[Tuple[str, str]] = ()) -> List[Part[NodeWork]]:
    """The task's parts (image work, repeats) still to run on its node: each image's repeats but those in ``done``
    ((image, repeat id) pairs the driver already holds: a retried task resumes), in the unit's order."""
    skip = set(done)
    parts: List[Part[NodeWork]] = []
    for shipped in task.requests:
        repeats = [r for r in shipped.repeats() if (shipped.image.name, r.id) not in skip]
        if repeats:
            parts.append((NodeWork(image_label(shipped.image.name, task.gpu_type), shipped), repeats))
    return parts


def task_nodes(nodes: Sequence[Mapping[str, object]], gpu_types: Sequence[str],
               gpus: bool) -> List[Mapping[str, object]]:
    """The nodes (``ray.nodes()``'s, alive) a unit's task may land on (``task_resources``): those of the run's GPU
    types, else (a GPU run) those with a GPU, else any with a CPU."""
    def has(node: Mapping[str, object], resource: str, least: float) -> bool:
        resources = node.get("Resources")
        return isinstance(resources, Mapping) and float(resources.get(resource, 0) or 0) >= least

    def fits(node: Mapping[str, object]) -> bool:
        if gpu_types:
            return any(has(node, f"{ACCELERATOR_PREFIX}{gpu_type}", ACCELERATOR_SHARE) for gpu_type in gpu_types)
        return has(node, "GPU", 1) if gpus else has(node, "CPU", 1)

    return [node for node in nodes if node.get("Alive") and fits(node)]


def task_shares(cores: Sequence[int], node_gpus: float, gpu_tasks: bool) -> List[Slot]:
    """The shares of a node's ``cores`` its units' tasks may get (``node_slot``): one per GPU for tasks that ask
    for one (``gpu_tasks``), else the one a task without a GPU gets."""
    if not gpu_tasks:
        return [node_slot([], node_gpus, False, cores)]
    return [node_slot([str(index)], node_gpus, True, cores) for index in range(max(int(node_gpus), 1))]


def turns_cores_here(count: int, slot: Slot, where: str) -> Tuple[int, ...]:
    """The cores a pair's blocks are pinned to in a task's share ``slot`` of its node (``where``: "node
    10.0.0.2"): its last ``count`` (() for 0). Raises OptionConflictError, naming the setting, the node and its
    share, when the share has fewer: refused as the run starts (``check_turns_cores``), or on a node that joined
    later, by its task."""
    return turns.last_cores(count, slot.cores, lambda have: (
        f"turns_cores: {count}: a unit's task on {where} may use {have} CPU core(s) "
        f"({format_cpulist(slot.cores)}: its GPU's share of the node's cores), and a pair in turns pins its "
        f"blocks within its task's share; set turns_cores to at most {have} (--set turns_cores={have}), or 0 "
        "not to pin"))


def check_turns_cores(count: int, shares: Sequence[Tuple[str, Slot]]) -> None:
    """Refuse ``turns_cores`` ``count`` where some share a task may get (``shares``: (where, share) of each node a
    unit's task may land on, ``task_shares``) has fewer cores, naming the smallest (``turns_cores_here``)."""
    if count > 0 and shares:
        where, smallest = min(shares, key=lambda share: len(share[1].cores))
        turns_cores_here(count, smallest, where)


def shippable(request: RunRequest) -> RunRequest:
    """A request as a task carries it: without run-time secrets (the task fetches them from the
    driver's Board actor as it starts) and without the driver's folders (the node has its own)."""
    env = {key: value for key, value in request.env.items() if key not in RUNTIME_SECRETS}
    name = Path(request.image.name)
    return request.relocated(Paths(name, cache_dir=None if request.paths.cache_dir is None else name), env)


@dataclass
class NodeRun:
    """A task's results on its node: ``records`` as (image, record dict), the runner logs' tails, ``notes`` for
    the driver to print."""

    records: List[Tuple[str, RecordData]] = field(default_factory=list)
    logs: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)


def node_slot(gpu_ids: Sequence[str], node_gpus: float, gpus: bool, cores: Optional[Sequence[int]] = None,
              node_uuids: Sequence[str] = ()) -> Slot:
    """The task's share of its node: the node's cores split among its GPUs, this GPU's part
    (all of them where there are fewer cores than GPUs); the GPU index when the cells use GPUs.
    Ray may name the GPU by UUID (CUDA_VISIBLE_DEVICES=GPU-...): its index is its place among
    ``node_uuids`` (the node's nvidia-smi, in index order), so tasks on different GPUs never share cores."""
    cores = sorted(cores if cores is not None else usable_cores()[0])
    first = str(gpu_ids[0]) if gpu_ids else "0"
    index = int(first) if first.isdigit() else (list(node_uuids).index(first) if first in node_uuids else None)
    position = index or 0
    count = max(int(node_gpus), 1)
    part = tuple(cores) if count > len(cores) else split_evenly(cores, count)[position % count]
    return Slot(position, part, gpu_index=index if gpus else None)


def on_node(request: RunRequest, repeats: Sequence[Repeat], scratch: Path, node: Node,
            slot: Slot, environ: Dict[str, str]) -> RunRequest:
    """The request as it runs on this node: its repeats, a scratch results folder, this node's caches,
    the GPUs Ray assigned, the placement, and the run-time secrets from this node's environment."""
    request = request.for_repeats(list(repeats))
    gpu_ids = tuple(str(i) for i in node.get("ray_gpu_ids", ())) if request.placement.gpus else ()
    cache = None if request.paths.cache_dir is None else cache_home() / "compile" / request.image.name
    here = request.relocated(Paths(scratch / request.image.name, cache_dir=cache, hf_cache_dir=hf_cache_home()),
                             {**request.env, **runtime_secrets(environ)})
    return here.placed(slot, slots=int(node.get("node_gpus") or 1), busy_units=int(node.get("busy") or 1),
                       node=placement_of(node), gpu_ids=gpu_ids)


def placement_of(node: Optional[Node]) -> Dict[str, object]:
    """The node's facts a record's placement carries."""
    facts: Mapping[str, object] = node or {}
    return {key: facts[key] for key in NODE_KEYS if key in facts}


def run_unit_here(task: UnitTask, node: Node, slot: Slot, done: Sequence[Tuple[str, str]],
                  emit: Callable[[str, RecordData], None], backend: Optional[Backend] = None,
                  environ: Optional[Dict[str, str]] = None) -> NodeRun:
    """Run ``task`` on this node: each image's repeats not in ``done`` ((image, repeat id) pairs the
    driver already holds: a retried task resumes), round by round, a pair of ``task.pairs`` at once in turns
    (``executors.turns.steps_of``; a repeat only one side still needs runs alone), ``emit(image, record)`` as each
    record appears. First it stops what a killed run of the same name left running on this node (a container whose
    owner is gone)."""
    from matrixbench.environments import create_backend

    cores = turns_cores_here(task.turns_cores if task.pairs else 0, slot, describe_node(node))
    backend = backend or create_backend(task.node_backend, run_id=task.run_name)   # its folder here is a scratch one
    environ = dict(os.environ if environ is None else environ)
    result = NodeRun()
    result.notes += backend.stop_run_leftovers(task.run_name)
    with tempfile.TemporaryDirectory(prefix="matrixbench-ray-") as scratch:
        here = Path(scratch)

        def run_one(work: NodeWork, repeats: Sequence[Repeat], in_turns: Optional[Turns] = None) -> None:
            request = on_node(work.request, repeats, here, node, slot, environ)
            request = request if in_turns is None else request.in_turns(in_turns)
            try:
                _run_request(backend, request, result, emit)
            finally:
                result.logs[request.image.name] = _log_tail(request, environ)

        for step in turns.steps_of(node_parts(task, done), task.pairs):
            if isinstance(step, turns.TurnPair):   # both runners at once, in this task's share of the node
                turns.take_turns(step, here, cores, lambda side, in_turns: run_one(side.work, side.repeats, in_turns),
                                 backend.stop_all)
            else:
                work, repeats = step
                interruptible(functools.partial(run_one, work, repeats), backend.stop_all)
    return result


def _run_request(backend: Backend, request: RunRequest, result: NodeRun,
                 emit: Callable[[str, RecordData], None]) -> None:
    """One runner for ``request`` on this node (blocking), each record appended to ``result`` and emitted as it
    appears."""
    def on_record(cell: Cell, record: Record) -> None:
        data = read_record(record_path(request.paths.out_dir, cell, record.repeat))
        result.records.append((request.image.name, data))
        emit(request.image.name, data)

    launch(backend, request, on_record)


def interruptible(work: Callable[[], R], stop: Callable[[], None]) -> R:
    """``work()`` in a thread while this one waits in short joins (executors.threads). Ray cancels a task by
    raising KeyboardInterrupt in its main thread (``_thread.interrupt_main``), which Python sees only between
    bytecodes, never inside a blocking wait for the runner; here it arrives within a short join, ``stop()``
    stops the runner (its finished records stay) and the interrupt goes on."""
    return run_in_thread(work, stop, "unit-runner")


def _log_tail(request: RunRequest, environ: Dict[str, str]) -> str:
    try:
        text = (request.work_dir() / LOG_FILENAME).read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""
    return redact_text(text, runtime_secrets(environ).values())


def lost_records(request: RunRequest, repeats: Sequence[Repeat], status: Status, reason: str,
                 node: Optional[Node]) -> List[Record]:
    """Records for a unit's repeats that no node recorded (its task failed or its node died), made by the
    runner's own builder: ``status`` (crashed, or error when the task itself raised), the reason naming
    the node, the placement the node had."""
    environment = fallback_environment(request.image.name, request.image.content_hash)
    environment.update(hostname=(node or Node()).get("node_ip") or "unknown", platform="unknown", cpu_model=None)
    placement = placement_of(node)
    made = []
    for repeat in repeats:
        record = new_record({"cell": repeat.cell, "repeat": repeat.index, "settings": request.work.settings,
                             "device": "cuda" if request.placement.gpus else "cpu", "environment": environment,
                             "precision": dict(NO_PRECISION), "started_at": utc_now()})
        record.placement = {"slot": 0, "cores": [], "affinity": None, **placement} if node else None
        record.duration_s = 0.0   # not measured: no node said when it started or stopped
        fail(record, status, "RayTaskLost" if status is Status.CRASHED else "RayTaskError", reason)
        made.append(record)
    return made


def describe_node(node: Optional[Mapping[str, object]]) -> str:
    """"node 10.0.0.2 (id 3f2a...)" or "no node (it never started)"."""
    if not node:
        return "no node (the task never started)"
    ids = node.get("ray_gpu_ids", ())
    gpus = ",".join(map(str, ids if isinstance(ids, (list, tuple)) else ())) or "-"
    return f"node {node.get('node_ip')} (id {str(node.get('node_id'))[:12]}, GPU {gpus})"



@dataclass
class UnitPart:
    """One image's share of a unit, as the driver knows it: where its records go, its request, its repeats."""

    work: ImageWork
    request: RunRequest            # the driver's request for these repeats (secrets and paths included)
    repeats: List[Repeat]


class ClusterRun:
    """The driver's side of a cluster run: the tasks, where each record goes, what is still missing.

    ``on_record(work, cell, record)`` is called once per record written (progress and counts).
    """

    def __init__(self, tasks: Sequence[UnitTask], parts: Sequence[Dict[str, UnitPart]], gpus: bool,
                 on_record: Callable[[ImageWork, Cell, Record], None]) -> None:
        self.tasks, self.parts, self.gpus = list(tasks), list(parts), gpus
        self._on_record = on_record
        self._written: Set[Tuple[str, str]] = set()
        self._nodes: Dict[int, Node] = {}
        self._by_name = {task.name: index for index, task in enumerate(self.tasks)}
        self._said: Set[Tuple[str, str]] = set()

    def index_of(self, name: str) -> int:
        return self._by_name[name]

    def news(self, node: str, line: str) -> bool:
        """Whether ``line``, said on ``node`` (describe_node), was not printed yet: each unit on a node looks at what
        a killed run left there, and a container it leaves, not knowing whether its owner runs, is said once."""
        if (node, line) in self._said:
            return False
        self._said.add((node, line))
        return True

    def started(self, index: int, node: Node) -> None:
        self._nodes[index] = node

    def node_of(self, index: int) -> Optional[Node]:
        return self._nodes.get(index)

    def record(self, index: int, image: str, data: RecordData) -> None:
        """Write a record a node sent (once: streamed, then returned again)."""
        part = self.parts[index][image]
        stem = record_stem(data)
        key = (part.work.label, stem)
        if key in self._written:
            return
        self._written.add(key)
        path = write_json_atomic(Path(part.work.out_dir) / f"{stem}.json", data)
        record = Record.from_dict(read_record(path))
        self._on_record(part.work, record.cell, record)

    def lost(self, index: int, status: Status, reason: str) -> None:
        """Records for the unit's repeats that arrived from no node."""
        node = self.node_of(index)
        for part in self.parts[index].values():
            missing = [r for r in part.repeats if (part.work.label, r.id) not in self._written]
            for record in lost_records(part.request, missing, status, reason, node):
                path = write_record(part.work.out_dir, record)
                self._written.add((part.work.label, Repeat(record.cell, record.repeat).id))
                self._on_record(part.work, record.cell, Record.from_dict(read_record(path)))

    def logs(self, index: int, node: Mapping[str, object], logs: Mapping[str, str]) -> None:
        """Append each image's runner log from the node to the image's runner.log on the driver."""
        for image, text in logs.items():
            out_dir = Path(self.parts[index][image].work.out_dir)
            out_dir.mkdir(parents=True, exist_ok=True)
            with open(out_dir / LOG_FILENAME, "a") as log:
                log.write(f"--- {self.tasks[index].name} on {describe_node(node)} ---\n{text}\n")

    def missing(self, work: ImageWork) -> List[str]:
        """The work's pending repeats with no record written by this run (Ctrl-C leaves some)."""
        pending = [p for parts in self.parts for p in parts.values() if p.work is work]
        return [r.id for part in pending for r in part.repeats if (work.label, r.id) not in self._written]
