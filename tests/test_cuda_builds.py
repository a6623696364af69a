"""Each image's CUDA build against the driver and GPUs (matrixbench.build.cuda_builds) in doctor, validate
and build, on fake hosts (tests/gpu_fakes.py: drivers 535-580 on H100, A100, V100, T4)."""
import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_fakes import DRIVERS, GPUS, nvidia_smi
from matrixbench import gpu as gpu_module
from matrixbench.build.cuda_builds import CudaBuildError, host_problems, image_cuda, pypi_cuda, refuse_on_this_host
from matrixbench.cli import main
from matrixbench.doctor import Commands, diagnose, report
from matrixbench.doctor.images import HostGpus
from matrixbench.matrix import load_matrix
from runner.archcheck import WHEEL_ARCHES, arch_problem

ROOT = Path(__file__).resolve().parents[1]
MATRIX = load_matrix(ROOT / "matrix.yaml")
GiB = 2**30


def pypi_latest():
    """The `latest` entry as it was: PyPI's torch 2.13.0 wheel (a CUDA 13.0 build)."""
    latest = dataclasses.replace(MATRIX.images["latest"], index_url=None)
    return dataclasses.replace(MATRIX, images={**MATRIX.images, "latest": latest})


class Client:
    def inspect_image(self, tag):
        return True

    def gpu_probe(self, image, device_ids=None):
        return ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-5e4f-3a2b-1c0d-e9f8a7b6c5d4)"]


def doctor(matrix, gpu, driver, connect=Client, backend="auto"):
    commands = Commands(run=nvidia_smi(gpu, driver), environ={}, disk_free=lambda path: 500 * GiB)
    return {c.name: c for c in diagnose(matrix, commands, connect=connect, hf_cache=Path("/hf"), backend=backend)}


def test_image_cuda_from_the_index_url_or_pypi():
    assert image_cuda(MATRIX.images["stable"]) == "11.8"
    assert image_cuda(MATRIX.images["latest"]) == "12.8"
    assert image_cuda(pypi_latest().images["latest"]) == "13.0"
    assert pypi_cuda("2.0.1") == "11.7" and pypi_cuda("2.8.0") == "12.8"
    cpu = load_matrix(ROOT / "matrix-cpu-smoke.yaml").images["latest"]
    assert image_cuda(cpu) is None
    mirror = dataclasses.replace(MATRIX.images["latest"], index_url="https://mirror.example/whl/cu121/simple/")
    assert image_cuda(mirror) == "12.1"   # a mirror's index path goes on after the build


@pytest.mark.parametrize("driver", sorted(DRIVERS))
@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_every_default_image_runs_on_common_rentals(gpu, driver):
    assert host_problems(MATRIX, list(MATRIX.images), run=nvidia_smi(gpu, driver)) == []


def test_doctor_passes_every_default_image_on_a_driver_550_h100():
    checks = doctor(MATRIX, "H100", "550")
    for name in MATRIX.images:
        assert checks[f"image {name} (Docker)"].status == "ok", checks[f"image {name} (Docker)"]
    report(list(checks.values()))   # raises on a failed check
    assert "CUDA 12.8" in checks["image latest (Docker)"].detail


@pytest.mark.parametrize("driver", ["535", "550", "570"])
def test_pypis_cuda_13_build_fails_before_driver_580_with_the_fix(driver):
    check = doctor(pypi_latest(), "H100", driver)["image latest (Docker)"]
    assert check.status == "fail" and "CUDA 13.0 build" in check.detail and DRIVERS[driver][1] in check.detail
    assert "use index_url https://download.pytorch.org/whl/cu128 for this driver" in check.fix


def test_pypis_cuda_13_build_runs_on_driver_580_but_not_on_a_v100():
    assert doctor(pypi_latest(), "H100", "580")["image latest (Docker)"].status == "ok"
    check = doctor(pypi_latest(), "V100", "580")["image latest (Docker)"]
    assert check.status == "fail" and "no kernels for Tesla V100-SXM2-16GB" in check.detail
    assert "whl/cu128 for the Tesla V100-SXM2-16GB" in check.fix


def test_validate_and_build_refuse_before_anything_is_built(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_module, "run_command", nvidia_smi("H100", "550"))
    monkeypatch.setattr("matrixbench.build.cuda_builds.run_command", nvidia_smi("H100", "550"))
    with pytest.raises(CudaBuildError, match="(?s)image latest: .*CUDA 13.0 build.*whl/cu128"):
        refuse_on_this_host(pypi_latest(), ["latest"])
    refuse_on_this_host(MATRIX, list(MATRIX.images))
    path = tmp_path / "matrix.yaml"
    path.write_text((ROOT / "matrix.yaml").read_text().replace(
        "    index_url: https://download.pytorch.org/whl/cu128\n", ""))
    for argv in (["validate"], ["build", "--dry-run"], ["build", "--backend", "venv", "--dry-run"],
                 ["run", "--backend", "auto", "--results", str(tmp_path / "r")],
                 ["run", "--backend", "venv", "--results", str(tmp_path / "r")]):
        result = CliRunner().invoke(main, [*argv, "--matrix", str(path)])
        assert result.exit_code == 2 and "use index_url https://download.pytorch.org/whl/cu128" in result.output, argv


def test_no_gpu_host_checks_nothing():
    assert host_problems(pypi_latest(), ["latest"], run=nvidia_smi(None, None)) == []


def test_the_arch_fix_for_an_older_gpu_does_not_say_newer():
    problem = arch_problem(WHEEL_ARCHES["13.0"], (7, 0), "Tesla V100-SXM2-16GB", "2.13.0", "latest")
    assert "newer" not in problem and "whl/cu128" in problem and "sm_70" in problem


# --- Docker's checks do not block the venv path ---------------------------------------------

def no_docker():
    from matrixbench.errors import DockerUnavailableError

    raise DockerUnavailableError("no Docker daemon answers at unix:///var/run/docker.sock (refused); "
                                 "start it with `sudo systemctl start docker`")


def test_doctor_without_docker_passes_and_says_venv_runs():
    checks = doctor(MATRIX, "H100", "550", connect=no_docker)
    text = report(list(checks.values()))
    assert checks["Docker"].status == "warn" and "venv backend runs instead" in checks["Docker"].detail
    assert checks["backend"].detail.startswith("venv: Docker does not answer")
    assert "image stable (Docker)" not in checks and "[WARN] image latest (venv): not built" in text
    assert "CUDA 12.8 (inferred from its index_url; not read from a build): runs on these GPUs" in text


def test_doctor_for_the_docker_backend_still_fails_without_docker():
    checks = doctor(MATRIX, "H100", "550", connect=no_docker, backend="docker")
    assert checks["Docker"].status == "fail" and "systemctl start docker" in checks["Docker"].fix


def test_doctor_with_docker_that_cannot_hand_over_gpus_falls_back():
    class NoToolkit(Client):
        def gpu_probe(self, image, device_ids=None):
            return []
    checks = doctor(MATRIX, "H100", "550", connect=NoToolkit)
    assert checks["GPUs in a container"].status == "warn" and checks["backend"].detail.startswith("venv")
    assert doctor(MATRIX, "H100", "550", connect=NoToolkit, backend="docker")["GPUs in a container"].status == "fail"
    backend = doctor(MATRIX, "H100", "550")["backend"].detail
    assert backend == "docker: the daemon answers and hands the GPUs to containers"


def test_doctor_warns_before_the_run_that_stables_max_autotune_cells_will_be_refused_on_hopper():
    matrix = dataclasses.replace(MATRIX, modes=(*MATRIX.modes, "max-autotune"))
    checks = doctor(matrix, "H100", "550")
    stable = checks["image stable (Docker)"]
    assert stable.status == "warn" and "max-autotune cells will be refused" in stable.detail
    assert checks["image nightly (Docker)"].status == "ok" and checks["image latest (Docker)"].status == "ok"
    assert doctor(matrix, "A100", "550")["image stable (Docker)"].status == "ok"


def test_doctor_on_a_host_without_gpus_claims_no_gpu_and_warns_of_a_build_other_than_asked():
    """No GPU: an image line never says it runs on "these GPUs"; a recorded CUDA build where the entry asks
    for the CPU index (a wheelhouse served it) is a warning naming the pin, not silence."""
    from matrixbench.build.facts import BuildFacts
    from matrixbench.doctor.images import check_image

    cpu_entry = load_matrix(ROOT / "matrix-cpu-smoke.yaml").images["stable"]   # the CPU index
    as_asked = check_image("cpu", cpu_entry, HostGpus(), None, None,
                           facts=BuildFacts("2.0.1+cpu", None, ()))
    assert as_asked.status == "ok" and "no GPU here" in as_asked.detail and "these GPUs" not in as_asked.detail
    other = check_image("cpu", cpu_entry, HostGpus(), None, None,
                        facts=BuildFacts("2.0.1+cu117", "11.7", ("sm_80",)))
    assert other.status == "warn" and "another build than the entry asks for" in other.detail
    assert "torch==2.0.1+cpu" in other.fix and not other.fix.startswith("note:")


def test_a_cpu_run_on_a_gpu_host_is_not_refused_for_a_build_this_driver_cannot_run(monkeypatch, tmp_path):
    """--device cpu hands the runner no GPU: a CUDA 13.0 build on driver 550 runs there on the CPU."""
    monkeypatch.setattr(gpu_module, "run_command", nvidia_smi("H100", "550"))
    monkeypatch.setattr("matrixbench.build.cuda_builds.run_command", nvidia_smi("H100", "550"))
    path = tmp_path / "matrix.yaml"
    path.write_text((ROOT / "matrix.yaml").read_text().replace(
        "    index_url: https://download.pytorch.org/whl/cu128\n", ""))
    base = ["run", "--backend", "venv", "--matrix", str(path), "--results", str(tmp_path / "r"), "--dry-run"]
    refused = CliRunner().invoke(main, base)
    assert refused.exit_code == 2 and "CUDA 13.0 build" in refused.output
    on_cpu = CliRunner().invoke(main, [*base, "--device", "cpu"])
    assert "CUDA 13.0 build" not in on_cpu.output and on_cpu.exit_code == 0, on_cpu.output
