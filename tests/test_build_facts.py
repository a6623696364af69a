"""What a build really holds (matrixbench.build.facts), recorded with the build and checked instead of the
inference by doctor and the run's pre-flight (cuda_builds.refuse_builds), on fake hosts (tests/gpu_fakes.py)
and fake Docker (tests/docker_fakes.py). The real venv and Docker builds: tests/test_build_facts_real.py."""
import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from docker_fakes import FakeImage, FakeSDK
from gpu_fakes import DRIVERS, nvidia_smi
from matrixbench import gpu
from matrixbench.build import docker_client
from matrixbench.build import facts as build_facts
from matrixbench.build.cuda_builds import CudaBuildError, known_build, refuse_builds
from matrixbench.build.docker_client import DockerClient
from matrixbench.build.facts import BuildFacts
from matrixbench.build.images import image_tag
from matrixbench.cli import main
from matrixbench.doctor import Commands, diagnose
from matrixbench.environments.docker import DockerBackend
from matrixbench.errors import BuildError
from matrixbench.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[1]
MATRIX = load_matrix(ROOT / "matrix.yaml")
SMOKE = load_matrix(ROOT / "matrix-cpu-smoke.yaml")
# As real builds answered build_facts.PROBE without a GPU (PyPI's 2.0.1 and 2.13.0 wheels, the CPU index's 2.13.0)
CU117 = BuildFacts("2.0.1+cu117", "11.7", ("sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"))
CU130 = BuildFacts("2.13.0+cu130", "13.0", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
CU128 = BuildFacts("2.13.0+cu128", "12.8", ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
CPU = BuildFacts("2.13.0+cpu", "cpu", ())


def preflight(images, facts, gpu_name="H100", driver="550"):
    notes = []
    refuse_builds(images, lambda image: facts.get(image.name), notes.append, run=nvidia_smi(gpu_name, driver))
    return notes


def test_facts_round_trip_and_a_malformed_answer_is_no_facts():
    assert build_facts.from_labels({build_facts.LABEL: CU130.to_label()}) == CU130
    assert build_facts.from_dict(CPU.to_dict()) == CPU and CPU.is_cpu and not CU130.is_cpu
    for bad in ({}, {build_facts.LABEL: "{"}, {build_facts.LABEL: '{"torch": "2.0.1", "cuda": 11.7}'},
                {build_facts.LABEL: '{"torch": "2.0.1", "cuda": "11.7", "arch_list": [70]}'}):
        assert build_facts.from_labels(bad) is None
    assert build_facts.parse_probe("a warning\n" + json.dumps(CU117.to_dict()) + "\n", "x") == CU117
    with pytest.raises(BuildError, match="image 'x'.*gave no answer.*rebuild it"):
        build_facts.parse_probe("Traceback ...\nModuleNotFoundError: No module named 'torch'", "image 'x'")


@pytest.mark.parametrize("driver", ["535", "550", "570"])
def test_a_recorded_cuda_13_build_is_refused_below_driver_580_though_its_entry_says_cu128(driver):
    """The entry's index says 12.8 (the inference passes it); the build says 13.0: the build wins."""
    latest = {"latest": MATRIX.images["latest"]}
    assert known_build(MATRIX.images["latest"]).cuda == "12.8"
    with pytest.raises(CudaBuildError) as refused:
        preflight(latest, {"latest": CU130}, driver=driver)
    message = str(refused.value)
    version, driver_cuda = DRIVERS[driver]
    assert "image latest: torch 2.13.0+cu130 is a CUDA 13.0 build (read from the build)" in message
    assert f"this driver, {version}, supports CUDA up to {driver_cuda}" in message
    assert "fix: use index_url https://download.pytorch.org/whl/cu128 for this driver" in message
    assert preflight(latest, {"latest": CU130}, driver="580") == []


def test_a_recorded_cuda_12_8_build_runs_where_the_inference_would_refuse_pypis_wheel():
    pypi = dataclasses.replace(MATRIX.images["latest"], index_url=None)   # inferred: PyPI's 13.0
    with pytest.raises(CudaBuildError, match="PyPI's wheel: no index_url; not read from a build"):
        preflight({"latest": pypi}, {})
    assert preflight({"latest": pypi}, {"latest": CU128}) == []


def test_the_recorded_arch_list_is_checked_against_the_gpu():
    """PyPI's torch 2.0.1 (CUDA 11.7) carries no Hopper kernels: refused on an H100, fine on an A100."""
    stable = {"stable": MATRIX.images["stable"]}   # its entry: the cu118 index (sm_90 inferred)
    assert preflight(stable, {}) == [
        "image stable: its build did not record its CUDA version (built by an older matrixbench): checked by "
        "inference from the matrix entry; `matrixbench build --images stable` records it"]
    with pytest.raises(CudaBuildError, match=r"(?s)no kernels for NVIDIA H100 80GB HBM3 \(compute capability 9.0; "
                       r"it carries sm_37 .* sm_86\).*fix: use index_url https://download.pytorch.org/whl/cu128"):
        preflight(stable, {"stable": CU117})
    assert preflight(stable, {"stable": CU117}, gpu_name="A100") == []


def test_a_cpu_build_is_refused_for_a_gpu_run_with_both_fixes():
    for images in ({"latest": MATRIX.images["latest"]}, {"latest": SMOKE.images["latest"]}):
        with pytest.raises(CudaBuildError) as refused:
            preflight(images, {"latest": CPU})
        message = str(refused.value)
        assert "image latest: torch 2.13.0+cpu is a CPU build (read from the build; torch.version.cuda is None): " \
               "it cannot use the NVIDIA H100 80GB HBM3" in message
        assert "whl/cu128 for a CUDA build" in message and "--device cpu" in message
    with pytest.raises(CudaBuildError, match="is a CPU build .inferred from its index_url; not read from a build"):
        preflight({"latest": SMOKE.images["latest"]}, {})    # the CPU index, not yet built
    assert preflight({"latest": SMOKE.images["latest"]}, {"latest": CPU}, gpu_name=None) == []   # no GPU host


class Labelled:
    """Docker for doctor: each image built from its entry, labelled with ``facts`` (None: no facts label)."""

    def __init__(self, matrix, facts):
        self.images = {image_tag(name): docker_client.ImageInfo("sha256:1", {
            docker_client.LABEL_CONTENT_HASH: image.content_hash(),
            **({build_facts.LABEL: facts[name].to_label()} if facts.get(name) else {})})
            for name, image in matrix.images.items()}

    def inspect_image(self, tag):
        return self.images.get(tag)

    def gpu_probe(self, image, device_ids=None):
        return ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-5e4f-3a2b-1c0d-e9f8a7b6c5d4)"]


def doctor(matrix, facts, driver="550", tmp_path=None):
    commands = Commands(run=nvidia_smi("H100", driver), environ={}, disk_free=lambda path: 500 * 2**30)
    checks = diagnose(matrix, commands, connect=lambda: Labelled(matrix, facts), hf_cache=Path("/hf"))
    return {check.name: check for check in checks}


def test_doctor_checks_the_recorded_build_and_says_when_it_infers(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))   # no venv of this matrix: the Docker label or nothing
    checks = doctor(MATRIX, {"latest": CU128})
    assert checks["image latest (Docker)"].status == "ok"
    assert "torch 2.13.0+cu128, CUDA 12.8 (read from the build)" in checks["image latest (Docker)"].detail
    assert "CUDA 11.8 (inferred from its index_url; not read from a build)" in checks["image stable (Docker)"].detail
    failed = doctor(MATRIX, {"latest": CU130}, driver="570")["image latest (Docker)"]
    assert failed.status == "fail" and "CUDA 13.0 build (read from the build)" in failed.detail
    assert "570.133.20" in failed.detail and "whl/cu128" in failed.fix


def test_doctor_fails_a_cpu_build_the_entry_did_not_ask_for_and_warns_for_the_smoke_matrix(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    check = doctor(MATRIX, {"latest": CPU})["image latest (Docker)"]
    assert check.status == "fail" and "CPU build (read from the build" in check.detail and "--device cpu" in check.fix
    assert doctor(SMOKE, {"latest": CPU})["image latest (Docker)"].status == "warn"


def test_doctor_reads_a_venvs_marker_when_docker_does_not_answer(monkeypatch, tmp_path):
    from matrixbench.build import venvs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    plan = venvs.plan_venv(MATRIX.images["latest"])
    plan.python_bin.parent.mkdir(parents=True)
    plan.python_bin.touch()
    plan.marker.write_text(json.dumps({"image_id": plan.content_hash, "recipe": venvs.recipe_hash(),
                                       "torch": CU130.torch, "build": CU130.to_dict()}))
    commands = Commands(run=nvidia_smi("H100", "570"), environ={}, disk_free=lambda path: 500 * 2**30)

    def no_docker():
        raise docker_client.DockerUnavailableError("no Docker daemon answers; start it")
    checks = {c.name: c for c in diagnose(MATRIX, commands, connect=no_docker, hf_cache=Path("/hf"))}
    assert checks["image latest (venv)"].status == "fail" and "CUDA 13.0 build (read from the build)" in \
        checks["image latest (venv)"].detail


def test_a_docker_build_is_labelled_with_what_its_python_says():
    from matrixbench.build import images

    sdk = FakeSDK(build_chunks=[{"stream": "Step 1/2 : FROM x\n"}])
    sdk.python_answer = (json.dumps(CU130.to_dict()) + "\n").encode()
    plan = images.build_spec(MATRIX.images["latest"])
    lines = []
    assert images.record_facts(DockerClient(sdk), plan, lambda name, line: lines.append(line)) == CU130
    (probe,) = sdk.started
    assert probe.kwargs["entrypoint"] == "python" and probe.command == ["-c", build_facts.PROBE]
    assert probe.kwargs["network_disabled"] and "device_requests" not in probe.kwargs and not sdk.started_live
    (label,) = sdk.build_calls
    assert label["tag"] == "matrixbench:latest"
    assert label["labels"] == {**plan.labels, build_facts.LABEL: CU130.to_label()}
    assert build_facts.from_labels(sdk.images_by_tag["matrixbench:latest"].labels) == CU130
    assert DockerBackend(client=DockerClient(sdk)).build_facts(MATRIX.images["latest"]) == CU130
    sdk.python_answer = b"ModuleNotFoundError: No module named 'torch'\n"
    with pytest.raises(BuildError, match="image 'latest' .matrixbench:latest.: asking its torch"):
        images.record_facts(DockerClient(sdk), plan, lambda *_: None)


def test_run_refuses_a_recorded_build_before_any_cell_runs(monkeypatch, tmp_path):
    """`run --backend docker` on a driver-570 H100 with an image whose label says CUDA 13.0: exit 2, no record."""
    sdk = FakeSDK()
    sdk.next_container = {"log": b"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-5e4f-3a2b-1c0d-e9f8a7b6c5d4)\n"}
    image = MATRIX.images["latest"]
    sdk.images_by_tag[image_tag("latest")] = FakeImage(image_tag("latest"), {
        docker_client.LABEL_MARK: "1", docker_client.LABEL_CONTENT_HASH: image.content_hash(),
        build_facts.LABEL: CU130.to_label()})
    monkeypatch.setattr(docker_client, "connect", lambda: DockerClient(sdk))
    monkeypatch.setattr(gpu, "run_command", nvidia_smi("H100", "570"))
    monkeypatch.setattr("matrixbench.build.cuda_builds.run_command", nvidia_smi("H100", "570"))
    result = CliRunner().invoke(main, ["run", "--backend", "docker", "--images", "latest", "--models", "vit",
                                       "--results", str(tmp_path / "results"), "--repeats", "1"])
    assert result.exit_code == 2, result.output
    assert "image latest: torch 2.13.0+cu130 is a CUDA 13.0 build (read from the build)" in result.output
    assert "Traceback" not in result.output and list((tmp_path / "results").rglob("*.json"))[0].name == "run.json"
    assert [c for c in sdk.started if c.kwargs.get("entrypoint") != "nvidia-smi"] == []   # no runner started


def test_a_build_other_than_its_entry_asked_for_says_so_and_how_to_pin_it():
    """As on the test machine: the smoke matrix's entries ask for the CPU index; the wheelhouse gave PyPI's
    CUDA wheels of the same versions."""
    with pytest.raises(CudaBuildError) as refused:
        preflight(dict(SMOKE.images), {"stable": CU117, "latest": CU130})
    message = str(refused.value)
    assert "image stable: torch 2.0.1+cu117 (CUDA 11.7, read from the build) has no kernels for NVIDIA H100" in message
    assert "note: the entry asks for a CPU build but the build holds CUDA 11.7" in message
    assert "pin it, e.g. torch==2.0.1+cpu" in message and "e.g. torch==2.13.0+cpu" in message
    notes = preflight({"latest": MATRIX.images["latest"]}, {"latest": CU128})   # as asked: no note
    assert notes == []
