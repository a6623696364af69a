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


HOLD_LEASE = """
import json, sys, time
from pathlib import Path
from matrixbench.run import owner
with owner.holding_lease(Path(sys.argv[1])) as lease:
    print(json.dumps({**owner.this_process().labels(), **lease.labels()}), flush=True)
    time.sleep(120)
"""


def holding_a_lease(path, prefix=()):
    """A real process (in ``prefix``: e.g. another PID namespace) that holds a lease at ``path``; (it, its labels)."""
    import json
    import os
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[1])
    process = subprocess.Popen([*prefix, sys.executable, "-c", HOLD_LEASE, str(path)], stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": repo})
    return process, json.loads(process.stdout.readline())


def test_a_lease_is_held_while_its_owner_lives_and_free_once_it_is_killed(tmp_path):
    """The owner of a container in another PID namespace of this machine (same boot id) cannot be asked by its pid;
    its lease answers: held while it lives, free after kill -9 (the kernel drops the flock). Real process."""
    import signal

    process, labels = holding_a_lease(tmp_path / ".c.lease")
    here = owner.this_process()
    there = dataclasses.replace(owner.Owner.from_labels(labels), pid_ns="pid:[1]")   # as if in another namespace
    lease = owner.Lease.from_labels(labels)
    try:
        assert there.alive(here) is None
        assert owner.judge(there, lease, here) == (True, f"in another PID namespace or container, still holds its "
                                                         f"lease {tmp_path / '.c.lease'}")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    alive, how = owner.judge(there, lease, here)
    assert alive is False and "no longer holds its lease" in how
    assert (tmp_path / ".c.lease").exists()     # a killed owner leaves it: discard removes it
    lease.discard()
    assert not (tmp_path / ".c.lease").exists()


def test_a_lease_label_naming_another_file_a_link_or_another_machine_tells_nothing(tmp_path):
    """A lease's path comes from a container's label: only the very file its owner locked answers (no link
    followed, a file now at its path with another inode is not it), and only on the owner's kernel."""
    here = owner.this_process()
    there = dataclasses.replace(here, pid_ns="pid:[1]")
    with owner.holding_lease(tmp_path / ".c.lease") as lease:
        (tmp_path / ".c.lease").rename(tmp_path / "moved")     # the locked file lives on elsewhere
        (tmp_path / ".c.lease").write_text("")                 # another file at its path
        assert owner.judge(there, lease, here) == (None, f"ran in another PID namespace or container on this "
                                                         f"machine, and {tmp_path / '.c.lease'} here is not the "
                                                         f"lease its owner locked (another file)")
    assert (tmp_path / ".c.lease").exists()     # as the lease ends, the other file at its path is left alone
    (tmp_path / ".c.lease").unlink()
    (tmp_path / ".c.lease").symlink_to(tmp_path / "elsewhere")
    assert owner.judge(there, lease, here)[0] is None
    lease.discard()
    assert (tmp_path / ".c.lease").is_symlink()                 # not its file: left
    alive, how = owner.judge(dataclasses.replace(there, boot_id="another-kernel", host="elsewhere"), lease, here)
    assert alive is None and "another machine" in how
    assert owner.judge(there, None, here)[0] is None


def test_sweep_removes_only_free_lease_files_no_container_names_never_a_link_or_a_folder(tmp_path):
    """A killed owner whose container was removed by hand leaves its lease file, which no container names: the
    rerun's sweep removes it. A lease a live process holds (a real one, in another process), one a remaining
    container names, a link to a free lease and a folder of a lease's name are left."""
    import signal

    (tmp_path / "stable").mkdir()
    stale = tmp_path / "stable" / ".matrixbench-run1-stable-aaaaaa.lease"
    with owner.holding_lease(stale):
        pass
    stale.write_text("")                                       # as a killed owner leaves it: there, unlocked
    named = tmp_path / ".matrixbench-run1-stable-bbbbbb.lease"
    named.write_text("")
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / ".link.lease").symlink_to(target)
    (tmp_path / ".folder.lease").mkdir()
    process, _ = holding_a_lease(tmp_path / ".matrixbench-run1-latest-cccccc.lease")
    try:
        removed = owner.sweep_leases(tmp_path, ".*.lease", keep={named.resolve()})
        assert removed == [stale] and not stale.exists()
        assert (tmp_path / ".matrixbench-run1-latest-cccccc.lease").exists()   # held: its owner lives
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert named.exists() and target.exists() and (tmp_path / ".link.lease").is_symlink()
    assert (tmp_path / ".folder.lease").is_dir()
    assert owner.sweep_leases(tmp_path, ".*.lease", keep={named.resolve()}) == [
        tmp_path / ".matrixbench-run1-latest-cccccc.lease"]   # killed: now free
    assert owner.sweep_leases(tmp_path / "missing", ".*.lease") == []
