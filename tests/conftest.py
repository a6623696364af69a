"""Shared fixtures, and how the suite is scheduled under pytest-xdist (issue 35).

Real components are built once per session and shared (tests/real_builds.py): ``real_builds`` (each Docker
image and venv by content), ``docker_test_client`` (the daemon, with the test base images), ``docker_e2e_images``
(tests/data/docker-matrix.yaml's two images), ``venv_e2e_builds`` (tests/data/venv-matrix.yaml's two venvs) and
``registry_address`` (a real registry on the host's loopback).

Scheduling (``make test``: ``-n N --dist loadgroup``): every test that uses a real component gets an
``xdist_group`` by the first of its markers in GROUPS, so a group runs on one worker, in order, sharing that
worker's session fixtures, and two groups never fight over the Docker daemon or a venv build; the other tests
(pure Python) go one by one to whichever worker is free. The heavy groups come first in the collection order
(the order loadgroup hands them out), the longest first. Without xdist the same order applies.
"""
import signal

import pytest

from real_builds import BASE_IMAGES, BUILD_LOGS, DOCKER_MATRIX, VENV_MATRIX, Builds

# marker -> xdist group, longest first (the fresh-machine times in docs/test-suite-time.md). The ray cluster
# test with docker nodes is marked both and runs in the docker group.
GROUPS = (("docker", "docker"), ("venv", "venv"), ("ray", "ray"), ("wheel", "wheel"), ("browser", "browser"))
GROUP_ORDER = {group: rank for rank, (_, group) in enumerate(GROUPS)}


def pytest_configure(config):
    # xdist registers it when installed; registered here too so --strict-markers holds with -p no:xdist
    config.addinivalue_line("markers", "xdist_group(name): run on one pytest-xdist worker with its group")


def group_of(item):
    for marker, group in GROUPS:
        if item.get_closest_marker(marker) is not None:
            return group
    return None


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook, which reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    ranked = []
    for index, item in enumerate(items):
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        ranked.append((GROUP_ORDER.get(group, len(GROUP_ORDER)), index, item))
    items[:] = [item for _, _, item in sorted(ranked, key=lambda entry: entry[:2])]


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
    from matrixbench import docker_client
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
