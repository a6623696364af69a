"""A real build records what its torch is (matrixbench.build.facts): a real venv (the CPU wheel: "cpu") and a
real Docker image (PyPI's torch 2.0.1: CUDA 11.7), and a GPU run on a fake GPU host (tests/gpu_fakes.py)
refuses the CPU build before any cell runs. Marked venv / docker: builds for real (the wheelhouse is warm)."""
import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_fakes import nvidia_smi
from matrixbench import gpu
from matrixbench.build import docker_client, venvs
from matrixbench.build import facts as build_facts
from matrixbench.build.cuda_builds import known_build, pypi_cuda
from matrixbench.build.facts import BuildFacts
from matrixbench.build.images import build_images, image_tag
from matrixbench.cli import main
from matrixbench.matrix import load_matrix
from real_builds import CA_BUNDLE
from venv_helpers import venv_matrix

ROOT = Path(__file__).resolve().parents[1]
VENV_MATRIX = ROOT / "tests" / "data" / "venv-matrix.yaml"
CU117_ARCHES = ("sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86")   # PyPI's torch 2.0.1


@pytest.mark.venv
def test_a_real_cpu_venv_says_cpu_and_a_gpu_run_refuses_it_before_any_cell(tmp_path, monkeypatch, venv_e2e_builds):
    """venv-latest as matrixbench's own build made it (once per session, shared with the other venv tests)."""
    matrix = venv_matrix(VENV_MATRIX)
    image = matrix.images["venv-latest"]    # no index_url: inferred as PyPI's CUDA 13.0 wheel, built from the CPU one
    venv = venvs.read_marker(venvs.plan_venv(image))
    assert venv == venv_e2e_builds["venv-latest"]
    assert venv.torch.endswith("+cpu") and venv.facts == BuildFacts(venv.torch, "cpu", ())
    assert known_build(image).cuda == "13.0"   # what the inference alone would have said

    for driver in ("580", "550"):   # 550: the inference would refuse CUDA 13.0; the build says CPU
        monkeypatch.setattr(gpu, "run_command", nvidia_smi("H100", driver))
        monkeypatch.setattr("matrixbench.build.cuda_builds.run_command", nvidia_smi("H100", driver))
        results = tmp_path / f"results-{driver}"
        result = CliRunner().invoke(main, ["run", "--backend", "venv", "--matrix", str(VENV_MATRIX), "--images",
                                           "venv-latest", "--models", "vit", "--modes", "eager", "--repeats", "1",
                                           "--results", str(results)])
        assert result.exit_code == 2, result.output
        assert (f"image venv-latest: torch {venv.torch} is a CPU build (read from the build; torch.version.cuda is "
                "None): it cannot use the NVIDIA H100 80GB HBM3") in result.output
        assert "--device cpu" in result.output and "is a CUDA 13.0 build" not in result.output   # not the inference
        assert "note: the entry asks for CUDA 13.0 but the build holds a CPU build" in result.output
        assert "Traceback" not in result.output
        assert [path.name for path in results.rglob("*.json")] == ["run.json"]   # no cell ran


# last in the docker group: its build, its layers cached, waits its turn to be served the wheelhouse behind any
# other Docker build (the ray-docker group's registry image starts when the e2e images are done: 233 s on a fresh
# machine, docs/test-suite-time.md "Stop 16"); after the docker e2e tests that build is long done
@pytest.mark.docker
@pytest.mark.last_in_group
def test_a_real_docker_build_is_labelled_with_its_torchs_cuda_and_arch_list(docker_test_client, docker_e2e_images):
    """PyPI's torch 2.0.1 in the docker e2e test's image (its layers cached: built after it, with the same CA
    bundle), under a name of this test."""
    docker = docker_test_client
    matrix = load_matrix(ROOT / "tests" / "data" / "docker-matrix.yaml")
    image = dataclasses.replace(matrix.images["e2e-stable"], name="facts-e2e-stable")
    matrix = dataclasses.replace(matrix, images={image.name: image})
    tag = image_tag(image.name)
    try:
        build_images(matrix, None, ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
                     on_progress=lambda name, line: None)
        labels = docker.inspect_image(tag).labels
        facts = build_facts.from_labels(labels)
        assert facts == BuildFacts(facts.torch, "11.7", CU117_ARCHES) and facts.torch.startswith("2.0.1")
        assert facts.cuda == pypi_cuda("2.0.1")   # here the inference was right
        assert labels[docker_client.LABEL_CONTENT_HASH] == image.content_hash()   # the build's labels stay
        assert labels[docker_client.LABEL_IMAGE] == image.name
    finally:
        if docker.inspect_image(tag) is not None:
            docker.remove_image(tag)
