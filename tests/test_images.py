"""Build planning (build args, labels, dry-run) and the build loop, with the SDK faked."""
import contextlib
import dataclasses
import json
import tarfile
from pathlib import Path

import pytest

from docker_fakes import FakeSDK
from host_helpers import answering
from matrixbench import resources
from matrixbench.build import docker_client, images, indexes, reachable, wheelhouse
from matrixbench.build.versions import torch_label
from matrixbench.errors import BuildError, MatrixError
from matrixbench.matrix import Image, Matrix

REPO = Path(__file__).resolve().parents[1]

STABLE = Image(name="stable", torch="torch==2.0.1", python="3.10", transformers="transformers==4.43.4",
               extra_pins=("numpy<2",), index_url="https://download.pytorch.org/whl/cu118",
               base_image="python:3.10-slim-bookworm", env={"X": "1"})
NEWEST = Image(name="newest", torch="torch==2.13.0", python="3.12", transformers="transformers",
               base_image="python:3.12-slim-bookworm")
MATRIX = Matrix(images={"stable": STABLE, "newest": NEWEST}, models={}, batch_sizes=(1,), modes=("eager",))


@pytest.fixture(autouse=True)
def own_cache_home(tmp_path, monkeypatch):
    """A cache folder of the test's own: a build holds a lock file there (images.building), and under the
    real one a faked build of matrixbench:stable waits for a real one of the docker tests beside it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def indexes_answer(monkeypatch):
    """Every index host answers (no socket opened): a build asks which do before it starts (images.choose_indexes)."""
    monkeypatch.setattr(reachable, "CHECKER", answering())


def test_build_args_come_from_the_image_entry():
    plan = images.build_spec(STABLE)
    assert plan.tag == "matrixbench:stable"
    assert plan.buildargs == {
        "BASE_IMAGE": "python:3.10-slim-bookworm",
        "PYTHON": "python3.10",
        "TORCH_SPEC": "torch==2.0.1",
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cu118",
        "TRANSFORMERS_SPEC": "transformers==4.43.4",
        "EXTRA_PINS": "numpy<2",
        "INDEX_URL": "https://pypi.org/simple",
        "EXTRA_INDEX_URLS": "",
        "FIND_LINKS": "",
    }


def test_labels_name_the_image_its_torch_and_its_content_hash():
    stable, newest = images.build_spec(STABLE), images.build_spec(NEWEST)
    assert stable.labels[docker_client.LABEL_IMAGE] == "stable"
    assert stable.labels[docker_client.LABEL_TORCH] == "2.0.1"
    assert newest.labels[docker_client.LABEL_TORCH] == "2.13.0"
    assert stable.labels[docker_client.LABEL_CONTENT_HASH] == STABLE.content_hash() != NEWEST.content_hash()
    assert stable.labels[docker_client.LABEL_MARK] == "1"


def test_options_override_the_entry_and_base_image_can_name_the_python(tmp_path):
    bundle = tmp_path / "proxy-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    plan = images.build_spec(
        STABLE, base_image="registry.local/py:{python}", index_url="https://mirror/simple",
        extra_index_urls=["https://a/simple", "https://b/simple"], ca_bundle=bundle,
    )
    assert plan.buildargs["BASE_IMAGE"] == "registry.local/py:3.10"
    assert plan.buildargs["INDEX_URL"] == "https://mirror/simple"
    assert plan.buildargs["EXTRA_INDEX_URLS"] == "https://a/simple https://b/simple"
    assert plan.ca_bundle == bundle


def test_changing_the_entry_changes_the_content_hash_label():
    changed = dataclasses.replace(STABLE, extra_pins=("numpy<2", "pillow<11"))
    assert (images.build_spec(STABLE).labels[docker_client.LABEL_CONTENT_HASH]
            != images.build_spec(changed).labels[docker_client.LABEL_CONTENT_HASH])


@pytest.mark.parametrize("spec, version", [
    ("torch==2.0.1", "2.0.1"), ("torch==2.1.0.dev20230601", "2.1.0.dev20230601"),
    ("torch>=2.1,<2.2", "<2.2,>=2.1"), ("torch", "any"),   # never "latest", the name of an image
])
def test_torch_label(spec, version):
    assert torch_label(spec) == version


def test_extra_pins_with_spaces_are_refused_with_the_field_path():
    with pytest.raises(MatrixError, match=r"images\.stable\.extra_pins: 'numpy <2'"):
        images.build_spec(dataclasses.replace(STABLE, extra_pins=("numpy <2",)))


def test_missing_ca_bundle_is_an_error_naming_the_option(tmp_path):
    with pytest.raises(BuildError, match="ca_bundle .*no such file"):
        images.build_spec(STABLE, ca_bundle=tmp_path / "nope.pem")


def test_dry_run_prints_tag_build_args_and_base_without_a_daemon(monkeypatch):
    monkeypatch.setattr(docker_client, "connect", pytest.fail)  # a daemon must not be needed
    lines = []
    tags = images.build_images(
        MATRIX, ["newest", "stable"], dry_run=True,
        index_url="https://user:s3cret@mirror.example/simple",
        on_progress=lambda name, line: lines.append((name, line)),
    )
    assert tags == ["matrixbench:newest", "matrixbench:stable"]
    text = "\n".join(line for _, line in lines)
    assert "matrixbench:stable  (image 'stable', base python:3.10-slim-bookworm)" in text
    assert "--build-arg TORCH_SPEC=torch==2.0.1" in text
    assert "--build-arg TORCH_SPEC=torch==2.13.0" in text
    assert "--label matrixbench.torch=2.13.0" in text
    assert "s3cret" not in text and "https://***@mirror.example/simple" in text
    assert {name for name, _ in lines} == {"newest", "stable"}


def test_select_images_keeps_the_order_asked_and_refuses_unknown_names():
    assert images.select_images(MATRIX, ["newest", "stable"]) == [NEWEST, STABLE]
    with pytest.raises(MatrixError, match="--images: unknown image.*nightly.*defines stable, newest"):
        images.select_images(MATRIX, ["nightly"])


def test_build_context_holds_the_dockerfile_scripts_runner_and_the_ca_bundle(tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(b"PEM")
    with tarfile.open(fileobj=images.build_context(bundle)) as tar:
        names = set(tar.getnames())
        assert tar.extractfile("ca-bundle.crt").read() == b"PEM"
        assert all(tar.getmember(name).mode & 0o444 == 0o444 for name in names)
    assert {"Dockerfile", "ensure-toolchain.sh", "pip-install.sh", "runner/schema.py"} <= names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)


def test_without_a_ca_bundle_the_context_has_an_empty_one():
    with tarfile.open(fileobj=images.build_context(None)) as tar:
        assert tar.extractfile("ca-bundle.crt").read() == b""


def _build_file(name):
    return next(path for path in resources.docker_build_files() if path.name == name)


def test_dockerfile_copies_runner_last_and_uses_no_buildkit_features():
    lines = [line for line in _build_file("Dockerfile").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    copies = [line for line in lines if line.startswith("COPY")]
    assert copies[-1].startswith("COPY runner ")
    assert lines[-1] == 'ENTRYPOINT ["python", "-m", "runner"]'
    assert not any("--mount" in line or "<<" in line for line in lines)
    assert any("pip freeze > /opt/matrixbench/pip-freeze.txt" in line for line in lines)
    build_args = {line.split()[1].split("=")[0] for line in lines if line.startswith("ARG ")}
    assert build_args == set(images.build_spec(STABLE).buildargs)


def _fake_client(monkeypatch, sdk, wheelhouse_url=None):
    """The SDK faked; the wheelhouse offered at ``wheelhouse_url`` (None: not offered)."""
    monkeypatch.setattr(docker_client, "connect", lambda: docker_client.DockerClient(sdk))

    @contextlib.contextmanager
    def offered(plan, python, *, emit, indexes):
        offers.append((plan.name, python))
        yield wheelhouse.Offer(wheelhouse_url, indexes.record() if wheelhouse_url else None)

    offers = []
    monkeypatch.setattr(images.wheelhouse, "offered", offered)
    return offers


def test_the_wheelhouse_is_offered_to_the_build_on_the_hosts_network(monkeypatch):
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    offers = _fake_client(monkeypatch, sdk, wheelhouse_url="http://127.0.0.1:47615/")
    images.build_images(MATRIX, ["stable"], on_progress=lambda *_: None)
    assert offers == [("stable", "3.10")]
    call, _label = sdk.build_calls   # the build, then the label of what it holds (build_facts)
    assert call["network_mode"] == "host" and call["buildargs"]["FIND_LINKS"] == "http://127.0.0.1:47615/"
    assert call["labels"][docker_client.LABEL_CONTENT_HASH] == images.build_spec(STABLE).labels[
        docker_client.LABEL_CONTENT_HASH]  # the URL is no part of what the image is


def test_without_a_wheelhouse_the_build_uses_dockers_own_network(monkeypatch):
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    _fake_client(monkeypatch, sdk)
    images.build_images(MATRIX, ["stable"], on_progress=lambda *_: None)
    call, _label = sdk.build_calls   # the build, then the label of what it holds (build_facts)
    assert "network_mode" not in call and call["buildargs"]["FIND_LINKS"] == ""


def test_an_unreachable_torch_index_is_left_out_of_the_docker_build_said_in_one_line_and_labelled(monkeypatch):
    """download.pytorch.org does not resolve: the build's pip is not told it (it would retry it for minutes), one
    line says so in the venvs' wording, and the image's label records where torch came from instead."""
    monkeypatch.setattr(reachable, "CHECKER", answering("download.pytorch.org"))
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    _fake_client(monkeypatch, sdk)
    lines = []
    images.build_images(MATRIX, ["stable"], on_progress=lambda name, line: lines.append(line))
    left_out = [line for line in lines if "left out" in line]
    assert left_out == [
        "images.stable.index_url https://download.pytorch.org/whl/cu118 is left out of this host's pip download and "
        "the Docker build (cannot resolve download.pytorch.org): torch==2.0.1 comes from https://pypi.org/simple "
        "instead, as pip would after its retries; note: PyPI's Linux torch wheels are CUDA builds"]
    build, label = sdk.build_calls   # the build, then the label of what it holds (build_facts)
    assert build["buildargs"] == {**images.build_spec(STABLE).buildargs, "TORCH_INDEX_URL": ""}
    assert build["labels"][docker_client.LABEL_CONTENT_HASH] == STABLE.content_hash()   # the entry is unchanged
    used = {"torch_index_used": "https://pypi.org/simple", "layers_from_wheelhouse": [], "indexes_left_out": [
        {"field": "images.stable.index_url", "url": "https://download.pytorch.org/whl/cu118",
         "reason": "cannot resolve download.pytorch.org"}]}
    assert json.loads(build["labels"][indexes.LABEL]) == used
    assert indexes.from_labels(sdk.images_by_tag["matrixbench:stable"].labels) == used   # kept by the label build
    assert label["labels"][indexes.LABEL] == build["labels"][indexes.LABEL]


def test_an_unreachable_extra_index_is_left_out_of_the_docker_build_and_the_others_kept(monkeypatch):
    monkeypatch.setattr(reachable, "CHECKER", answering("down.example"))
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    _fake_client(monkeypatch, sdk)
    images.build_images(MATRIX, ["newest"], extra_index_urls=["https://down.example/simple",
                                                              "https://up.example/simple"],
                        on_progress=lambda *_: None)
    build, _label = sdk.build_calls
    assert build["buildargs"]["EXTRA_INDEX_URLS"] == "https://up.example/simple"
    used = json.loads(build["labels"][indexes.LABEL])
    assert used["torch_index_used"] == "https://pypi.org/simple"   # newest names no torch index of its own
    assert [(out["field"], out["url"]) for out in used["indexes_left_out"]] == [
        ("images.newest.extra_index_urls / --extra-index-url", "https://down.example/simple")]


def test_the_python_version_comes_from_the_python_build_arg():
    assert images.python_version(images.build_spec(STABLE)) == "3.10"
    assert images.python_version(images.build_spec(NEWEST)) == "3.12"


def test_build_streams_lines_and_passes_no_cache(monkeypatch):
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}, {"stream": "Collecting torch==2.0.1\n"}])
    _fake_client(monkeypatch, sdk)
    lines = []
    tags = images.build_images(MATRIX, ["stable"], no_cache=True,
                               on_progress=lambda name, line: lines.append(line))
    assert tags == ["matrixbench:stable"]
    assert "Collecting torch==2.0.1" in lines
    call, _label = sdk.build_calls   # the build, then the label of what it holds (build_facts)
    assert call["nocache"] is True and call["tag"] == "matrixbench:stable"
    assert call["buildargs"]["TORCH_SPEC"] == "torch==2.0.1"
    assert call["labels"][docker_client.LABEL_TORCH] == "2.0.1"


def test_a_failed_build_raises_build_error_with_the_log_tail(monkeypatch):
    sdk = FakeSDK(build_chunks=[
        {"stream": "Step 16/25 : RUN sh /opt/matrixbench/pip-install.sh torch\n"},
        {"stream": "ERROR: No matching distribution found for torch==9.9.9\n"},
        {"error": "The command '/bin/sh -eu -c sh pip-install.sh' returned a non-zero code: 1"},
    ])
    _fake_client(monkeypatch, sdk)
    with pytest.raises(BuildError) as caught:
        images.build_images(MATRIX, ["stable", "newest"], on_progress=lambda *_: None)
    message = str(caught.value)
    assert message.startswith("building image 'stable' (matrixbench:stable) failed")
    assert "No matching distribution found for torch==9.9.9" in message
    assert len(sdk.build_calls) == 1  # stops at the first failure (no label build)
    assert "matrixbench:stable" not in sdk.images_by_tag


def test_progress_leaves_out_docker_bookkeeping_but_the_error_tail_keeps_it(monkeypatch):
    sdk = FakeSDK(build_chunks=[
        {"stream": "Step 14/25 : RUN sh /opt/matrixbench/pip-install.sh torch\n"},
        {"stream": " ---> Running in 8d2ae4217556\n"},
        {"stream": "Collecting torch==2.0.1\n"},
        {"stream": "Removing intermediate container 8d2ae4217556\n ---> 730d03285f88\n"},
        {"error": "boom"},
    ])
    _fake_client(monkeypatch, sdk)
    lines = []
    with pytest.raises(BuildError) as caught:
        images.build_images(MATRIX, ["stable"], on_progress=lambda name, line: lines.append(line))
    assert lines == ["building matrixbench:stable from python:3.10-slim-bookworm",
                     "Step 14/25 : RUN sh /opt/matrixbench/pip-install.sh torch", "Collecting torch==2.0.1",
                     "ERROR: boom"]
    assert not any("--->" in line or "intermediate" in line for line in lines)
    assert " ---> Running in 8d2ae4217556" in str(caught.value)


def test_a_build_failing_at_from_says_the_base_image_is_missing(monkeypatch):
    sdk = FakeSDK(build_chunks=[
        {"stream": "Step 1/25 : ARG BASE_IMAGE=python:3.10-slim-bookworm\n"},
        {"stream": "Step 2/25 : FROM ${BASE_IMAGE}\n"},
        {"error": 'Get "https://registry-1.docker.io/v2/": dial tcp: no such host'},
    ])
    _fake_client(monkeypatch, sdk)
    with pytest.raises(BuildError, match="base image registry.local/py:3.10 is not on this machine.*--base-image"):
        images.build_images(MATRIX, ["stable"], base_image="registry.local/py:{python}",
                            on_progress=lambda *_: None)


def test_a_base_image_that_cannot_be_pulled_fails_before_the_wheelhouse_is_filled(monkeypatch):
    from docker.errors import APIError

    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    sdk.pull_error = APIError('Get "https://registry-1.docker.io/v2/": dial tcp: no such host')
    offers = _fake_client(monkeypatch, sdk, wheelhouse_url="http://127.0.0.1:47615/")
    with pytest.raises(BuildError, match="(?s)registry-1.docker.io.*base image python:3.10-slim-bookworm is not on "
                                         "this machine.*--base-image"):
        images.build_images(MATRIX, ["stable"], on_progress=lambda *_: None)
    assert offers == [] and sdk.build_calls == []   # no wheel downloaded, no build started


def test_a_missing_base_image_is_pulled_once_and_a_local_one_is_not(monkeypatch):
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    _fake_client(monkeypatch, sdk)
    images.build_images(MATRIX, ["stable"], on_progress=lambda *_: None)
    images.build_images(MATRIX, ["stable"], on_progress=lambda *_: None)
    assert sdk.pulled == ["python:3.10-slim-bookworm"]


def test_dry_run_of_the_repository_matrix_yaml():
    from matrixbench.matrix import load_matrix

    lines = []
    tags = images.build_images(load_matrix(REPO / "matrix.yaml"), None, dry_run=True,
                               on_progress=lambda name, line: lines.append(line))
    assert tags == ["matrixbench:seed", "matrixbench:stable", "matrixbench:nightly", "matrixbench:latest"]
    text = "\n".join(lines)
    assert "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118" in text
    assert "--build-arg TRANSFORMERS_SPEC=transformers==4.43.4" in text
    assert "--build-arg BASE_IMAGE=python:3.12-slim-bookworm" in text


def test_a_rebuild_discards_the_image_it_replaced(monkeypatch):
    sdk = FakeSDK(build_chunks=[{"stream": "Successfully built x\n"}])
    _fake_client(monkeypatch, sdk)
    images.build_images(MATRIX, ["stable"], on_progress=lambda *_: None)
    first = sdk.images_by_tag["matrixbench:stable"].id
    images.build_images(MATRIX, ["stable"], on_progress=lambda *_: None)
    assert sdk.removed_images == [first]
    assert sdk.images_by_tag["matrixbench:stable"].id != first


# --- images on a Ray node (backends.ray.build_on_node) ---------------------------------------

def _current_labels(image, runner=None):
    return {docker_client.LABEL_CONTENT_HASH: image.content_hash(),
            docker_client.LABEL_RUNNER_HASH: runner or images.runner_hash()}


def test_a_node_keeps_an_image_built_from_the_entry_and_this_runner(monkeypatch):
    from docker_fakes import FakeImage
    from matrixbench.executors.ray.executor import build_on_node

    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    sdk.images_by_tag["matrixbench:stable"] = FakeImage("matrixbench:stable", _current_labels(STABLE))
    _fake_client(monkeypatch, sdk)
    lines = build_on_node([STABLE], where="node 10.0.0.2")
    assert sdk.build_calls == []
    assert lines == [f"[stable] matrixbench:stable is up to date on node 10.0.0.2 "
                     f"(content hash {STABLE.content_hash()})"]


@pytest.mark.parametrize("labels", [lambda: _current_labels(STABLE, runner="0" * 16),
                                    lambda: _current_labels(NEWEST), lambda: {}],
                         ids=["older-runner", "other-entry", "unlabelled"])
def test_a_node_rebuilds_an_image_from_another_entry_or_runner(monkeypatch, labels):
    from docker_fakes import FakeImage
    from matrixbench.executors.ray.executor import build_on_node

    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    sdk.images_by_tag["matrixbench:stable"] = FakeImage("matrixbench:stable", labels())
    sdk.images_by_tag["python:3.10-slim-bookworm"] = FakeImage("python:3.10-slim-bookworm", {})
    _fake_client(monkeypatch, sdk)
    build_on_node([STABLE])
    call, _label = sdk.build_calls   # the build, then the label of what it holds (build_facts)
    assert call["labels"] == {**call["labels"], **_current_labels(STABLE)}   # the rebuild is current


def test_a_failed_node_build_says_how_to_build_on_that_node(monkeypatch):
    from docker_fakes import FakeImage
    from matrixbench.executors.ray.executor import build_on_node

    sdk = FakeSDK(build_chunks=[{"error": "pip: no route to PyPI"}])
    sdk.images_by_tag["python:3.10-slim-bookworm"] = FakeImage("python:3.10-slim-bookworm", {})
    _fake_client(monkeypatch, sdk)
    with pytest.raises(BuildError, match=r"no route to PyPI(.|\n)*Build it on node 10.0.0.2 with `matrixbench build "
                                         r"--images stable` and the --ca-bundle"):
        build_on_node([STABLE], where="node 10.0.0.2")


def test_a_node_builds_with_the_users_build_options_and_ca_bundle_bytes(monkeypatch, tmp_path):
    from docker_fakes import FakeImage
    from matrixbench.executors.ray.executor import build_on_node

    bundle = tmp_path / "proxy-ca.pem"
    bundle.write_bytes(b"-----BEGIN CERTIFICATE-----\nsynthetic\n")
    options = images.BuildOptions.given(ca_bundle=bundle, index_url="https://mirror.example/simple",
                                        extra_index_urls=("https://extra.example/simple",),
                                        base_image="mirror.example/python:{python}-slim")
    bundle.unlink()   # the node has no such file: the bundle travels as bytes
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    sdk.images_by_tag["mirror.example/python:3.10-slim"] = FakeImage("mirror.example/python:3.10-slim", {})
    _fake_client(monkeypatch, sdk)
    build_on_node([STABLE], options)
    call, _label = sdk.build_calls   # the build, then the label of what it holds (build_facts)
    assert call["buildargs"]["INDEX_URL"] == "https://mirror.example/simple"
    assert call["buildargs"]["EXTRA_INDEX_URLS"].endswith("https://extra.example/simple")
    assert call["buildargs"]["BASE_IMAGE"] == "mirror.example/python:3.10-slim"
    call["fileobj"].seek(0)
    with tarfile.open(fileobj=call["fileobj"]) as tar:
        assert tar.extractfile("ca-bundle.crt").read() == b"-----BEGIN CERTIFICATE-----\nsynthetic\n"


def test_no_build_option_given_is_none_and_a_missing_ca_bundle_is_refused(tmp_path):
    assert images.BuildOptions.given() is None
    with pytest.raises(BuildError, match="ca_bundle .*nope.pem: no such file"):
        images.BuildOptions.given(ca_bundle=tmp_path / "nope.pem")


def test_the_runner_hash_follows_the_runner_sources(tmp_path, monkeypatch):
    (tmp_path / "core.py").write_text("A = 1\n")
    monkeypatch.setattr(resources, "runner_dir", lambda: tmp_path)
    first = images.runner_hash()
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"x")
    assert images.runner_hash() == first                       # byte code is not the runner
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "tiny.json").write_text("{}")
    assert images.runner_hash() != first                       # a shipped config is
