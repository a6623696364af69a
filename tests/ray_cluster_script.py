"""A real two-node Ray cluster on this machine, matrixbench's driver on it, one node killed mid-run.

Run by tests/test_executor_ray.py as root inside ``unshare --net --pid --fork --kill-child --mount-proc``
(a fresh network namespace: Ray binds only to its loopback; a fresh PID namespace: every Ray process dies when
this script, its PID 1's child, ends):

    python ray_cluster_script.py WORK_DIR MATRIX OUT_JSON [TURNS_MATRIX]

Head on 127.0.0.1 with 2 fake GPUs of type A100, a second node on 127.0.0.2 with 1 fake T4 (Ray's
``accelerator_type:<T>`` resources, as it sets them for real GPUs). It runs the driver twice: once with
an unknown GPU type (H100), which must fail before submitting, then with A100,T4 (and a fake HF_TOKEN
in the driver's environment), killing the T4 node's raylet once its first record has arrived. With
TURNS_MATRIX (two images, turns: true, turns_cores: 1), before that: a run of it on A100 (both runners of
the pair at once in one task on the head), and the same with more turns_cores than an A100 task's share of the
head has (refused). It writes what it saw to OUT_JSON for the test to assert on.
"""
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FAKE_TOKEN = "hf_FAKE_token_for_the_ray_test_0123456789"
HEAD, NODE = "127.0.0.1", "127.0.0.2"
COMMON = ["--num-cpus=1", "--object-store-memory=80000000", "--disable-usage-stats"]
KILL_AFTER = "T4/latest/resnet-tiny_bs1_eager_float32.json"
HANGING_UNIT_STARTED = "T4 resnet bs=2: started on node 127.0.0.2"
START_ATTEMPTS = 3
RUNNER_APPEARS_S = 60   # from the unit's "started" line to its runner's process, at most
RUNNERS_GO_S = 20   # from the driver's exit on Ctrl-C to its cancelled tasks' runners gone, at most
RUN_TIMEOUT_S = 600   # generous: on a loaded 2-core machine everything here runs several times slower
# Ray's token authentication, as docs/cluster.md tells users to run a cluster: every node and driver has it
AUTH_TOKEN = secrets.token_hex(32)


def ray_env(temp):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0",
               RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="10",
               RAY_health_check_initial_delay_ms="0", RAY_TMPDIR=temp, TMPDIR=temp,
               RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=AUTH_TOKEN)
    for name in ("HF_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    return env


def start_cluster(temp, env):
    head = [str(BIN / "ray"), "start", "--head", f"--node-ip-address={HEAD}", "--port=6379", "--num-gpus=2",
            '--resources={"accelerator_type:A100": 1}', "--include-dashboard=false", *COMMON]
    node = [str(BIN / "ray"), "start", f"--address={HEAD}:6379", f"--node-ip-address={NODE}", "--num-gpus=1",
            '--resources={"accelerator_type:T4": 1}', *COMMON]
    for argv in (head, node):
        for attempt in range(START_ATTEMPTS):   # under load `ray start` may give up waiting for its raylet
            done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=RUN_TIMEOUT_S)
            if done.returncode == 0:
                break
            if attempt == START_ATTEMPTS - 1:
                raise RuntimeError(f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
            time.sleep(5)


def raylets():
    """ip -> (pid, node id) of each raylet, from /proc."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"/raylet"):
            args = dict(arg.decode().lstrip("-").split("=", 1) for arg in argv[1:] if b"=" in arg)
            found[args["node_ip_address"]] = (int(proc.name), args["node_id"])
    return found


def driver(matrix, results, gpu_types, env, log_path, run="cluster", extra=()):
    argv = [str(BIN / "python"), "-m", "matrixbench.cli", "run", "--matrix", str(matrix), "--results", str(results),
            "--run", run, "--executor", "ray", "--ray-address", f"{HEAD}:6379", "--backend", "local",
            "--device", "cpu", "--gpu-types", gpu_types, *extra]
    log = open(log_path, "w")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO)), log


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(work, matrix, out_json, turns_matrix=None):
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work, started = Path(work), time.monotonic()
    temp = tempfile.mkdtemp(prefix="mbray", dir="/tmp")   # short: Ray's socket paths must fit 107 bytes
    env = ray_env(temp)
    result = {}
    try:
        start_cluster(temp, env)
        result["cluster_up_s"] = time.monotonic() - started
        result["nodes"] = {ip: node_id for ip, (_, node_id) in raylets().items()}

        t0 = time.monotonic()
        process, log = driver(matrix, work / "results-unknown", "A100,H100", env, work / "unknown.log")
        code = process.wait(timeout=RUN_TIMEOUT_S)
        written = sorted(str(p.relative_to(work)) for p in (work / "results-unknown").rglob("*.json"))
        result["unknown"] = {"code": code, "output": (work / "unknown.log").read_text(), "results": written,
                             "results_folder": (work / "results-unknown").exists()}
        log.close()
        result["unknown_s"] = time.monotonic() - t0
        result["unauthenticated"] = {name: unauthenticated(matrix, work, env, name, drop)
                                     for name, drop in (("no_token", ("RAY_AUTH_TOKEN",)),
                                                        ("no_auth_mode", ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")))}
        if turns_matrix:
            result["turns"] = in_turns(turns_matrix, work, env)

        t0 = time.monotonic()
        results = work / "results"
        process, log = driver(matrix, results, "A100,T4", dict(env, HF_TOKEN=FAKE_TOKEN), work / "driver.log")
        trigger, log_path = results / "cluster" / KILL_AFTER, work / "driver.log"
        while not (trigger.exists() and HANGING_UNIT_STARTED in log_path.read_text()) \
                and process.poll() is None and time.monotonic() - t0 < RUN_TIMEOUT_S:
            time.sleep(0.2)   # the T4 node's first record is in, its unit with the hanging cell has started
        # "started" is said by the Ray task before it starts the unit's runner: under load the runner can take
        # seconds more to appear (CI at load 7 found none 1 s after the line), so wait for it, within the cell's
        # 25 s limit, and kill the node while the runner holds the hanging cell
        waited = time.monotonic()
        while not runners_with(f"HF_TOKEN={FAKE_TOKEN}") and process.poll() is None \
                and time.monotonic() - waited < RUNNER_APPEARS_S:
            time.sleep(0.2)
        time.sleep(1.0)
        before = {str(p.relative_to(results)): sha(p) for p in results.rglob("*.json") if p.name != "run.json"}
        result["runners_with_token"] = runners_with(f"HF_TOKEN={FAKE_TOKEN}")
        result["runner_appeared_s"] = time.monotonic() - waited
        pid, node_id = raylets()[NODE]
        os.kill(pid, signal.SIGKILL)
        result["killed"] = {"ip": NODE, "node_id": node_id, "at_s": time.monotonic() - t0}
        result["before_kill"] = before
        result["code"] = process.wait(timeout=RUN_TIMEOUT_S)
        log.close()
        result["run_s"] = time.monotonic() - t0
        result["records"] = {str(p.relative_to(results)): json.loads(p.read_text())
                             for p in results.rglob("*.json") if p.name not in ("run.json", "cells.json")}
        result["after_sha"] = {name: sha(results / name) for name in before}
        result["driver_log"] = (work / "driver.log").read_text()
        result["files_with_token"] = files_containing(FAKE_TOKEN, [results, work / "driver.log"])
        result["ray_logs_with_token"] = files_containing(FAKE_TOKEN, [Path(temp)])
        result["interrupt"] = interrupt(matrix, results, env, work)
    except Exception as exc:   # noqa: BLE001 -- reported in the result for the test's message
        result["failure"] = f"{type(exc).__name__}: {exc}"
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
        shutil.rmtree(temp, ignore_errors=True)
        result["total_s"] = time.monotonic() - started
        Path(out_json).write_text(json.dumps(result, indent=1, sort_keys=True))


def unauthenticated(matrix, work, env, name, drop):
    """A driver without the cluster's token (``drop``: the environment variables it lacks)."""
    t0 = time.monotonic()
    results = work / f"results-{name}"
    process, log = driver(matrix, results, "A100", {k: v for k, v in env.items() if k not in drop},
                          work / f"{name}.log")
    code = process.wait(timeout=RUN_TIMEOUT_S)
    log.close()
    return {"code": code, "output": (work / f"{name}.log").read_text(), "s": time.monotonic() - t0,
            "results_folder": results.exists()}


def in_turns(matrix, work, env):
    """More turns_cores than an A100 task's share of the head (its 2 fake GPUs split the cores) has: refused; then
    the run in turns on A100 (one unit: both runners of its pair at once in one task)."""
    found = {}
    for name, extra in (("refused", ("--set", "turns_cores=1024")), ("run", ())):
        t0, results = time.monotonic(), work / f"results-turns-{name}"
        process, log = driver(matrix, results, "A100", env, work / f"turns-{name}.log", run="turns",
                              extra=extra)
        code = process.wait(timeout=RUN_TIMEOUT_S)
        log.close()
        found[name] = {"code": code, "s": time.monotonic() - t0, "output": (work / f"turns-{name}.log").read_text(),
                       "results_folder": results.exists(),
                       "records": {str(p.relative_to(results)): json.loads(p.read_text())
                                   for p in results.rglob("*.json") if p.name not in ("run.json", "cells.json")}}
    return found


def interrupt(matrix, results, env, work):
    """Ctrl-C on a driver once its first record is in (the other unit hangs): what stays behind."""
    t0 = time.monotonic()
    process, log = driver(matrix, results, "A100", env, work / "interrupt.log", run="interrupted")
    first = results / "interrupted" / "A100" / "latest" / "resnet-tiny_bs1_eager_float32.json"
    while not first.exists() and process.poll() is None and time.monotonic() - t0 < RUN_TIMEOUT_S:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=RUN_TIMEOUT_S)
    log.close()
    # What the cancelled task stops goes within RUNNERS_GO_S (a loaded machine takes longer than a quiet one); a
    # runner its task did not stop hangs in its fault for ever (nobody is left to time it out), so it is still seen.
    stopped = time.monotonic()
    while runners() and time.monotonic() - stopped < RUNNERS_GO_S:
        time.sleep(0.2)
    folder = results / "interrupted"
    return {"code": code, "s": time.monotonic() - t0, "output": (work / "interrupt.log").read_text(),
            "runners_gone_s": round(time.monotonic() - stopped, 1),
            "records": {str(p.relative_to(folder)): json.loads(p.read_text())["status"]
                        for p in folder.rglob("*.json") if p.name not in ("run.json", "cells.json")},
            "manifest": json.loads((folder / "run.json").read_text()).get("status"),
            "runners_left": runners()}


def runners():
    """The command lines of the runners running on this machine."""
    return [" ".join(argv) for argv in commands() if argv[1:3] == ["-m", "runner"]]


def runners_with(assignment):
    """How many running runners have ``assignment`` ("NAME=value") in their environment."""
    found = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        found += argv[1:3] == [b"-m", b"runner"] and assignment.encode() in environ
    return found


def commands():
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            yield [part.decode() for part in (proc / "cmdline").read_bytes().split(b"\0") if part]
        except OSError:
            continue


def files_containing(text, roots):
    found = []
    for root in roots:
        for path in ([root] if root.is_file() else root.rglob("*")):
            try:
                if path.is_file() and text.encode() in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue
    return found


if __name__ == "__main__":
    main(*sys.argv[1:5])
