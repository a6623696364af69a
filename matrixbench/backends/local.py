"""The local backend: the runner in the current interpreter, no Docker.

It runs ``sys.executable -m runner --cells <out_dir>/cells.json --out <out_dir>`` with an
allow-listed environment, logs to ``<out_dir>/runner.log``, and on Ctrl-C stops the runner's
whole process group. The image's torch pin is not installed: cells run with whatever torch this
interpreter has, and every record says which.
"""
import os
from importlib import metadata
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from matrixbench.backends.base import Backend
from matrixbench.gpu import host_gpus
from matrixbench.runner_input import write_cells_file

LOG_FILENAME = "runner.log"
STOP_GRACE_S = 10

# Passed through from the caller's environment; nothing else is.
ENV_ALLOWED = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "PYTHONPATH", "LD_LIBRARY_PATH", "CC", "CXX",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_ENDPOINT", "TRANSFORMERS_OFFLINE",
)
ENV_ALLOWED_PREFIXES = ("TORCH_", "TORCHINDUCTOR_", "TRITON_")

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class LocalBackend(Backend):
    name = "local"

    def __init__(self, python=None):
        self.python = python or sys.executable

    def describe(self):
        return (f"local backend: this interpreter ({self.python}, torch {_torch_version()}); "
                "the images' torch pins are not installed")

    def gpus_available(self):
        return bool(host_gpus())

    def run(self, request):
        cells_file = write_cells_file(request)
        argv = [self.python, "-m", "runner", "--cells", str(cells_file), "--out", str(request.out_dir)]
        with _compile_cache(request) as cache_env, open(Path(request.out_dir) / LOG_FILENAME, "ab") as log:
            env = runner_env(os.environ, request, cache_env)
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
            return _wait(process)


def _torch_version():
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def runner_env(environ, request, cache_env):
    """The runner's environment: the allow-list, the request's env, caches, the project on the path."""
    env = {key: value for key, value in environ.items()
           if key in ENV_ALLOWED or key.startswith(ENV_ALLOWED_PREFIXES)}
    if request.hf_cache_dir is not None:
        env["HF_HOME"] = str(request.hf_cache_dir)
    if not request.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(cache_env)
    env.update(request.env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


class _compile_cache:
    """Inductor/Triton cache folders: the request's per-image folder, or a fresh one for --cold."""

    def __init__(self, request):
        self._root = request.cache_dir
        self._temp = None

    def __enter__(self):
        if self._root is None:
            self._temp = tempfile.TemporaryDirectory(prefix="matrixbench-cold-")
            root = Path(self._temp.name)
        else:
            root = Path(self._root)
        return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}

    def __exit__(self, *exc):
        if self._temp is not None:
            self._temp.cleanup()
        return False


def _wait(process):
    try:
        return process.wait()
    except KeyboardInterrupt:
        _stop(process)
        raise


def _stop(process):
    """SIGTERM the runner's process group (it and its cell processes), then SIGKILL if needed."""
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
