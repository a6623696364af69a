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
