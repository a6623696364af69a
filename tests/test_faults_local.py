"""Fault scenarios, for real on the local backend (issue 24): the host stopped by SIGINT (started
with SIGINT ignored, as a background job is), SIGTERM and SIGHUP; the host killed with ``kill -9``
while a rerun races its orphaned runner; the runner killed with ``kill -9``; the host killed with
``kill -9`` while its runner starts (issue 33: the forkserver importing on for minutes).

Each starts `matrixbench run --backend local` on tiny resnet (batch sizes 1 and 2, eager): batch
size 1 records, batch size 2 hangs (an injected fault) until the fault strikes. Afterwards: the
finished record is untouched, no process of the run is left, run.json says what happened, and a
rerun resumes (``--timeout 5`` ends the hanging cell as a timeout record; the finished one is
skipped). Polling waits for conditions, never for time.
"""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from matrixbench.environments.local import _running, descendants
from matrixbench.run.folder import lock_holders
from matrixbench.run.layout import LOCK_FILENAME
from runner.faults import FORKSERVER

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
FIRST, HUNG = "resnet-tiny_bs1_eager_float32", "resnet-tiny_bs2_eager_float32"
WAIT_S = 600
MATRIX = {
    "images": {"latest": {"torch": "torch==2.13.0", "python": "3.12", "transformers": "transformers==5.23.0",
                          "env": {"MATRIXBENCH_TEST_FAULTS": json.dumps({HUNG: "hang"})}}},
    "weights": "random", "size": "tiny",
    "models": {"resnet": {"id": "microsoft/resnet-50", "task": "image-classification"}},
    "batch_sizes": [1, 2], "modes": ["eager"], "dtypes": ["float32"], "repeats": 1,
    "iterations": 3, "warmup": 1, "timeout_s": 600,
}


class Run:
    """One `matrixbench run` of the test matrix in ``folder``, in a session of its own."""

    def __init__(self, folder, *args, ignore_sigint=False):
        self.folder, self.run_path = folder, folder / "results" / "default"
        self.out_dir = self.run_path / "latest"
        self.log_path = folder / f"host-{time.monotonic_ns()}.log"
        argv = [sys.executable, "-m", "matrixbench.cli", "run", "--matrix", str(folder / "m.yaml"),
                "--backend", "local", "--device", "cpu", "--cache-dir", str(folder / "cache"), *args]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(argv, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=ignore)

    @property
    def output(self):
        return self.log_path.read_text()

    def wait(self):
        code = self.process.wait(timeout=WAIT_S)
        return code, self.output

    def until_hung(self):
        """Wait until the first cell has its record and the second runs; return the runner's pid."""
        runner_log = self.out_dir / "runner.log"
        wait_for(lambda: (self.out_dir / f"{FIRST}.json").exists() and runner_log.exists()
                 and f"{HUNG}: running" in runner_log.read_text(), self, "the second cell to start")
        runners = [pid for pid in lock_holders(self.run_path / LOCK_FILENAME) if pid != self.process.pid]
        assert len(runners) == 1, (runners, self.output)
        return runners[0]

    def manifest(self):
        return json.loads((self.run_path / "run.json").read_text())


def wait_for(condition, run, what):
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert run.process.poll() is None or what == "the processes to end", f"host ended:\n{run.output}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}:\n{run.output}"
        time.sleep(0.1)


def gone(pids, run):
    wait_for(lambda: not any(_running(pid) for pid in pids), run, "the processes to end")


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    return tmp_path


def resumes(folder, first_bytes):
    """A rerun skips the finished cell and records the hanging one as a timeout."""
    code, output = Run(folder, "--timeout", "5").wait()
    out_dir = folder / "results" / "default" / "latest"
    assert code == 0, output
    assert (out_dir / f"{FIRST}.json").read_bytes() == first_bytes, "the finished record was rewritten"
    assert json.loads((out_dir / f"{HUNG}.json").read_text())["status"] == "timeout"
    assert not list(out_dir.glob("*.tmp")) and not list(out_dir.glob(".*.tmp"))
    return json.loads((folder / "results" / "default" / "run.json").read_text())


@pytest.mark.parametrize("sig, code, ignore_sigint", [
    ("SIGINT", 130, True), ("SIGTERM", 143, False), ("SIGHUP", 129, False)])
def test_a_stop_signal_stops_the_run_like_ctrl_c(folder, sig, code, ignore_sigint):
    run = Run(folder, ignore_sigint=ignore_sigint)
    runner = run.until_hung()
    below = descendants(runner)
    first = (run.out_dir / f"{FIRST}.json").read_bytes()
    run.process.send_signal(getattr(signal, sig))
    assert run.wait()[0] == code, run.output
    assert f"interrupted ({sig})" in run.output and "Traceback" not in run.output
    gone([runner, *below], run)
    manifest = run.manifest()
    assert (manifest["status"], manifest["stopped_by"]) == ("interrupted", sig)
    assert (run.out_dir / f"{FIRST}.json").read_bytes() == first
    assert not (run.out_dir / f"{HUNG}.json").exists()
    history = resumes(folder, first)["history"]
    assert [(entry["status"], entry.get("stopped_by")) for entry in history] == [("interrupted", sig)]


def test_a_killed_host_takes_its_runner_along_and_a_rerun_never_adopts_a_live_one(folder):
    run = Run(folder)
    runner = run.until_hung()
    below = descendants(runner)
    first = (run.out_dir / f"{FIRST}.json").read_bytes()
    os.kill(runner, signal.SIGSTOP)   # the orphan outlives its host for as long as the test wants
    try:
        os.kill(run.process.pid, signal.SIGKILL)
        run.wait()
        racing = Run(folder, "--timeout", "5")
        code, output = racing.wait()
        assert code == 5 and f"pid {runner}" in output and "runner" in output and "Traceback" not in output, output
        assert (run.out_dir / f"{FIRST}.json").read_bytes() == first
        assert run.manifest()["status"] == "running"   # the refused rerun changed nothing
    finally:
        os.kill(runner, signal.SIGCONT)   # its pending death signal (its host died) lands now
    gone([runner, *below], run)
    history = resumes(folder, first)["history"]
    assert [entry["status"] for entry in history] == ["killed"]


def test_a_killed_runner_leaves_no_cell_behind_and_the_run_says_incomplete(folder):
    run = Run(folder)
    runner = run.until_hung()
    below = descendants(runner)
    assert below, "the runner's forkserver and cell process"
    first = (run.out_dir / f"{FIRST}.json").read_bytes()
    os.kill(runner, signal.SIGKILL)
    code, output = run.wait()
    assert code == 5 and "1 cell(s) without a record" in output and "Traceback" not in output, output
    gone(below, run)
    assert run.manifest()["status"] == "incomplete"
    history = resumes(folder, first)["history"]
    assert [entry["status"] for entry in history] == ["incomplete"]


def marked(marker):
    """Every live process whose environment holds ``marker`` (zombies, whose environment is gone, aside)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            held = marker.encode() in environ.read_bytes()
        except OSError:
            continue
        if held and _running(int(environ.parent.name)):
            found.append(int(environ.parent.name))
    return found


def command_line(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the processes' environments in /proc")
def test_a_host_killed_while_its_runner_starts_leaves_no_forkserver_importing_on(tmp_path):
    """The forkserver's preload never ends (fault "hang" under FORKSERVER: a preload that takes minutes on
    a loaded machine); the host is killed with ``kill -9`` as soon as the runner has started the forkserver.
    Within seconds no process of the run is left: the runner (its host's death signal), its forkserver
    still importing (its runner's), everything they started."""
    marker = f"MATRIXBENCH_TEST_RUN_{uuid.uuid4().hex}"
    matrix = json.loads(json.dumps(MATRIX))
    matrix["images"]["latest"]["env"] = {"MATRIXBENCH_TEST_FAULTS": json.dumps({FORKSERVER: "hang"}), marker: "1"}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(matrix))
    run = Run(tmp_path)
    try:
        forkservers = []

        def forkserver_started():
            forkservers[:] = [pid for pid in marked(marker) if "multiprocessing.forkserver" in command_line(pid)]
            return forkservers

        wait_for(forkserver_started, run, "the runner to start its forkserver")
        os.kill(run.process.pid, signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 30
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {pid: command_line(pid) for pid in marked(marker)}
        assert not left, f"still running 30 s after the host was killed: {left}\n{run.output}"
        assert not list(run.out_dir.glob("*_float32*.json")), "no cell ran"
    finally:
        for pid in marked(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
