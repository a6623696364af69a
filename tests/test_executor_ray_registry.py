"""Images through a registry (issue 16, ``run --executor ray`` with ``registry: HOST:PORT`` in matrix.yaml or
``--set registry=HOST:PORT``): the driver pushes
the images it built, each node pulls them and checks them (matrixbench.executors.ray.registry).

The refusals use the faked SDK; the round trip uses a real Docker daemon and a real registry (Debian's
``docker-registry``, started on a free loopback port) with a tiny image made for the test: pushed,
removed here, pulled back through the node's code path. Skips, saying why, without either.
"""
import io
import socket
import tarfile

import pytest
from docker import errors as docker_errors

from docker_fakes import FakeImage, FakeSDK
from host_helpers import small_matrix_data, write_matrix
from matrixbench.build import docker_client
from matrixbench.build.images import BuildOptions, image_tag, runner_hash
from matrixbench.errors import DockerUnavailableError, OptionConflictError
from matrixbench.executors import create_environment
from matrixbench.executors.ray import registry
from matrixbench.executors.ray.options import RayOptions
from matrixbench.matrix import Image, load_matrix
from matrixbench.run.command import RunOptions, run_matrix

TEST_IMAGE = Image(name="registry-test", torch="torch==2.13.0", python="3.12", transformers="transformers==5.23.0",
                   base_image="python:3.12-slim-bookworm")
OTHER_ENTRY = Image(name="registry-test", torch="torch==2.0.1", python="3.10", transformers="transformers==4.43.4",
                    base_image="python:3.10-slim-bookworm")


def _labels(image):
    return {docker_client.LABEL_MARK: "1", docker_client.LABEL_CONTENT_HASH: image.content_hash(),
            docker_client.LABEL_RUNNER_HASH: runner_hash()}


# --- refusals (faked Docker) ----------------------------------------------------------------

def test_an_image_not_built_here_from_its_entry_is_not_pushed():
    sdk = FakeSDK()
    sdk.images_by_tag["matrixbench:registry-test"] = FakeImage("matrixbench:registry-test", _labels(OTHER_ENTRY))
    with pytest.raises(registry.RegistryError, match="run `matrixbench build --images registry-test` here first"):
        registry.publish(docker_client.DockerClient(sdk), [TEST_IMAGE], "127.0.0.1:5000", lambda *_: None)


def _driver_and_node(pushed_entry=TEST_IMAGE):
    """A driver's faked Docker holding matrixbench:registry-test built from ``pushed_entry``, and a node's
    that shares its registry (``remote``) and has no images."""
    driver, node = FakeSDK(), FakeSDK()
    node.remote = driver.remote
    driver.images_by_tag["matrixbench:registry-test"] = FakeImage("matrixbench:registry-test",
                                                                  _labels(pushed_entry), "sha256:built1")
    return driver, node


def test_a_push_shows_its_progress_and_the_node_pulls_checks_and_names_that_image():
    driver, node = _driver_and_node()
    lines = []
    registry.publish(docker_client.DockerClient(driver), [TEST_IMAGE], "127.0.0.1:5000",
                     lambda name, line: lines.append((name, line)))
    assert lines == [("registry-test", "The push refers to repository [fake]"), ("registry-test", "abc Pushed"),
                     ("registry-test", f"pushed 127.0.0.1:5000/matrixbench:registry-test "
                                       f"(content hash {TEST_IMAGE.content_hash()})")]
    shown = registry.fetch(docker_client.DockerClient(node), [TEST_IMAGE], "127.0.0.1:5000")
    assert node.pulled == ["127.0.0.1:5000/matrixbench:registry-test"]
    assert node.images_by_tag["matrixbench:registry-test"].id == "sha256:built1"
    assert shown == [f"[registry-test] pulled 127.0.0.1:5000/matrixbench:registry-test as "
                     f"matrixbench:registry-test (content hash {TEST_IMAGE.content_hash()})"]


def test_a_node_refuses_a_pulled_image_of_another_entry_and_keeps_its_own_name_untouched():
    driver, node = _driver_and_node(pushed_entry=OTHER_ENTRY)
    pushed = docker_client.DockerClient(driver)     # a stale push: the registry holds another entry's build
    pushed.tag_image("matrixbench:registry-test", "127.0.0.1:5000/matrixbench:registry-test")
    assert pushed.push_image("127.0.0.1:5000/matrixbench:registry-test", lambda _: None) is None
    node.images_by_tag["matrixbench:registry-test"] = FakeImage("matrixbench:registry-test", {}, "sha256:mine")
    with pytest.raises(registry.RegistryError, match=f"content hash {OTHER_ENTRY.content_hash()} and runner "
                                                     f"{runner_hash()}, the matrix's are {TEST_IMAGE.content_hash()}"):
        registry.fetch(docker_client.DockerClient(node), [TEST_IMAGE], "127.0.0.1:5000")
    assert node.images_by_tag["matrixbench:registry-test"].id == "sha256:mine"


def test_a_failed_push_or_pull_names_the_registry_and_what_to_check():
    driver, node = _driver_and_node()
    driver.push_chunks = [{"error": "Get \"https://10.0.0.5:5000/v2/\": http: server gave HTTP response "
                                    "to HTTPS client"}]
    with pytest.raises(registry.RegistryError, match="registry 10.0.0.5:5000: pushing 10.0.0.5:5000/matrixbench:"
                                                     "registry-test failed: .*HTTPS client; .*insecure-registries"):
        registry.publish(docker_client.DockerClient(driver), [TEST_IMAGE], "10.0.0.5:5000", lambda *_: None)
    node.pull_error = docker_errors.APIError("manifest unknown")
    with pytest.raises(registry.RegistryError, match="pulling 10.0.0.5:5000/matrixbench:registry-test on this node "
                                                     "failed: manifest unknown; is a registry listening there"):
        registry.fetch(docker_client.DockerClient(node), [TEST_IMAGE], "10.0.0.5:5000")


@pytest.mark.parametrize("options, message", [
    ({"backend": "local", "ray": RayOptions(registry="127.0.0.1:5000")}, "registry: only with --executor ray"),
    ({"executor": "ray", "backend": "local", "ray": RayOptions(registry="127.0.0.1:5000")},
     "images go through a registry only to docker nodes"),
    ({"backend": "local", "build_options": BuildOptions(index_url="https://mirror.example/simple")},
     "ca_bundle/index_url/extra_index_urls/base_image: only with --executor ray"),
    ({"executor": "ray", "ray": RayOptions(registry="127.0.0.1:5000"),
      "build_options": BuildOptions(base_image="m/python:3.10")},
     "ca_bundle, index_url, extra_index_urls, base_image: for the image builds on docker nodes without "
     "a registry"),
])
def test_registry_and_node_build_options_are_refused_where_unused(tmp_path, options, message):
    matrix = load_matrix(write_matrix(tmp_path, dict(small_matrix_data())))
    with pytest.raises(OptionConflictError, match=message):
        run_matrix(matrix, RunOptions(results_root=tmp_path / "results", device="cpu", **options))
    assert not (tmp_path / "results").exists()


def test_the_ray_backend_gets_the_users_build_options():
    options = BuildOptions(ca_bundle_pem=b"PEM", index_url="https://mirror.example/simple")
    backend = create_environment(RunOptions(executor="ray", build_options=options))
    assert backend.build_options is options


# --- a real registry -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sdk():
    try:
        docker_client.connect()
    except DockerUnavailableError as exc:
        pytest.skip(f"no Docker daemon: {exc}")
    import docker  # tests may look behind the wrapper

    return docker.from_env()


# registry_address: tests/conftest.py (a real registry on a free loopback port, for the session)


@pytest.fixture
def tiny_image(sdk):
    """A one-file image under matrixbench:registry-test, labelled as built from TEST_IMAGE."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", b"FROM scratch\nCOPY hello /hello\n"),
                           ("hello", b"a tiny image for the registry test\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    built, _ = sdk.images.build(fileobj=context, custom_context=True, tag=image_tag(TEST_IMAGE.name),
                                labels=_labels(TEST_IMAGE), rm=True)
    yield built
    for image in sdk.images.list(filters={"label": f"{docker_client.LABEL_CONTENT_HASH}="
                                                   f"{TEST_IMAGE.content_hash()}"}):
        sdk.images.remove(image.id, force=True)


@pytest.mark.docker
def test_an_image_pushed_once_is_pulled_checked_and_named_on_a_node(sdk, registry_address, tiny_image):
    client, lines = docker_client.connect(), []
    registry.publish(client, [TEST_IMAGE], registry_address, lambda name, line: lines.append((name, line)))
    source = registry.reference(registry_address, TEST_IMAGE.name)
    assert ("registry-test", f"pushed {source} (content hash {TEST_IMAGE.content_hash()})") in lines
    for name in (source, image_tag(TEST_IMAGE.name)):
        sdk.images.remove(name, force=True)             # a node that has never seen the image
    assert client.inspect_image(image_tag(TEST_IMAGE.name)) is None
    shown = registry.fetch(client, [TEST_IMAGE], registry_address)
    assert shown == [f"[registry-test] pulled {source} as matrixbench:registry-test "
                     f"(content hash {TEST_IMAGE.content_hash()})"]
    pulled = client.inspect_image(image_tag(TEST_IMAGE.name))
    assert pulled.id == tiny_image.id                   # the very image that was pushed
    assert pulled.labels[docker_client.LABEL_CONTENT_HASH] == TEST_IMAGE.content_hash()


@pytest.mark.docker
def test_a_pulled_image_of_another_entry_is_refused_naming_both_hashes(sdk, registry_address, tiny_image):
    client = docker_client.connect()
    registry.publish(client, [TEST_IMAGE], registry_address, lambda *_: None)
    with pytest.raises(registry.RegistryError, match=f"content hash {TEST_IMAGE.content_hash()} .*the matrix's are "
                                                     f"{OTHER_ENTRY.content_hash()}"):
        registry.fetch(client, [OTHER_ENTRY], registry_address)


@pytest.mark.docker
def test_an_unreachable_registry_says_what_to_check(sdk, tiny_image):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(registry.RegistryError, match="pushing .* failed: .*is a registry listening there"):
        registry.publish(docker_client.connect(), [TEST_IMAGE], closed, lambda *_: None)
