"""The ray backend: the run's units as Ray tasks on a cluster of GPU nodes (issue 16).

It imports ray (``api.ray_api``, typed as the part of Ray's API it calls) only when a function here
runs (``pip install 'matrixbench[ray]'``). Its driver's side (``RayBackend``) is an Environment, not a
Backend: it starts no runner, the nodes' backend does. The driver (``matrixbench run --executor ray
--ray-address HOST:PORT``, on a node of the cluster) decides resume first, refuses GPU types the cluster
lacks, then submits one task per unit (``matrixbench.executors.ray.tasks.UnitTask``) asking for one GPU
of the unit's type (``num_gpus=1`` and a sliver of ``accelerator_type:<T>``). On its node the task runs the node's
backend (docker, or local) pinned to ``ray.get_gpu_ids()`` and hands each record, as it appears, to
a small actor on the driver's node (``Board``), so the driver writes it at once and a task that dies
later loses none of them; its return value carries them all again. A task whose node dies is retried
by Ray (``max_retries``) and resumes after the records the driver already holds; a unit that runs out
of retries, or whose GPU type has no node left, gets ``crashed`` records naming the node. Ctrl-C
cancels what is outstanding and keeps every record that arrived.
"""
from __future__ import annotations

import logging
import os
import time
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    List,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    Union,
    cast,
    runtime_checkable,
)

from matrixbench.build.images import BuildOptions
from matrixbench.environments.base import Environment
from matrixbench.environments.environment import runtime_secrets
from matrixbench.errors import BuildError, OptionConflictError, RunError
from matrixbench.executors.base import Executor, Run
from matrixbench.executors.ray import tasks as cluster
from matrixbench.executors.ray.api import ray_api
from matrixbench.executors.ray.tasks import Node, RecordData, TaskValue
from matrixbench.executors.scheduler import make_units
from matrixbench.executors.turns import pairs_of
from matrixbench.gpu import host_gpus
from matrixbench.matrix import Image
from matrixbench.run.at_once import AtOnce
from matrixbench.run.placement import Slot, usable_cores
from runner.core import Status

if TYPE_CHECKING:
    from matrixbench.executors.ray.api import Api, NodeInfo, Ref, Remote

POLL_S = 0.5
MAX_RETRIES = 2
LOST_CHECK_S = 2.0
CANCEL_GRACE_S = 20.0
RECORDS_WAIT_S = 30.0   # a task's end waits at most this long for the records it sent to reach the Board
NAMESPACE = "matrixbench"
Note = Callable[[str], None]
Event = Tuple[str, str, Union[Node, Tuple[str, RecordData]]]   # ("started", unit, node) or ("record", unit, ...)


class Board:
    """An actor on the driver's node: where each task started, and each record as its node wrote it;
    it hands the run-time secrets (HF_TOKEN) to each task as the task starts (``secrets``)."""

    def __init__(self, secrets: Optional[Dict[str, str]] = None) -> None:
        self._secrets: Dict[str, str] = dict(secrets or {})
        self._events: List[Event] = []
        self._done: Dict[str, Set[Tuple[str, str]]] = {}
        self._running: Dict[str, Set[str]] = {}

    def started(self, unit: str, node: Node) -> int:
        """A task started; returns how many units now run on its node (this one included)."""
        running = self._running.setdefault(node["node_id"], set())
        running.add(unit)
        self._events.append(("started", unit, node))
        return len(running)

    def finished(self, unit: str, node: Node) -> None:
        self._running.get(node["node_id"], set()).discard(unit)

    def record(self, unit: str, image: str, data: RecordData) -> None:
        self._done.setdefault(unit, set()).add((image, cluster.record_stem(data)))
        self._events.append(("record", unit, (image, data)))

    def recorded(self, unit: str) -> List[Tuple[str, str]]:
        """(image, repeat id) pairs some attempt of ``unit`` recorded: a retry skips them."""
        return sorted(self._done.get(unit, ()))

    def drain(self) -> List[Event]:
        events, self._events = self._events, []
        return events

    def secrets(self) -> Dict[str, str]:
        """The driver's run-time secrets: fetched by each task at run time, so they are never in a task's
        arguments or its runtime environment (which Ray's runtime_env agent writes to its log)."""
        return dict(self._secrets)


class BoardHandle(Protocol):
    """The Board actor as the driver and its tasks call it: each of its methods, through ``remote``."""

    @property
    def started(self) -> Remote[[str, Node], int]: ...

    @property
    def finished(self) -> Remote[[str, Node], None]: ...

    @property
    def record(self) -> Remote[[str, str, RecordData], None]: ...

    @property
    def recorded(self) -> Remote[[str], List[Tuple[str, str]]]: ...

    @property
    def drain(self) -> Remote[[], List[Event]]: ...

    @property
    def secrets(self) -> Remote[[], Dict[str, str]]: ...


def node_task(task: cluster.UnitTask, board: BoardHandle) -> TaskValue:
    """One unit on the node Ray chose: run it, streaming records to ``board``; return them all."""
    ray = ray_api()
    node_id = ray.get_runtime_context().get_node_id()
    gpu_ids = [str(i) for i in ray.get_gpu_ids()]
    node = Node(node_id=node_id, node_ip=ray.util.get_node_ip_address(), gpu_type=task.gpu_type,
                ray_gpu_ids=gpu_ids)
    node_gpus = next((n["Resources"].get("GPU", 0) for n in ray.nodes() if n["NodeID"] == node_id), 0)
    busy = ray.get(board.started.remote(task.name, node))   # the Board keeps the node as it was before these two
    node["node_gpus"], node["busy"] = node_gpus, busy
    done = ray.get(board.recorded.remote(task.name))
    environ = {**os.environ, **ray.get(board.secrets.remote())}
    slot = cluster.node_slot(gpu_ids, node_gpus, any(request.placement.gpus for request in task.requests),
                             node_uuids=[gpu.uuid for gpu in host_gpus()])

    sent: List[Ref[None]] = []

    def emit(image: str, data: RecordData) -> None:   # (from a thread of each runner of a pair in turns)
        sent.append(board.record.remote(task.name, image, data))

    try:
        result = cluster.run_unit_here(task, node, slot, done, emit, environ=environ)
    finally:
        board.finished.remote(task.name, node)
        # Every record sent is on the Board before the task ends: the driver drains it before it judges the task,
        # so a task that raises (one side of a pair, say) never has its sent records written over as lost.
        if sent:
            ray.wait(list(sent), num_returns=len(sent), timeout=RECORDS_WAIT_S)
    return TaskValue(node=cluster.placement_of(node), records=result.records, logs=result.logs, notes=result.notes)


def node_cores() -> List[int]:
    """The CPU cores a task may use on its node (a Ray task's, as ``tasks.node_slot`` reads them)."""
    return list(usable_cores()[0])


def build_on_node(images: Sequence[Image], options: Optional[BuildOptions] = None,
                  where: str = "this node") -> List[str]:
    """Have the matrix images on this node's Docker: an image already built from its matrix entry (its
    content-hash label) is kept, any other is built as `matrixbench build` does, with the user's build
    options (``images.BuildOptions``, None: the matrix's own); the log's last lines."""
    from matrixbench.build import docker_client
    from matrixbench.build.images import BuildOptions, build_spec, image_tag, is_current, run_build

    client, lines = docker_client.connect(), []
    stale: List[Image] = [image for image in images if not is_current(client, image)]
    for image in images:
        if image not in stale:
            lines.append(f"[{image.name}] {image_tag(image.name)} is up to date on {where} "
                         f"(content hash {image.content_hash()})")
    with (options or BuildOptions()).spec_options() as spec_options:
        for image in stale:   # asked again in the build's turn: another unit on this node may have just built it
            try:
                run_build(client, build_spec(image, **spec_options), no_cache=False,
                          emit=lambda name, line: lines.append(f"[{name}] {line}"), unless_current=image)
            except BuildError as exc:
                raise BuildError(f"{exc}\nBuild it on {where} with `matrixbench build --images {image.name}` and "
                                 "the --ca-bundle / --index-url / --base-image its network needs (or set ca_bundle, "
                                 "index_url, base_image in matrix.yaml): the run then finds it up to date") from None
    return lines[-20:]


def pull_on_node(images: Sequence[Image], registry: str) -> List[str]:
    """Pull the matrix images from ``registry`` into this node's Docker, checked (executors/ray/registry.py)."""
    from matrixbench.build import docker_client
    from matrixbench.executors.ray import registry as through

    return list(through.fetch(docker_client.connect(), images, registry))


class RayBackend(Environment):
    """The driver's side of the cluster: units as Ray tasks; on each node the ``node_backend`` (docker or local)
    runs the runner. Not a Backend: it starts no runner itself; it connects, says whether the cluster has
    GPUs and which types, has the images on the nodes, submits the units and follows them (``run_units``)."""

    name = "ray"

    def __init__(self, address: Optional[str] = None, node_backend: str = cluster.DEFAULT_NODE_BACKEND,
                 max_retries: int = MAX_RETRIES, registry: Optional[str] = None,
                 build_options: Optional[BuildOptions] = None) -> None:
        if node_backend not in cluster.NODE_BACKENDS:
            raise OptionConflictError(f"--executor ray --backend {node_backend}: a node runs --backend "
                           f"{' or '.join(cluster.NODE_BACKENDS)}")
        self.address = address
        self.node_backend = node_backend
        self.registry = registry
        self.build_options = build_options   # images.BuildOptions for builds on the nodes, or None
        self.max_retries = max_retries

    def describe(self) -> str:
        return (f"ray backend: one task per unit on the Ray cluster at {self.address or 'auto'}, each running "
                f"the {self.node_backend} backend on its node, on the GPU Ray assigned")

    def _connect(self) -> Api:
        ray = ray_api()
        if not ray.is_initialized():
            try:
                ray.init(address=self.address or "auto", namespace=NAMESPACE, log_to_driver=False,
                         logging_level=logging.WARNING)
            except ray.exceptions.AuthenticationError as exc:
                raise RunError(f"--ray-address {self.address}: the cluster uses token authentication and this "
                               f"driver has no token ({str(exc).split('.')[0]}); give it the cluster's token: "
                               "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (docs/cluster.md)"
                               ) from None
            except ConnectionError as exc:
                raise RunError(f"--ray-address {self.address}: no Ray cluster answers ({exc}). Start one with "
                               "`ray start --head`; a cluster with token authentication also refuses a driver "
                               "without RAY_AUTH_MODE=token and its RAY_AUTH_TOKEN (docs/cluster.md)") from exc
        return ray

    def gpus_available(self) -> bool:
        return bool(self._connect().cluster_resources().get("GPU", 0) > 0)

    def check_gpu_types(self, gpu_types: Tuple[str, ...]) -> None:
        ray = self._connect()
        cluster.check_gpu_types(gpu_types, ray.cluster_resources(), self.address or "")
        cluster.check_one_type_a_node(ray.nodes(), gpu_types)

    def check_turns_cores(self, count: int, gpu_types: Tuple[str, ...], device: str) -> None:
        """Refuse ``turns_cores`` ``count`` where a node a unit's task may land on gives a task fewer cores (its
        GPU's share of the node's: ``tasks.task_shares``), naming the node: a small task on each such node reads
        the cores it may use there."""
        if count <= 0:
            return
        ray = self._connect()
        gpus = device != "cpu" and self.gpus_available()   # as run.command resolves the run's device
        nodes = cluster.task_nodes(ray.nodes(), gpu_types, gpus)
        probe = ray.remote(node_cores)
        refs = [(node, probe.options(num_cpus=0, scheduling_strategy=_on(str(node["NodeID"]))).remote())
                for node in nodes]
        shares: List[Tuple[str, Slot]] = []
        for node, ref in refs:
            resources = cast("Dict[str, float]", node["Resources"])
            for share in cluster.task_shares(ray.get(ref), resources.get("GPU", 0), bool(gpu_types) or gpus):
                shares.append((f"node {node['NodeManagerAddress']}", share))
        cluster.check_turns_cores(count, shares)

    def runners_at_once(self, gpu_types: Tuple[str, ...], gpus: bool) -> AtOnce:
        """The units the cluster's live nodes run at once, by GPU type, for the run's bill
        (``tasks.cluster_at_once``)."""
        return cluster.cluster_at_once(self._connect().nodes(), gpu_types, gpus, self.address or "auto")

    def prepare(self, images: List[Image], emit: Optional[Callable[[str, str], None]] = None) -> None:
        """With docker on the nodes: have the images on every GPU node, as a Ray task each: found current
        or built there, or (``registry``) pushed once from here and pulled there. The docker backend then
        checks each image's content hash on its node before running."""
        if self.node_backend != "docker" or not images:
            return
        say = emit or (lambda name, text: None)
        ray = self._connect()
        if self.registry:
            from matrixbench.build import docker_client
            from matrixbench.executors.ray import registry

            registry.publish(docker_client.connect(), images, self.registry, say)
            pull, address = ray.remote(pull_on_node), self.registry

            def submit(node: NodeInfo) -> Ref[List[str]]:
                return pull.options(num_cpus=1, scheduling_strategy=_on(node["NodeID"])).remote(list(images), address)
        else:
            build = ray.remote(build_on_node)

            def submit(node: NodeInfo) -> Ref[List[str]]:
                return build.options(num_cpus=1, scheduling_strategy=_on(node["NodeID"])).remote(
                    list(images), self.build_options, f"node {node['NodeManagerAddress']}")
        nodes = [node for node in ray.nodes() if node["Alive"] and node["Resources"].get("GPU")]
        refs = {submit(node): node for node in nodes}
        for ref, node in refs.items():
            try:
                lines = ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise BuildError(f"having the images on node {node['NodeManagerAddress']} failed: "
                                 f"{_cause(exc)}") from None
            for line in lines:
                say(node["NodeManagerAddress"], line)

    def run_units(self, run: cluster.ClusterRun, secrets: Dict[str, str], note: Note = print) -> None:
        """Submit every task of ``run``; follow them until each has returned, failed or been given up."""
        ray = self._connect()
        board = self._board(ray, secrets)
        remote = ray.remote(node_task)
        refs: Dict[Ref[TaskValue], int] = {}
        for index, task in enumerate(run.tasks):
            options = dict(cluster.task_resources(task.gpu_type, run.gpus), max_retries=self.max_retries,
                           retry_exceptions=False)
            refs[remote.options(**options).remote(task, board)] = index
        note(f"submitted {len(refs)} unit(s) to the Ray cluster")
        try:
            self._follow(ray, refs, board, run, note)
        except KeyboardInterrupt:
            self._cancel(ray, refs, board, run, note)
            raise

    def close(self) -> None:
        ray = ray_api()
        if ray.is_initialized():
            ray.shutdown()

    def _board(self, ray: Api, secrets: Dict[str, str]) -> BoardHandle:
        here = ray.get_runtime_context().get_node_id()
        handle = ray.remote(Board).options(num_cpus=0, scheduling_strategy=_on(here)).remote(secrets)
        return cast("BoardHandle", handle)   # for a class, Ray's remote() gives the actor's handle, not a Ref

    def _follow(self, ray: Api, refs: Dict[Ref[TaskValue], int], board: BoardHandle, run: cluster.ClusterRun,
                note: Note) -> None:
        checked = time.monotonic()
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=POLL_S)
            _drain(ray, board, run, note)
            for ref in ready:
                _finish(ray, ref, refs.pop(ref), run, note)
            if time.monotonic() - checked > LOST_CHECK_S:
                checked = time.monotonic()
                _give_up_lost_types(ray, refs, run, note)
        _drain(ray, board, run, note)

    def _cancel(self, ray: Api, refs: Dict[Ref[TaskValue], int], board: BoardHandle, run: cluster.ClusterRun,
                note: Note) -> None:
        """Ctrl-C: interrupt running tasks (their runners stop), drop pending ones, keep what arrived."""
        note(f"interrupted: cancelling {len(refs)} outstanding unit(s); records that arrived are kept")
        for ref in refs:
            ray.cancel(ref)
        ready, waiting = ray.wait(list(refs), num_returns=len(refs), timeout=CANCEL_GRACE_S)
        _drain(ray, board, run, note)
        for ref in ready:
            _finish(ray, ref, refs[ref], run, note, lost=False)
        for ref in waiting:
            ray.cancel(ref, force=True)


def _drain(ray: Api, board: BoardHandle, run: cluster.ClusterRun, note: Note) -> None:
    for _, unit, payload in ray.get(board.drain.remote()):
        index = run.index_of(unit)
        if isinstance(payload, tuple):   # ("record", unit, (image, record))
            run.record(index, *payload)
        else:                            # ("started", unit, node)
            run.started(index, payload)
            note(f"{unit}: started on {cluster.describe_node(payload)}")


def _finish(ray: Api, ref: Ref[TaskValue], index: int, run: cluster.ClusterRun, note: Note,
            lost: bool = True) -> None:
    """A task that ended: write what it returned and print what it said on its node, or (``lost``) records for
    what it could not run."""
    try:
        value = ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return
    except ray.exceptions.RayTaskError as exc:
        if lost:
            run.lost(index, Status.ERROR, f"the unit's task raised on {cluster.describe_node(run.node_of(index))}: "
                                          f"{_cause(exc)}")
        return
    except ray.exceptions.RayError as exc:
        if lost:
            run.lost(index, Status.CRASHED, f"the unit's task was lost, Ray's retries used up; last on "
                                            f"{cluster.describe_node(run.node_of(index))}: {type(exc).__name__}: "
                                            f"{str(exc)[:500]}")
        return
    where = cluster.describe_node(value["node"])
    for line in value.get("notes", ()):   # (a task of an older matrixbench on the node says none)
        if run.news(where, line):
            note(f"{run.tasks[index].name} on {where}: {line}")
    for image, data in value["records"]:
        run.record(index, image, data)
    run.logs(index, value["node"], value["logs"])


def _give_up_lost_types(ray: Api, refs: Dict[Ref[TaskValue], int], run: cluster.ClusterRun, note: Note) -> None:
    """Tasks whose GPU type no live node has any more: Ray would keep them pending forever."""
    have = set(cluster.cluster_gpu_types(ray.cluster_resources()))
    for ref, index in list(refs.items()):
        gpu_type = run.tasks[index].gpu_type
        if gpu_type is not None and gpu_type not in have:
            ray.cancel(ref, force=True)
            del refs[ref]
            last = run.node_of(index)
            note(f"{run.tasks[index].name}: no node of type {gpu_type} is left in the cluster; "
                 f"its cells without a record are recorded as crashed")
            run.lost(index, Status.CRASHED, f"no node of GPU type {gpu_type} is left in the Ray cluster: "
                                            f"{cluster.describe_node(last)} was lost and Ray could not retry "
                                            "the unit elsewhere")


def _on(node_id: str) -> object:
    """Ray's scheduling strategy "on this node, nowhere else"."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def _cause(exc: BaseException) -> Optional[str]:
    cause = getattr(exc, "cause", None)
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc).splitlines()[0]


@runtime_checkable
class Cluster(Protocol):
    """What the ray executor asks of the cluster's driver side (``RayBackend``): the backend its nodes run,
    and the run's units submitted and followed to the end."""

    node_backend: str

    def run_units(self, run: cluster.ClusterRun, secrets: Dict[str, str], note: Note = print) -> None: ...


class RayExecutor(Executor):
    """``--executor ray``: the run's units (the scheduler's, per GPU type) as one Ray task each; on each
    node, ``--backend`` (docker or local) runs the runner. With ``turns``, each task carries its unit's image pairs
    (``turns.pairs_of``) and runs a pair's two runners at once on its node. Its ``environment`` is the driver's
    side of the cluster (RayBackend: GPUs, images on the nodes, GPU types, the connection)."""

    def __init__(self, environment: Environment) -> None:
        if not isinstance(environment, Cluster):
            raise RunError(f"--executor ray runs its units through the cluster's driver side, not the "
                           f"{environment.name} environment")
        self.environment = environment   # the RayBackend run_matrix made (executors.create_environment)

    def run(self, run: Run) -> None:
        run.start()
        tasks: List[cluster.UnitTask] = []
        parts: List[Dict[str, cluster.UnitPart]] = []
        torch_of = {name: image.torch_version for name, image in run.matrix.images.items()}
        pairs = pairs_of(run.works, run.matrix) if run.matrix.turns else []   # (labels: across the GPU types)
        for gpu_type in run.matrix.gpu_types or (None,):
            for unit in make_units([work for work in run.works if work.gpu_type == gpu_type], torch_of):
                unit_parts = {work.image_name: cluster.UnitPart(work, run.request(work).for_repeats(repeats),
                                                                list(repeats))
                              for work, repeats in unit.parts}
                name = " ".join(filter(None, [gpu_type, unit.name]))
                requests = tuple(cluster.shippable(part.request) for part in unit_parts.values())
                labels = {work.label for work, _ in unit.parts}
                in_unit = tuple(pair for pair in pairs if set(pair) <= labels)
                tasks.append(cluster.UnitTask(name, gpu_type, requests, self.environment.node_backend,
                                              run.options.run_name, pairs=in_unit,
                                              turns_cores=run.matrix.turns_cores if in_unit else 0))
                parts.append(unit_parts)
        cluster_run = cluster.ClusterRun(tasks, parts, run.gpus,
                                         lambda work, cell, record: run.record_arrived(work, cell, record))
        try:
            self.environment.run_units(cluster_run, runtime_secrets(run.environ), note=run.progress.note)
        finally:
            for work in run.works:
                run.missed(work, None, cluster_run.missing(work))
