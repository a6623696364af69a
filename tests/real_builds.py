"""The real Docker images and venvs the tests need, each built once per test session (issue 35).

tests/conftest.py holds one ``Builds`` for the session (fixture ``real_builds``); every test file that
needs a real image or venv asks it, by matrix, instead of building its own. It remembers what it built
by image content (name and content hash: what a venv's path and an image's labels are keyed by), so
two files naming the same image share one build, and no test depends on another file having run
first: whichever asks first builds. Under pytest-xdist a session is one worker's, so the real-component
tests share an ``xdist_group`` (conftest.py) and run on one worker. The docker and venv groups build at once,
on two workers, filling one wheelhouse: matrixbench's own lock (``wheelhouse.downloading``) lets one pip
download into it at a time, as it does for two users' builds.
"""
import os
import time
from pathlib import Path

from matrixbench.build.images import build_images, image_tag
from matrixbench.build.venvs import build_venvs, plan_venv, read_marker

HERE = Path(__file__).resolve().parent
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # PyPI is reachable from builds only with it here
BASE_IMAGES = ("matrixbench-test-base:bookworm-py310", "matrixbench-test-base:bookworm-py311",   # .ci/make-base-images
               "matrixbench-test-base:bookworm-py312")
DOCKER_MATRIX = HERE / "data" / "docker-matrix.yaml"
VENV_MATRIX = HERE / "data" / "venv-matrix.yaml"
BUILD_LOGS = HERE.parent / ".ci" / "cache"   # gitignored: each build's log


def _key(kind, image):
    return kind, image.name, image.content_hash()


def _logger(log_path):
    log_path.parent.mkdir(parents=True, exist_ok=True)
    return open(log_path, "a")


class Builds:
    """What this session built: {(kind, image name, content hash): True}."""

    def __init__(self):
        self.done = {}

    def _missing(self, kind, matrix):
        return [name for name, image in matrix.images.items() if _key(kind, image) not in self.done]

    def venvs(self, matrix, log_path, shared_with=None):
        """Every image of ``matrix`` as a venv (matrixbench's own build, its lines appended to ``log_path``);
        {image name: its marker (venvs.read_marker), None when incomplete}. The images that the matrix
        ``shared_with`` has too (same name and content: one venv) are built last: another test group builds
        those meanwhile, and this one, asking for them after its own, waits less for that build's turn or finds
        it done."""
        shared = set() if shared_with is None else {_key("venv", image) for image in shared_with.images.values()}
        missing = sorted(self._missing("venv", matrix), key=lambda name: _key("venv", matrix.images[name]) in shared)
        if missing:
            started = time.monotonic()
            with _logger(log_path) as log:
                paths = build_venvs(matrix, missing, on_progress=lambda name, line: print(f"[{name}] {line}",
                                                                                         file=log, flush=True))
            print(f"\nvenvs ready in {time.monotonic() - started:.0f} s: {', '.join(map(str, paths))} "
                  f"(log: {log_path})")
            self.done.update({_key("venv", matrix.images[name]): True for name in missing})
        return {plan.name: read_marker(plan) for plan in map(plan_venv, matrix.images.values())}

    def images(self, matrix, log_path):
        """Every image of ``matrix``, found current or built by matrixbench's own build, its lines appended to
        ``log_path``; their tags. Current: Docker has the tag built from this very entry and runner
        (``images.is_current``, the check a Ray node makes), asked in the image's build turn, so a worker whose
        image another worker is building waits for that build and then uses it instead of building again."""
        missing = self._missing("docker", matrix)
        if missing:
            started = time.monotonic()
            with _logger(log_path) as log:
                def emit(name, line):
                    print(f"[{name}] {line}", file=log, flush=True)

                tags = build_images(matrix, missing, ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
                                    on_progress=emit, keep_current=True)
            found = sorted(set(map(image_tag, missing)) - set(tags))
            print(f"\nbuilt {', '.join(tags) or 'nothing'}, found current {', '.join(found) or 'nothing'} in "
                  f"{time.monotonic() - started:.0f} s (log: {log_path}, pid {os.getpid()})")
            self.done.update({_key("docker", matrix.images[name]): True for name in missing})
        return [image_tag(name) for name in matrix.images]


