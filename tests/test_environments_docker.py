"""DockerBackend with the docker SDK faked at docker_client's seam."""
import dataclasses
import json
import os
from pathlib import Path

import pytest

from docker_fakes import APIError, FakeImage, FakeSDK
from host_helpers import Notes, make_record, write_matrix
from matrixbench import environments as backends
from matrixbench.build import docker_client
from matrixbench.environments import docker as docker_backend
from matrixbench.environments.base import ImageRef, Paths, Placement, RunRequest, Work
from matrixbench.environments.docker import DockerBackend
from matrixbench.errors import RunError
from matrixbench.matrix import load_matrix
from matrixbench.run import owner
from matrixbench.run.command import RunOptions, run_matrix
from matrixbench.run.launch import LaunchStatus, launch
from runner.core import Cell
from runner.schema import CELLS_SCHEMA_VERSION, record_path, write_record

CELL = Cell(model="vit", model_id=None, config_path=None, task="image-classification",
            weights="random", size="tiny", batch_size=1, mode="eager", fullgraph=False, dtype="float32")
CELLS = [CELL, dataclasses.replace(CELL, mode="default")]
SETTINGS = {"iterations": 3, "warmup": 1, "timeout_s": 60, "device": "cpu"}


@pytest.fixture
def sdk():
    fake = FakeSDK()
    fake.images_by_tag["matrixbench:stable"] = FakeImage(
        "matrixbench:stable", {"matrixbench": "1", "matrixbench.torch": "2.0.1"}, "sha256:stable")
    return fake


def request_for(tmp_path, image_name="stable", cells=CELLS, out_dir=None, cache_dir="cache", gpus=False, gpu_ids=(),
                torch=None, image_hash=None):
    """An unplaced request (``.placed(...)`` puts it in a slot, as the slots executor does)."""
    paths = Paths(out_dir or tmp_path / "results" / "run1" / "stable", hf_cache_dir=tmp_path / "hf",
                  cache_dir=cache_dir and tmp_path / cache_dir / "stable")
    return RunRequest(ImageRef(image_name, torch=torch, content_hash=image_hash), Work(cells, SETTINGS), paths,
                      Placement(gpus=gpus, gpu_ids=gpu_ids), env={"HF_TOKEN": "hf_abcdefgh"})


def write_records(request, cells):
    for cell in cells:
        path = record_path(request.paths.out_dir, cell)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")


def backend(sdk, **kwargs):
    return DockerBackend(client=docker_client.DockerClient(sdk), **kwargs)


def test_runs_the_runner_with_mounts_env_user_and_labels(sdk, tmp_path):
    request = request_for(tmp_path)
    held = []
    sdk.next_container = {"on_wait": lambda container: held.append(owner.Lease.from_labels(container.labels).held())}
    assert backend(sdk).run(request) == 0

    (container,) = sdk.started
    kwargs = container.kwargs
    assert container.image == "matrixbench:stable"
    assert container.command == ["--cells", "/results/cells.json", "--out", "/results"]
    binds = {spec["bind"]: (host, spec["mode"]) for host, spec in kwargs["volumes"].items()}
    assert binds == {
        "/results": (str(request.paths.out_dir.resolve()), "rw"),
        "/compile-cache": (str(request.paths.cache_dir.resolve()), "rw"),
        "/hf-home": (str(request.paths.hf_cache_dir.resolve()), "rw"),
    }
    env = kwargs["environment"]
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/compile-cache/inductor"
    assert env["TRITON_CACHE_DIR"] == "/compile-cache/triton"
    assert env["HF_HOME"] == "/hf-home" and env["HF_TOKEN"] == "hf_abcdefgh"
    assert "PATH" not in env  # an allow-list, not the host's environment
    assert kwargs["user"] == f"{os.getuid()}:{os.getgid()}"
    assert kwargs["labels"] == {"matrixbench": "1", "matrixbench.run_id": "run1",
                                "matrixbench.run_dir": str(request.paths.out_dir.parent.resolve()),
                                "matrixbench.image": "stable", "matrixbench.torch": "2.0.1",
                                **owner.this_process().labels(), **owner.Lease.from_labels(kwargs["labels"]).labels()}
    assert owner.Owner.from_labels(kwargs["labels"]) == owner.this_process()
    lease = Path(kwargs["labels"]["matrixbench.owner.lease"])    # held while the container ran, removed after it
    assert lease == (request.paths.out_dir / f".{kwargs['name']}.lease").resolve() and not lease.exists()
    assert held == [(True, "")]
    assert kwargs["device_requests"] is None
    cells_file = json.loads((request.paths.out_dir / "cells.json").read_text())
    assert cells_file == {"schema_version": CELLS_SCHEMA_VERSION, "settings": SETTINGS, "image_name": "stable",
                          "image_id": "sha256:stable", "cells": [c.to_dict() for c in CELLS]}
    assert container.calls[-1] == "remove" and not sdk.started_live


def test_cold_runs_mount_no_compile_cache(sdk, tmp_path):
    backend(sdk).run(request_for(tmp_path, cache_dir=None))
    kwargs = sdk.started[0].kwargs
    assert "/compile-cache" not in {spec["bind"] for spec in kwargs["volumes"].values()}
    assert "TORCHINDUCTOR_CACHE_DIR" not in kwargs["environment"]
    assert "TRITON_CACHE_DIR" not in kwargs["environment"]


def test_gpus_requested_where_docker_has_them_asks_for_all(sdk, tmp_path):
    sdk.next_container = {"log": b"GPU 0: NVIDIA L4 (UUID: GPU-0a1b2c3d)\n", "exit_code": 0}
    backend(sdk).run(request_for(tmp_path, gpus=True))
    (device_request,) = sdk.started[-1].kwargs["device_requests"]
    assert device_request["Count"] == -1


def test_an_image_that_was_never_built_says_how_to_build_it(sdk, tmp_path):
    with pytest.raises(RunError, match=r"Docker has no matrixbench:nightly.*matrixbench build --images nightly"):
        backend(sdk).run(request_for(tmp_path, image_name="nightly"))


def test_a_container_that_dies_early_is_an_incomplete_launch_with_its_log_tail_and_is_removed(sdk, tmp_path):
    # one policy for a runner that dies (matrixbench.run.launch): the outcome says so, the run carries on
    request = request_for(tmp_path)
    sdk.next_container = {"log": b"loading vit\nSegmentation fault, token hf_abcdefgh\n", "exit_code": 139,
                          "on_wait": lambda _: write_records(request, CELLS[:1])}
    outcome = launch(backend(sdk), request)
    assert outcome.status is LaunchStatus.INCOMPLETE and outcome.exit_code == 139
    assert [repeat.cell for repeat in outcome.missing] == CELLS[1:]
    message = outcome.describe(request)
    assert "exited with code 139" in message and "1 of 2" in message
    assert "Segmentation fault, token ***" in message
    assert "hf_abcdefgh" not in message
    assert not sdk.started_live


def test_a_nonzero_exit_after_every_cell_has_a_record_is_returned(sdk, tmp_path):
    request = request_for(tmp_path)
    sdk.next_container = {"exit_code": 1, "on_wait": lambda _: write_records(request, CELLS)}
    assert backend(sdk).run(request) == 1
    assert launch(backend(sdk), request).status is LaunchStatus.COMPLETE


def test_ctrl_c_stops_and_removes_the_container_and_keeps_records(sdk, tmp_path):
    request = request_for(tmp_path)
    write_records(request, CELLS[:1])
    sdk.next_container = {"log": b"cell 1 ok\n", "log_raises": KeyboardInterrupt()}
    with pytest.raises(KeyboardInterrupt):
        backend(sdk).run(request)
    (container,) = sdk.started
    assert container.calls == ["stop", "remove"]
    assert record_path(request.paths.out_dir, CELLS[0]).exists()


def test_the_log_goes_to_runner_log_and_on_log_with_secrets_hidden(sdk, tmp_path):
    lines = []
    request = request_for(tmp_path)
    sdk.next_container = {"log": b"HF_TOKEN=hf_abcdefgh\ncell vit ok\n"}
    backend(sdk, on_log=lambda *args: lines.append(args)).run(request)
    assert lines == [("stable", "HF_TOKEN=***"), ("stable", "cell vit ok")]
    assert (request.paths.out_dir / "runner.log").read_text() == "HF_TOKEN=***\ncell vit ok\n"


def test_gpus_available_asks_a_container_once_per_run(sdk):
    sdk.next_container = {"log": b"GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5f0e1d2c-3b4a-5968-7a6b-8c9d0e1f2a3b)\n",
                          "exit_code": 0}
    docker = backend(sdk)
    assert docker.gpus_available() is True and docker.gpus_available() is True
    assert len(sdk.started) == 1 and sdk.started[0].image == "matrixbench:stable"
    assert "docker" in docker.describe()


def test_no_gpus_without_a_working_probe_or_a_built_image(sdk):
    sdk.run_error = APIError('could not select device driver "" with capabilities: [[gpu]]')
    assert backend(sdk).gpus_available() is False
    assert backend(FakeSDK()).gpus_available() is False   # nothing built: nothing to probe with


def test_chosen_gpus_reach_the_device_request(sdk, tmp_path):
    sdk.next_container = {"log": b"GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5f0e1d2c)\n", "exit_code": 0}
    docker = backend(sdk)
    docker.gpus_available()
    sdk.next_container = {}
    docker.run(request_for(tmp_path, gpus=True, gpu_ids=("2",)))
    assert sdk.started[-1].kwargs["device_requests"][0]["DeviceIDs"] == ["2"]


@pytest.mark.parametrize("label", [None, "0123456789ab"])
def test_a_stale_image_is_refused_naming_the_rebuild(sdk, tmp_path, label):
    labels = sdk.images_by_tag["matrixbench:stable"].labels
    if label is not None:
        labels[docker_client.LABEL_CONTENT_HASH] = label
    with pytest.raises(RunError, match="another definition of the image .*matrixbench build --images stable"):
        backend(sdk).run(request_for(tmp_path, image_hash="fedcba987654"))
    assert sdk.started == []


def test_an_image_built_from_the_matrix_entry_runs(sdk, tmp_path):
    sdk.images_by_tag["matrixbench:stable"].labels[docker_client.LABEL_CONTENT_HASH] = "fedcba987654"
    backend(sdk).run(request_for(tmp_path, image_hash="fedcba987654"))
    assert len(sdk.started) == 1


def test_the_registry_builds_it():
    from matrixbench.environments import create_backend

    assert isinstance(create_backend("docker"), DockerBackend)


def test_run_id_can_be_given(sdk, tmp_path):
    backend(sdk, run_id="nightly-42").run(request_for(tmp_path))
    assert sdk.started[0].kwargs["labels"]["matrixbench.run_id"] == "nightly-42"
    assert sdk.started[0].kwargs["name"].startswith("matrixbench-nightly-42-stable-")


def test_an_image_built_for_another_torch_is_refused_before_any_container(sdk, tmp_path):
    with pytest.raises(RunError, match=r"built with torch 2\.0\.1, but the matrix asks for torch==2\.1\.0.*"
                                       r"matrixbench build --images stable"):
        backend(sdk).run(request_for(tmp_path, torch="torch==2.1.0"))
    assert sdk.started == []
    assert backend(sdk).run(request_for(tmp_path, torch="torch==2.0.1")) == 0


def test_a_users_own_model_is_mounted_read_only_and_its_path_rewritten(sdk, tmp_path):
    mine = tmp_path / "my models" / "swin"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text('{"model_type": "swin"}')
    cell = dataclasses.replace(CELL, model="swin", size="full", config_path=str(mine / "config.json"))
    request = request_for(tmp_path, cells=[cell, dataclasses.replace(cell, mode="default")])
    backend(sdk).run(request)
    binds = {spec["bind"]: (host, spec["mode"]) for host, spec in sdk.started[0].kwargs["volumes"].items()}
    assert binds["/models/swin"] == (str(mine.resolve()), "ro")
    cells = json.loads((request.paths.out_dir / "cells.json").read_text())["cells"]
    assert [c["config_path"] for c in cells] == ["/models/swin/config.json"] * 2


def test_a_slot_pins_the_container_to_its_cores_numa_node_and_one_gpu(sdk, tmp_path):
    from matrixbench.run.placement import Slot
    from runner.records import PLACEMENT_ENV

    slot = Slot(1, (32, 33, 34, 35), gpu_index=5, gpu_uuid="GPU-5f3c2a1e", numa_node=1)
    request = request_for(tmp_path, gpus=True, gpu_ids=("0", "5")).placed(slot, slots=8, busy_units=3)
    backend(sdk).run(request)
    kwargs = sdk.started[-1].kwargs
    assert (kwargs["cpuset_cpus"], kwargs["cpuset_mems"]) == ("32-35", "1")
    assert kwargs["device_requests"][0]["DeviceIDs"] == ["GPU-5f3c2a1e"]
    assert kwargs["device_requests"][0]["Capabilities"] == [["gpu"]]
    assert sdk.started[-1].command == ["--cells", "/results/slot-1/cells.json", "--out", "/results"]
    env = kwargs["environment"]
    assert env["OMP_NUM_THREADS"] == env["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    assert json.loads(env[PLACEMENT_ENV])["busy_units"] == 3
    assert (request.paths.out_dir / "slot-1" / "cells.json").exists()
    assert (request.paths.out_dir / "slot-1" / "runner.log").exists()


def test_outside_slots_no_cpuset_is_asked(sdk, tmp_path):
    backend(sdk).run(request_for(tmp_path))
    assert "cpuset_cpus" not in sdk.started[-1].kwargs and "cpuset_mems" not in sdk.started[-1].kwargs


def test_a_calibration_runner_is_labelled_with_its_run(sdk, tmp_path):
    from matrixbench.executors import calibration as calibrate
    from matrixbench.run.placement import Slot

    out_dir = calibrate.out_dir(tmp_path / "results" / "run1" / "stable", "loaded", Slot(1, (1,)))
    backend(sdk).run(request_for(tmp_path, out_dir=out_dir).placed(Slot(1, (1,)), slots=2, busy_units=2,
                                                                   calibration={"phase": "loaded", "slots": 2}))
    assert sdk.started[0].kwargs["labels"]["matrixbench.run_id"] == "run1"
    assert sdk.started[0].kwargs["labels"]["matrixbench.run_dir"] == str((tmp_path / "results" / "run1").resolve())


# --- containers a killed run left running ------------------------------------------------

def _leftover(sdk, tmp_path, monkeypatch, who, run="run1"):
    """A container of ``run`` labelled as the backend labels it, but owned by ``who`` (a run
    killed with kill -9 never reached its finally: its container still runs)."""
    monkeypatch.setattr(docker_backend, "this_process", lambda: who)
    labels = backend(sdk)._labels(request_for(tmp_path, out_dir=tmp_path / "results" / run / "stable"),
                                  sdk.images_by_tag["matrixbench:stable"])
    monkeypatch.undo()
    docker_client.DockerClient(sdk).start_container("matrixbench:stable", [], user="0:0", env={}, mounts={},
                                                    labels=labels)
    return sdk.started[-1]


def test_containers_whose_owner_is_gone_are_stopped_and_removed_saying_so(sdk, tmp_path, monkeypatch):
    here = owner.this_process()
    reused_pid = dataclasses.replace(here, start="-1")           # this pid, but another process's start
    rebooted = dataclasses.replace(here, boot_id="another-boot")
    killed = [_leftover(sdk, tmp_path, monkeypatch, who) for who in (reused_pid, rebooted)]
    alive = _leftover(sdk, tmp_path, monkeypatch, here)
    elsewhere = _leftover(sdk, tmp_path, monkeypatch, dataclasses.replace(here, host="another-host",
                                                                          boot_id="another-kernel"))
    unleased = _leftover(sdk, tmp_path, monkeypatch, dataclasses.replace(here, pid_ns="pid:[1]"))   # no lease label
    other_run = _leftover(sdk, tmp_path, monkeypatch, rebooted, run="run2")
    lines = backend(sdk).stop_leftovers(tmp_path / "results" / "run1")
    assert [c.calls for c in killed] == [["stop", "remove"]] * 2
    assert alive.calls == elsewhere.calls == unleased.calls == other_run.calls == []
    assert sorted(sdk.started_live, key=sdk.started.index) == [alive, elsewhere, unleased, other_run]
    assert sum(line.startswith("stopped container ") and "killed run" in line for line in lines) == 2
    assert f"pid {here.pid} on {here.host}, gone" in lines[0]
    assert sum(line.startswith(f"left container {container.id[:12]} ") for line in lines
               for container in (alive, elsewhere, unleased)) == 3
    assert any("left container" in line and "still runs" in line for line in lines)
    assert any("left container" in line and "ran on another machine" in line and "matrixbench clean" in line
               for line in lines)
    assert any("left container" in line and "carries no lease" in line and "matrixbench clean" in line
               for line in lines)


def test_a_killed_runs_lease_files_whose_containers_were_removed_by_hand_go_with_the_rerun(sdk, tmp_path,
                                                                                            monkeypatch):
    """kill -9 on the host, then `docker rm -f` on its container: its lease file stays (hidden, empty) with nothing
    naming it. The rerun's stop_leftovers removes it and says so; the lease of a container still there (its owner on
    another machine) and a lease this process holds stay."""
    run = tmp_path / "results" / "run1"
    (run / "stable").mkdir(parents=True)
    stale = run / "stable" / ".matrixbench-run1-stable-aaaaaa.lease"
    stale.write_text("")
    elsewhere = _leftover(sdk, tmp_path, monkeypatch, dataclasses.replace(owner.this_process(), host="another-host",
                                                                           boot_id="another-kernel"))
    named = run / "stable" / ".matrixbench-run1-stable-bbbbbb.lease"
    named.write_text("")
    elsewhere.labels.update(owner.Lease(named.resolve(), "0:0").labels())
    with owner.holding_lease(run / "stable" / ".matrixbench-run1-stable-cccccc.lease") as held:
        lines = backend(sdk).stop_leftovers(run)
        assert held.path.exists()
    assert not stale.exists() and named.exists() and elsewhere.calls == []
    assert lines[-1] == ("removed 1 lease file(s) of a killed run whose containers were removed by hand: "
                         "stable/.matrixbench-run1-stable-aaaaaa.lease")
    assert not any("lease file" in line for line in backend(sdk).stop_leftovers(run))   # said once


def test_a_leftover_another_process_removed_meanwhile_is_not_said_stopped_here(sdk, tmp_path, monkeypatch):
    """Two Ray nodes on one host share its Docker daemon and both find a killed run's container (the real
    ray-docker test's two nodes did): only the one whose removal took it says it stopped it."""
    gone = dataclasses.replace(owner.this_process(), boot_id="another-boot")
    first = _leftover(sdk, tmp_path, monkeypatch, gone)
    assert [line.startswith(f"stopped container {first.id[:12]}") for line in
            backend(sdk).stop_run_leftovers("run1")] == [True]

    def raced(container):
        """The other node removes ``container`` between this node's listing and its removal."""
        original = container.remove

        def remove(force=False):
            sdk.started_live.remove(container)
            return original(force=force)      # NotFound now
        container.remove = remove
        return container
    raced(_leftover(sdk, tmp_path, monkeypatch, gone))
    assert backend(sdk).stop_run_leftovers("run1") == []     # a node says only what it stopped
    late = raced(_leftover(sdk, tmp_path, monkeypatch, gone))
    lines = backend(sdk)._stop_leftovers({"matrixbench.run_id": "run1"})
    assert len(lines) == 1 and f"container {late.id[:12]}" in lines[0]
    assert "removed meanwhile by another process" in lines[0] and not lines[0].startswith("stopped")


def _fake_runner(container):
    """What the entrypoint does, for the fake SDK: one ok record per cell of the mounted cells file."""
    results = next(Path(host) for host, spec in container.kwargs["volumes"].items() if spec["bind"] == "/results")
    cells = json.loads((results / Path(container.command[1]).relative_to("/results")).read_text())["cells"]
    for cell in cells:
        write_record(results, make_record(Cell.from_dict(cell)))


def test_a_run_stops_what_a_killed_run_of_its_folder_left_running(sdk, tmp_path, monkeypatch):
    matrix = load_matrix(write_matrix(tmp_path), None)
    for name, image in matrix.images.items():
        sdk.images_by_tag[f"matrixbench:{name}"] = FakeImage(f"matrixbench:{name}", {
            "matrixbench": "1", "matrixbench.torch": image.torch.split("==")[1],
            docker_client.LABEL_CONTENT_HASH: image.content_hash()}, f"sha256:{name}")
    killed = _leftover(sdk, tmp_path, monkeypatch, dataclasses.replace(owner.this_process(), boot_id="gone"))
    sdk.next_container = {"on_wait": _fake_runner}
    monkeypatch.setitem(backends.FACTORIES, "docker", lambda build_options=None, run_id=None: backend(sdk))
    progress = Notes()
    run_matrix(matrix, RunOptions(run_name="run1", results_root=tmp_path / "results", backend="docker",
                                  device="cpu", cache_root=tmp_path / "cache", hf_cache_dir=tmp_path / "hf"),
               progress=progress)
    assert killed.calls == ["stop", "remove"] and killed not in sdk.started_live
    assert progress.notes[0].startswith(
        f"stopped container {killed.id[:12]} (image stable): left running by a killed run")


def test_a_ray_task_pins_its_container_to_the_gpu_ray_assigned_and_that_gpus_cores(sdk, tmp_path):
    """A unit's request as its Ray task runs it (cluster.on_node) on a 4-GPU, 16-core node whose
    Ray gave it GPU 2: DeviceRequest for GPU 2 only, the cores of GPU 2's quarter of the node."""
    from matrixbench.executors.ray.tasks import node_slot, on_node, shippable
    from runner.core import Repeat
    from runner.records import PLACEMENT_ENV

    shipped = shippable(request_for(tmp_path, gpus=True))
    node = {"node_id": "f" * 56, "node_ip": "10.0.0.7", "gpu_type": "A100", "ray_gpu_ids": ["2"],
            "node_gpus": 4, "busy": 2}
    slot = node_slot(node["ray_gpu_ids"], node["node_gpus"], True, cores=range(16))
    request = on_node(shipped, [Repeat(cell) for cell in CELLS], tmp_path / "scratch", node, slot, environ={})
    backend(sdk).run(request)
    kwargs = sdk.started[-1].kwargs
    assert kwargs["device_requests"][0]["DeviceIDs"] == ["2"]
    assert kwargs["cpuset_cpus"] == "8-11"
    placement = json.loads(kwargs["environment"][PLACEMENT_ENV])
    assert (placement["node_ip"], placement["ray_gpu_ids"], placement["gpu_type"]) == ("10.0.0.7", ["2"], "A100")


def test_a_ray_tasks_containers_carry_the_runs_name_not_its_scratch_folders(sdk, tmp_path, monkeypatch):
    """On a Ray node a unit runs in a scratch folder (matrixbench-ray-*); its containers are still labelled and
    named with the run's name, so `matrixbench clean --run NAME` and `docker ps` find them."""
    from matrixbench.executors.ray.tasks import UnitTask, node_slot, run_unit_here, shippable

    monkeypatch.setattr(docker_client, "connect", lambda *args, **kwargs: docker_client.DockerClient(sdk))
    task = UnitTask("A100 vit bs=1", "A100", (shippable(request_for(tmp_path)),), "docker", run_name="nightly-7")
    node = {"node_id": "n1", "node_ip": "10.0.0.1", "gpu_type": "A100"}
    run_unit_here(task, node, node_slot(["0"], 1, False, cores=[0]), [], lambda image, data: None, environ={})
    started = sdk.started[0].kwargs
    assert started["labels"]["matrixbench.run_id"] == "nightly-7"
    assert started["name"].startswith("matrixbench-nightly-7-stable-")


def test_a_ray_node_stops_what_a_killed_run_of_the_same_name_left_there_before_its_unit_runs(sdk, tmp_path,
                                                                                              monkeypatch):
    """A run killed on the driver (kill -9) leaves its units' containers running on the nodes, labelled with the
    node's scratch folder, which the next run's driver cannot name. The next run's unit on that node stops the
    containers of the run's name whose owner is gone, and says so to the driver; a live owner's container (another
    unit of the run, running now) and another run's stay, and are not news; one on another machine stays, and
    the node says so (nothing here can tell whether its owner runs: it may linger)."""
    from matrixbench.executors.ray.tasks import UnitTask, node_slot, run_unit_here, shippable

    here = owner.this_process()
    gone = dataclasses.replace(here, boot_id="another-boot")

    def on_node(who, run_id="nightly-7"):
        monkeypatch.setattr(docker_backend, "this_process", lambda: who)
        labels = backend(sdk, run_id=run_id)._labels(request_for(tmp_path, out_dir=tmp_path / "ray-old" / "stable"),
                                                     sdk.images_by_tag["matrixbench:stable"])
        monkeypatch.undo()
        docker_client.DockerClient(sdk).start_container("matrixbench:stable", [], user="0:0", env={}, mounts={},
                                                        labels=labels)
        return sdk.started[-1]

    killed, alive = on_node(gone), on_node(here)
    elsewhere = on_node(dataclasses.replace(here, host="another-host", boot_id="another-kernel"))
    other_run = on_node(gone, "nightly-6")
    task = UnitTask("A100 vit bs=1", "A100", (shippable(request_for(tmp_path)),), "docker", run_name="nightly-7")
    node = {"node_id": "n1", "node_ip": "10.0.0.1", "gpu_type": "A100"}
    result = run_unit_here(task, node, node_slot(["0"], 1, False, cores=[0]), [], lambda image, data: None,
                           backend=backend(sdk, run_id="nightly-7"), environ={})
    assert killed.calls == ["stop", "remove"]
    assert alive.calls == elsewhere.calls == other_run.calls == []
    assert [line.split(" (")[0] for line in result.notes] == [f"stopped container {killed.id[:12]}",   # only news
                                                              f"left container {elsewhere.id[:12]}"]
    assert "ran on another machine" in result.notes[1]
    assert len(sdk.started) == 5     # and then the unit ran


def test_a_ray_tasks_pair_in_turns_shares_its_gpu_its_cores_and_one_baton_folder_in_two_containers(sdk, tmp_path):
    """An image pair in turns (turns_cores: 2) in a unit's task on a 4-GPU, 16-core node whose Ray gave it GPU 2: both
    sides' containers ask for GPU 2 only and GPU 2's quarter of the cores, bind-mount one host folder at /turns, and
    their cells files name it, their roles and pair, and the share's last 2 cores; the folder is gone after."""
    from matrixbench.executors.ray.tasks import UnitTask, node_slot, run_unit_here, shippable

    sdk.images_by_tag["matrixbench:latest"] = FakeImage(
        "matrixbench:latest", {"matrixbench": "1", "matrixbench.torch": "2.13.0"}, "sha256:latest")
    seen = {}

    def capture(container):   # while the container runs: its mounts and the cells file it was given
        volumes = {bind["bind"]: Path(host) for host, bind in container.kwargs["volumes"].items()}
        cells = volumes["/results"] / container.command[1].removeprefix("/results/")
        seen[container.labels["matrixbench.image"]] = (container.kwargs, volumes, json.loads(cells.read_text()),
                                                        volumes["/turns"].is_dir())

    sdk.next_container = {"on_wait": capture}
    requests = tuple(shippable(request_for(tmp_path, name, gpus=True, out_dir=tmp_path / "driver" / name))
                     for name in ("stable", "latest"))
    task = UnitTask("A100 vit bs=1", "A100", requests, "docker", pairs=(("A100/stable", "A100/latest"),),
                    turns_cores=2)
    node = {"node_id": "n1", "node_ip": "10.0.0.7", "gpu_type": "A100", "ray_gpu_ids": ["2"], "node_gpus": 4,
            "busy": 1}
    run_unit_here(task, node, node_slot(["2"], 4, True, cores=range(16)), [], lambda image, data: None,
                  backend=backend(sdk), environ={})
    assert sorted(seen) == ["latest", "stable"]
    (kwargs, volumes, cells, baton_there), (other_kwargs, other_volumes, other_cells, _) = seen.values()
    for started in (kwargs, other_kwargs):
        assert started["device_requests"][0]["DeviceIDs"] == ["2"] and started["cpuset_cpus"] == "8-11"
    assert volumes["/turns"] == other_volumes["/turns"] and baton_there
    assert not volumes["/turns"].exists()                                   # removed once both were done
    turns = {cells["turns"]["role"]: cells["turns"], other_cells["turns"]["role"]: other_cells["turns"]}
    assert {side["partner"] for side in turns.values()} == {"stable", "latest"}
    assert turns["first"]["pair_id"] == turns["second"]["pair_id"]
    assert all(side["folder"] == "/turns" and side["cores"] == [10, 11] for side in turns.values())
