"""Shared fixtures, and how the suite is scheduled under pytest-xdist (issue 35).

Real components are built once per session and shared (tests/real_builds.py): ``real_builds`` (each Docker
image and venv by content), ``docker_test_client`` (the daemon, with the test base images), ``docker_e2e_images``
(tests/data/docker-matrix.yaml's two images), ``venv_e2e_builds`` (tests/data/venv-matrix.yaml's two venvs) and
``registry_address`` (a real registry on the host's loopback). A test file asks for these instead of building
its own, so no test depends on another file having run first.

Scheduling (``make test``: ``-n N --dist loadgroup``): every test that uses a real component belongs to a group,
by the first entry of GROUPS whose markers it has; a group runs on one worker, in order, sharing that worker's
session fixtures, so two groups' tests never fight over one component (and matrixbench's build turns,
matrixbench/build/turns.py, keep two processes' builds of one image, or downloads into one wheelhouse, apart).
The other tests (pure Python) go one by one to whichever worker is free. The groups come first in the
collection order, the longest first, and the scheduler hands them out in that order.
Without xdist the same order applies.

pytest-xdist 3.8's own loadgroup reads ``xdist_group`` markers by rewriting ``item._nodeid``, which pytest 9 no
longer reads (the groups silently fall apart), so this conftest brings its own: the workers write {node id:
group} to the file $MATRIXBENCH_TEST_GROUPS names (the controller sets it before it starts them), and
``pytest_xdist_make_scheduler`` returns xdist's scope scheduler with the groups as its scopes.
"""
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from real_builds import BASE_IMAGES, BUILD_LOGS, DOCKER_MATRIX, VENV_MATRIX, Builds

# markers -> group; a test joins the first group whose markers it all has. The Ray cluster test with docker nodes
# (marked ray and docker) has a group of its own, beside the docker group: it needs the docker group's e2e images,
# and finds them built (tests/real_builds.py: one build of a tag at a time, across processes, so the second build
# finds every layer cached); it looks only at its own run's containers and pushes a small image of its own.
# The attribution test (marked venv and attribution_venvs: tests/data/venv-attribution-matrix.yaml's venvs, the seed
# era and the bridge besides venv-stable and venv-latest) is a group of its own too, beside the venv group: each
# builds the venvs the other does not while the other builds its own, and one build of a venv at a time across
# processes (matrixbench.build.venvs.building) makes the second asker of a shared venv wait for it and use it.
GROUPS = ((("ray", "docker"), "ray-docker"), (("docker",), "docker"), (("venv", "attribution_venvs"), "venv-seed-era"),
          (("venv",), "venv"), (("ray",), "ray"), (("wheel",), "wheel"), (("browser",), "browser"))
# The order the groups start in: the longest first (the fresh-machine times in docs/test-suite-time.md).
GROUP_ORDER = {group: rank for rank, group in enumerate(("docker", "venv-seed-era", "venv", "ray-docker", "ray",
                                                         "wheel", "browser"))}
GROUPS_FILE = "MATRIXBENCH_TEST_GROUPS"


def _is_worker(config):
    return hasattr(config, "workerinput")


def pytest_configure(config):
    if not _is_worker(config):
        config.pluginmanager.register(GroupTimes(), "matrixbench-group-times")
    if getattr(config.option, "dist", "no") == "loadgroup" and not _is_worker(config):
        folder = tempfile.mkdtemp(prefix="matrixbench-test-groups-")
        config.stash[_FOLDER] = folder
        os.environ[GROUPS_FILE] = str(Path(folder) / "groups.json")   # the workers, started after this, inherit it


_FOLDER = pytest.StashKey[str]()


def pytest_unconfigure(config):
    folder = config.stash.get(_FOLDER, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(GROUPS_FILE, None)


class GroupTimes:
    """Where the suite's time went (issue 35), a plugin of the controller (under xdist the workers' reports come
    to it too): per group (GROUPS, and "pure Python" for the other tests) the tests, the sum of their phases'
    durations, and the wall-clock span from the first start to the last stop, with the workers that ran it;
    printed after the slowest tests. A test's group comes from its markers, which are among its keywords."""

    def __init__(self):
        self.groups = {}   # group -> [tests, busy seconds, first start, last stop, {workers}]

    def pytest_runtest_logreport(self, report):
        if not report.start:
            return
        group = next((name for markers, name in GROUPS if all(marker in report.keywords for marker in markers)),
                     "pure Python")
        entry = self.groups.setdefault(group, [0, 0.0, report.start, report.stop, set()])
        entry[0] += report.when == "call"
        entry[1] += report.duration
        entry[2], entry[3] = min(entry[2], report.start), max(entry[3], report.stop)
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        entry[4].add(gateway.id if gateway is not None else "main")

    def lines(self):
        start = min(entry[2] for entry in self.groups.values())
        rows = sorted(self.groups.items(), key=lambda item: item[1][3], reverse=True)
        out = [f"{'group':<12} {'tests':>6} {'busy s':>8} {'starts s':>9} {'ends s':>8}  workers"]
        out += [f"{group:<12} {tests:>6} {busy:>8.0f} {first - start:>9.0f} {last - start:>8.0f}  "
                f"{','.join(sorted(workers))}" for group, (tests, busy, first, last, workers) in rows]
        return out

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter):
        if self.groups:
            terminalreporter.write_sep("=", "time by group (seconds from the first test's start)")
            for line in self.lines():
                terminalreporter.write_line(line)


def group_of(item):
    """The group of a test that uses a real component (GROUPS), else None."""
    for markers, group in GROUPS:
        if all(item.get_closest_marker(marker) is not None for marker in markers):
            return group
    return None


def pytest_collection_modifyitems(config, items):
    ranked, groups = [], {}
    for index, item in enumerate(items):
        group = group_of(item)
        if group is not None:
            groups[item.nodeid] = group
        last = item.get_closest_marker("last_in_group") is not None
        ranked.append((GROUP_ORDER.get(group, len(GROUP_ORDER)), last, index, item))
    items[:] = [entry[-1] for entry in sorted(ranked, key=lambda entry: entry[:3])]
    if _is_worker(config) and os.environ.get(GROUPS_FILE):
        path = Path(os.environ[GROUPS_FILE])
        staged = path.with_name(f"{path.name}.{os.getpid()}")
        staged.write_text(json.dumps(groups))
        os.replace(staged, path)        # every worker writes the same map; the scheduler reads it once


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup: xdist's scope scheduler, a group (GROUPS) being one scope and every other test its own,
    handed out in collection order (the longest group first)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups = None

        def _split_scope(self, nodeid):
            if self.groups is None:
                path = os.environ.get(GROUPS_FILE)
                self.groups = json.loads(Path(path).read_text()) if path and Path(path).is_file() else {}
            return self.groups.get(nodeid, nodeid)

    config.option.loadscopereorder = False    # keep the collection order: the longest group first
    return GroupScheduling(config, log)


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler for the test: a test run started as a background job inherits
    SIGINT ignored, and then neither ``kill -INT`` nor ``_thread.interrupt_main`` raise
    KeyboardInterrupt. Tests that send SIGINT use this; the previous handler comes back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# --- real components, built once per session ---------------------------------------------------

@pytest.fixture(scope="session")
def real_builds():
    """This session's builds of real Docker images and venvs, by content (tests/real_builds.py)."""
    return Builds()


@pytest.fixture(scope="session")
def docker_test_client():
    """matrixbench's Docker client; skips, saying why, without a daemon or the test base images."""
    from matrixbench.build import docker_client
    from matrixbench.errors import DockerUnavailableError

    try:
        client = docker_client.connect()
    except DockerUnavailableError as exc:
        pytest.skip(f"no Docker daemon: {exc}")
    missing = [base for base in BASE_IMAGES if client.inspect_image(base) is None]
    if missing:
        pytest.skip(f"base image(s) {', '.join(missing)} missing: run .ci/make-base-images")
    return client


@pytest.fixture(scope="session")
def docker_e2e_images(docker_test_client, real_builds):
    """tests/data/docker-matrix.yaml's two images (torch 2.0.1 and 2.13), built once; their tags."""
    from matrixbench.matrix import load_matrix

    return real_builds.images(load_matrix(DOCKER_MATRIX), BUILD_LOGS / "docker-e2e-build.log")


@pytest.fixture(scope="session")
def venv_e2e_builds(real_builds):
    """tests/data/venv-matrix.yaml's two venvs (torch 2.0.1 and 2.13), built once; {image: marker}. Skips,
    saying so, without the Pythons they name."""
    from venv_helpers import venv_matrix

    return real_builds.venvs(venv_matrix(VENV_MATRIX), BUILD_LOGS / "venv-e2e-build.log")


@pytest.fixture(scope="session")
def registry_address(tmp_path_factory):
    """HOST:PORT of a real registry (Debian's docker-registry) on a free loopback port, for the session."""
    import shutil
    import socket
    import subprocess
    import time
    import urllib.request

    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("needs Debian's docker-registry (apt-get install docker-registry; .ci/run installs it)")
    folder = tmp_path_factory.mktemp("registry")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = folder / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder / 'storage'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://{address}/v2/", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        pytest.fail(f"docker-registry did not answer on {address}")
    yield address
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(folder, ignore_errors=True)   # the pushed layers



@pytest.fixture
def charts_drawn_not_rendered():
    """Charts drawn, not rendered, for the test (tests/unrendered_charts.py: for tests that check no chart)."""
    from unrendered_charts import drawn_not_rendered

    with drawn_not_rendered():
        yield
