"""The host process that owns what a run started (its containers), and whether it still lives.

An owner is named by its host's name, the host's boot id (``/proc/sys/kernel/random/boot_id``),
its pid and that pid's start time (``/proc/<pid>/stat``, field 22, in clock ticks since boot):
a pid that a later process reuses, or a reboot, is not the owner. A pid means something only in its
PID namespace (``/proc/self/ns/pid``): an owner in another one (a Ray node in its own namespaces on
this host, a driver in a container) is one this process cannot ask about, as one on another host.
Carried as container labels, so a run can find the containers of a killed (``kill -9``) run and stop them.

An owner that cannot be asked by its pid, but ran on this very kernel (the same boot id: a Ray node in its own
PID namespace, a run started inside a container), is asked through its container's lease (``Lease``): a file the
owner holds an exclusive ``flock`` on from before its container starts until after it is removed. The kernel
drops the lock when the owner dies, however it dies (``kill -9`` included), and one kernel's ``flock`` table
answers for every namespace on it: a free lease is a dead owner, a held one a live one. This is testcontainers'
Ryuk idea (a connection the kernel closes when its process dies) without a reaper container: the rerun asks.
An owner on another machine (another boot id) stays one that cannot be asked.
"""
import fcntl
import os
import socket
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Dict, Iterator, List, Optional, Tuple

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


def judge(owner: Owner, lease: Optional["Lease"], here: Optional[Owner] = None) -> Tuple[Optional[bool], str]:
    """Does the owner of a container still run (None: this process cannot tell), and how that is known, for the
    line that says so: by its pid where this process can ask, else by its container's ``lease`` where the owner
    ran on this kernel. ``here`` is this process (default: this_process())."""
    here = here or this_process()
    alive = owner.alive(here)
    if alive is not None:
        return alive, "still runs" if alive else "gone"
    if not here.boot_id or owner.boot_id != here.boot_id:
        return None, "ran on another machine (another kernel's boot id), which cannot be asked here"
    if lease is None:
        return None, ("ran in another PID namespace or container on this machine, and its container carries no "
                      "lease to ask (an older matrixbench started it)")
    held, why = lease.held()
    if held is None:
        return None, f"ran in another PID namespace or container on this machine, and {why}"
    return held, (f"in another PID namespace or container, {'still holds' if held else 'gone: no longer holds'} "
                  f"its lease {lease.path}")


LEASE_LABEL = f"{LABEL_PREFIX}lease"        # the lease file's path, as its owner saw it
LEASE_ID_LABEL = f"{LABEL_PREFIX}lease_id"  # its "st_dev:st_ino": only that very file answers


@dataclass(frozen=True)
class Lease:
    """The file a container's owner holds an exclusive flock on while the container may run (``holding_lease``)."""
    path: Path
    file_id: str

    def labels(self) -> Dict[str, str]:
        return {LEASE_LABEL: str(self.path), LEASE_ID_LABEL: self.file_id}

    @classmethod
    def from_labels(cls, labels: Dict[str, str]) -> Optional["Lease"]:
        """The lease a container's labels name; None for one started without a lease (an older matrixbench)."""
        path, file_id = labels.get(LEASE_LABEL), labels.get(LEASE_ID_LABEL)
        return cls(Path(path), file_id) if path and file_id else None

    def held(self) -> Tuple[Optional[bool], str]:
        """(True: a process holds it, False: none does, None: this process cannot tell), and the why of None.
        The path comes from a label (untrusted): no link followed, nothing but the regular file the owner
        locked (its device and inode), opened read-only and never created or written."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            return None, f"its lease {self.path} cannot be opened here ({exc.strerror or exc})"
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or _file_id(info) != self.file_id:
                return None, f"{self.path} here is not the lease its owner locked (another file)"
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True, ""
            except OSError as exc:
                return None, f"its lease {self.path} cannot be locked here ({exc.strerror or exc})"
            return False, ""
        finally:
            os.close(fd)   # (drops the lock taken just to look)

    def discard(self) -> bool:
        """Remove the lease file of a gone owner whose container was stopped: only the very file it locked,
        never a link or another file now at its path; whether it removed it."""
        try:
            info = os.lstat(self.path)
        except OSError:
            return False
        if not (stat.S_ISREG(info.st_mode) and _file_id(info) == self.file_id):
            return False
        self.path.unlink(missing_ok=True)
        return True


@contextmanager
def holding_lease(path: Path) -> Iterator[Lease]:
    """Hold a new lease file at ``path`` (made here, locked before anything is started under it) until the block
    ends; then remove it. A process killed meanwhile leaves the file, unlocked."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    lease = Lease(Path(path).resolve(), _file_id(os.fstat(fd)))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # a new file of this name: nobody else has it
        yield lease
    finally:
        lease.discard()
        os.close(fd)


def sweep_leases(folder: Path, pattern: str, keep: AbstractSet[Path] = frozenset()) -> List[Path]:
    """Remove the lease files under ``folder`` (named ``pattern``) that no process holds and no container names
    (``keep``: the resolved paths the leases of the containers still there name), and return them: a killed owner
    whose container was then removed by hand (``docker rm -f``) left its lease, which nothing else removes. Call it
    under the run folder's lock (no owner of that folder starts meanwhile). Each is asked and removed as a
    container's lease is (``Lease.held``, ``Lease.discard``): no link followed, only that regular file."""
    removed = []
    for path in sorted(Path(folder).rglob(pattern)):   # rglob does not descend into linked folders
        try:
            info = os.lstat(path)
        except OSError:
            continue
        lease = Lease(path, _file_id(info))
        if stat.S_ISREG(info.st_mode) and path.resolve() not in keep and lease.held()[0] is False and lease.discard():
            removed.append(path)
    return removed


def _file_id(info: os.stat_result) -> str:
    return f"{info.st_dev}:{info.st_ino}"


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
