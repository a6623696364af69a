"""validate --build: every model built on the meta device by the runner's --check in each image
(the docker backend: a container of each built image; local: this interpreter, once); failures
named by image and model."""
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from docker_fakes import FakeImage, FakeSDK
from host_helpers import RecordingBackend, local_run_options, small_matrix_data, use_backend, write_matrix
from matrixbench import environments as backends
from matrixbench.build import docker_client
from matrixbench.build.check import build_models, check_built
from matrixbench.cli import main
from matrixbench.environments.base import Environment
from matrixbench.environments.docker import DockerBackend
from matrixbench.errors import MatrixError, RunError
from matrixbench.matrix import load_matrix
from matrixbench.matrix.aa import aa_matrix
from matrixbench.run.command import run_matrix


def test_validate_build_local_names_each_model_that_does_not_build(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "unknown.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    data = small_matrix_data()
    data["models"] = {"vit": data["models"]["vit"],
                      "mine": {"config": "unknown.json", "task": "image-classification"}}
    result = CliRunner().invoke(main, ["validate", "--matrix", str(write_matrix(tmp_path, data)), "--build",
                                       "--backend", "local"])
    assert result.exit_code == 2, result.output
    assert "image local (torch 2.13" in result.stdout and ", transformers 5." in result.stdout
    assert "model vit: builds on the meta device" in result.stdout
    assert "1 model build(s) of the matrix fail" in result.stderr
    assert "model mine: does not build: ModelError: config model_type='no-such-architecture'" in result.stderr


# What each image's transformers knows, for the fake entrypoint: the old one lacks a model.
IMAGE_TORCH = {"stable": "2.0.1", "latest": "2.13.0"}
UNKNOWN_IN = {"stable": {"detr-resnet-101"}, "latest": set()}


def _fake_check(container):
    """The image's entrypoint with --check, for the fake SDK: check.json in the mounted results folder."""
    results = next(Path(host) for host, spec in container.kwargs["volumes"].items() if spec["bind"] == "/results")
    cells_path = results / Path(container.command[container.command.index("--cells") + 1]).relative_to("/results")
    cells = json.loads(cells_path.read_text())["cells"]
    image = container.kwargs["labels"]["matrixbench.image"]
    models = [{"model": cell["model"], "size": cell["size"], "weights": cell["weights"],
               "error": "ValueError: unknown model type" if cell["model"] in UNKNOWN_IN[image] else None}
              for cell in cells]
    (results / "check.json").write_text(json.dumps({"schema_version": 1, "image_name": image,
                                                    "torch": IMAGE_TORCH[image], "transformers": "4.43.4",
                                                    "models": models}))


@pytest.fixture
def sdk(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path), None)
    fake = FakeSDK()
    for name, image in matrix.images.items():
        fake.images_by_tag[f"matrixbench:{name}"] = FakeImage(f"matrixbench:{name}", {
            "matrixbench": "1", "matrixbench.torch": IMAGE_TORCH[name],
            docker_client.LABEL_CONTENT_HASH: image.content_hash()}, f"sha256:{name}")
    fake.next_container = {"on_wait": _fake_check}
    return fake


def test_the_docker_backend_checks_in_a_container_of_each_built_image(sdk, tmp_path):
    matrix = load_matrix(write_matrix(tmp_path), None)
    checks = build_models(matrix, DockerBackend(client=docker_client.DockerClient(sdk)), environ={})
    assert [container.image for container in sdk.started] == ["matrixbench:stable", "matrixbench:latest"]
    assert all(container.command[-1] == "--check" for container in sdk.started)
    assert all(container.kwargs["device_requests"] is None for container in sdk.started)
    assert [(check.image_name, check.torch) for check in checks] == [("stable", "2.0.1"), ("latest", "2.13.0")]
    with pytest.raises(MatrixError, match=r"(?s)1 model build\(s\).*image stable \(torch 2\.0\.1, transformers "
                                          r"4\.43\.4\): model "
                                          r"detr-resnet-101: does not build: ValueError"):
        check_built(checks)


def test_validate_build_runs_in_the_images_by_default_and_names_image_and_model(sdk, tmp_path, monkeypatch):
    backend = DockerBackend(client=docker_client.DockerClient(sdk))
    monkeypatch.setitem(backends.FACTORIES, "docker", lambda build_options=None, run_id=None: backend)
    result = CliRunner().invoke(main, ["validate", "--matrix", str(write_matrix(tmp_path)), "--build"])
    assert result.exit_code == 2, result.output
    assert ("image latest (torch 2.13.0, transformers 4.43.4): model detr-resnet-101: builds on the meta "
            "device") in result.stdout
    assert "image stable (torch 2.0.1, transformers 4.43.4): model detr-resnet-101: does not build" in result.stderr
    assert len(sdk.started) == 2 and not sdk.started_live     # every container removed


def test_an_image_not_built_is_named_with_the_build_command(sdk, tmp_path):
    del sdk.images_by_tag["matrixbench:latest"]
    matrix = load_matrix(write_matrix(tmp_path), None)
    with pytest.raises(RunError, match="Docker has no matrixbench:latest; build it first with `matrixbench build "
                                       "--images latest`"):
        build_models(matrix, DockerBackend(client=docker_client.DockerClient(sdk)), environ={})


def test_a_check_that_fails_says_so_with_the_log_tail(sdk, tmp_path):
    sdk.next_container = {"log": b"Traceback: no torch here\n", "exit_code": 1}
    matrix = load_matrix(write_matrix(tmp_path), None)
    with pytest.raises(MatrixError, match=r"image 'stable': the runner could not check the models \(runner exit "
                                          r"code 1: Traceback: no torch here\); its log's end:\nTraceback: no torch"):
        build_models(matrix, DockerBackend(client=docker_client.DockerClient(sdk)), environ={})


# --- the run's model check (run_matrix, before any cell) -------------------------------------------

def _with_own(**models):
    """The small matrix (shipped vit and detr-resnet-101, random weights) with hub models of the user's."""
    data = small_matrix_data()
    data["models"].update({name: {"id": f"org/{name}", "task": "image-classification"} for name in models})
    return data


def test_a_run_with_a_model_an_image_cannot_build_is_refused_before_any_cell(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend(
        unbuildable={"mine": "ValueError: Unrecognized model in config.json: model_type 'vit2'"}))
    matrix = load_matrix(write_matrix(tmp_path, _with_own(mine=1, theirs=1)), None)
    with pytest.raises(MatrixError) as raised:
        run_matrix(matrix, local_run_options(tmp_path))
    message = str(raised.value)
    assert "2 model build(s) fail before any cell ran" in message
    assert ("model mine in image stable (torch 2.13.0, transformers 5.23.0): ValueError: Unrecognized "
            "model in config.json: model_type 'vit2'") in message
    assert "--models leaving out mine" in message and "`transformers:` pin" in message
    assert backend.requests == []                                    # no cell ran
    assert [request.image.name for request in backend.checks] == ["stable", "latest"]   # each environment once
    assert [cell.model for cell in backend.checks[0].work.cells] == ["mine", "theirs"]  # one cell a model; shipped:
    assert not backend.checks[0].placement.gpus and backend.checks[0].work.mode_argv() == ["--check"]   # not asked
    assert (tmp_path / "results" / "r1" / "stable" / ".model-check" / "check.json").is_file()
    assert json.loads((tmp_path / "results" / "r1" / "run.json").read_text())["status"] == "failed"


def test_the_run_checks_only_pending_models_of_the_users_once_per_build(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    run_matrix(load_matrix(write_matrix(tmp_path), None), local_run_options(tmp_path, order_seed=1))
    assert backend.checks == [] and len(backend.requests) == 2   # shipped models with random weights: no check
    run_matrix(load_matrix(write_matrix(tmp_path, _with_own(mine=1)), None), local_run_options(tmp_path, order_seed=1))
    assert len(backend.requests) == 4   # the new model's cells ran, in both images
    assert [[cell.model for cell in check.work.cells] for check in backend.checks] == [["mine"], ["mine"]]
    data = {**_with_own(mine=1), "repeats": 2}
    data["models"]["vit"]["weights"] = "pretrained"   # a shipped model read from the hub is checked too
    run_matrix(aa_matrix(load_matrix(write_matrix(tmp_path, data), None), "stable"),
               local_run_options(tmp_path, run_name="aa", order_seed=1))
    assert [check.image.name for check in backend.checks[2:]] == ["stable"]   # the twin runs in its original's build
    assert [cell.model for cell in backend.checks[2].work.cells] == ["vit", "mine"]


def test_shipped_models_in_an_image_of_another_transformers_are_checked_too(tmp_path, monkeypatch):
    """The shipped configs are built with the transformers the project's images pin; an image of another one (an
    older transformers lacks classes: 4.30.2 cannot build conditional-detr's config) checks its shipped models too,
    and only that image's."""
    backend = use_backend(monkeypatch, RecordingBackend())
    data = small_matrix_data()
    data["images"]["stable"]["transformers"] = "transformers==4.30.2"
    run_matrix(load_matrix(write_matrix(tmp_path, data), None), local_run_options(tmp_path, order_seed=1))
    assert [check.image.name for check in backend.checks] == ["stable"]
    assert sorted(cell.model for cell in backend.checks[0].work.cells) == ["detr-resnet-101", "vit"]
    assert len(backend.requests) == 2   # then both images' cells ran


def test_the_transformers_exempt_from_the_check_are_those_the_projects_images_span():
    """SHIPPED_TRANSFORMERS spans the matrix.yaml images' pins, ends included: a newer or older pin there without it
    here would check every shipped model in that image; a wider span would exempt a transformers nothing builds
    them with."""
    from packaging.version import Version

    from matrixbench.build.check import SHIPPED_TRANSFORMERS, needs_run_check
    from matrixbench.build.versions import pinned_version
    from runner.core import Cell

    project = load_matrix(Path(__file__).resolve().parents[1] / "matrix.yaml", None)
    pins = sorted((pinned_version(image.transformers) for image in project.images.values()), key=Version)
    assert {(spec.operator, spec.version) for spec in SHIPPED_TRANSFORMERS} == {(">=", pins[0]), ("<=", pins[-1])}
    shipped = Cell(model="vit", model_id="google/vit-base-patch16-224", task="image-classification", batch_size=1,
                   mode="eager", fullgraph=False, dtype="float32", size="tiny", weights="random")
    for inside in ("4.31.0", "4.43.4", "5.17.0", "5.23.0"):   # 5.17.0: the lent H200's, between the pins
        assert not needs_run_check(shipped, f"transformers=={inside}"), inside
    for outside in ("transformers==4.30.2", "transformers==5.24.0", "transformers>=4.31", "transformers"):
        assert needs_run_check(shipped, outside), outside
    assert needs_run_check(dataclasses.replace(shipped, weights="pretrained"), "transformers==5.23.0")


def test_a_check_answer_of_another_version_refuses_the_run_naming_the_rebuild(tmp_path, monkeypatch):
    class OldRunner(RecordingBackend):
        def run(self, request):
            code = super().run(request)
            if request.work.check:   # validate --build's answer before check.json had a version
                path = request.paths.out_dir / "check.json"
                path.write_text(json.dumps({key: value for key, value in json.loads(path.read_text()).items()
                                            if key not in ("schema_version", "transformers")}))
            return code

    backend = use_backend(monkeypatch, OldRunner())
    with pytest.raises(RunError, match=r"image 'stable': the model check's answer: .*check\.json: schema_version "
                                       r"None, not 1: its runner is not this matrixbench's; rebuild the image"):
        run_matrix(load_matrix(write_matrix(tmp_path, _with_own(mine=1)), None), local_run_options(tmp_path))
    assert backend.requests == []


def test_a_ray_run_says_its_nodes_check_nothing_first(tmp_path):
    from matrixbench.run.command import _model_check

    class Notes:
        lines = []
        note = lines.append

    class Driver(Environment):   # the Ray executor's driver side starts no runner here
        name = "ray"

    own = SimpleNamespace(model="mine", model_id="org/mine", config_path=None, weights="random")
    run = SimpleNamespace(works=[SimpleNamespace(image_name="latest", pending=[SimpleNamespace(cell=own)])],
                          matrix=load_matrix(write_matrix(tmp_path), None))
    _model_check(Driver(), run, Notes)
    assert Notes.lines == ["model check: not run (the Ray executor starts its runners on its nodes; `matrixbench "
                           "validate --build` builds each model in each image beforehand)"]


def test_a_dry_run_names_the_model_checks_runner_starts_and_bills_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dry_run = ["run", "--backend", "local", "--device", "cpu", "--images", "latest", "--dry-run"]
    write_matrix(tmp_path)
    shipped = CliRunner().invoke(main, dry_run)
    write_matrix(tmp_path, _with_own(mine=1))
    own = CliRunner().invoke(main, dry_run)
    assert shipped.exit_code == 0 and own.exit_code == 0, shipped.output + own.output
    assert "model check" not in shipped.output
    assert "model check: before any cell, each pending model (but a shipped one with random weights in an image of a " \
           "transformers within the releases the project's images span) built on the meta device (no weights, no " \
           "timing) once in each environment: 1 runner start(s)" in own.output
    starts = [line for line in (shipped.output + own.output).splitlines() if line.startswith("estimated duration")]
    assert [line.split(" runner start(s)")[0].rsplit("; ", 1)[-1] for line in starts] == ["1", "2"], starts
