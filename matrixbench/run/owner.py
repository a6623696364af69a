"""The host process that owns what a run started (its containers), and whether it still lives.

An owner is named by its host's name, the host's boot id (``/proc/sys/kernel/random/boot_id``),
its pid and that pid's start time (``/proc/<pid>/stat``, field 22, in clock ticks since boot):
a pid that a later process reuses, or a reboot, is not the owner. A pid means something only in its
PID namespace (``/proc/self/ns/pid``): an owner in another one (a Ray node in its own namespaces on
this host, a driver in a container) is one this process cannot ask about, as one on another host.
Carried as container labels, so a run can find the containers of a killed (``kill -9``) run and stop them.
"""
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
PID_NAMESPACE_PATH = Path("/proc/self/ns/pid")
LABEL_PREFIX = "matrixbench.owner."
FIELDS = ("host", "boot_id", "pid", "start")
OPTIONAL_FIELDS = ("pid_ns",)   # absent from the labels of containers started before it was recorded


@dataclass(frozen=True)
class Owner:
    host: str
    boot_id: str
    pid: int
    start: str     # the pid's start time; "" where /proc cannot say
    pid_ns: str = ""   # the pid's namespace ("pid:[4026531836]"); "" where /proc cannot say or no label had it

    def labels(self) -> Dict[str, str]:
        return {f"{LABEL_PREFIX}{name}": str(getattr(self, name)) for name in FIELDS + OPTIONAL_FIELDS}

    @classmethod
    def from_labels(cls, labels: Dict[str, str]) -> Optional["Owner"]:
        """The owner a container's labels name; None for a container labelled before owners were."""
        values = {name: labels.get(f"{LABEL_PREFIX}{name}") for name in FIELDS}
        if None in values.values() or not str(values["pid"]).isdigit():
            return None
        return cls(host=str(values["host"]), boot_id=str(values["boot_id"]), pid=int(str(values["pid"])),
                   start=str(values["start"]), pid_ns=str(labels.get(f"{LABEL_PREFIX}pid_ns", "")))

    def alive(self, here: Optional["Owner"] = None) -> Optional[bool]:
        """Does the owner still run? None when it ran on another host, or in another PID namespace of this one
        (this process cannot tell). ``here`` is this process (default: this_process())."""
        here = here or this_process()
        if self.host != here.host or not here.boot_id:   # another host, or no /proc to ask
            return None
        if self.pid_ns and here.pid_ns and self.pid_ns != here.pid_ns:
            return None      # its pid names another process here, or none
        if self.boot_id != here.boot_id:
            return False     # the host rebooted since: every process of then is gone
        return process_start(self.pid) == self.start if self.start else process_start(self.pid) is not None

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def this_process() -> Owner:
    pid = os.getpid()
    return Owner(host=socket.gethostname(), boot_id=boot_id(), pid=pid, start=process_start(pid) or "",
                 pid_ns=pid_namespace())


def pid_namespace() -> str:
    """This process's PID namespace ("pid:[4026531836]"); "" where /proc cannot say."""
    try:
        return os.readlink(PID_NAMESPACE_PATH)
    except OSError:
        return ""


def boot_id() -> str:
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> Optional[str]:
    """When ``pid`` started (clock ticks since boot, from /proc); None when no such process runs."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after the ")" that ends the command name: field 3 (state) is fields[0], field 22 (starttime) fields[19]
    if fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None
