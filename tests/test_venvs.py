"""venv builds without the network: identity and paths, the marker rule, and the build steps run
through images/pip-install.sh (the Dockerfile's pip logic) with fake interpreters and a fake pip."""
import dataclasses
import json
import os
import shlex

import pytest

from host_helpers import answering
from matrixbench.build import venvs
from matrixbench.build.facts import BuildFacts
from matrixbench.build.interpreters import Finder
from matrixbench.build.wheelhouse import wheelhouse_dir
from matrixbench.errors import BuildError, IndexUnreachableError
from matrixbench.matrix import Image, Matrix

STABLE = Image(name="stable", torch="torch==2.0.1", python="3.10", transformers="transformers==4.43.4",
               base_image="python:3.10-slim-bookworm", extra_pins=("numpy<2",),
               index_url="https://download.pytorch.org/whl/cu118", description="torch 2.0.1")


# --- identity --------------------------------------------------------------------------------

def test_the_folder_is_named_by_the_image_and_its_content_hash(tmp_path):
    plan = venvs.plan_venv(STABLE, root=tmp_path)
    assert plan.path == tmp_path / f"stable-{STABLE.content_hash()}"
    assert plan.content_hash == STABLE.content_hash() and len(plan.content_hash) == 12


@pytest.mark.parametrize("change", [
    {"torch": "torch==2.0.0"}, {"python": "3.11"}, {"transformers": "transformers==4.44.0"},
    {"extra_pins": ("numpy<1.26",)}, {"extra_pins": ()}, {"index_url": None},
    {"extra_index_urls": ("https://mirror/simple",)},
])
def test_changing_a_pin_gives_another_folder(tmp_path, change):
    changed = dataclasses.replace(STABLE, **change)
    assert venvs.plan_venv(changed, root=tmp_path).path != venvs.plan_venv(STABLE, root=tmp_path).path


def test_the_description_is_not_part_of_the_identity(tmp_path):
    described = dataclasses.replace(STABLE, description="another sentence")
    assert venvs.plan_venv(described, root=tmp_path).path == venvs.plan_venv(STABLE, root=tmp_path).path


def test_caches_follow_xdg_cache_home_and_the_wheelhouse_variable(tmp_path):
    assert venvs.venvs_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "matrixbench" / "venvs"
    assert wheelhouse_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "matrixbench" / "wheels"
    assert wheelhouse_dir({"MATRIXBENCH_WHEELHOUSE": str(tmp_path / "w")}) == tmp_path / "w"


def test_the_marker_must_name_this_hash(tmp_path):
    plan = venvs.plan_venv(STABLE, root=tmp_path)
    assert venvs.read_marker(plan) is None
    (plan.path / "bin").mkdir(parents=True)
    (plan.path / "bin" / "python").touch()
    assert venvs.read_marker(plan) is None  # half-built: no marker
    plan.marker.write_text(json.dumps({"image_id": "0123456789ab", "torch": "2.0.1"}))
    assert venvs.read_marker(plan) is None  # a marker of other pins
    plan.marker.write_text(json.dumps({"image_id": plan.content_hash, "torch": "2.0.1+cu117", "recipe": "0"}))
    assert venvs.read_marker(plan) is None  # made by another pip-install.sh
    plan.marker.write_text(json.dumps({"image_id": plan.content_hash, "torch": "2.0.1+cu117",
                                       "recipe": venvs.recipe_hash()}))
    assert venvs.read_marker(plan) == venvs.Venv("stable", plan.path, plan.python_bin, plan.content_hash,
                                                 "2.0.1+cu117")


# --- the pip logic is the Dockerfile's -------------------------------------------------------

FAKE_PIP = """#!/bin/sh
printf '%s\\n' "$*" >> "$PIP_LOG"
[ -z "${PIP_FAIL:-}" ] || { echo "ERROR: No matching distribution found for torch==2.0.1"; exit 1; }
echo "Successfully ran pip $1"
"""
FAKE_VENV_PYTHON = """#!/bin/sh
case "$2" in *get_arch_list*)   # build_facts.PROBE: a torch as the cu118 index serves it
  echo '{"torch": "$FAKE_TORCH+cu118", "cuda": "11.8", "arch_list": ["sm_80", "sm_90"]}'; exit;; esac
if [ "$1 $2" = "-m pip" ]; then echo "torch==$FAKE_TORCH"; else echo "$FAKE_TORCH"; fi
"""


def executable(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_host(tmp_path):
    """A host with a fake python3.10 whose `-m venv DIR` makes a venv holding a fake pip (it logs
    its argv) and a fake python (it reports torch FAKE_TORCH); returns the build's environ."""
    templates = tmp_path / "templates"
    executable(templates / "pip", FAKE_PIP)
    executable(templates / "python", FAKE_VENV_PYTHON.replace("$FAKE_TORCH", "2.0.1"))
    executable(tmp_path / "bin" / "python3.10", f"""#!/bin/sh
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp {templates}/pip {templates}/python "$3/bin/"; exit; fi
echo "3.10 $0"
""")
    return {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.defpath}", "PYENV_ROOT": str(tmp_path / "no-pyenv"),
            "PIP_LOG": str(tmp_path / "pip.log"), "MATRIXBENCH_WHEELHOUSE": str(tmp_path / "wheels"),
            "PYTHONPATH": "/host/site-packages"}


def build(plan, environ, emitted=None, checker=None):
    emit = (lambda name, line: emitted.append((name, line))) if emitted is not None else (lambda *_: None)
    return venvs.ensure_venv(plan, emit=emit, finder=Finder(environ=environ), environ=environ,
                             checker=checker or answering())


def test_download_then_install_each_layer_with_the_images_index_settings(tmp_path, fake_host):
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs", extra_index_urls=["https://extra/simple"])
    emitted = []
    venv = build(plan, fake_host, emitted)
    wheels = tmp_path / "wheels"
    calls = [shlex.split(line) for line in (tmp_path / "pip.log").read_text().splitlines()]
    common = ["--progress-bar", "off", "--find-links", str(wheels), "--extra-index-url", "https://extra/simple"]
    torch_index = ["--index-url", "https://download.pytorch.org/whl/cu118", "--extra-index-url", "https://pypi.org/simple"]
    rest = ["torch==2.0.1", "transformers==4.43.4", "pillow", "scipy", "nvidia-ml-py==13.615.71", "numpy<2"]
    assert calls == [   # torch from its own index (it answers); the rest offline first: the fake pip finds all
        ["download", "--dest", str(wheels), "torch==2.0.1", *common, *torch_index],
        ["install", "--no-index", "torch==2.0.1", *common, *torch_index],
        ["download", "--dest", str(wheels), "--no-index", *rest, *common, "--index-url", "https://pypi.org/simple"],
        ["install", "--no-index", *rest, *common, "--index-url", "https://pypi.org/simple"],
    ]
    assert wheels.is_dir()
    assert venv.image_id == plan.content_hash and venv.torch == "2.0.1"
    assert venv.facts == BuildFacts("2.0.1+cu118", "11.8", ("sm_80", "sm_90"))   # asked of the venv's python
    assert json.loads(plan.marker.read_text())["build"] == venv.facts.to_dict()
    assert (plan.path / "pip-freeze.txt").read_text() == "torch==2.0.1\n"
    assert json.loads(plan.marker.read_text())["interpreter"] == str(tmp_path / "bin" / "python3.10")
    assert ("stable", "Successfully ran pip install") in emitted  # pip's lines, per image
    used = {key: json.loads(plan.marker.read_text())[key]
            for key in ("torch_index_used", "indexes_left_out", "layers_from_wheelhouse")}
    assert used == {"torch_index_used": "https://download.pytorch.org/whl/cu118", "indexes_left_out": [],
                    "layers_from_wheelhouse": ["rest"]}
    assert ("stable", f"wheelhouse: every wheel of the rest layer is in {wheels}; no index asked") in emitted


def test_an_incomplete_wheelhouse_falls_back_to_the_indexes(tmp_path, fake_host):
    """pip install --no-index fails when the wheelhouse lacks a wheel; the script then asks the indexes."""
    pip = tmp_path / "templates" / "pip"
    pip.write_text(pip.read_text().replace('[ -z "${PIP_FAIL:-}" ]', '[ "$2" != --no-index ]'))
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs")
    emitted = []
    build(plan, fake_host, emitted)
    calls = [line.split()[:2] for line in (tmp_path / "pip.log").read_text().splitlines()]
    assert calls[:3] == [["download", "--dest"], ["install", "--no-index"], ["install", "torch==2.0.1"]]
    assert ("stable", "pip-install.sh: the wheelhouse lacks some of these; installing from the indexes") in emitted
    assert plan.marker.exists()


def test_pip_runs_in_the_venv_without_the_hosts_pythonpath(tmp_path, fake_host):
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs", ca_bundle=None)
    env = venvs.pip_env(plan, "install", fake_host)
    assert "PYTHONPATH" not in env
    assert env["PATH"].split(os.pathsep)[0] == str(plan.path / "bin")
    assert env["CA_BUNDLE"] == os.devnull and env["PIP_NO_CACHE_DIR"] == "1"


# --- indexes that do not answer --------------------------------------------------------------

OFFLINE_DOWNLOAD_FAILS = ('[ "$1" != download ] || case "$*" in *--no-index*) '
                          'echo "ERROR: No matching distribution"; exit 1;; esac\n')


def lacking_wheelhouse(tmp_path):
    """The fake pip's offline downloads fail: the wheelhouse lacks the wheels."""
    pip = tmp_path / "templates" / "pip"
    pip.write_text(pip.read_text().replace('[ -z "${PIP_FAIL:-}" ]', OFFLINE_DOWNLOAD_FAILS + '[ -z "${PIP_FAIL:-}" ]'))


def test_an_unreachable_torch_index_is_left_out_said_and_recorded(tmp_path, fake_host):
    lacking_wheelhouse(tmp_path)
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs", extra_index_urls=["https://extra/simple"])
    emitted = []
    build(plan, fake_host, emitted, answering("download.pytorch.org"))
    calls = [shlex.split(line) for line in (tmp_path / "pip.log").read_text().splitlines()]
    online = [call for call in calls if "--no-index" not in call]
    assert [call[:4] for call in online] == [["download", "--dest", str(tmp_path / "wheels"), "torch==2.0.1"],
                                             ["download", "--dest", str(tmp_path / "wheels"), "torch==2.0.1"]]
    for call in calls:   # every host pip call: the torch index left out, the extra and the main index kept
        assert "https://download.pytorch.org/whl/cu118" not in call
        assert call[-4:] == ["--extra-index-url", "https://extra/simple", "--index-url", "https://pypi.org/simple"]
    assert ("stable", "images.stable.index_url https://download.pytorch.org/whl/cu118 is left out of this host's pip "
                      "download (cannot resolve download.pytorch.org): torch==2.0.1 comes from https://pypi.org/simple "
                      "instead, as pip would after its retries; note: PyPI's Linux torch wheels are CUDA builds"
            ) in emitted
    marker = json.loads(plan.marker.read_text())
    assert marker["torch_index_used"] == "https://pypi.org/simple" and marker["layers_from_wheelhouse"] == []
    assert marker["indexes_left_out"] == [{"field": "images.stable.index_url", "url": "https://download.pytorch.org/whl/cu118",
                                           "reason": "cannot resolve download.pytorch.org"}]
    assert marker["buildargs"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cu118"   # what was asked for
    assert plan.content_hash == STABLE.content_hash()


def test_a_filled_wheelhouse_asks_no_index_and_the_marker_says_so(tmp_path, fake_host):
    """The torch index does not answer, the wheelhouse holds every wheel: nothing is downloaded from anywhere."""
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs")
    build(plan, fake_host, checker=answering("download.pytorch.org", "pypi.org"))
    calls = [shlex.split(line) for line in (tmp_path / "pip.log").read_text().splitlines()]
    assert all("--no-index" in call for call in calls) and len(calls) == 4
    marker = json.loads(plan.marker.read_text())
    assert marker["torch_index_used"] is None and marker["layers_from_wheelhouse"] == ["torch", "rest"]
    assert [out["field"] for out in marker["indexes_left_out"]] == ["images.stable.index_url"]


def test_an_unreachable_main_index_fails_fast_when_the_wheelhouse_lacks_wheels(tmp_path, fake_host):
    lacking_wheelhouse(tmp_path)
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs", index_url="https://user:s3cret@mirror.example/simple")
    with pytest.raises(IndexUnreachableError) as raised:
        build(plan, fake_host, checker=answering("mirror.example"))
    message = str(raised.value)
    assert message.startswith("image 'stable': the index https://***@mirror.example/simple (the build setting "
                              "index_url: matrix.yaml, --set index_url=URL or build --index-url) does not answer from "
                              "this host (cannot resolve mirror.example), and the wheelhouse ")
    assert "s3cret" not in message and "Give an index this host reaches (--index-url" in message
    calls = (tmp_path / "pip.log").read_text().splitlines()
    assert len(calls) == 1 and "--no-index" in calls[0]   # the offline try only: no pip retried the index
    assert not plan.marker.exists()


def test_a_complete_venv_is_reused_and_a_half_built_one_is_rebuilt(tmp_path, fake_host):
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs")
    log = tmp_path / "pip.log"
    build(plan, fake_host)
    built_at = plan.marker.read_text()
    log.unlink()
    emitted = []
    build(plan, fake_host, emitted)
    assert not log.exists() and plan.marker.read_text() == built_at
    assert emitted == [("stable", f"using {plan.path} (torch 2.0.1+cu118, CUDA 11.8 (sm_80 sm_90))")]

    plan.marker.unlink()  # as a build killed halfway leaves it
    (plan.path / "left-over").touch()
    build(plan, fake_host)
    assert len(log.read_text().splitlines()) == 4 and plan.marker.exists()
    assert not (plan.path / "left-over").exists()


def test_a_venv_built_before_venvs_recorded_their_build_is_asked_once_on_reuse(tmp_path, fake_host):
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs")
    build(plan, fake_host)
    older = {key: value for key, value in json.loads(plan.marker.read_text()).items() if key != "build"}
    plan.marker.write_text(json.dumps(older))
    assert venvs.read_marker(plan).facts is None   # not recorded: doctor would infer, and say so
    (tmp_path / "pip.log").unlink()
    venv = build(plan, fake_host)
    assert venv.facts == BuildFacts("2.0.1+cu118", "11.8", ("sm_80", "sm_90")) and not (tmp_path / "pip.log").exists()
    assert json.loads(plan.marker.read_text()) == {**older, "build": venv.facts.to_dict()}   # nothing else changed


def test_a_failed_pip_leaves_no_marker_and_says_why(tmp_path, fake_host):
    plan = venvs.plan_venv(STABLE, root=tmp_path / "venvs")
    with pytest.raises(BuildError, match="(?s)venv of image 'stable'.*rebuilt next time.*No matching distribution"):
        build(plan, {**fake_host, "PIP_FAIL": "1"})
    assert plan.path.exists() and not plan.marker.exists()
    assert venvs.read_marker(plan) is None


def test_a_venv_with_another_torch_than_the_pin_is_refused(tmp_path, fake_host):
    plan = venvs.plan_venv(dataclasses.replace(STABLE, torch="torch==2.1.0"), root=tmp_path / "venvs")
    with pytest.raises(BuildError, match="pip installed torch 2.0.1, but the image pins torch==2.1.0"):
        build(plan, fake_host)
    assert not plan.marker.exists()


def test_build_venvs_dry_run_describes_and_builds_nothing(tmp_path):
    matrix = Matrix(images={"stable": STABLE}, models={}, batch_sizes=(1,), modes=("eager",))
    lines = []
    paths = venvs.build_venvs(matrix, None, dry_run=True, root=tmp_path,
                              on_progress=lambda name, line: lines.append(line))
    assert paths == [tmp_path / f"stable-{STABLE.content_hash()}"] and not paths[0].exists()
    assert "  TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118" in lines
    assert "  EXTRA_PINS=numpy<2" in lines


def test_remove_venvs_removes_every_folder(tmp_path):
    for name in ("stable-aaa", "latest-bbb"):
        (tmp_path / name / "bin").mkdir(parents=True)
    assert venvs.remove_venvs(root=tmp_path, dry_run=True) == [f"venv {tmp_path / 'latest-bbb'}",
                                                               f"venv {tmp_path / 'stable-aaa'}"]
    assert len(venvs.remove_venvs(root=tmp_path)) == 2
    assert list(tmp_path.iterdir()) == []
    assert venvs.remove_venvs(root=tmp_path / "never-made") == []
