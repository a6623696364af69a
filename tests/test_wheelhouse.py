"""The wheelhouse offered to Docker builds: filled with this host's pip for the image's Python
(through images/pip-install.sh), served on 127.0.0.1 for the build."""
import shlex
import sys
import urllib.request

from matrixbench.build import images, wheelhouse
from matrixbench.matrix import Image

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
    assert wheelhouse.fill(plan, "3.10", emit=lambda *_: None, environ=environ)
    torch, rest = [shlex.split(line) for line in log.read_text().splitlines()]
    download = ["-m", "pip", "download", "--dest", str(tmp_path / "wheels"), "--only-binary=:all:",
                "--python-version", "3.10"]
    assert torch[:9] == [*download, "torch==2.0.1"]
    assert "https://download.pytorch.org/whl/cu118" in torch
    assert rest[:14] == [*download, "torch==2.0.1", "transformers==4.43.4", "pillow", "scipy",
                         "nvidia-ml-py==13.615.71", "numpy<2"]
    assert ["--find-links", str(tmp_path / "wheels")] == rest[rest.index("--find-links"):][:2]


def test_a_failed_download_offers_nothing_and_says_so(tmp_path, monkeypatch):
    fake_interpreter(tmp_path, monkeypatch, fail=True)
    environ = {"PATH": "/usr/bin:/bin", wheelhouse.WHEELHOUSE_VARIABLE: str(tmp_path / "wheels")}
    lines = []
    with wheelhouse.offered(images.build_spec(STABLE), "3.10", emit=lambda name, line: lines.append(line),
                            environ=environ) as url:
        assert url is None
    assert "the build downloads its wheels itself" in lines[-1]


def test_no_python_version_offers_nothing(tmp_path, monkeypatch):
    log = fake_interpreter(tmp_path, monkeypatch)
    with wheelhouse.offered(images.build_spec(STABLE), None, emit=lambda *_: None, environ={}) as url:
        assert url is None
    assert not log.exists()


def test_a_download_alone_does_not_wait(tmp_path):
    said = []
    with wheelhouse.downloading("x", emit=lambda name, line: said.append(line),
                                environ={"MATRIXBENCH_WHEELHOUSE": str(tmp_path / "w")}) as directory:
        assert directory == tmp_path / "w" and directory.is_dir()
    assert said == []
