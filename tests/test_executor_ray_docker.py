"""The ray backend with docker on the nodes (issue 16; ``--backend docker``, the CLI's default) on a
real two-node Ray cluster on this machine: tests/ray_docker_cluster_script.py, as root in fresh network
and PID namespaces, the nodes reaching the host's Docker daemon through its socket.

The real-Docker test images (tests/conftest.py's ``docker_e2e_images``: torch 2.0.1 and 2.13) are built, or found
current, outside the namespace first, so each node finds them by their content-hash and runner-hash labels and
builds nothing; that run takes its image change in turns (``ray_docker_cluster_script.TURNS``), both containers of a
unit's pair at once on its node. A second run with ``--set registry=...`` (Debian's docker-registry on the host's
loopback, tests/conftest.py's ``registry_address``) pushes one small image once
(tests/data/docker-registry-matrix.yaml: torch's CPU build on Python 3.11, 1.85 GB, also built outside first) and
has every node pull it and run it: pushing the two torch CUDA images (11 GB) took longer than the run's 600 s limit
on a fresh machine (issue 35). Skips, saying why, without Ray, root, unshare, Docker, docker-registry or the base
images.
"""
from pathlib import Path

import pytest

from matrixbench.build.images import image_tag
from matrixbench.matrix import load_matrix
from ray_docker_cluster_script import RUN
from real_builds import BUILD_LOGS
from test_docker_e2e import MATRIX_PATH, TORCH
from test_executor_ray import run_in_namespaces

pytestmark = [pytest.mark.ray, pytest.mark.docker]

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "ray_docker_cluster_script.py"
REGISTRY_MATRIX = HERE / "data" / "docker-registry-matrix.yaml"
REGISTRY_TORCH = {"registry-cpu": "2.13.0"}
TIMEOUT_S = 2400   # the cluster, both runs (each driver run stops at ray_cluster_script.RUN_TIMEOUT_S)
CELL = "resnet-tiny_bs1_eager_float32.json"


@pytest.fixture(scope="module")
def registry_images(docker_test_client, docker_e2e_images, real_builds):
    """The registry run's one small image, built once per session; after the e2e images (one build at a time)."""
    return real_builds.images(load_matrix(REGISTRY_MATRIX), BUILD_LOGS / "docker-registry-build.log")


@pytest.fixture(scope="module")
def docker_cluster_run(docker_test_client, docker_e2e_images, registry_images, registry_address, tmp_path_factory):
    client = docker_test_client
    work = tmp_path_factory.mktemp("raydocker")
    try:
        result, done = run_in_namespaces(SCRIPT, work, MATRIX_PATH, registry_address, REGISTRY_MATRIX,
                                         timeout=TIMEOUT_S)
    finally:
        for name in REGISTRY_TORCH:   # the registry's names for the images; the images keep their own
            if client.inspect_image(f"{registry_address}/{image_tag(name)}") is not None:
                client.remove_image(f"{registry_address}/{image_tag(name)}")
    assert "records" in result, (f"the cluster script stopped early: {result.get('failure')}\n"
                                 f"{result.get('driver_log', '')[-4000:]}\n{done.stderr[-4000:]}")
    image_ids = {name: client.inspect_image(image_tag(name)).id for name in (*TORCH, *REGISTRY_TORCH)}
    return result, image_ids


def test_each_gpu_types_unit_runs_both_images_in_docker_on_its_node(docker_cluster_run):
    result, image_ids = docker_cluster_run
    assert result["code"] == 0, result["driver_log"][-4000:]
    head, node = result["nodes"]["127.0.0.1"], result["nodes"]["127.0.0.2"]
    expected = {f"docker-cluster/{gpu}/{image}/{CELL}" for gpu in ("A100", "T4") for image in TORCH}
    assert set(result["records"]) == expected, sorted(result["records"])
    for name, record in result["records"].items():
        _, gpu_type, image, _ = name.split("/")
        assert record["status"] == "ok", (name, record["error"])
        assert record["environment"]["image_name"] == image
        assert record["environment"]["image_id"] == image_ids[image]             # ran in the image, on Docker
        assert record["environment"]["torch"].split("+")[0] == TORCH[image]
        placement = record["placement"]
        assert placement["gpu_type"] == gpu_type
        assert placement["node_id"] == (head if gpu_type == "A100" else node)
        assert placement["affinity"] == placement["cores"], (name, placement)   # the container saw its cores
        assert record["device"] == "cpu"


def test_each_units_image_pair_took_turns_in_two_containers_on_its_node_pinned_to_its_shares_last_core(
        docker_cluster_run):
    """The first run in turns (TURNS): on each node, its unit's task started both images' containers at once; they met
    over the baton folder bind-mounted into both and took turns (one pair_id, first and second, each other's
    partner, every block measured, nothing lost), their blocks pinned to the last core of the task's share of the
    node, which both containers were given."""
    result, _ = docker_cluster_run
    for gpu_type in ("A100", "T4"):
        records = {image: result["records"][f"docker-cluster/{gpu_type}/{image}/{CELL}"] for image in TORCH}
        sides = {image: record["timing"]["turns"] for image, record in records.items()}
        assert sides["e2e-stable"]["pair_id"] == sides["e2e-latest"]["pair_id"], sides
        assert (sides["e2e-stable"]["role"], sides["e2e-latest"]["role"]) == ("first", "second")   # round 0
        assert (sides["e2e-stable"]["partner"], sides["e2e-latest"]["partner"]) == ("e2e-latest", "e2e-stable")
        for image, side in sides.items():
            placement = records[image]["placement"]
            assert side["lost"] is None and len(side["block_ms"]) == side["blocks"] == 10, (gpu_type, image, side)
            assert side["cores"] == placement["cores"][-1:] and side["threads"] == 1, (gpu_type, image, side)
        assert records["e2e-stable"]["placement"]["cores"] == records["e2e-latest"]["placement"]["cores"]


def test_the_bill_counts_the_units_the_clusters_nodes_run_at_once(docker_cluster_run):
    """Asked of the cluster as the run started: the head's 2 A100s run one unit at a time (it was started with one
    CPU, and a unit's task holds one), the T4 node one."""
    result, _ = docker_cluster_run
    (bill,) = [line for line in result["driver_log"].splitlines() if line.startswith("estimated duration")]
    assert ", 2 runner(s) at once: A100 1, T4 1 (asked the Ray cluster at 127.0.0.1:6379: the units its 2 live " \
           "node(s) run at once, a unit's task holding a CPU and a GPU of its type; earlier records" in bill, bill


def test_the_nodes_found_the_images_current_and_built_nothing(docker_cluster_run):
    result, _ = docker_cluster_run
    log = result["driver_log"]
    for ip in ("127.0.0.1", "127.0.0.2"):
        for image in TORCH:
            assert f"[{ip}] [{image}] {image_tag(image)} is up to date on node {ip}" in log, log[-4000:]
    assert "building matrixbench:" not in log


def test_no_container_of_the_run_is_left(docker_cluster_run):
    """Only the run's own containers are looked at (other docker tests run beside this one): the filter saw
    them while the run ran (a container per image and unit), and none is left after."""
    result, _ = docker_cluster_run
    during = result["containers_during"]
    assert during and all(name.startswith(f"matrixbench-{RUN}-") for name in during), during
    assert {image for image in TORCH if any(f"-{image}-" in name for name in during)} == set(TORCH), during
    assert set(result["containers_after"]) <= set(result["containers_before"])


def test_with_a_registry_the_driver_pushes_once_and_each_node_pulls_and_runs_the_same_images(docker_cluster_run,
                                                                                          registry_address):
    result, image_ids = docker_cluster_run
    assert "registry" in result, f"the cluster script stopped before the registry run: {result.get('failure')}"
    pulled = result["registry"]
    assert "failure" not in pulled, (f"the registry run did not finish after {pulled['s']:.0f} s: "
                                     f"{pulled['failure']}\n{pulled['log'][-4000:]}")
    assert pulled["code"] == 0, pulled["log"][-4000:]
    log = pulled["log"]
    for image in REGISTRY_TORCH:
        source = f"{registry_address}/{image_tag(image)}"
        assert log.count(f"[{image}] pushed {source}") == 1                      # once, from the driver
        for ip in ("127.0.0.1", "127.0.0.2"):
            assert f"[{ip}] [{image}] pulled {source} as {image_tag(image)}" in log   # by every GPU node
    assert "is up to date on node" not in log                                   # no build-on-node step
    expected = {f"docker-cluster-registry/{gpu}/{image}/{CELL}" for gpu in ("A100", "T4") for image in REGISTRY_TORCH}
    assert set(pulled["records"]) == expected, sorted(pulled["records"])       # every image on both nodes
    for name, record in pulled["records"].items():
        image = name.split("/")[2]
        assert record["status"] == "ok" and record["environment"]["image_id"] == image_ids[image]
        assert record["environment"]["torch"] == f"{REGISTRY_TORCH[image]}+cpu"   # the small CPU build, as named


def test_a_killed_runs_containers_are_stopped_by_the_nodes_when_it_runs_again(docker_cluster_run):
    """The run killed with kill -9 (its driver and the node processes owning its containers) while both nodes'
    containers run: the containers outlive it; the same run again stops them before its units, says so once a
    container (the two nodes share this host's Docker daemon, so both see both), and finishes with every record
    and no container of the run left."""
    result, _ = docker_cluster_run
    assert "killed" in result, f"the cluster script stopped before the killed run: {result.get('failure')}"
    killed = result["killed"]
    assert len(killed["running_at_kill"]) == 2, killed["first_log"][-4000:]      # one a node, both running
    assert len(killed["owners_killed"]) == 2
    left = set(killed["running_after_kill"])
    assert left == set(killed["running_at_kill"]), "the containers did not outlive the killed run"
    assert killed["code"] == 0, killed["log"][-4000:]
    stopped = [line for line in killed["log"].splitlines() if "left running by a killed run" in line]
    assert len(stopped) == len(left), killed["log"][-4000:]
    for line in stopped:
        assert "stopped container" in line and "gone" in line
    assert sorted(line.split("stopped container ")[1].split()[0] for line in stopped) == killed["ids_after_kill"]
    expected = {f"{RUN}-killed/{gpu}/{image}/{CELL}" for gpu in ("A100", "T4") for image in TORCH}
    assert set(killed["records"]) == expected, sorted(killed["records"])
    assert all(record["status"] == "ok" and record["settings"]["iterations"] == 5
               for record in killed["records"].values())   # the second run's, not the killed one's
    assert killed["containers_after"] == []
