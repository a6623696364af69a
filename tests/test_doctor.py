"""matrixbench doctor against nvidia-smi outputs written from NVIDIA's documented formats
(tests/data/gpu/nvidia-smi/README.md), a fake Docker client and a fake disk."""
import json
from pathlib import Path

import pytest

from matrixbench.build import docker_client, indexes
from matrixbench.build import facts as build_facts
from matrixbench.doctor import Commands, DoctorError, diagnose, report
from matrixbench.environments.auto import SKIP_VARIABLE
from matrixbench.errors import DockerUnavailableError
from matrixbench.gpu import parse_gpus
from matrixbench.matrix import load_matrix

DATA = Path(__file__).parent / "data" / "gpu" / "nvidia-smi"
MATRIX = Path(__file__).resolve().parents[1] / "matrix.yaml"
SMOKE = Path(__file__).resolve().parents[1] / "matrix-cpu-smoke.yaml"
NO_VENVS = Path("/nonexistent/matrixbench-venvs")
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


def checks_for(machine="a100x8", apps="", client=None, free_gib=500, environ=None, connect=None, matrix=MATRIX,
               backend="auto", venv_root=NO_VENVS):
    commands = Commands(run=smi(machine, apps), environ=environ or {}, disk_free=lambda path: free_gib * GiB)
    client = client or FakeClient()
    return {check.name: check for check in diagnose(load_matrix(matrix), commands, connect=connect or (lambda: client),
                                                    hf_cache=Path("/hf"), backend=backend, venv_root=venv_root)}


def fake_venv(root, image, torch, cuda, **used):
    """A built venv of ``image`` under ``root`` as build.venvs leaves one: its marker (``used``: what the
    downloads used, absent in a marker from before they were recorded) and its interpreter."""
    from matrixbench.build import venvs

    plan = venvs.plan_venv(image, root=root)
    (plan.path / "bin").mkdir(parents=True)
    plan.python_bin.touch()
    plan.marker.write_text(json.dumps({"image_id": plan.content_hash, "recipe": venvs.recipe_hash(), "torch": torch,
                                       "build": {"torch": torch, "cuda": cuda, "arch_list": []}, **used}))


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
    docker = checks["image stable (Docker)"]
    assert docker.status == "warn" and "matrixbench build --images stable" in docker.fix
    assert checks["GPUs in a container"].status == "warn"
    assert checks["free disk"].status == "fail" and "45 GiB needed" in checks["free disk"].detail   # 4 images


def test_a_gpu_the_cu118_wheels_cannot_run_fails_those_images():
    checks = checks_for(machine="b200")
    for name in ("stable", "nightly"):
        docker = checks[f"image {name} (Docker)"]
        assert docker.status == "fail" and "NVIDIA B200" in docker.detail and "cu128" in docker.fix
    assert checks["image latest (Docker)"].status == "ok"


def test_a_driver_too_old_for_the_images_cuda_fails():
    checks = checks_for(machine="v100")
    latest = checks["image latest (Docker)"]
    assert latest.status == "fail" and "needs a driver for CUDA 12.x" in latest.detail
    assert "whl/cu118 for this driver" in latest.fix
    assert checks["image stable (Docker)"].status == "ok"    # CUDA 11.8 on a CUDA 11.4 driver: same major


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


def smoke_venvs(root, **used):
    """The CPU smoke matrix's venvs as the test machine built them: asked for the CPU index, they hold PyPI's
    CUDA wheels of the same versions."""
    smoke = load_matrix(SMOKE)
    fake_venv(root, smoke.images["stable"], "2.0.1+cu117", "11.7", **used)
    fake_venv(root, smoke.images["latest"], "2.13.0+cu130", "13.0", **used)


def test_the_docker_image_and_the_venv_each_get_a_line_of_their_own(tmp_path):
    smoke_venvs(tmp_path)       # no GPU; Docker answers, no image built; the venvs built (the audit's machine)
    checks = checks_for(machine=None, client=FakeClient(built=()), matrix=SMOKE, venv_root=tmp_path)
    docker, venv = checks["image stable (Docker)"], checks["image stable (venv)"]
    assert docker.status == "warn" and "matrixbench:stable is not built" in docker.detail
    assert "cu117" not in docker.detail and "a CPU build (inferred from its index_url" in docker.detail
    assert docker.fix == "`matrixbench build --images stable`"
    assert venv.status == "warn" and "2.0.1+cu117, a CUDA 11.7 build" in venv.detail
    assert "asks for the CPU build of https://download.pytorch.org/whl/cpu" in venv.detail
    assert "marker does not say why" in venv.detail and "a CPU smoke run is sound" in venv.detail
    assert venv.fix.startswith("once https://download.pytorch.org/whl/cpu answers: "
                               "`matrixbench build --backend venv --no-cache --images stable`")
    assert "torch==2.0.1+cpu" in venv.fix and "not built" not in venv.detail


def test_a_venv_whose_index_did_not_answer_says_so(tmp_path):
    left_out = {"field": "images.stable.index_url", "url": "https://download.pytorch.org/whl/cpu",
                "reason": "connection refused"}
    smoke_venvs(tmp_path, torch_index_used=None, indexes_left_out=[left_out], layers_from_wheelhouse=[])
    checks = checks_for(machine=None, client=FakeClient(built=()), matrix=SMOKE, venv_root=tmp_path)
    venv = checks["image stable (venv)"]
    assert "that index did not answer when it was built (connection refused)" in venv.detail
    assert "PyPI's wheel of the same version" in venv.detail


class LabelledClient(FakeClient):
    """Docker with ``image`` built from its entry, holding ``torch`` (CUDA ``cuda``), its labels as a build leaves
    them (``labels``: more of them)."""

    def __init__(self, image, torch, cuda, labels):
        super().__init__(built=(image.name,))
        self.labels = {docker_client.LABEL_CONTENT_HASH: image.content_hash(),
                       build_facts.LABEL: build_facts.BuildFacts(torch, cuda, ()).to_label(), **labels}

    def inspect_image(self, tag):
        return docker_client.ImageInfo("sha256:1", self.labels) if super().inspect_image(tag) else None


def test_a_docker_image_whose_index_did_not_answer_says_so_from_its_label(tmp_path):
    """The venv marker's twin: a Docker image's label (indexes.LABEL) records that its build left out the torch
    index, and doctor says so, with the Docker rebuild."""
    left_out = {"field": "images.stable.index_url", "url": "https://download.pytorch.org/whl/cpu",
                "reason": "cannot resolve download.pytorch.org"}
    used = {"torch_index_used": "https://pypi.org/simple", "indexes_left_out": [left_out],
            "layers_from_wheelhouse": []}
    client = LabelledClient(load_matrix(SMOKE).images["stable"], "2.0.1+cu117", "11.7",
                            {indexes.LABEL: json.dumps(used)})
    docker = checks_for(machine=None, client=client, matrix=SMOKE, venv_root=tmp_path)["image stable (Docker)"]
    assert docker.status == "warn"
    assert ("2.0.1+cu117, a CUDA 11.7 build, but the entry asks for the CPU build of "
            "https://download.pytorch.org/whl/cpu: that index did not answer when it was built (cannot resolve "
            "download.pytorch.org), so pip took PyPI's wheel of the same version") in docker.detail
    assert docker.fix.startswith("once https://download.pytorch.org/whl/cpu answers: "
                                 "`matrixbench build --no-cache --images stable`")


def test_the_backend_line_says_which_environment_a_run_uses(tmp_path):
    def no_docker():
        raise DockerUnavailableError("no Docker daemon answers; start it")
    unbuilt = checks_for(machine=None, client=FakeClient(built=()), matrix=SMOKE)["backend"].detail
    assert unbuilt == ("docker: the daemon answers; a run builds stable, latest first; where a Docker build fails, "
                       "the venvs")
    assert checks_for(machine=None, matrix=SMOKE)["backend"].detail == "docker: the daemon answers"
    checks = checks_for(machine=None, connect=no_docker, matrix=SMOKE)
    assert checks["backend"].detail == "venv: Docker does not answer; a run builds stable, latest first"
    assert "image stable (Docker)" not in checks and checks["image stable (venv)"].status == "warn"
    assert checks["image stable (venv)"].fix == "`matrixbench build --backend venv --images stable`"


def test_backend_venv_checks_the_venvs_only(tmp_path):
    smoke_venvs(tmp_path)
    checks = checks_for(machine=None, matrix=SMOKE, backend="venv", venv_root=tmp_path)
    assert checks["Docker"].status == "info" and not [name for name in checks if name.endswith("(Docker)")]
    assert checks["backend"].detail == "venv (--backend venv)"
    assert "--backend venv --no-cache --images latest" in checks["image latest (venv)"].fix


def test_a_fallback_venv_not_built_is_only_information():
    venv = checks_for()["image stable (venv)"]    # Docker hands the GPUs to containers: venvs only where a build fails
    assert venv.status == "info" and "only where the Docker build fails" in venv.detail


def measured(monkeypatch, checks):
    """doctor --measure over ``checks`` with the noise check and the selftest faked: (result, their calls)."""
    from click.testing import CliRunner

    from matrixbench import doctor, host_noise, selftest
    from matrixbench.cli import main

    calls = []
    monkeypatch.setattr(doctor, "diagnose", lambda matrix, backend: list(checks.values()))
    monkeypatch.setattr(host_noise, "doctor_check", lambda python, emit: calls.append(("noise", python)))
    monkeypatch.setattr(selftest, "run_selftest", lambda path, device, python, emit: calls.append(("selftest", device)))
    return CliRunner().invoke(main, ["doctor", "--matrix", str(SMOKE), "--measure"]), calls


def test_measure_without_a_gpu_measures_the_cpu_part_and_says_the_gpu_part_was_skipped(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    result, calls = measured(monkeypatch, checks_for(machine=None, matrix=SMOKE))
    assert calls == [("noise", None), ("selftest", "cpu")]
    assert "the selftest's GPU checks are skipped for want of a GPU" in result.output
    assert "selftest not run" not in result.output and "[FAIL] driver and GPUs" in result.output
    assert result.exit_code == 7 and "measured the CPU part only" in result.output


def test_measure_after_another_failure_measures_nothing(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    result, calls = measured(monkeypatch, checks_for(apps="apps-busy.csv"))
    assert calls == [] and result.exit_code == 7 and "selftest not run: fix the failures above first" in result.output
    result, calls = measured(monkeypatch, checks_for())
    assert calls == [("noise", None), ("selftest", "auto")] and result.exit_code == 0


def test_unbuilt_venvs_count_against_the_cache_disk_at_what_a_venv_takes(tmp_path):
    """A run that builds venvs needs room where they go (the cache), VENV_DISK_GIB each with its wheels (measured:
    a fresh make matrix's two venvs and wheels), not Docker's 10 GiB an image under /var/lib/docker."""
    from matrixbench.doctor import machine

    seen = []
    commands = Commands(run=smi("a100x8", ""), environ={}, disk_free=lambda path: seen.append(path) or 30 * GiB)
    root = tmp_path / "cache" / "venvs"      # not made yet: its nearest existing parent is measured
    checks = {check.name: check for check in diagnose(load_matrix(MATRIX), commands, connect=lambda: None,
                                                      hf_cache=Path("/hf"), venv_root=root)}
    disk = checks["free disk"]
    unbuilt = len(load_matrix(MATRIX).images)
    need = unbuilt * machine.VENV_DISK_GIB + machine.RESULTS_DISK_GIB
    assert seen == [str(tmp_path)] and f"{need:g} GiB needed" in disk.detail and "venv(s)" in disk.detail
    assert disk.status == ("fail" if need > 30 else "ok")
    if disk.status == "fail":
        assert "matrixbench clean --venvs" in disk.fix


# --- MATRIXBENCH_AUTO_SKIP (make matrix HAS_GPU=no HAS_DOCKER=no TRY_VENV=no): what run --backend auto skips ---

def no_docker():
    raise DockerUnavailableError("no Docker daemon answers; start it")


def test_a_docker_skipped_by_the_variable_is_not_asked_and_the_venvs_run():
    """HAS_DOCKER=no: `run --backend auto` never asks Docker (environments.auto.this_machine), so doctor does not
    either, even where a daemon would answer: its backend line names the venvs and says the variable skipped Docker,
    and no image gets a Docker line."""
    def asked():
        raise AssertionError(f"Docker asked though {SKIP_VARIABLE} skips it")
    checks = checks_for(machine=None, connect=asked, matrix=SMOKE, environ={SKIP_VARIABLE: "docker"})
    assert checks["backend"].detail == (f"venv: Docker skipped ({SKIP_VARIABLE}=docker); a run builds stable, "
                                        "latest first")
    assert checks["Docker"].status == "info" and f"Docker skipped ({SKIP_VARIABLE}=docker)" in checks["Docker"].detail
    assert not [name for name in checks if name.endswith("(Docker)")]
    venv = checks["image stable (venv)"]
    assert venv.status == "warn" and "a run builds it first" in venv.detail
    assert checks_for(machine=None, matrix=SMOKE, environ={SKIP_VARIABLE: "docker"},
                      backend="docker")["Docker"].status == "ok"   # the variable is --backend auto's alone


def test_venvs_skipped_by_the_variable_get_no_lines_and_the_fallback_is_what_auto_falls_to():
    """TRY_VENV=no: no venv is built, so none gets a line; where a Docker build fails, a CPU host runs the local
    backend (image 'latest' in this interpreter), and with Docker skipped too that is what runs."""
    checks = checks_for(machine=None, client=FakeClient(built=()), matrix=SMOKE, environ={SKIP_VARIABLE: "venv"})
    assert checks["backend"].detail == ("docker: the daemon answers; a run builds stable, latest first; where a Docker "
                                        f"build fails, the local backend: venvs skipped ({SKIP_VARIABLE}=venv)")
    assert not [name for name in checks if name.endswith("(venv)")] and checks["image stable (Docker)"].status == "warn"
    checks = checks_for(machine=None, connect=no_docker, matrix=SMOKE, environ={SKIP_VARIABLE: "venv, docker"})
    backend = checks["backend"]
    assert backend.detail.startswith("local: the local backend (this interpreter's torch, recorded as image 'latest')")
    assert backend.detail.endswith(f"not compared: Docker and the venvs skipped ({SKIP_VARIABLE}=docker,venv)")
    assert [name for name in checks if name.startswith("image ")] == ["image latest"]   # what that run runs


def test_venvs_skipped_on_a_gpu_host_whose_docker_cannot_hand_over_the_gpus_fail_as_the_run_would():
    """With a GPU and Docker, run --backend auto stops rather than fall to the local backend (auto.choose): with the
    venvs skipped and no GPU in a container, doctor fails its backend line, and the container check stays a failure."""
    checks = checks_for(client=FakeClient(container_gpus=()), environ={SKIP_VARIABLE: "venv"})
    backend = checks["backend"]
    assert backend.status == "fail" and "`run --backend auto` would stop" in backend.detail
    assert "not venvs: venvs were not tried (TRY_VENV=no)" in backend.detail
    assert "nvidia-container-toolkit" not in backend.fix and f"take venv out of {SKIP_VARIABLE}" in backend.fix
    assert checks["GPUs in a container"].status == "fail" and "venv backend" not in checks["GPUs in a container"].detail
    gpu_skipped = checks_for(client=FakeClient(container_gpus=()), environ={SKIP_VARIABLE: "gpu,venv"})
    assert "GPUs in a container" not in gpu_skipped   # a run told to skip the GPU asks no container for one
    assert gpu_skipped["backend"].detail.startswith("docker: the daemon answers; GPUs skipped")


def test_gpus_skipped_by_the_variable_check_the_builds_for_the_cpu_and_say_so(monkeypatch, tmp_path):
    """HAS_GPU=no (MATRIXBENCH_AUTO_SKIP=gpu) on a GPU host: `run --backend auto` leaves the GPUs out, so doctor
    checks the builds for the CPU a run uses, not against this host's GPUs (a B200 the cu118 wheels cannot run, a
    busy GPU: both fail without the variable), asks nothing GPU-bound after the driver, says in the driver's line
    that the variable left the GPUs out, and passes; --measure measures the CPU part, saying why."""
    checks = checks_for(machine="b200", apps="apps-busy.csv", environ={SKIP_VARIABLE: "gpu"})
    report(list(checks.values()))     # no failure
    driver = checks["driver and GPUs"]
    assert driver.status == "info" and "NVIDIA B200" in driver.detail
    assert f"left out: GPUs skipped ({SKIP_VARIABLE}=gpu)" in driver.detail
    for name in ("stable", "nightly"):
        docker = checks[f"image {name} (Docker)"]
        assert docker.status == "ok" and "B200" not in docker.detail, docker.detail
        assert docker.detail.endswith(f"checked for the CPU, which a run here uses: GPUs skipped ({SKIP_VARIABLE}=gpu)")
    gpu_bound = {"driver CUDA version", "GPUs in a container", "other processes on the GPUs", "persistence mode",
                 "clocks"}
    assert not gpu_bound & set(checks)
    assert checks["backend"].detail.startswith("docker: the daemon answers; GPUs skipped")
    assert gpu_bound <= set(checks_for(machine="b200", apps="apps-busy.csv"))   # without it: asked, and failing
    local = checks_for(machine="b200", connect=no_docker, matrix=SMOKE,
                       environ={SKIP_VARIABLE: "gpu,venv,docker"})["image latest"]   # the local backend's line too
    assert local.status == "ok" and local.detail.endswith("checked for the CPU, which a run here uses: GPUs skipped "
                                                          f"({SKIP_VARIABLE}=docker,gpu,venv)"), local.detail
    no_smi = checks_for(machine=None, matrix=SMOKE, environ={SKIP_VARIABLE: "gpu"})["driver and GPUs"]
    assert no_smi.status == "info" and "nvidia-smi is not installed, and none is needed; left out" in no_smi.detail
    monkeypatch.chdir(tmp_path)
    result, calls = measured(monkeypatch, checks)
    assert calls == [("noise", None), ("selftest", "cpu")] and result.exit_code == 0, result.output
    assert "measuring the CPU part, as a run here would use the CPU: the GPUs are left out" in result.output


def half_speed_timer_python(tmp_path):
    """This interpreter, but for ``-m runner.selftest`` with its timer (time.perf_counter, the cells' timed loop's)
    running at half speed: the real selftest, on this real CPU, against a timer that under-measures."""
    import sys

    script = tmp_path / "python-half-speed-timer"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = runner.selftest ]; then\n'
        "  shift 2\n"
        f'  exec {sys.executable} -c "import runpy, time; real = time.perf_counter; '
        "time.perf_counter = lambda: real() / 2; runpy.run_module('runner.selftest', run_name='__main__', "
        'alter_sys=True)" "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_measure_without_a_gpu_exits_7_when_the_cpu_selftest_fails(monkeypatch, tmp_path):
    """No GPU (nvidia-smi not installed): doctor --measure runs the selftest's CPU part, which fails for real here
    (its timer under-measures); doctor exits 7 all the same (cli.py's help, docs/gpu.md), not the selftest's 10,
    and says both: no GPU, and the selftest's failure with where its numbers are."""
    import json

    from click.testing import CliRunner

    from matrixbench import doctor, host_noise
    from matrixbench.cli import main

    no_gpu = list(checks_for(machine=None, matrix=SMOKE).values())   # nvidia-smi not installed, as on this host
    monkeypatch.setattr(doctor, "diagnose", lambda matrix, backend: no_gpu)
    monkeypatch.setattr(host_noise, "CPU_LOOP_S", 0.2)   # 12 s in real use
    monkeypatch.setattr(host_noise, "PROBE_S", 0.5)      # 8 s
    result = CliRunner().invoke(main, ["doctor", "--measure", "--results", str(tmp_path), "--run", "m",
                                       "--python", half_speed_timer_python(tmp_path)])
    written = json.loads((tmp_path / "m" / "selftest.json").read_text())
    assert not written["passed"] and written["device"] == "cpu"
    assert "[FAIL   ] CPU known-duration step" in result.output   # its line, with what it means
    assert result.exit_code == 7, result.output
    assert "measured the CPU part only" in result.stderr
    assert "selftest failed (CPU known-duration step" in result.stderr and str(tmp_path / "m") in result.stderr
