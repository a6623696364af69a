"""matrixbench doctor against nvidia-smi outputs written from NVIDIA's documented formats
(tests/data/gpu/nvidia-smi/README.md), a fake Docker client and a fake disk."""
from pathlib import Path

import pytest

from matrixbench.doctor import Commands, DoctorError, diagnose, report
from matrixbench.errors import DockerUnavailableError
from matrixbench.gpu import parse_gpus
from matrixbench.matrix import load_matrix

DATA = Path(__file__).parent / "data" / "gpu" / "nvidia-smi"
MATRIX = Path(__file__).resolve().parents[1] / "matrix.yaml"
GiB = 2**30


def smi(machine, apps=""):
    """A command runner replaying ``machine``'s nvidia-smi outputs; None: no nvidia-smi."""
    def run(argv):
        if machine is None:
            return None, ""
        if argv == ["nvidia-smi"]:
            return 0, (DATA / f"{machine}-nvidia-smi.txt").read_text()
        if argv[1].startswith("--query-gpu="):
            return 0, (DATA / f"{machine}-query-gpu.csv").read_text()
        if argv[1].startswith("--query-compute-apps="):
            return 0, (DATA / apps).read_text() if apps else ""
        raise AssertionError(argv)
    return run


CONTAINER_GPUS = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-0f3c)",)


class FakeClient:
    def __init__(self, built=("seed", "stable", "nightly", "latest"), container_gpus=CONTAINER_GPUS):
        self.built, self.container_gpus = set(built), list(container_gpus)

    def inspect_image(self, tag):
        return tag.split(":", 1)[1] in self.built or None

    def gpu_probe(self, image, device_ids=None):
        return self.container_gpus


def checks_for(machine="a100x8", apps="", client=None, free_gib=500, environ=None, connect=None):
    commands = Commands(run=smi(machine, apps), environ=environ or {}, disk_free=lambda path: free_gib * GiB)
    client = client or FakeClient()
    return {check.name: check for check in diagnose(load_matrix(MATRIX), commands,
                                                    connect=connect or (lambda: client), hf_cache=Path("/hf"))}


def test_parse_the_documented_csv():
    gpus = parse_gpus((DATA / "a100x8-query-gpu.csv").read_text())
    assert len(gpus) == 8 and gpus[0].name == "NVIDIA A100-SXM4-80GB" and gpus[0].capability == (8, 0)
    assert gpus[7].uuid.startswith("GPU-7") and gpus[0].sm_clock_max == "1410"


def test_a_healthy_8x_a100_passes_and_lists_gpus_with_uuids():
    checks = checks_for()
    assert {c.status for c in checks.values()} <= {"ok", "info"}
    assert "8 GPU(s)" in checks["driver and GPUs"].detail and "GPU-0f3c2a1e" in checks["driver and GPUs"].detail
    assert checks["driver CUDA version"].detail.endswith("12.2")
    text = report(list(checks.values()))
    assert "--lock-gpu-clocks=1410,1410" in text and "--lock-memory-clocks=1593,1593" in text


def test_no_driver_fails_with_the_fix():
    check = checks_for(machine=None)["driver and GPUs"]
    assert check.status == "fail" and "nvidia-smi is not installed" in check.detail and "driver" in check.fix


def test_docker_unreachable_warns_under_backend_auto():
    def connect():
        raise DockerUnavailableError("no Docker daemon answers at unix:///var/run/docker.sock (refused); "
                                     "start it with `sudo systemctl start docker`")
    check = checks_for(connect=connect)["Docker"]   # --backend auto: venvs run instead (tests/test_cuda_builds.py)
    assert check.status == "warn" and "systemctl start docker" in check.fix


def test_gpus_not_reachable_from_a_container_warns_and_venvs_run():
    check = checks_for(client=FakeClient(container_gpus=()))["GPUs in a container"]
    assert check.status == "warn" and "nvidia-container-toolkit" in check.fix and "venv backend" in check.detail


def test_unbuilt_images_warn_and_count_against_disk():
    checks = checks_for(client=FakeClient(built=()), free_gib=20)
    assert checks["image stable"].status == "warn" and "matrixbench build --images stable" in checks["image stable"].fix
    assert checks["GPUs in a container"].status == "warn"
    assert checks["free disk"].status == "fail" and "45 GiB needed" in checks["free disk"].detail   # 4 images


def test_a_gpu_the_cu118_wheels_cannot_run_fails_those_images():
    checks = checks_for(machine="b200")
    for name in ("stable", "nightly"):
        assert checks[f"image {name}"].status == "fail"
        assert "NVIDIA B200" in checks[f"image {name}"].detail and "cu128" in checks[f"image {name}"].fix
    assert checks["image latest"].status == "ok"


def test_a_driver_too_old_for_the_images_cuda_fails():
    checks = checks_for(machine="v100")
    assert checks["image latest"].status == "fail" and "needs a driver for CUDA 12.x" in checks["image latest"].detail
    assert "whl/cu118 for this driver" in checks["image latest"].fix
    assert checks["image stable"].status == "ok"    # CUDA 11.8 on a CUDA 11.4 driver: same major


def test_other_processes_on_the_gpus_fail_naming_them():
    check = checks_for(apps="apps-busy.csv")["other processes on the GPUs"]
    assert check.status == "fail" and "48213" in check.detail and "kill 48213 51877" in check.fix


def test_persistence_off_warns_with_the_command():
    checks = checks_for(machine="h100")
    assert checks["persistence mode"].status == "warn" and checks["persistence mode"].fix == "`sudo nvidia-smi -pm 1`"
    assert "345/1980 MHz" in checks["clocks"].detail


def test_hf_token_presence_is_said_never_its_value():
    check = checks_for(environ={"HF_TOKEN": "hf_supersecretvalue"})["Hugging Face"]
    assert "HF_TOKEN set" in check.detail and "hf_supersecret" not in report([check])


def test_a_failure_raises_with_the_whole_checklist():
    with pytest.raises(DoctorError) as error:
        report(list(checks_for(apps="apps-busy.csv").values()))
    assert error.value.exit_code == 7
    assert "other processes on the GPUs" in str(error.value) and "[ ok ] driver and GPUs" in str(error.value)


def test_the_command_prints_the_checklist_and_exits_7_on_a_failure(monkeypatch):
    from click.testing import CliRunner

    from matrixbench import doctor
    from matrixbench.cli import main

    monkeypatch.setattr(doctor, "diagnose", lambda matrix, backend: list(checks_for(apps="apps-busy.csv").values()))
    result = CliRunner().invoke(main, ["doctor", "--matrix", str(MATRIX)])
    assert result.exit_code == 7 and "kill 48213 51877" in result.output
    monkeypatch.setattr(doctor, "diagnose", lambda matrix, backend: list(checks_for().values()))
    result = CliRunner().invoke(main, ["doctor", "--matrix", str(MATRIX)])
    assert result.exit_code == 0 and "[ ok ] driver and GPUs" in result.output
