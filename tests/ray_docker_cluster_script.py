"""A real two-node Ray cluster on this machine whose nodes run the runner in Docker (``--backend
docker``, the CLI's default): the docker-backed variant of tests/ray_cluster_script.py.

Run by tests/test_executor_ray_docker.py as root inside ``unshare --net --pid --fork --kill-child
--mount-proc``, after the test built the real-Docker test images outside the namespace:

    python ray_docker_cluster_script.py WORK_DIR MATRIX OUT_JSON REGISTRY REGISTRY_MATRIX

Ray binds only to the namespace's loopback; the nodes reach the host's Docker daemon through its unix
socket, and the containers run in the daemon's own namespaces (the runner needs no network). Head:
2 fake A100s on 127.0.0.1, second node: 1 fake T4 on 127.0.0.2. The driver runs one tiny model at
batch 1, eager, in both images, on both GPU types: two units, each running both images on its node.
That run takes image changes in turns (``TURNS``: turns, its blocks pinned to one core): each unit's task starts
both images' containers at once on its node, sharing a baton folder and the task's share of the cores.
Then a run of REGISTRY_MATRIX (one small image, tests/data/docker-registry-matrix.yaml) under another name with
``--set registry=REGISTRY`` (a registry the test started on the host's loopback, where the Docker daemon pushes
and pulls): its outcome, or why it did not finish, under "registry". Last, a run killed (SIGKILL) while its
containers run, then the same run again (``killed_run``): under "killed". It writes what it saw to OUT_JSON.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ray_cluster_script import BIN, HEAD, REPO, RUN_TIMEOUT_S, ray_env, raylets, start_cluster

RUN = "docker-cluster"
TURNS = ("--set", "turns=true", "--set", "turns_cores=1")   # the first run's: a pair in turns a unit


KILLED_RUN = f"{RUN}-killed"
LONG_ITERATIONS = 300000     # the killed run's cells: minutes of calls, so its containers outlive its driver


def driver_argv(matrix, results, run=RUN, extra=()):
    return [str(BIN / "python"), "-m", "matrixbench.cli", "run", "--matrix", str(matrix), "--results", str(results),
            "--run", run, *extra, "--executor", "ray", "--backend", "docker", "--ray-address", f"{HEAD}:6379",
            "--device", "cpu",
            "--gpu-types", "A100,T4", "--models", "resnet", "--modes", "eager"]


def driver(matrix, results, env, log_path, run=RUN, extra=()):
    with open(log_path, "w") as log:
        return subprocess.run(driver_argv(matrix, results, run, extra), env=env, stdout=log,
                              stderr=subprocess.STDOUT, cwd=str(REPO), timeout=RUN_TIMEOUT_S).returncode


def matrixbench_containers(run=RUN, running_only=False):
    """The names of the containers matrixbench labelled as this script's run's (``--run``) that Docker still has,
    running or not (``running_only``: running). Only the run's own: other tests' containers come and go on the
    same daemon meanwhile (the docker group runs beside this test, and the killed-host test leaves one of its
    run's on purpose)."""
    done = subprocess.run(["docker", "ps", *(() if running_only else ("-a",)), "--filter", "label=matrixbench",
                           "--filter", f"label=matrixbench.run_id={run}", "--format", "{{.Names}}"],
                          capture_output=True, text=True, timeout=60)
    return [name for name in done.stdout.split() if name]


def owner_pids(run):
    """The pids the run's running containers name as their owner (run.owner's label; the nodes' processes, in
    this script's PID namespace)."""
    done = subprocess.run(["docker", "ps", "--filter", "label=matrixbench", "--filter",
                           f"label=matrixbench.run_id={run}", "--format", '{{.Label "matrixbench.owner.pid"}}'],
                          capture_output=True, text=True, timeout=60)
    return sorted({int(pid) for pid in done.stdout.split() if pid.isdigit()})


def killed_run(matrix, work, env):
    """A run killed with kill -9 (its driver and the node processes that own its containers) while its containers
    run on both nodes, then run again under the same name: {running_at_kill, owners_killed, running_after_kill,
    ids_after_kill, code, log, records, containers_after, s}. The containers run on in the daemon; the second
    run's nodes must stop them (docker.py ``stop_run_leftovers``) before their units, and say so, once each."""
    t0, results, step = time.monotonic(), work / "killed", {}
    first_log = work / "killed-first.log"
    with open(first_log, "w") as log:
        first = subprocess.Popen(driver_argv(matrix, results, KILLED_RUN, ("--iterations", str(LONG_ITERATIONS))),
                                 env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and first.poll() is None and \
            len(matrixbench_containers(KILLED_RUN, running_only=True)) < 2:
        time.sleep(0.5)
    step["running_at_kill"] = matrixbench_containers(KILLED_RUN, running_only=True)
    owners = owner_pids(KILLED_RUN)
    for pid in owners:  # kill -9 of the run: the node processes that started the containers, then the driver
        try:            # at once (before it could retry their tasks), so no finally of theirs stops them
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    first.kill()
    first.wait()
    step["owners_killed"] = owners
    step["running_after_kill"] = matrixbench_containers(KILLED_RUN, running_only=True)
    done = subprocess.run(["docker", "ps", "--filter", f"label=matrixbench.run_id={KILLED_RUN}", "--format", "{{.ID}}"],
                          capture_output=True, text=True, timeout=60)
    step["ids_after_kill"] = sorted(done.stdout.split())     # short ids, as the nodes' lines name them
    step["first_log"] = first_log.read_text()
    again_log = work / "killed-again.log"
    step["code"] = driver(matrix, results, env, again_log, run=KILLED_RUN)
    step["log"] = again_log.read_text()
    step["records"] = {str(p.relative_to(results)): json.loads(p.read_text())
                       for p in results.rglob("*.json") if p.name not in ("run.json", "cells.json")}
    step["containers_after"] = matrixbench_containers(KILLED_RUN)
    step["s"] = time.monotonic() - t0
    return step


def watch_containers(seen, stop, every_s=0.5):
    """Add the names of the run's containers (``matrixbench_containers``) to ``seen`` every ``every_s`` until
    ``stop`` is set: what the run's filter saw while the run ran, so that "none left after" is known to look
    at the containers the run made."""
    while not stop.is_set():
        seen.update(matrixbench_containers())
        stop.wait(every_s)


def registry_run(matrix, work, env, registry):
    """The run through the registry: {code, s, log, records}, or {failure, s, log} when it did not finish (a
    timeout reads as one, with the log so far)."""
    t0, pulled, log_path = time.monotonic(), work / "registry", work / "registry.log"
    step = {}
    try:
        step["code"] = driver(matrix, pulled, env, log_path, run=f"{RUN}-registry",
                              extra=("--set", f"registry={registry}"))
        step["records"] = {str(p.relative_to(pulled)): json.loads(p.read_text())
                           for p in pulled.rglob("*.json") if p.name not in ("run.json", "cells.json")}
    except Exception as exc:   # noqa: BLE001 -- reported in the result for the test's message
        step["failure"] = f"{type(exc).__name__}: {exc}"
    step["s"] = time.monotonic() - t0
    step["log"] = log_path.read_text() if log_path.exists() else ""
    return step


def main(work, matrix, out_json, registry, registry_matrix):
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work, started = Path(work), time.monotonic()
    temp = tempfile.mkdtemp(prefix="mbrdk", dir="/tmp")   # short: Ray's socket paths must fit 107 bytes
    env = ray_env(temp)
    result = {"containers_before": matrixbench_containers()}
    try:
        start_cluster(temp, env)
        result["cluster_up_s"] = time.monotonic() - started
        result["nodes"] = {ip: node_id for ip, (_, node_id) in raylets().items()}
        t0 = time.monotonic()
        results = work / "results"
        seen, stop = set(), threading.Event()
        watcher = threading.Thread(target=watch_containers, args=(seen, stop), daemon=True)
        watcher.start()
        try:
            result["code"] = driver(matrix, results, env, work / "driver.log", extra=TURNS)
        finally:
            stop.set()
            watcher.join(timeout=60)
        result["containers_during"] = sorted(seen - set(result["containers_before"]))
        result["run_s"] = time.monotonic() - t0
        result["records"] = {str(p.relative_to(results)): json.loads(p.read_text())
                             for p in results.rglob("*.json") if p.name not in ("run.json", "cells.json")}
        result["driver_log"] = (work / "driver.log").read_text()
        result["containers_after"] = matrixbench_containers()
        result["registry"] = registry_run(registry_matrix, work, env, registry)
        result["killed"] = killed_run(matrix, work, env)
    except Exception as exc:   # noqa: BLE001 -- reported in the result for the test's message
        result["failure"] = f"{type(exc).__name__}: {exc}"
        log = work / "driver.log"
        result["driver_log"] = log.read_text() if log.exists() else ""
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
        result["total_s"] = time.monotonic() - started
        Path(out_json).write_text(json.dumps(result, indent=1, sort_keys=True))
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
