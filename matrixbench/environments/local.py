"""The local backend: the runner in the current interpreter, no Docker.

It runs ``sys.executable -m runner --cells <out_dir>/cells.json --out <out_dir>`` with an
allow-listed environment, logs to ``<out_dir>/runner.log``, and on Ctrl-C stops the runner's
whole process group. The image's torch pin is not installed: cells run with whatever torch this
interpreter has, and every record says which.
"""
import os
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

from matrixbench.build.versions import pinned_version, same_release
from matrixbench.environments.base import Backend, ImageRef, RunRequest
from matrixbench.environments.environment import compile_cache_env, runner_env
from matrixbench.errors import RunError
from matrixbench.gpu import host_gpus
from matrixbench.matrix import Image
from matrixbench.run.folder import held_lock_fds
from matrixbench.run.layout import CELLS_FILENAME, LOG_FILENAME
from matrixbench.run.placement import Slot
from matrixbench.run.runner_input import write_cells_file
from runner.lifetime import die_with_parent

STOP_GRACE_S = 10
SIGNAL_CHECK_S = 0.5


class LocalBackend(Backend):
    name = "local"

    def __init__(self, python: Optional[str] = None) -> None:
        self.python = python or sys.executable

    def describe(self) -> str:
        return (f"local backend: this interpreter ({self.python}, torch {_installed_torch()}); "
                "the images' torch pins are not installed")

    def gpus_available(self) -> bool:
        return bool(host_gpus())

    def refuse(self, images: List[Image]) -> None:
        """An image that pins another torch than this interpreter's (``check_torch_pin``), before any runs."""
        if self.python == sys.executable:
            for image in images:
                check_torch_pin(image, _installed_torch())

    def installed_versions(self) -> Optional[Dict[str, str]]:
        """This interpreter's torch and transformers (package metadata: nothing is imported); None for another
        interpreter."""
        if self.python != sys.executable:
            return None
        return {"torch": _installed_torch(), "transformers": _installed("transformers")}

    def run(self, request: RunRequest) -> int:
        if self.python == sys.executable:
            check_torch_pin(request.image, _installed_torch())
        env = runner_env(os.environ, request, compile_cache_env(request.paths.cache_dir))
        return launch_runner(self.python, request, env)

    def stop_all(self) -> None:
        stop_running()


# Runners started by launch_runner and not yet waited for (slots: from several threads).
_RUNNING: "set[subprocess.Popen[bytes]]" = set()


def launch_runner(python: Union[str, Path], request: RunRequest, env: Dict[str, str],
                  image_id: Optional[str] = None) -> int:
    """``python -m runner --cells <work_dir>/cells.json --out <out_dir>``, as the container's
    entrypoint runs it, logging to <work_dir>/runner.log (work_dir: out_dir, or its slot-<i>
    folder in a slot, whose cores it is pinned to); return its exit code.

    The runner dies with this process (SIGTERM when it dies, ``kill -9`` included) and holds the
    run's lock with it (the inherited ``run.lock`` descriptor): no later run adopts the folder
    while it lives."""
    request.work_dir().mkdir(parents=True, exist_ok=True)
    cells_file = write_cells_file(request, image_id, path=request.work_dir() / CELLS_FILENAME)
    argv = [str(python), "-m", "runner", "--cells", str(cells_file), "--out", str(request.paths.out_dir),
            *request.work.mode_argv()]
    with open(request.work_dir() / LOG_FILENAME, "ab") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   pass_fds=held_lock_fds(), preexec_fn=child_setup(request.placement.slot))
        _RUNNING.add(process)
        try:
            return _wait(process)
        finally:
            _RUNNING.discard(process)


def stop_running() -> None:
    """Stop every runner launch_runner started that still runs (Ctrl-C with slots)."""
    for process in list(_RUNNING):
        _stop(process)


def child_setup(slot: Optional[Slot]) -> Callable[[], None]:
    """The child's pre-exec step: die with this process; run on the slot's cores only (if any)."""
    host, cores = os.getpid(), set(slot.cores) if slot is not None else None

    def setup() -> None:
        die_with_parent(signal.SIGTERM, host)
        if cores is not None:
            os.sched_setaffinity(0, cores)
    return setup


def _installed_torch() -> str:
    return _installed("torch")


def _installed(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def check_torch_pin(image: Union[Image, ImageRef], installed: str) -> None:
    """Refuse to record this interpreter's torch under an image (a matrix Image, or a request's ImageRef)
    that pins another one: the report would compare images that ran the same torch."""
    pinned = pinned_version(image.torch) if image.torch else None
    if pinned is not None and not same_release(installed, pinned):
        raise RunError(
            f"image {image.name!r} pins {image.torch}, but --backend local runs this "
            f"interpreter's torch {installed}: run only images that pin torch {installed} "
            f"(--images NAME), or use --backend docker"
        )


def _wait(process: "subprocess.Popen[bytes]") -> int:
    """The runner's exit code; waits in steps, so a stop signal another thread took (SIGTERM,
    SIGHUP) reaches this thread's handler within a step."""
    try:
        while True:
            try:
                return process.wait(timeout=SIGNAL_CHECK_S)
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:
        _stop(process)
        raise


def _stop(process: "subprocess.Popen[bytes]") -> None:
    """Stop the runner and everything below it, cell processes in sessions of their own included.

    SIGTERM first (the runner may record the interrupted cell), SIGKILL after the grace period
    for whatever is left.
    """
    targets = [process.pid, *descendants(process.pid)]
    _signal_all(targets, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_all([pid for pid in targets + descendants(process.pid) if _running(pid)], signal.SIGKILL)
    process.wait()


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)  # a group leader: its compiler children go too
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def descendants(pid: int) -> List[int]:
    """Every process below ``pid``, from /proc (Linux); [] where there is no /proc."""
    children: Dict[int, List[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found: List[int] = []
    todo = [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (in a container, PID 1 may never reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
