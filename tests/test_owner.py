"""The owner of a run's containers: this host's name and boot id, a pid and its start time."""
import dataclasses
import subprocess
import sys

from matrixbench.run import owner


def test_this_process_is_alive_and_round_trips_through_labels():
    here = owner.this_process()
    assert here.start and here.boot_id   # Linux: /proc answers
    assert owner.Owner.from_labels(here.labels()) == here
    assert here.alive(here) is True


def test_a_dead_pid_a_reused_pid_and_a_reboot_are_gone():
    here = owner.this_process()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert owner.Owner(here.host, here.boot_id, child.pid, "1").alive(here) is False
    assert dataclasses.replace(here, start=str(int(here.start) + 1)).alive(here) is False
    assert dataclasses.replace(here, boot_id="before-a-reboot").alive(here) is False


def test_another_host_or_no_proc_cannot_tell():
    here = owner.this_process()
    assert dataclasses.replace(here, host="elsewhere").alive(here) is None
    assert here.alive(dataclasses.replace(here, boot_id="")) is None


def test_labels_without_an_owner_name_none():
    assert owner.Owner.from_labels({"matrixbench": "1"}) is None
    assert owner.Owner.from_labels({**owner.this_process().labels(), "matrixbench.owner.pid": "x"}) is None


def test_an_owner_in_another_pid_namespace_cannot_be_asked_about_from_here(tmp_path):
    """A process in its own PID namespace on this host (a Ray node of tests/test_executor_ray_docker.py, a driver in
    a container) names a pid that means another process here, or none: neither alive nor gone, as one on another
    host, so a leftover-stopper never stops a live unit's container. Real: unshare(1) as root."""
    import json
    import shutil

    import pytest

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    code = "import json; from matrixbench.run import owner; print(json.dumps(owner.this_process().labels()))"
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"unshare --pid refused here: {done.stderr.strip()[:200]}")
    there = owner.Owner.from_labels(json.loads(done.stdout))
    here = owner.this_process()
    assert there is not None and there.pid_ns and there.pid_ns != here.pid_ns and there.pid < 10   # its own pids
    assert (there.host, there.boot_id) == (here.host, here.boot_id)
    assert there.alive(here) is None
    # a container labelled before the namespace was recorded: judged as before, by pid and start time
    assert dataclasses.replace(here, pid_ns="").alive(here) is True
    assert owner.Owner.from_labels({key: value for key, value in here.labels().items()
                                    if not key.endswith("pid_ns")}).pid_ns == ""
