"""images/pip-install.sh run on the host: its argv, its environment, its streamed output.

The Dockerfile runs the script in the image; the venv backend (matrixbench/build/venvs.py) and the
wheelhouse (matrixbench/build/wheelhouse.py) run the same script here, fed the same build args
(``images.build_spec``), so the pip logic has one home.
"""
import os
import subprocess
from collections import deque

from matrixbench import resources

# The build args pip-install.sh reads, in the Docker build and on the host alike.
PIP_BUILDARGS = ("TORCH_SPEC", "TORCH_INDEX_URL", "TRANSFORMERS_SPEC", "EXTRA_PINS", "INDEX_URL",
                 "EXTRA_INDEX_URLS")
LAYERS = ("torch", "rest")
# Host variables that would point pip or python at another environment.
DROPPED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV", "PIP_TARGET",
           "PIP_PREFIX", "PIP_USER")
TAIL_LINES = 40


def command(layer):
    """``sh images/pip-install.sh LAYER``, as the Dockerfile's RUN lines call it."""
    return ["sh", str(resources.docker_build_file("pip-install.sh")), layer]


def environment(buildargs, environ, *, action, find_links, ca_bundle=None, pip=None):
    """The script's environment on the host: the host's (its proxies and pip configuration) minus
    DROPPED, plus the build args, the pip action, the wheelhouse and the CA bundle (none: an
    empty file). ``pip`` replaces the ``pip`` found on PATH (e.g. "/usr/bin/python3 -m pip")."""
    env = {key: value for key, value in environ.items() if key not in DROPPED}
    env.update({key: buildargs[key] for key in PIP_BUILDARGS})
    env.update(
        PIP_ACTION=action,
        FIND_LINKS=str(find_links),
        CA_BUNDLE=str(ca_bundle or os.devnull),
        PIP_NO_CACHE_DIR="1",  # the wheelhouse is the cache, as in the Dockerfile
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    if pip:
        env["PIP"] = pip
    return env


def run_streamed(argv, env, emit_line):
    """Run ``argv``, each non-empty output line to ``emit_line``; return (exit code, last lines).
    A command that cannot start returns 127 and the reason."""
    tail = deque(maxlen=TAIL_LINES)
    try:
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, text=True, errors="replace")
    except OSError as exc:
        return 127, [f"cannot run {argv[0]}: {exc}"]
    with process:
        for line in process.stdout:
            line = line.rstrip()
            if line.strip():
                tail.append(line)
                emit_line(line)
    return process.returncode, list(tail)
