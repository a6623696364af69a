"""The wheelhouse offered to Docker builds: filled with this host's pip for the image's Python
(through images/pip-install.sh), served on 127.0.0.1 for the build."""
import dataclasses
import json
import shlex
import socket
import sys
import time
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest

from host_helpers import answering
from matrixbench.build import images, indexes, wheelhouse
from matrixbench.build.reachable import Reach
from matrixbench.errors import IndexUnreachableError
from matrixbench.matrix import Image, Matrix

STABLE = Image(name="stable", torch="torch==2.0.1", python="3.10", transformers="transformers==4.43.4",
               base_image="python:3.10-slim-bookworm", extra_pins=("numpy<2",),
               index_url="https://download.pytorch.org/whl/cu118")


def test_the_served_folder_is_a_find_links_page(tmp_path):
    (tmp_path / "torch-2.0.1-cp310-cp310-manylinux1_x86_64.whl").write_bytes(b"wheel")
    with wheelhouse.served(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'href="torch-2.0.1-cp310-cp310-manylinux1_x86_64.whl"' in page
        assert urllib.request.urlopen(url + "torch-2.0.1-cp310-cp310-manylinux1_x86_64.whl",
                                      timeout=10).read() == b"wheel"


def test_a_taken_port_falls_back_to_a_free_one(tmp_path):
    with wheelhouse.served(tmp_path) as first, wheelhouse.served(tmp_path) as second:
        assert first != second


def fake_interpreter(tmp_path, monkeypatch, fail=False):
    """sys.executable replaced by a script that logs its argv (as `python -m pip ...`)."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {tmp_path / "pip.log"}\n{"exit 1" if fail else ""}\n')
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    return tmp_path / "pip.log"


def test_fill_downloads_each_layer_for_the_images_python_with_the_dockerfiles_arguments(tmp_path, monkeypatch):
    log = fake_interpreter(tmp_path, monkeypatch)
    environ = {"PATH": "/usr/bin:/bin", wheelhouse.WHEELHOUSE_VARIABLE: str(tmp_path / "wheels")}
    plan = images.build_spec(STABLE)
    assert wheelhouse.fill(plan, "3.10", emit=lambda *_: None, environ=environ, checker=answering())
    torch, rest = [shlex.split(line) for line in log.read_text().splitlines()]
    download = ["-m", "pip", "download", "--dest", str(tmp_path / "wheels"), "--only-binary=:all:",
                "--python-version", "3.10"]
    assert torch[:9] == [*download, "torch==2.0.1"]   # its own index first: it answers
    assert "https://download.pytorch.org/whl/cu118" in torch
    assert rest[:15] == [*download, "--no-index", "torch==2.0.1", "transformers==4.43.4", "pillow", "scipy",
                         "nvidia-ml-py==13.615.71", "numpy<2"]   # offline first: the fake pip finds every wheel
    assert ["--find-links", str(tmp_path / "wheels")] == rest[rest.index("--find-links"):][:2]


def test_a_failed_download_offers_nothing_and_says_so(tmp_path, monkeypatch):
    fake_interpreter(tmp_path, monkeypatch, fail=True)
    environ = {"PATH": "/usr/bin:/bin", wheelhouse.WHEELHOUSE_VARIABLE: str(tmp_path / "wheels")}
    lines = []
    with wheelhouse.offered(images.build_spec(STABLE), "3.10", emit=lambda name, line: lines.append(line),
                            environ=environ, checker=answering()) as offer:
        assert offer == wheelhouse.Offer(None, None)
    assert "the build downloads its wheels itself" in lines[-1]


def test_no_python_version_offers_nothing(tmp_path, monkeypatch):
    log = fake_interpreter(tmp_path, monkeypatch)
    with wheelhouse.offered(images.build_spec(STABLE), None, emit=lambda *_: None, environ={}) as offer:
        assert offer.url is None
    assert not log.exists()


def test_a_download_alone_does_not_wait(tmp_path):
    said = []
    with wheelhouse.downloading("x", emit=lambda name, line: said.append(line),
                                environ={"MATRIXBENCH_WHEELHOUSE": str(tmp_path / "w")}) as directory:
        assert directory == tmp_path / "w" and directory.is_dir()
    assert said == []


# --- indexes that do not answer, and a filled wheelhouse, with the real pip --------------------

def test_an_unreachable_extra_index_is_left_out_and_the_others_kept():
    plan = images.build_spec(STABLE, extra_index_urls=["https://down.example/simple", "https://up.example/simple"])
    chosen = indexes.choose("stable", plan.buildargs, {}, answering("down.example"))
    assert chosen.buildargs == {**plan.buildargs, "EXTRA_INDEX_URLS": "https://up.example/simple"}
    assert chosen.lines() == [
        "images.stable.extra_index_urls / --extra-index-url https://down.example/simple is left out of this host's pip "
        "download (cannot resolve down.example): what it serves comes from https://pypi.org/simple and the other "
        "indexes instead, as pip would after its retries"]
    assert chosen.torch_index == "https://download.pytorch.org/whl/cu118" and chosen.main == Reach(True)


def docker_build(tmp_path, monkeypatch, *unresolved):
    """A Docker build of STABLE with the SDK faked and the real wheelhouse (this host's pip faked by
    ``fake_interpreter``), where the index hosts ``unresolved`` do not resolve; the FakeSDK."""
    from docker_fakes import FakeSDK
    from matrixbench.build import docker_client, reachable

    monkeypatch.setenv(wheelhouse.WHEELHOUSE_VARIABLE, str(tmp_path / "wheels"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(reachable, "CHECKER", answering(*unresolved))
    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    monkeypatch.setattr(docker_client, "connect", lambda: docker_client.DockerClient(sdk))
    return sdk


def test_a_docker_build_whose_main_index_does_not_answer_is_refused_before_it_starts(tmp_path, monkeypatch):
    """pypi.org does not resolve and the wheelhouse lacks wheels: the build's own pip would retry it for minutes
    (its network is taken for this host's), so the build stops at once, after the offline try only."""
    log = fake_interpreter(tmp_path, monkeypatch, fail=True)
    sdk = docker_build(tmp_path, monkeypatch, "pypi.org")
    with pytest.raises(IndexUnreachableError) as refused:
        images.build_images(Matrix(images={"stable": STABLE}, models={}, batch_sizes=(1,), modes=("eager",)),
                            ["stable"], on_progress=lambda *_: None)
    assert str(refused.value).startswith(
        "image 'stable': the index https://pypi.org/simple (the build setting index_url: matrix.yaml, --set "
        "index_url=URL or build --index-url) does not answer from this host (cannot resolve pypi.org)")
    assert len(log.read_text().splitlines()) == 1 and "--no-index" in log.read_text()   # the offline try only
    assert sdk.build_calls == []


def test_a_docker_builds_label_records_the_indexes_its_wheelhouse_download_used(tmp_path, monkeypatch):
    """The torch layer from the image's own index (it answers), the rest from the wheelhouse: the image's label
    says so, as a venv's marker would."""
    fake_interpreter(tmp_path, monkeypatch)
    sdk = docker_build(tmp_path, monkeypatch)
    images.build_images(Matrix(images={"stable": STABLE}, models={}, batch_sizes=(1,), modes=("eager",)),
                        ["stable"], on_progress=lambda *_: None)
    build, _label = sdk.build_calls
    assert build["network_mode"] == "host" and build["buildargs"]["FIND_LINKS"].startswith("http://127.0.0.1:")
    assert json.loads(build["labels"][indexes.LABEL]) == {
        "torch_index_used": "https://download.pytorch.org/whl/cu118", "indexes_left_out": [],
        "layers_from_wheelhouse": ["rest"]}


WHEELS = {"torch": "2.0.1", "transformers": "4.43.4", "pillow": "10.0.0", "scipy": "1.11.0",
          "nvidia_ml_py": "13.615.71"}


def make_wheel(folder, name, version):
    """A tiny real wheel (metadata only) pip accepts for any Python."""
    info = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


@pytest.fixture
def counting_index():
    """An index on 127.0.0.1 that counts the requests it gets and serves nothing (404)."""
    hits = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the base class's name)
            hits.append(self.path)
            self.send_error(404)

        def log_message(self, format, *args):  # noqa: A002
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def filled(tmp_path):
    """The environ of a real pip (this interpreter's) whose wheelhouse holds every pin of TINY; no pip
    configuration file (this machine's adds indexes and constraints)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, version in WHEELS.items():
        make_wheel(wheels, name, version)
    return {"PATH": "/usr/bin:/bin", wheelhouse.WHEELHOUSE_VARIABLE: str(wheels), "PIP_CONFIG_FILE": "/dev/null",
            "HOME": str(tmp_path)}


TINY = dataclasses.replace(STABLE, transformers="transformers==4.43.4", extra_pins=(), index_url=None)
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_a_filled_wheelhouse_asks_no_index_at_all(tmp_path, counting_index):
    index, hits = counting_index
    lines = []
    plan = images.build_spec(TINY, index_url=f"{index}/simple")
    assert wheelhouse.fill(plan, PYTHON, emit=lambda name, line: lines.append(line), environ=filled(tmp_path))
    assert hits == []
    assert [line for line in lines if "no index asked" in line] == [
        f"wheelhouse: every wheel of the {layer} layer is in {tmp_path / 'wheels'}; no index asked"
        for layer in ("torch", "rest")]


def test_an_unreachable_torch_index_costs_no_retries_with_a_filled_wheelhouse(tmp_path, counting_index):
    index, hits = counting_index
    with socket.socket() as probe:   # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    plan = images.build_spec(dataclasses.replace(TINY, index_url=f"http://127.0.0.1:{closed}/whl/cpu"),
                             index_url=f"{index}/simple")
    lines = []
    started = time.monotonic()
    assert wheelhouse.fill(plan, PYTHON, emit=lambda name, line: lines.append(line), environ=filled(tmp_path))
    assert time.monotonic() - started < 60 and hits == []
    assert lines[0].startswith(f"images.stable.index_url http://127.0.0.1:{closed}/whl/cpu is left out of this host's "
                               f"pip download (cannot connect to 127.0.0.1:{closed} (")


def test_a_torch_index_that_answers_is_asked_for_torch_even_with_a_filled_wheelhouse(tmp_path, counting_index):
    """Offline, the wheelhouse's torch of the pinned version would do whichever index it came from: the image's
    own torch index is asked for torch (pip keeps the wheel it already has); the rest stays offline."""
    index, hits = counting_index
    plan = images.build_spec(dataclasses.replace(TINY, index_url=f"{index}/torch"), index_url=f"{index}/simple")
    assert wheelhouse.fill(plan, PYTHON, emit=lambda *_: None, environ=filled(tmp_path))
    assert "/torch/torch/" in hits
    assert {hit.split("/")[2] for hit in hits} == {"torch"}   # the rest layer (transformers, ...) asked nothing
