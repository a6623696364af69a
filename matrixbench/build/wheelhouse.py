"""The wheelhouse: one folder of wheels shared by venv builds, Docker builds and the tests, so
each wheel (torch's CUDA builds are about 2.5 GB with their nvidia-* dependencies) is downloaded
once.

venv builds fill it with ``pip download --dest`` and install with ``--find-links`` it
(matrixbench/build/venvs.py). Docker builds (the classic builder: no RUN --mount, and the Dockerfile
keeps no pip cache) get it offered: ``offered()`` fills it for the image's Python version with
this host's pip, serves it on 127.0.0.1 for the length of the build, and the build (on the host's
network) passes ``--find-links`` that URL to pip through the FIND_LINKS build arg. Both run
images/pip-install.sh (matrixbench/build/pip_script.py). ``$MATRIXBENCH_WHEELHOUSE`` moves it (CI keeps
it between runs); it defaults to ``<cache>/wheels``.
"""
import functools
import os
import sys
import threading
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from matrixbench.build import pip_script, turns
from matrixbench.paths import cache_home

WHEELHOUSE_VARIABLE = "MATRIXBENCH_WHEELHOUSE"
# Fixed: the URL is a build arg, and build args are part of the Docker layer cache's key.
SERVE_PORT = 47615


def wheelhouse_dir(environ=None):
    """``$MATRIXBENCH_WHEELHOUSE``, else ``<cache>/wheels``."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(WHEELHOUSE_VARIABLE) or cache_home(environ) / "wheels")


@contextmanager
def downloading(name, *, emit, environ=None):
    """Held while pip downloads into the wheelhouse: one download at a time into one wheelhouse across the
    processes of this machine (two builds, a build and the tests), so that no pip reads, or writes again, a
    wheel another pip is still writing. Only the downloads wait: installs from the filled wheelhouse, and
    Docker builds it is served to, run at once. The lock is a file beside the wheelhouse (not in it: its
    listing is a find-links page)."""
    directory = wheelhouse_dir(environ)
    directory.mkdir(parents=True, exist_ok=True)
    with turns.taking_turns(directory.parent / f".{directory.name}.lock", say=lambda line: emit(name, line),
                            waiting=f"wheelhouse: waiting for another download into {directory} to finish"):
        yield directory


def download_action(directory, python=None):
    """pip's download subcommand into ``directory``; for another Python than pip's own
    (``python`` "3.10"), wheels only, as pip requires."""
    action = f"download --dest {directory}"
    return f"{action} --only-binary=:all: --python-version {python}" if python else action


def fill(plan, python, *, emit, environ=None):
    """Download a Docker build's pins for Python ``python`` into the wheelhouse with this host's
    pip; True when every layer's wheels are there. A failure is a note, not an error: the build
    then downloads what it needs itself."""
    environ = os.environ if environ is None else environ
    with downloading(plan.name, emit=emit, environ=environ) as directory:
        env = pip_script.environment(plan.buildargs, environ, action=download_action(directory, python),
                                     find_links=directory, ca_bundle=plan.ca_bundle, pip=f"{sys.executable} -m pip")
        for layer in pip_script.LAYERS:
            code, tail = pip_script.run_streamed(pip_script.command(layer), env,
                                                 lambda line: emit(plan.name, line))
            if code != 0:
                emit(plan.name, f"wheelhouse: pip download failed ({tail[-1] if tail else code}); "
                                "the build downloads its wheels itself")
                return False
    return True


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@contextmanager
def served(directory, port=SERVE_PORT):
    """Serve ``directory`` (its listing is a find-links page) on 127.0.0.1:``port`` (any free port
    when that one is taken) while the block runs; yield the URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def offered(plan, python, *, emit, environ=None):
    """For one Docker build: the wheelhouse's URL, filled and served while the block runs; None
    when the image's Python version is unknown or the download failed."""
    environ = os.environ if environ is None else environ
    if not python or not fill(plan, python, emit=emit, environ=environ):
        yield None
        return
    with serving(plan.name, emit=emit, environ=environ), served(wheelhouse_dir(environ)) as url:
        emit(plan.name, f"wheelhouse: {wheelhouse_dir(environ)} served at {url} for this build")
        yield url


def serving(name, *, emit, environ=None):
    """Held while a Docker build is served the wheelhouse: builds on this machine take turns, so that each gets
    the fixed port (SERVE_PORT). The URL is a build arg, part of Docker's layer cache key: a build served on
    another port would find none of its image's cached layers and install torch again. The lock is a file beside
    the wheelhouse."""
    directory = wheelhouse_dir(environ)
    return turns.taking_turns(directory.parent / f".{directory.name}.serve.lock", say=lambda line: emit(name, line),
                              waiting=f"wheelhouse: waiting for another Docker build served from {directory} to "
                                      "finish (the URL is part of Docker's layer cache key)")
