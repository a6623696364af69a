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

Both download a layer offline first (``Download``): with ``--no-index``, so a wheelhouse that holds every
wheel asks no index at all; else from the indexes that answer (matrixbench/build/indexes.py). A Docker build
chooses its indexes before the wheelhouse is filled (images.py) and hands the choice in: the host's download
and the build's own pip leave out the same indexes, and the image's label records what was used.
"""
import functools
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, Optional

from matrixbench.build import indexes, pip_script, turns
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


class Download:
    """One build's downloads into the wheelhouse ``directory`` with this host's pip, a layer at a time.

    Offline first (``--no-index``): when the wheelhouse holds every wheel of the layer, no index is asked.
    Else from the indexes that answer (``indexes.choose``, once a build; its lines say what was left out),
    or IndexUnreachableError when the main index does not. The torch layer of an image whose own torch
    index answers (and the main index) asks those first: offline, a torch of the pinned version from
    another index (PyPI's CUDA build where the CPU index serves ``+cpu``) would do, silently.
    ``env_for(action, buildargs)`` is pip-install.sh's environment; ``checker`` replaces reachable's (tests);
    ``indexes``: the indexes already chosen (and said) for the build, else chosen here when first needed.
    """

    def __init__(self, name, buildargs, env_for, directory, *, emit, environ, checker=None, indexes=None):
        self.name, self.buildargs, self.directory = name, buildargs, directory
        self._env_for, self._emit, self._environ, self._checker = env_for, emit, environ, checker
        self.indexes = indexes         # else chosen when a layer first needs the network
        self.from_wheelhouse = []      # the layers whose wheels were all in the wheelhouse

    def layer(self, layer, action):
        """pip-install.sh ``layer`` with PIP_ACTION ``action`` (a download); (exit code, last lines)."""
        if not self._torch_index_first(layer):
            code, tail = self._pip(layer, f"{action} --no-index", self.host_buildargs, quiet=True)
            if code == 0:
                self.from_wheelhouse.append(layer)
                self._emit(self.name, f"wheelhouse: every wheel of the {layer} layer is in {self.directory}; "
                                      "no index asked")
                return code, tail
            self._emit(self.name, f"wheelhouse: {self.directory} lacks some of the {layer} layer's wheels "
                                  f"({tail[-1] if tail else code}); asking the indexes")
        chosen = self.chosen()
        chosen.require_main(layer, self.directory)
        return self._pip(layer, action, chosen.buildargs)

    def chosen(self):
        """The indexes that answer, chosen (and said) once."""
        if self.indexes is None:
            self.indexes = indexes.choose(self.name, self.buildargs, self._environ, self._checker)
            for line in self.indexes.lines():
                self._emit(self.name, line)
        return self.indexes

    @property
    def host_buildargs(self):
        """The build args the host's pip gets: those of the indexes that answer, once chosen."""
        return self.indexes.buildargs if self.indexes else self.buildargs

    def record(self):
        """What the downloads used, for a venv's marker or an image's label: torch's index (None: no index
        asked, the wheelhouse held it), the indexes left out, the layers the wheelhouse held."""
        if self.indexes is None:
            return {"torch_index_used": None, "indexes_left_out": [],
                    "layers_from_wheelhouse": list(self.from_wheelhouse)}
        return self.indexes.record(self.from_wheelhouse)

    def _torch_index_first(self, layer):
        """The torch layer of an image whose own torch index answers (and the main index too, which pip asks
        beside it): those are asked first, not the wheelhouse."""
        if layer != "torch" or not self.buildargs["TORCH_INDEX_URL"]:
            return False
        chosen = self.chosen()
        return bool(chosen.buildargs["TORCH_INDEX_URL"]) and chosen.main.ok

    def _pip(self, layer, action, buildargs, quiet=False):
        emit_line = (lambda line: None) if quiet else (lambda line: self._emit(self.name, line))
        return pip_script.run_streamed(pip_script.command(layer), self._env_for(action, buildargs), emit_line)


def fill(plan, python, *, emit, environ=None, checker=None, indexes=None):
    """Download a Docker build's pins for Python ``python`` into the wheelhouse with this host's
    pip (``Download``, with the ``indexes`` chosen for the build); the Download when every layer's wheels are
    there. A failed pip is a note, not an error: None, and the build then downloads what it needs itself. The
    main index not answering while the wheelhouse lacks wheels is IndexUnreachableError, at once: the
    build's own pip, taken to reach what this host reaches, would retry it for minutes too."""
    environ = os.environ if environ is None else environ
    with downloading(plan.name, emit=emit, environ=environ) as directory:
        def env_for(action, buildargs):
            return pip_script.environment(buildargs, environ, action=action, find_links=directory,
                                          ca_bundle=plan.ca_bundle, pip=f"{sys.executable} -m pip")
        download = Download(plan.name, plan.buildargs, env_for, directory, emit=emit, environ=environ,
                            checker=checker, indexes=indexes)
        for layer in pip_script.LAYERS:
            code, tail = download.layer(layer, download_action(directory, python))
            if code != 0:
                emit(plan.name, f"wheelhouse: pip download failed ({tail[-1] if tail else code}); "
                                "the build downloads its wheels itself")
                return None
    return download


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


@dataclass(frozen=True)
class Offer:
    """The wheelhouse as one Docker build gets it: its URL (None: not offered) and what the host's download
    used (``Download.record``; None: not offered)."""

    url: Optional[str] = None
    used: Optional[Dict[str, object]] = None


@contextmanager
def offered(plan, python, *, emit, environ=None, checker=None, indexes=None):
    """For one Docker build: the wheelhouse filled (``fill``, with the build's ``indexes``) and served while
    the block runs, as an Offer; Offer() when the image's Python version is unknown or the download failed."""
    environ = os.environ if environ is None else environ
    download = fill(plan, python, emit=emit, environ=environ, checker=checker, indexes=indexes) if python else None
    if download is None:
        yield Offer()
        return
    with serving(plan.name, emit=emit, environ=environ), served(wheelhouse_dir(environ)) as url:
        emit(plan.name, f"wheelhouse: {wheelhouse_dir(environ)} served at {url} for this build")
        yield Offer(url, download.record())


def serving(name, *, emit, environ=None):
    """Held while a Docker build is served the wheelhouse: builds on this machine take turns, so that each gets
    the fixed port (SERVE_PORT). The URL is a build arg, part of Docker's layer cache key: a build served on
    another port would find none of its image's cached layers and install torch again. The lock is a file beside
    the wheelhouse."""
    directory = wheelhouse_dir(environ)
    return turns.taking_turns(directory.parent / f".{directory.name}.serve.lock", say=lambda line: emit(name, line),
                              waiting=f"wheelhouse: waiting for another Docker build served from {directory} to "
                                      "finish (the URL is part of Docker's layer cache key)")
