"""The ray backend (issue 16) on a real two-node Ray cluster on this machine, and its parts without one.

The cluster test runs tests/ray_cluster_script.py as root in fresh network and PID namespaces
(``unshare --net --pid --fork --mount-proc``): Ray binds only to that namespace's loopback and every
Ray process dies with it. It skips, saying why, without Ray (``pip install 'matrixbench[ray]'``),
without root or without unshare.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "ray_cluster_script.py"
FAKE_TOKEN = "hf_FAKE_token_for_the_ray_test_0123456789"
TIMEOUT_S = 1800   # about 4 minutes on an idle 2-core machine; several times that under load
HANG = "resnet-tiny_bs2_eager_float32"

pytestmark = pytest.mark.ray


def _why_not():
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'matrixbench[ray]'; make test's venv has it)"
    if os.geteuid() != 0:
        return "the two-node cluster runs in its own network and PID namespaces: needs root (unshare)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare (util-linux) and ip (iproute2)"
    return None


def cluster_matrix(folder):
    """One image of this interpreter's torch, one tiny model at two batch sizes: four units, two per GPU
    type. The batch-2 cell hangs (a test fault) until its 25 s limit: the T4 node dies during it."""
    data = {
        "images": {"latest": {"torch": "torch==2.13.0", "python": "3.12", "transformers": "transformers==5.23.0",
                              "env": {"MATRIXBENCH_TEST_FAULTS": json.dumps({HANG: "hang"})}}},
        "models": {"resnet": {"id": "microsoft/resnet-50", "task": "image-classification"}},
        "size": "tiny", "weights": "random", "batch_sizes": [1, 2], "modes": ["eager"],
        "iterations": 3, "warmup": 0, "timeout_s": 25,
    }
    path = Path(folder) / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_in_namespaces(script, work, matrix, *extra, timeout):
    """``script WORK MATRIX WORK/result.json EXTRA...`` as root in fresh network and PID namespaces (skipping,
    saying why, where that cannot be); returns the JSON it wrote and the finished process."""
    why = _why_not()
    if why:
        pytest.skip(why)
    out = work / "result.json"
    # --kill-child: if the test times out and kills unshare, the namespace's processes go with it
    argv = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, str(script),
            str(work), str(matrix), str(out), *map(str, extra)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), f"the cluster script wrote no result (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(out.read_text()), done


def turns_matrix(folder):
    """Two images of this interpreter's torch (an image comparison, "latest" against "copy"), one tiny model at one
    batch size in eager: one unit, one pair, in turns, its blocks pinned to one core."""
    image = {"torch": "torch==2.13.0", "python": "3.12", "transformers": "transformers==5.23.0"}
    data = {
        "images": {"latest": image, "copy": dict(image)},
        "models": {"resnet": {"id": "microsoft/resnet-50", "task": "image-classification"}},
        "size": "tiny", "weights": "random", "batch_sizes": [1], "modes": ["eager"],
        "iterations": 3, "warmup": 0, "timeout_s": 120, "turns": True, "turns_cores": 1,
    }
    path = Path(folder) / "turns.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("ray")
    result, done = run_in_namespaces(SCRIPT, work, cluster_matrix(work), turns_matrix(work), timeout=TIMEOUT_S)
    assert "records" in result, f"the cluster script stopped early: {result.get('failure')}\n{done.stderr[-4000:]}"
    return result


def _records(result, gpu_type):
    return {name.split("/")[-1]: record for name, record in result["records"].items()
            if name.startswith(f"cluster/{gpu_type}/")}


def test_an_unknown_gpu_type_fails_before_anything_runs_naming_the_clusters_types(cluster_run):
    unknown = cluster_run["unknown"]
    assert unknown["code"] == 5
    assert "no node of the Ray cluster at 127.0.0.1:6379 has H100; its GPU types are A100, T4" in unknown["output"]
    assert unknown["results"] == [] and not unknown["results_folder"]   # refused before the run started
    assert cluster_run["unknown_s"] < 120


def test_units_run_on_the_node_of_their_gpu_type_and_their_records_reach_the_driver(cluster_run):
    head, node = cluster_run["nodes"]["127.0.0.1"], cluster_run["nodes"]["127.0.0.2"]
    a100, t4 = _records(cluster_run, "A100"), _records(cluster_run, "T4")
    assert set(a100) == set(t4) == {"resnet-tiny_bs1_eager_float32.json", f"{HANG}.json"}
    for record in a100.values():
        assert (record["placement"]["node_id"], record["placement"]["node_ip"]) == (head, "127.0.0.1")
        assert record["placement"]["gpu_type"] == "A100" and record["placement"]["ray_gpu_ids"] in (["0"], ["1"])
    t4_ok = t4["resnet-tiny_bs1_eager_float32.json"]
    assert (t4_ok["placement"]["node_id"], t4_ok["placement"]["gpu_type"]) == (node, "T4")
    assert t4_ok["status"] == a100["resnet-tiny_bs1_eager_float32.json"]["status"] == "ok"
    # --device cpu: Ray set CUDA_VISIBLE_DEVICES for its fake GPUs, the runner used none
    assert {r["device"] for r in cluster_run["records"].values()} == {"cpu"}
    assert a100[f"{HANG}.json"]["status"] == "timeout"   # the hang ran out its limit on the surviving node


def test_a_killed_node_keeps_every_returned_record_and_its_lost_cell_is_crashed_naming_it(cluster_run):
    before = cluster_run["before_kill"]
    assert "cluster/T4/latest/resnet-tiny_bs1_eager_float32.json" in before
    assert cluster_run["after_sha"] == before   # every record there at the kill is there, byte for byte
    lost = _records(cluster_run, "T4")[f"{HANG}.json"]
    assert lost["status"] == "crashed"
    assert "127.0.0.2" in lost["error"]["message"] and cluster_run["killed"]["node_id"][:12] in lost["error"]["message"]
    assert lost["placement"]["node_ip"] == "127.0.0.2"
    assert cluster_run["code"] == 0   # not every cell failed: the run finished, the crash is a status
    assert "started on node 127.0.0.2" in cluster_run["driver_log"]


def test_hf_token_reaches_the_nodes_runners_and_no_record_and_no_log(cluster_run):
    assert cluster_run["runners_with_token"] >= 1        # the hanging unit's runner, at the kill
    assert cluster_run["files_with_token"] == []
    assert cluster_run["ray_logs_with_token"] == []      # not even Ray's own logs on the nodes
    assert FAKE_TOKEN not in cluster_run["driver_log"]


def test_ctrl_c_cancels_the_outstanding_units_keeps_the_records_and_stops_their_runners(cluster_run):
    stopped = cluster_run["interrupt"]
    assert stopped["code"] == 130, stopped["output"][-3000:]
    assert stopped["records"]["A100/latest/resnet-tiny_bs1_eager_float32.json"] == "ok"   # kept
    assert stopped["records"].get(f"A100/latest/{HANG}.json") != "ok"   # stopped in its hang: none, or not ok
    assert stopped["manifest"] == "interrupted"
    assert re.search(r"cancelling [12] outstanding unit\(s\)", stopped["output"])   # 2: bs=1's task not back yet
    assert stopped["runners_left"] == [], stopped["runners_gone_s"]   # the cancelled task stopped its runner


@pytest.mark.parametrize("missing", ["no_token", "no_auth_mode"])
def test_a_driver_without_the_clusters_token_is_refused_saying_how_to_give_it(cluster_run, missing):
    refused = cluster_run["unauthenticated"][missing]
    assert refused["code"] == 5, refused["output"][-3000:]
    assert "Traceback" not in refused["output"]
    assert "RAY_AUTH_TOKEN" in refused["output"] and "docs/cluster.md" in refused["output"]
    assert not refused["results_folder"]


def test_an_image_pair_runs_in_turns_in_one_task_on_its_node_pinned_to_its_last_core(cluster_run):
    """An image comparison in turns on A100: the unit's task runs both runners at once on the head; they meet over
    the baton and take turns (one pair_id, roles first and second, each other's partner, every block measured,
    nothing lost), their blocks pinned to the last core of the task's share of the head; both records reach the
    driver."""
    run = cluster_run["turns"]["run"]
    assert run["code"] == 0, run["output"][-3000:]
    records = {name.split("/")[-2]: record for name, record in run["records"].items()}
    assert set(records) == {"latest", "copy"} and {r["status"] for r in records.values()} == {"ok"}, sorted(records)
    sides = {name: record["timing"]["turns"] for name, record in records.items()}
    assert sides["latest"]["pair_id"] == sides["copy"]["pair_id"]
    assert (sides["latest"]["role"], sides["copy"]["role"]) == ("first", "second")   # the baseline, in round 0
    assert (sides["latest"]["partner"], sides["copy"]["partner"]) == ("copy", "latest")
    for name, side in sides.items():
        placement = records[name]["placement"]
        assert side["lost"] is None and len(side["block_ms"]) == side["blocks"] == 10, (name, side)
        assert (placement["node_ip"], placement["gpu_type"]) == ("127.0.0.1", "A100")
        assert side["cores"] == placement["cores"][-1:] and side["threads"] == 1   # the task's share's last core
    assert records["latest"]["placement"]["ray_gpu_ids"] == records["copy"]["placement"]["ray_gpu_ids"]   # one task


def test_more_turns_cores_than_a_task_gets_on_its_node_is_refused_before_anything_is_written(cluster_run):
    refused = cluster_run["turns"]["refused"]
    assert refused["code"] != 0 and not refused["results_folder"]
    assert re.search(r"turns_cores: 1024: a unit's task on node 127.0.0.1 may use \d+ CPU core", refused["output"])
