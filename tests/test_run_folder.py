"""One writer per run folder: the lock, a dead holder taken over, run.json's history, scratch folders."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from host_helpers import RecordingBackend, use_backend, write_matrix
from matrixbench.errors import RunLockedError
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.run.command import RunOptions, run_matrix
from matrixbench.run.folder import RunLock
from matrixbench.run.layout import LOCK_FILENAME
from matrixbench.run.manifest import read_manifest
from runner.files import ROOM_PREFIX
from runner.schema import SCRATCH_DIRNAME
from test_run import RecordingProgress

ROOT = Path(__file__).resolve().parents[1]

HOLDER = textwrap.dedent("""
    import sys, time
    from matrixbench.run.manifest import write_manifest
    from matrixbench.run.folder import RunLock
    RunLock(sys.argv[1], ["matrixbench", "run", "--run", "r1"]).acquire()
    write_manifest(sys.argv[1], {"schema_version": 1, "status": "running", "command": ["matrixbench", "run"],
                                 "started_at": "2026-01-01T00:00:00+00:00", "matrix_hash": "first"})
    print("locked", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def matrix(tmp_path):
    return load_matrix(write_matrix(tmp_path))


@pytest.fixture
def run_path(tmp_path):
    path = tmp_path / "results" / "r1"
    path.mkdir(parents=True)
    return path


def _options(tmp_path, **changes):
    values = dict(run_name="r1", results_root=tmp_path / "results", backend="local", device="auto",
                  cache_root=tmp_path / "cache", hf_cache_dir=tmp_path / "hf",
                  command=("matrixbench", "run", "--run", "r1"))
    return RunOptions(**{**values, **changes})


def _holder(run_path):
    """Another process holding the run's lock (and a run.json saying "running")."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_path)], stdout=subprocess.PIPE,
                               text=True, env=env)
    assert process.stdout.readline().strip() == "locked"
    return process


def test_a_second_run_on_a_locked_folder_is_refused_with_the_holders_details(matrix, tmp_path, run_path,
                                                                             monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    holder = _holder(run_path)
    try:
        with pytest.raises(RunLockedError) as caught:
            run_matrix(matrix, _options(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    message = str(caught.value)
    assert f"pid {holder.pid}" in message and "matrixbench run --run r1" in message and "in use" in message
    assert backend.requests == []
    assert read_manifest(run_path)["matrix_hash"] == "first"   # the holder's run.json is untouched


def test_a_lock_left_by_a_killed_run_is_taken_over_and_run_json_says_killed(matrix, tmp_path, run_path,
                                                                           monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    holder = _holder(run_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (run_path / LOCK_FILENAME).exists()
    progress = RecordingProgress()
    run_matrix(matrix, _options(tmp_path), progress=progress)
    notes = [event[1] for event in progress.events if event[0] == "note"]
    assert any("was killed" in note and f"pid {holder.pid}" in note for note in notes), notes
    manifest = read_manifest(run_path)
    assert manifest["history"][0]["status"] == "killed" and manifest["status"] == "finished"
    assert not (run_path / LOCK_FILENAME).exists()


def test_the_lock_is_released_after_a_run_and_after_ctrl_c(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(stop_after=1))
    with pytest.raises(KeyboardInterrupt):
        run_matrix(matrix, _options(tmp_path))
    with RunLock(tmp_path / "results" / "r1") as lock:
        assert lock.stale is None


def test_ctrl_c_records_the_cells_that_finished(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(stop_after=3))
    with pytest.raises(KeyboardInterrupt):
        run_matrix(matrix, _options(tmp_path))
    manifest = read_manifest(tmp_path / "results" / "r1")
    assert manifest["status"] == "interrupted"
    assert manifest["cells"]["ran"] == 3 and manifest["cells"]["statuses"] == {"ok": 3}


def test_run_json_history_keeps_what_each_invocation_said(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path, note="first"))
    first = read_manifest(tmp_path / "results" / "r1")
    changed = load_matrix(matrix.path, Overrides(models=["vit"]))
    run_matrix(changed, _options(tmp_path, note="second", force=True))
    history = read_manifest(tmp_path / "results" / "r1")["history"]
    assert history == [{key: value for key, value in first.items() if key != "history"}]
    assert history[0]["matrix_hash"] == matrix.content_hash() != changed.content_hash()


def test_scratch_folders_a_killed_run_left_are_removed_by_the_next_run(matrix, tmp_path, run_path,
                                                                     monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    left = run_path / "stable" / SCRATCH_DIRNAME / "matrixbench-cell-abc123"
    left.mkdir(parents=True)
    (left / "inductor.json").write_text("{}")
    room = run_path / "stable" / f"{ROOM_PREFIX}4242.0badcafe.tmp"   # the disk space a killed runner held
    room.write_bytes(b"\0" * 4096)
    progress = RecordingProgress()
    run_matrix(matrix, _options(tmp_path), progress=progress)
    assert not (run_path / "stable" / SCRATCH_DIRNAME).exists() and not room.exists()
    assert ("note", f"removed 1 scratch folder(s) a killed run left in {run_path}") in progress.events


def test_a_second_lock_in_the_same_process_is_refused_too(run_path):
    with RunLock(run_path, ["first"]):
        with pytest.raises(RunLockedError, match="first"):
            RunLock(run_path, ["second"]).acquire()


def test_a_lock_a_dead_hosts_runner_still_holds_refuses_naming_the_runner(tmp_path):
    """The runner inherits the run lock: its host gone, the folder stays locked until it ends, and
    the refusal names it (issue 24: a rerun never adopts a folder whose runner lives)."""
    import time

    from matrixbench.environments.local import _running
    from matrixbench.run.folder import RunLock

    host = ("import os, subprocess\nfrom matrixbench.run.folder import RunLock, held_lock_fds\n"
            f"RunLock({str(tmp_path)!r}, ['matrixbench', 'run']).acquire()\n"
            "child = subprocess.Popen(['sleep', '600'], pass_fds=held_lock_fds(), stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL)\n"
            "print(child.pid, flush=True)\nos._exit(0)\n")   # dies without releasing, as kill -9 would
    done = subprocess.run([sys.executable, "-c", host], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    runner = int(done.stdout)
    try:
        with pytest.raises(RunLockedError, match=rf"host process is gone.*pid {runner} \(sleep 600\).*kill {runner}"):
            RunLock(tmp_path).acquire()
    finally:
        os.kill(runner, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while _running(runner) and time.monotonic() < deadline:
        time.sleep(0.05)
    lock = RunLock(tmp_path).acquire()
    assert lock.stale["command"] == ["matrixbench", "run"]
    lock.release()


# --- a folder the file system refuses -------------------------------------------------------

def test_a_results_folder_the_file_system_refuses_exits_9_naming_the_option_and_the_folder(tmp_path):
    from matrixbench.errors import FILESYSTEM_EXIT_CODE, ResultsFolderUnwritableError
    from matrixbench.run.folder import prepare

    with pytest.raises(ResultsFolderUnwritableError) as refused:   # /proc takes no new folder (ENOENT)
        prepare(Path("/proc/matrixbench-x/default"))
    assert refused.value.exit_code == FILESYSTEM_EXIT_CODE == 9
    assert str(refused.value).startswith("--results: cannot make /proc/matrixbench-x/default")
    assert "choose another --results" in str(refused.value)


@pytest.mark.parametrize("uid, folder, chown", [
    (1000, "home/results", True),       # a user's folder: giving it to the user helps
    (0, "home/results", False),         # root: chown changes nothing
    (1000, "/sys/kernel/mb", False),    # the kernel's folders: no owner change makes them writable
    (1000, "/proc/mb", False),
])
def test_chown_is_advised_only_where_it_could_help(tmp_path, monkeypatch, uid, folder, chown):
    from matrixbench.run import folder as run_folder

    path = Path(folder) if folder.startswith("/") else tmp_path / folder
    monkeypatch.setattr(run_folder.os, "getuid", lambda: uid)
    monkeypatch.setattr(run_folder, "_read_only", lambda path: False)   # the EACCES branch, wherever it is
    message = run_folder._cannot_write(path / "default")
    assert "permission denied for this user" in message and "Choose another --results" in message
    assert ("sudo chown -R" in message) is chown, message


def test_a_system_folder_refused_is_told_to_choose_another_not_to_chown(tmp_path, monkeypatch):
    """As root (EPERM, or EROFS where /sys is mounted read-only) and as any other user (EACCES) alike."""
    from click.testing import CliRunner

    from matrixbench.cli import main

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "--matrix", str(write_matrix(tmp_path)), "--backend", "local",
                                       "--device", "cpu", "--results", "/sys/kernel/matrixbench-x"])
    assert result.exit_code == 9, result.output
    assert "--results" in result.stderr and "/sys/kernel" in result.stderr and "chown" not in result.stderr
