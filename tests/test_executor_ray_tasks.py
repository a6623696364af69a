"""The cluster's parts without Ray (issue 16): what a task carries, what it does on its node, what the
driver writes when a unit is lost; the driver's whole loop through an in-process stand-in for the
cluster. The real two-node cluster is tests/test_executor_ray.py."""
import pickle
import subprocess
import sys

import jsonschema
import pytest

from host_helpers import RecordingBackend, small_matrix_data, write_matrix
from matrixbench.environments.base import Backend
from matrixbench.errors import OptionConflictError
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
    assert task_resources("A100", gpus=False) == {"num_gpus": 1, "resources": {"accelerator_type:A100": 0.001}}
    assert task_resources(None, gpus=True) == {"num_gpus": 1, "resources": {}}
    assert task_resources(None, gpus=False) == {"num_cpus": 1}


def test_a_task_gets_its_gpus_share_of_the_nodes_cores():
    assert node_slot(["1"], 2, gpus=True, cores=[0, 1, 2, 3]).cores == (2, 3)
    assert node_slot(["1"], 2, gpus=True, cores=[0, 1, 2, 3]).gpu_index == 1
    assert node_slot(["0"], 2, gpus=False, cores=[0, 1, 2, 3]).gpu_index is None   # --device cpu
    assert node_slot(["2"], 4, gpus=True, cores=[0, 1]).cores == (0, 1)   # fewer cores than GPUs: all


class InProcessCluster(Backend):
    """The ray backend's seam (check_gpu_types, run_units) without Ray: each task runs here, through
    cluster.run_unit_here and a RecordingBackend, as on a node; T4 tasks lose their node after their
    first record."""

    name = "ray"
    node_backend = "local"

    def __init__(self):
        self.tasks, self.inner = [], RecordingBackend()
        self.secrets_seen = []

    def check_gpu_types(self, gpu_types):
        check_gpu_types(gpu_types, CLUSTER, "in-process")

    def run(self, request):
        raise AssertionError("the driver runs units, not requests")

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


def test_a_units_task_runs_its_images_in_turn_repeat_by_repeat(tmp_path, cluster):
    data = dict(small_matrix_data(), gpu_types=["A100"])
    matrix = load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"], batch_sizes=[1], modes=["eager"],
                                                                 repeats=2))
    run_matrix(matrix, RunOptions(results_root=tmp_path / "results", executor="ray", device="cpu"))
    (task,) = [pickle.loads(shipped) for shipped in cluster.tasks]
    assert [(r.image.name, [x.index for x in r.repeats()]) for r in task.requests] == [
        ("stable", [0]), ("latest", [0]), ("latest", [1]), ("stable", [1])]   # counterbalanced (ABBA)
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
    driver prints each, naming the unit and its node, then writes the records and logs the task returned."""
    import types

    written, notes = [], []
    value = {"node": {"node_ip": "10.0.0.7", "node_id": "abcdef123456"}, "records": [("latest", {"cell_id": "c"})],
             "logs": {"latest": "tail"}, "notes": ["stopped container 0123456789ab (image latest): left running"]}
    run = types.SimpleNamespace(tasks=[types.SimpleNamespace(name="A100 vit bs=1")],
                                record=lambda index, image, data: written.append(("record", image)),
                                logs=lambda index, node, logs: written.append(("logs", logs)))
    ray = types.SimpleNamespace(get=lambda ref: value)
    ray_executor._finish(ray, "ref", 0, run, notes.append)
    assert len(notes) == 1 and notes[0].startswith("A100 vit bs=1 on node 10.0.0.7")
    assert notes[0].endswith(": stopped container 0123456789ab (image latest): left running")
    assert written == [("record", "latest"), ("logs", {"latest": "tail"})]
