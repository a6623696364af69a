"""The cluster's parts without Ray (issue 16): what a task carries, what it does on its node, what the
driver writes when a unit is lost; the driver's whole loop through an in-process stand-in for the
cluster. The real two-node cluster is tests/test_executor_ray.py."""
import pickle
import subprocess
import sys

import jsonschema
import pytest

from host_helpers import RecordingBackend, small_matrix_data, write_matrix
from matrixbench.environments.base import Environment
from matrixbench.errors import OptionConflictError, RunError
from matrixbench.executors.ray import executor as ray_executor
from matrixbench.executors.ray.options import RayOptions
from matrixbench.executors.ray.tasks import (
    UnknownGpuTypeError,
    check_gpu_types,
    cluster_gpu_types,
    node_slot,
    run_unit_here,
    shippable,
    task_resources,
)
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.run.command import RunOptions, run_matrix
from runner.core import Status
from runner.schema import RECORD_SCHEMA, read_record
from test_executor_turns import PairedBackend

FAKE_TOKEN = "hf_FAKE_token_never_shipped_0123456789"
CLUSTER = {"CPU": 4.0, "GPU": 3.0, "accelerator_type:A100": 1.0, "accelerator_type:T4": 1.0, "node:10.0.0.1": 1.0}


def test_the_clusters_gpu_types_are_its_accelerator_type_resources():
    assert cluster_gpu_types(CLUSTER) == ["A100", "T4"]
    check_gpu_types(["T4", "A100"], CLUSTER)
    with pytest.raises(UnknownGpuTypeError, match="at 10.0.0.1:6379 has H100, V100; its GPU types are A100, T4"):
        check_gpu_types(["A100", "H100", "V100"], CLUSTER, "10.0.0.1:6379")
    with pytest.raises(UnknownGpuTypeError, match="its GPU types are none"):
        check_gpu_types(["T4"], {"CPU": 2.0})


def test_a_task_asks_one_gpu_of_its_type_as_rays_accelerator_type_does():
    assert task_resources("A100", gpus=False) == {"num_cpus": 1, "num_gpus": 1,
                                                  "resources": {"accelerator_type:A100": 0.001}}
    assert task_resources(None, gpus=True) == {"num_cpus": 1, "num_gpus": 1, "resources": {}}
    assert task_resources(None, gpus=False) == {"num_cpus": 1}   # num_cpus 1: Ray's default for a task, said


def test_the_bill_counts_the_units_the_clusters_live_nodes_run_at_once_by_gpu_type():
    """As the units' tasks fit in each node's Ray resources (a CPU, a GPU of its type): a node with 2 GPUs but one
    CPU runs one unit; a dead node none; a CPU run's units one per CPU."""
    from matrixbench.executors.ray.tasks import cluster_at_once

    nodes = [_node("a", CPU=8, GPU=2, **{"accelerator_type:A100": 1}),
             _node("b", CPU=1, GPU=2, **{"accelerator_type:T4": 1}),
             _node("c", alive=False, CPU=8, GPU=4, **{"accelerator_type:A100": 1}), _node("d", CPU=2)]
    typed = cluster_at_once(nodes, ("A100", "T4"), gpus=False, where="10.0.0.1:6379")
    assert typed.runners == {"A100": 2, "T4": 1}
    assert typed.source == ("asked the Ray cluster at 10.0.0.1:6379: the units its 3 live node(s) run at once, a "
                            "unit's task holding a CPU and a GPU of its type")
    assert cluster_at_once(nodes, (), gpus=True, where="auto").runners == {None: 3}
    assert cluster_at_once(nodes, (), gpus=False, where="auto").runners == {None: 11}
    assert cluster_at_once(nodes, ("V100",), gpus=True, where="auto").runners == {"V100": 0}


def test_a_node_with_two_of_the_asked_gpu_types_is_refused_naming_it():
    """Ray hands a task any GPU of its node: on a node of two types a unit could run on the other type's GPU."""
    from matrixbench.executors.ray.tasks import check_one_type_a_node

    mixed = _node("10.0.0.3", CPU=8, GPU=2, **{"accelerator_type:A100": 1, "accelerator_type:T4": 1})
    nodes = [_node("10.0.0.1", CPU=8, GPU=2, **{"accelerator_type:A100": 1}), mixed]
    with pytest.raises(UnknownGpuTypeError, match=r"node 10\.0\.0\.3 \(id 10\.0\.0\.3\) has the GPU types A100, T4: "
                                                  r"Ray gives a task any GPU of its node, so a unit of T4 could run"):
        check_one_type_a_node(nodes, ["T4"])
    check_one_type_a_node(nodes, ["V100"])                     # not asked there (check_gpu_types refuses V100)
    check_one_type_a_node([nodes[0], {**mixed, "Alive": False}], ["A100", "T4"])   # a dead node runs nothing
    check_one_type_a_node(nodes[:1], ["A100"])


def test_a_task_gets_its_gpus_share_of_the_nodes_cores():
    assert node_slot(["1"], 2, gpus=True, cores=[0, 1, 2, 3]).cores == (2, 3)
    assert node_slot(["1"], 2, gpus=True, cores=[0, 1, 2, 3]).gpu_index == 1
    assert node_slot(["0"], 2, gpus=False, cores=[0, 1, 2, 3]).gpu_index is None   # --device cpu
    assert node_slot(["2"], 4, gpus=True, cores=[0, 1]).cores == (0, 1)   # fewer cores than GPUs: all


def _node(name, alive=True, **resources):
    """A node as ray.nodes() lists it."""
    return {"NodeID": name, "Alive": alive, "NodeManagerAddress": name, "Resources": resources}


class InProcessCluster(Environment):
    """The ray backend's seam (check_gpu_types, run_units) without Ray: each task runs here, through
    cluster.run_unit_here and a RecordingBackend, as on a node; T4 tasks lose their node after their
    first record."""

    name = "ray"
    node_backend = "local"

    def __init__(self):
        self.tasks, self.inner = [], RecordingBackend()
        self.secrets_seen = []
        self.turns_checks, self.node_cores = [], [0]   # what run_matrix asked of turns_cores; each node's cores

    def check_gpu_types(self, gpu_types):
        check_gpu_types(gpu_types, CLUSTER, "in-process")

    def check_turns_cores(self, count, gpu_types, device):
        """As RayBackend does, with one node of one GPU whose cores are ``node_cores``."""
        from matrixbench.executors.ray.tasks import check_turns_cores, task_shares

        self.turns_checks.append((count, tuple(gpu_types), device))
        check_turns_cores(count, [("node 10.0.0.1", share) for share in task_shares(self.node_cores, 1, True)])

    def runners_at_once(self, gpu_types, gpus):
        """As RayBackend does, over CLUSTER's two nodes: 2 A100s and 4 CPUs, 1 T4 and no more CPUs."""
        from matrixbench.executors.ray.tasks import cluster_at_once

        nodes = [_node("10.0.0.1", CPU=4.0, GPU=2.0, **{"accelerator_type:A100": 1.0}),
                 _node("10.0.0.2", CPU=0.0, GPU=1.0, **{"accelerator_type:T4": 1.0})]
        return cluster_at_once(nodes, gpu_types, gpus, "in-process")

    def run_units(self, run, secrets, note=print):
        for index, task in enumerate(run.tasks):
            self.tasks.append(pickle.dumps(task))
            node = {"node_id": f"node-{task.gpu_type}", "node_ip": f"10.0.0.{index + 1}", "gpu_type": task.gpu_type,
                    "ray_gpu_ids": ["0"]}
            run.started(index, node)
            emitted = []

            def emit(image, data, index=index, emitted=emitted):
                emitted.append(data)
                run.record(index, image, data)

            result = run_unit_here(task, node, node_slot(["0"], 1, False, cores=[0]), [], emit,
                                   backend=self.inner, environ=dict(secrets))
            if task.gpu_type == "T4":
                run.lost(index, Status.CRASHED, f"node {node['node_ip']} died")
            else:
                for image, data in result.records:
                    run.record(index, image, data)   # returned again: written once


@pytest.fixture
def cluster(monkeypatch):
    fake = InProcessCluster()
    monkeypatch.setattr(ray_executor, "RayBackend", lambda *args, **settings: fake)
    return fake


def _matrix(tmp_path):
    data = dict(small_matrix_data(), gpu_types=["A100", "T4"])
    data["images"] = {"latest": data["images"]["latest"]}
    return load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"], batch_sizes=[1], modes=["eager"]))


def test_the_driver_writes_each_gpu_types_records_in_its_folder_and_ships_no_secret(tmp_path, cluster):
    options = RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu")
    summary = run_matrix(_matrix(tmp_path), options, environ={"HF_TOKEN": FAKE_TOKEN})
    run_path = tmp_path / "results" / "default"
    ok = read_record(run_path / "A100" / "latest" / "vit_bs1_eager_float32.json")
    assert ok["status"] == "ok"
    assert [image.image_name for image in summary.images] == ["A100/latest", "T4/latest"]
    assert all(FAKE_TOKEN.encode() not in task for task in cluster.tasks)      # never in a task's arguments
    assert all(request.env.get("HF_TOKEN") == FAKE_TOKEN for request in cluster.inner.requests)   # on the node
    assert {request.placement.node["gpu_type"] for request in cluster.inner.requests} == {"A100", "T4"}
    assert FAKE_TOKEN not in (run_path / "run.json").read_text()


def test_the_runs_bill_counts_the_units_the_cluster_runs_at_once_and_says_it_asked(tmp_path, cluster):
    """The bill of a run on the cluster (RayBackend.runners_at_once): A100's units over its node's 2 GPUs, T4's node
    holding none (no CPU for a task), said as asked."""
    from host_helpers import Notes

    notes = Notes()
    run_matrix(_matrix(tmp_path), RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu"), notes)
    (bill,) = [note for note in notes.notes if note.startswith("estimated duration")]
    assert ", 2 runner(s) at once: A100 2, T4 0 (asked the Ray cluster at in-process: the units its 2 live node(s) " \
           "run at once, a unit's task holding a CPU and a GPU of its type; earlier records" in bill, bill


def test_the_runs_budget_counts_the_runners_the_cluster_runs_at_once(tmp_path, cluster, monkeypatch):
    """--budget on the cluster admits processes over the runners the bill counted (it counted one at a time)."""
    from matrixbench.executors import adaptive

    seen, waves = [], adaptive.Waves
    monkeypatch.setattr(adaptive, "Waves", lambda policy, works, budget, **kw: seen.append(budget.at_once)
                        or waves(policy, works, budget, **kw))
    run_matrix(_matrix(tmp_path), RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu",
                                             budget_min=60.0))
    assert [at_once.runners for at_once in seen] == [{"A100": 2, "T4": 0}]


def test_a_dry_run_that_connects_anyway_asks_the_cluster_for_its_bill(tmp_path, cluster, monkeypatch):
    """--device cuda: the dry run asks the cluster whether it has GPUs, so its bill asks it too (a GPU run's units:
    2 A100s on the first node, the T4 node without a CPU)."""
    from matrixbench.run.command import check_dry_run
    from matrixbench.run.dry_run import describe_plan

    monkeypatch.setattr(cluster, "gpus_available", lambda: True, raising=False)
    matrix = _matrix(tmp_path)
    asked = check_dry_run(matrix, RunOptions(results_root=tmp_path / "results", executor="ray", device="cuda"))
    assert asked is not None and asked.runners == {"A100": 2, "T4": 0}
    text = describe_plan(matrix, tmp_path / "results" / "default", False, False, executor="ray", device="cuda",
                         at_once=asked)
    assert "2 runner(s) at once: A100 2, T4 0 (asked the Ray cluster at in-process" in text.splitlines()[-1]
    assert check_dry_run(matrix, RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu")) is None


def test_a_units_task_runs_its_images_in_turn_repeat_by_repeat(tmp_path, cluster):
    data = dict(small_matrix_data(), gpu_types=["A100"])
    matrix = load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"], batch_sizes=[1], modes=["eager"],
                                                                 repeats=2))
    run_matrix(matrix, RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu"))
    (task,) = [pickle.loads(shipped) for shipped in cluster.tasks]
    assert [(r.image.name, [x.index for x in r.repeats()]) for r in task.requests] == [
        ("stable", [0, 1]), ("latest", [0, 1])]   # the unit's parts; its node runs them round by round:
    assert [(r.image.name, [x.index for x in r.repeats()]) for r in cluster.inner.requests] == [
        ("stable", [0]), ("latest", [0]), ("latest", [1]), ("stable", [1])]   # counterbalanced (ABBA)
    assert task.pairs == () and all(r.work.turns is None for r in cluster.inner.requests)   # no turns asked
    folder = tmp_path / "results" / "default" / "A100"
    assert sorted(p.name for p in folder.glob("*/vit_*.json")) == ["vit_bs1_eager_float32.json",
                                                                  "vit_bs1_eager_float32.json",
                                                                  "vit_bs1_eager_float32.r1.json",
                                                                  "vit_bs1_eager_float32.r1.json"]


def test_a_lost_unit_is_crashed_records_naming_its_node_and_valid_against_the_schema(tmp_path, cluster):
    options = RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu")
    summary = run_matrix(_matrix(tmp_path), options)
    # the T4 task's record arrived before its node died: kept, not overwritten by a crashed one
    t4 = tmp_path / "results" / "default" / "T4" / "latest" / "vit_bs1_eager_float32.json"
    assert read_record(t4)["status"] == "ok" and summary.failures() == 0


def test_lost_records_say_crashed_and_name_the_node(tmp_path):
    from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
    from matrixbench.executors.ray.tasks import lost_records
    from matrixbench.matrix import expand_cells, runner_settings
    from runner.core import Repeat

    matrix = _matrix(tmp_path)
    cell = expand_cells(matrix)[0]
    request = RunRequest(ImageRef("latest", content_hash="abc"), Work([cell], runner_settings(matrix, "cpu")),
                         Paths(tmp_path))
    node = {"node_id": "f" * 56, "node_ip": "10.0.0.2", "gpu_type": "T4", "ray_gpu_ids": ["0"]}
    (record,) = lost_records(request, [Repeat(cell, 1)], Status.CRASHED, "node 10.0.0.2 died", node)
    data = record.to_dict()
    jsonschema.validate(data, RECORD_SCHEMA)
    assert (data["status"], data["repeat"], data["error"]["type"]) == ("crashed", 1, "RayTaskLost")
    assert data["placement"]["node_ip"] == "10.0.0.2" and data["environment"]["image_id"] == "abc"


def test_an_unknown_gpu_type_is_refused_before_anything_is_written(tmp_path, cluster):
    matrix = load_matrix(write_matrix(tmp_path), Overrides(gpu_types=["H100"]))
    with pytest.raises(UnknownGpuTypeError, match="has H100; its GPU types are A100, T4"):
        run_matrix(matrix, RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu"))
    assert not (tmp_path / "results").exists()   # not even an empty run folder


def test_a_rerun_submits_nothing_already_recorded(tmp_path, cluster):
    options = RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu")
    run_matrix(_matrix(tmp_path), options)
    submitted = len(cluster.tasks)
    run_matrix(_matrix(tmp_path), options)
    assert len(cluster.tasks) == submitted == 2


def test_the_host_package_imports_ray_only_when_the_ray_backend_connects():
    code = ("import sys, matrixbench.cli, matrixbench.run.command, matrixbench.executors.ray.tasks, "
            "matrixbench.executors.ray.executor; "
            "assert 'ray' not in sys.modules, 'ray imported'; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_retried_task_skips_what_the_driver_already_holds_and_runs_on_its_gpu(tmp_path):
    from matrixbench.environments.base import ImageRef, Paths, Placement, RunRequest, Work
    from matrixbench.executors.ray.tasks import UnitTask
    from matrixbench.matrix import expand_cells, runner_settings

    matrix = load_matrix(write_matrix(tmp_path), Overrides(models=["vit"], batch_sizes=[1], gpu_types=["A100"]))
    eager, default = expand_cells(matrix)
    request = RunRequest(ImageRef("latest"), Work([eager, default], runner_settings(matrix, "cuda")), Paths(tmp_path),
                         Placement(gpus=True), env={"HF_TOKEN": FAKE_TOKEN, "A": "b"})
    task = UnitTask("A100 vit bs=1", "A100", (shippable(request),), "local")
    assert task.requests[0].env == {"A": "b"} and FAKE_TOKEN.encode() not in pickle.dumps(task)
    inner, emitted = RecordingBackend(), []
    node = {"node_id": "n1", "node_ip": "10.0.0.1", "gpu_type": "A100", "ray_gpu_ids": ["1"]}
    result = run_unit_here(task, node, node_slot(["1"], 2, True, cores=[0, 1]), [("latest", eager.id)],
                           lambda image, data: emitted.append(data["cell_id"]), backend=inner, environ={})
    (ran,) = inner.requests
    assert [r.cell for r in ran.repeats()] == [default]   # the eager record reached the driver before the retry
    placed = ran.placement
    assert (placed.gpu_ids, placed.slot.cores, placed.node["node_ip"]) == (("1",), (1,), "10.0.0.1")
    assert "HF_TOKEN" not in ran.env   # none on this node's environment: none passed on
    assert emitted == [default.id] == [data["cell_id"] for _, data in result.records]


def test_a_cancelled_task_stops_its_runner_even_inside_a_blocking_wait(sigint_raises):
    import _thread
    import threading
    import time

    from matrixbench.executors.ray.tasks import interruptible

    stopped = threading.Event()
    threading.Timer(0.3, _thread.interrupt_main).start()   # what ray.cancel does to the task's thread
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        interruptible(lambda: stopped.wait(30), stopped.set)   # a runner that runs until stopped
    assert stopped.is_set() and time.monotonic() - started < 5
    assert interruptible(lambda: 7, stopped.set) == 7
    with pytest.raises(ValueError):
        interruptible(lambda: int("x"), stopped.set)


def test_the_node_runs_the_runs_own_backend_no_second_axis():
    import inspect

    from click.testing import CliRunner

    from matrixbench.cli import main
    from matrixbench.executors.ray.executor import RayBackend
    from matrixbench.executors.ray.tasks import DEFAULT_NODE_BACKEND, NODE_BACKENDS, UnitTask

    assert DEFAULT_NODE_BACKEND in NODE_BACKENDS and RunOptions().backend == DEFAULT_NODE_BACKEND
    assert inspect.signature(RayBackend).parameters["node_backend"].default == DEFAULT_NODE_BACKEND
    assert inspect.signature(UnitTask).parameters["node_backend"].default is inspect.Parameter.empty
    help_text = CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output
    assert "--node-backend" not in help_text and "--executor" in help_text
    with pytest.raises(OptionConflictError, match="--executor ray --backend venv: a node runs --backend docker or "
                                                  "local"):
        RayBackend(node_backend="venv")


@pytest.mark.parametrize("changes, named", [
    ({"slots": 2}, "--slots"), ({"calibrate": True}, "--calibrate"), ({"exclusive_timing": True}, "--exclusive-timing"),
])
def test_slot_settings_are_refused_under_ray_naming_them(tmp_path, cluster, changes, named):
    data = dict(small_matrix_data(), gpu_types=["A100"], **changes)
    matrix = load_matrix(write_matrix(tmp_path, data))
    with pytest.raises(OptionConflictError, match=f"{named}.*not with --executor ray"):
        run_matrix(matrix, RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu"))
    assert cluster.tasks == [] and not (tmp_path / "results").exists()


@pytest.mark.parametrize("changes, named", [({"gpu": "0"}, "--gpu"), ({"allow_busy_gpus": True}, "--allow-busy-gpus")])
def test_gpu_choices_are_refused_under_ray_naming_them(tmp_path, cluster, changes, named):
    options = RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu", **changes)
    with pytest.raises(OptionConflictError, match=f"{named}.*not with --executor ray"):
        run_matrix(_matrix(tmp_path), options)


@pytest.mark.parametrize("changes, named", [({"ray": RayOptions(address="10.0.0.1:6379")}, "--ray-address"),
                                            ({"ray": RayOptions(registry="10.0.0.1:5000")}, "registry")])
def test_cluster_options_are_refused_without_ray(tmp_path, changes, named):
    data = small_matrix_data()
    options = RunOptions(results_root=tmp_path / "results", backend="local", device="cpu", **changes)
    with pytest.raises(OptionConflictError, match=f"{named}: only with --executor ray"):
        run_matrix(load_matrix(write_matrix(tmp_path, data)), options)
    assert not (tmp_path / "results").exists()


def test_gpus_named_by_uuid_get_their_own_cores():
    from gpu_fakes import query_gpu
    from matrixbench.gpu import parse_gpus

    uuids = [gpu.uuid for gpu in parse_gpus(query_gpu("A100", "550", count=4))]
    slots = [node_slot([uuid], 4, gpus=True, cores=range(16), node_uuids=uuids) for uuid in uuids]
    assert [slot.gpu_index for slot in slots] == [0, 1, 2, 3]
    assert len({slot.cores for slot in slots}) == 4 and not set(slots[0].cores) & set(slots[3].cores)


def test_the_driver_prints_what_a_unit_said_on_its_node_before_writing_its_records():
    """A unit's task returns the lines it said on its node (the leftovers of a killed run it stopped there): the
    driver prints each, naming the unit and its node, then writes the records and logs the task returned. A line
    that another unit said on the same node (a container each leaves, not knowing whether its owner runs) is
    printed once; on another node, again."""
    import types

    from matrixbench.executors.ray.tasks import ClusterRun

    written, notes = [], []
    left = "left container 0123456789ac (image latest) of this run folder alone: its owner ran on another machine"
    value = {"node": {"node_ip": "10.0.0.7", "node_id": "abcdef123456"}, "records": [("latest", {"cell_id": "c"})],
             "logs": {"latest": "tail"}, "notes": ["stopped container 0123456789ab (image latest): left running", left]}
    said = ClusterRun([], [], False, on_record=lambda work, cell, record: None)
    run = types.SimpleNamespace(tasks=[types.SimpleNamespace(name="A100 vit bs=1"),
                                       types.SimpleNamespace(name="A100 vit bs=2")], news=said.news,
                                record=lambda index, image, data: written.append(("record", image)),
                                logs=lambda index, node, logs: written.append(("logs", logs)))
    ray = types.SimpleNamespace(get=lambda ref: value)
    ray_executor._finish(ray, "ref", 0, run, notes.append)
    assert len(notes) == 2 and notes[0].startswith("A100 vit bs=1 on node 10.0.0.7")
    assert notes[0].endswith(": stopped container 0123456789ab (image latest): left running")
    assert written == [("record", "latest"), ("logs", {"latest": "tail"})]
    value["notes"] = [left]
    ray_executor._finish(ray, "ref", 1, run, notes.append)   # the next unit on that node
    assert len(notes) == 2
    value["node"] = {"node_ip": "10.0.0.8", "node_id": "fedcba654321"}
    ray_executor._finish(ray, "ref", 1, run, notes.append)
    assert len(notes) == 3 and notes[2].startswith("A100 vit bs=2 on node 10.0.0.8")


# --- turns: a unit's pairs run at once on its node (executors.turns) ----------------------------------------------

def _turns_matrix(tmp_path, **settings):
    data = dict(small_matrix_data(), gpu_types=["A100"], turns=True, repeats=2, **settings)
    return load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"], batch_sizes=[1], modes=["eager"]))


def test_a_units_task_carries_its_pairs_and_its_node_runs_each_rounds_pair_at_once_in_its_share(tmp_path, cluster):
    """The driver ships the unit's image pairs (turns.pairs_of, by label) and turns_cores; the node runs each round's
    pair at once (a barrier of two: a side started alone fails), both sides in the task's share of the node, the
    first role alternating by round, their blocks on the share's last core, the baton folder in the task's scratch
    folder, removed after; every record reaches the driver."""
    cluster.inner = PairedBackend()
    run_matrix(_turns_matrix(tmp_path, turns_cores=1),
               RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu"))
    assert cluster.turns_checks == [(1, ("A100",), "cpu")]   # asked of the cluster before anything was written
    (task,) = [pickle.loads(shipped) for shipped in cluster.tasks]
    assert (task.pairs, task.turns_cores) == ((("A100/stable", "A100/latest"),), 1)
    by_pair = {}
    for request in cluster.inner.requests:
        turns = request.work.turns
        assert turns is not None and turns.cores == (0,) == request.placement.slot.cores
        by_pair.setdefault(turns.pair_id, {})[request.image.name] = (turns.role, turns.partner, turns.folder,
                                                                     [r.id for r in request.repeats()])
        assert turns.folder.name == turns.pair_id and turns.folder.parent.name == ".turns"
        assert turns.folder.parent.parent.name.startswith("matrixbench-ray-") and not turns.folder.exists()
    first, second = by_pair.values()   # one pair a round
    assert (first["stable"][:2], first["latest"][:2]) == (("first", "latest"), ("second", "stable"))
    assert (second["latest"][:2], second["stable"][:2]) == (("first", "stable"), ("second", "latest"))
    assert all(pair["stable"][2:] == pair["latest"][2:] for pair in (first, second))   # one folder, same repeats
    folder = tmp_path / "results" / "default" / "A100"
    assert sorted(str(p.relative_to(folder)) for p in folder.glob("*/vit_*.json")) == [
        "latest/vit_bs1_eager_float32.json", "latest/vit_bs1_eager_float32.r1.json",
        "stable/vit_bs1_eager_float32.json", "stable/vit_bs1_eager_float32.r1.json"]


def test_turns_cores_more_than_a_nodes_task_gets_are_refused_before_anything_is_written(tmp_path, cluster):
    cluster.node_cores = [0, 1, 2]
    with pytest.raises(OptionConflictError, match=r"turns_cores: 4: a unit's task on node 10.0.0.1 may use 3 CPU "
                                                  r"core\(s\) \(0-2: .*at most 3 \(--set turns_cores=3\)"):
        run_matrix(_turns_matrix(tmp_path, turns_cores=4),
                   RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu"))
    assert cluster.tasks == [] and not (tmp_path / "results").exists()


def test_the_default_turns_ask_the_cluster_only_where_the_run_has_an_image_pair(tmp_path, cluster):
    """Turns are on by default (turns_cores auto: 1); a run of one image has no pair, so its start asks no node for
    its cores, while a run of two images does, once."""
    data = {key: value for key, value in small_matrix_data().items() if key != "turns"}
    data["gpu_types"] = ["A100"]
    one = load_matrix(write_matrix(tmp_path, data), Overrides(images=["latest"], models=["vit"], batch_sizes=[1],
                                                              modes=["eager"]))
    assert (one.turns, one.turns_cores) == (True, 1)
    run_matrix(one, RunOptions(results_root=tmp_path / "one", executor="ray", device="cpu"))
    assert cluster.turns_checks == []
    two = load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"], batch_sizes=[1], modes=["eager"]))
    run_matrix(two, RunOptions(results_root=tmp_path / "two", executor="ray", device="cpu"))
    assert cluster.turns_checks == [(1, ("A100",), "cpu")]


def test_the_nodes_a_task_may_land_on_and_its_share_of_their_cores_bound_turns_cores():
    from matrixbench.executors.ray.tasks import check_turns_cores, task_nodes, task_shares, turns_cores_here
    from matrixbench.run.placement import Slot

    nodes = [_node("a", CPU=8, GPU=2, **{"accelerator_type:A100": 1}),
             _node("b", CPU=4, GPU=1, **{"accelerator_type:T4": 1}),
             _node("c", alive=False, CPU=8, GPU=1, **{"accelerator_type:A100": 1}), _node("d", CPU=2)]
    assert [n["NodeID"] for n in task_nodes(nodes, ("A100",), gpus=False)] == ["a"]   # its type's, alive
    assert [n["NodeID"] for n in task_nodes(nodes, (), gpus=True)] == ["a", "b"]
    assert [n["NodeID"] for n in task_nodes(nodes, (), gpus=False)] == ["a", "b", "d"]
    assert [share.cores for share in task_shares(range(3), 2, True)] == [(0, 1), (2,)]   # one per GPU
    assert [share.cores for share in task_shares(range(3), 2, False)] == [(0, 1)]       # a task without a GPU
    shares = [("node a", share) for share in task_shares(range(3), 2, True)]
    check_turns_cores(1, shares)
    check_turns_cores(0, shares)
    with pytest.raises(OptionConflictError, match=r"turns_cores: 2: a unit's task on node a may use 1 CPU core\(s\) "
                                                  r"\(2: its GPU's share.* at most 1 \(--set turns_cores=1\), or 0"):
        check_turns_cores(2, shares)
    assert turns_cores_here(2, Slot(0, (6, 4, 5)), "node a") == (5, 6)   # the share's last ones
    assert turns_cores_here(0, Slot(0, (4,)), "node a") == ()


def _turns_task(tmp_path, repeats=1):
    from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
    from matrixbench.executors.ray.tasks import UnitTask
    from matrixbench.matrix import expand_cells, runner_settings
    from runner.core import Repeat

    matrix = _turns_matrix(tmp_path)
    (cell,) = expand_cells(matrix)
    work = Work([cell], runner_settings(matrix, "cpu")).for_repeats([Repeat(cell, index) for index in range(repeats)])
    requests = tuple(shippable(RunRequest(ImageRef(name), work, Paths(tmp_path / name)))
                     for name in ("stable", "latest"))
    return cell, UnitTask("A100 vit bs=1", "A100", requests, "local", pairs=(("A100/stable", "A100/latest"),))


class OneSideFails(PairedBackend):
    """A PairedBackend whose ``latest`` runner meets its partner, then dies without a record or (``raises``)
    raises instead of starting."""

    def __init__(self, raises):
        super().__init__()
        self.raises = raises

    def run(self, request):
        if request.image.name != "latest" or request.work.check:
            return super().run(request)
        self.seen.append((request.image.name, request.work.turns, None, [r.id for r in request.repeats()]))
        self.barrier.wait()   # its partner runs meanwhile
        if self.raises:
            raise RunError("image 'latest' is gone from this node")
        return 1


@pytest.mark.parametrize("raises", [False, True])
def test_a_pair_whose_one_side_fails_on_the_node_keeps_the_other_sides_record(tmp_path, raises):
    cell, task = _turns_task(tmp_path)
    backend, emitted = OneSideFails(raises), []
    node = {"node_id": "n1", "node_ip": "10.0.0.1", "gpu_type": "A100", "ray_gpu_ids": ["0"]}

    def run():
        return run_unit_here(task, node, node_slot(["0"], 1, False, cores=[0]), [],
                             lambda image, data: emitted.append((image, data["cell_id"])), backend=backend, environ={})

    if raises:
        with pytest.raises(RunError, match="image 'latest' is gone"):
            run()
    else:
        assert [(image, data["cell_id"]) for image, data in run().records] == [("stable", cell.id)]
    assert emitted == [("stable", cell.id)]   # sent to the driver as it appeared, whatever its partner did
    sides = sorted((name, turns.role, turns.pair_id) for name, turns, _, _ in backend.seen)
    assert [side[:2] for side in sides] == [("latest", "second"), ("stable", "first")] and sides[0][2] == sides[1][2]


def test_a_retried_task_in_turns_runs_only_what_is_missing_alone_where_its_partner_has_it(tmp_path):
    from runner.core import Repeat

    cell, task = _turns_task(tmp_path, repeats=2)
    backend, emitted = PairedBackend(), []
    node = {"node_id": "n1", "node_ip": "10.0.0.1", "gpu_type": "A100", "ray_gpu_ids": ["0"]}
    done = [("latest", Repeat(cell, 0).id)]   # the first attempt's record of latest, round 0, reached the driver
    run_unit_here(task, node, node_slot(["0"], 1, False, cores=[0]), done,
                  lambda image, data: emitted.append((image, data["repeat"])), backend=backend, environ={})
    alone = [(name, ids) for name, turns, _, ids in backend.seen if turns is None]
    paired = sorted((name, turns.role, ids) for name, turns, _, ids in backend.seen if turns is not None)
    assert alone == [("stable", [Repeat(cell, 0).id])]
    assert paired == [("latest", "first", [Repeat(cell, 1).id]), ("stable", "second", [Repeat(cell, 1).id])]
    assert sorted(emitted) == [("latest", 1), ("stable", 0), ("stable", 1)]   # nothing recorded ran again
