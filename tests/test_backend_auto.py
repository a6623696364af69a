"""``--backend auto`` (the policy ``make matrix`` runs): docker, else venv, else local, with the note that
says which ran and why; a GPU host with Docker never falls to the local backend. Every kind of machine
(GPU or not, Docker or not, builds ok or failed) with fake probes and builds; the CLI wiring with a
fake build and the local runner's stand-in."""
import itertools
import shutil

import pytest
from click.testing import CliRunner

from host_helpers import RecordingBackend, small_matrix_data, use_backend, write_matrix
from matrixbench import gpu
from matrixbench.build import docker_client
from matrixbench.cli import main
from matrixbench.environments import auto
from matrixbench.environments.auto import Machine, choose
from matrixbench.errors import BuildError
from matrixbench.run.manifest import read_manifest


class Builds:
    """Fake builds: each ok or failing with a BuildError; ``ran`` says which were tried."""

    def __init__(self, docker_ok, venv_ok):
        self.ok = {"docker": docker_ok, "venv": venv_ok}
        self.ran = []

    def build(self, kind):
        def run():
            self.ran.append(kind)
            if not self.ok[kind]:
                raise BuildError(f"{kind} build failed: no package index reachable\nlog tail")
        return run


KINDS = list(itertools.product([True, False], [True, False], [True, False], [True, False]))


def expected(gpu, docker, docker_ok, venv_ok):
    """The policy, stated as a table of outcomes: (backend or 'refused', builds tried)."""
    if docker and docker_ok:
        return "docker", ["docker"]
    tried = (["docker"] if docker else []) + ["venv"]
    if venv_ok:
        return "venv", tried
    return ("refused" if gpu and docker else "local"), tried


@pytest.mark.parametrize("gpu, docker, docker_ok, venv_ok", KINDS)
def test_each_kind_of_machine_gets_the_backend_the_policy_names(gpu, docker, docker_ok, venv_ok):
    builds = Builds(docker_ok, venv_ok)
    backend, tried = expected(gpu, docker, docker_ok, venv_ok)
    if backend == "refused":
        with pytest.raises(auto.RunError, match="With a GPU and Docker, fix a build"):
            choose(Machine(gpu, docker), builds.build("docker"), builds.build("venv"))
        assert builds.ran == tried
        return
    choice = choose(Machine(gpu, docker), builds.build("docker"), builds.build("venv"))
    assert (choice.backend, builds.ran) == (backend, tried)
    assert choice.images == (("latest",) if backend == "local" else None)
    assert choice.note.startswith(f"--backend auto ran {auto.HOW[backend]}.")
    if backend != "docker":
        why = "Docker runs, but the image build failed (docker build failed" if docker else auto.NO_DOCKER
        assert f"Not Docker: {why}" in choice.note
    if backend == "local":
        assert "Not venvs: the venv build failed (venv build failed" in choice.note
        assert "the images' torch versions are not compared" in choice.note


def test_without_trying_venvs_the_note_says_so():
    choice = choose(Machine(False, False), Builds(False, True).build("docker"), Builds(False, True).build("venv"),
                    try_venv=False)
    assert choice.backend == "local" and f"Not venvs: {auto.NO_VENVS}" in choice.note


def test_run_backend_auto_runs_what_the_policy_chose_and_records_its_note(tmp_path, monkeypatch):
    # no Docker and a failing venv build: the local fallback runs image 'latest' only, and says why
    builds = Builds(docker_ok=False, venv_ok=False)
    monkeypatch.setattr(auto, "this_machine", lambda skip: Machine(gpu=False, docker=False))
    monkeypatch.setattr(auto, "choose", lambda machine, docker, venv, try_venv=True, docker_gpus=None: choose(
        machine, builds.build("docker"), builds.build("venv"), try_venv))
    backend = use_backend(monkeypatch, RecordingBackend())
    data = small_matrix_data()
    result = CliRunner().invoke(main, ["run", "--matrix", str(write_matrix(tmp_path, data)), "--backend", "auto",
                                       "--device", "cpu", "--results", str(tmp_path / "results"), "--note", "mine"])
    assert result.exit_code == 0, result.output
    assert {request.image.name for request in backend.requests} == {"latest"}
    note = read_manifest(tmp_path / "results" / "default")["note"]
    assert note.startswith("mine --backend auto ran the local backend") and auto.NO_DOCKER in note
    assert "--backend auto ran the local backend" in result.output


def test_make_matrix_overrides_force_the_fallbacks(monkeypatch):
    assert auto.skipped({auto.SKIP_VARIABLE: "gpu, docker,venv"}) == {"gpu", "docker", "venv"}
    assert auto.skipped({}) == frozenset()
    monkeypatch.setattr(docker_client, "connect", lambda: pytest.fail("Docker asked though skipped"))
    monkeypatch.setattr(gpu, "host_gpus", lambda: pytest.fail("nvidia-smi asked though skipped"))
    assert auto.this_machine(frozenset({"gpu", "docker"})) == Machine(gpu=False, docker=False)


def test_a_gpu_host_whose_docker_cannot_hand_over_gpus_runs_venvs():
    builds = Builds(docker_ok=True, venv_ok=True)
    choice = choose(Machine(gpu=True, docker=True), builds.build("docker"), builds.build("venv"),
                    docker_gpus=lambda: False)
    assert choice.backend == "venv" and f"Not Docker: {auto.NO_DOCKER_GPUS}" in choice.note
    assert builds.ran == ["docker", "venv"]
    asked = []
    choice = choose(Machine(gpu=False, docker=True), builds.build("docker"), builds.build("venv"),
                    docker_gpus=lambda: asked.append(1) or False)
    assert choice.backend == "docker" and asked == []   # a CPU host never asks a container for GPUs


def test_make_matrix_on_a_gpu_host_without_docker_builds_venvs(tmp_path, monkeypatch):
    """What `make matrix` runs on a GPU host (faked: an H100 on driver 550) without a Docker daemon:
    doctor passes and says venv runs, then `run --backend auto` builds the venvs and runs on the GPU."""
    from gpu_fakes import nvidia_smi
    from matrixbench.build import cuda_builds, venvs
    from matrixbench.doctor import check
    from matrixbench.errors import DockerUnavailableError

    smi = nvidia_smi("H100", "550")
    for module in (gpu, cuda_builds, check):
        monkeypatch.setattr(module, "run_command", smi)

    def no_daemon():
        raise DockerUnavailableError("no Docker daemon answers at unix:///var/run/docker.sock; start it")
    monkeypatch.setattr(docker_client, "connect", no_daemon)
    # a roomy disk: this machine's own free space is not what the flow tests (CI failed here at 25 GiB free)
    roomy = shutil.disk_usage("/")._replace(free=500 * 2**30)
    monkeypatch.setattr(check.shutil, "disk_usage", lambda path: roomy)
    data = small_matrix_data()
    for image in data["images"].values():   # CUDA builds this driver runs (doctor checks them)
        image.setdefault("index_url", "https://download.pytorch.org/whl/cu128")
    path = write_matrix(tmp_path, data)
    doctor = CliRunner().invoke(main, ["doctor", "--matrix", str(path)])
    assert doctor.exit_code == 0, doctor.output
    assert "[WARN] Docker" in doctor.output and "[info] backend: venv: Docker does not answer" in doctor.output
    built = []
    monkeypatch.setattr(venvs, "build_venvs", lambda matrix, names, **options: built.append(list(names)))
    backend = RecordingBackend(gpus=True)
    from matrixbench import environments

    monkeypatch.setitem(environments.FACTORIES, "venv", lambda build_options=None, run_id=None: backend)
    result = CliRunner().invoke(main, ["run", "--matrix", str(path), "--backend", "auto", "--device", "auto",
                                       "--results", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    assert built == [list(data["images"])]
    assert backend.requests and all(request.placement.gpus for request in backend.requests)
    note = read_manifest(tmp_path / "results" / "default")["note"]
    assert note.startswith(f"--backend auto ran {auto.HOW['venv']}") and auto.NO_DOCKER in note


def test_make_matrix_has_docker_no_doctor_names_the_venvs_the_run_then_uses(tmp_path, monkeypatch):
    """`make matrix HAS_DOCKER=no` (MATRIXBENCH_AUTO_SKIP=docker) where a daemon would answer: doctor's backend line
    names the venvs and the variable, and `run --backend auto` runs the venvs; neither asks Docker."""
    from matrixbench.build import venvs
    from matrixbench.doctor import check

    monkeypatch.setenv(auto.SKIP_VARIABLE, "docker")
    monkeypatch.setattr(docker_client, "connect", lambda: pytest.fail("Docker asked though skipped"))
    for module in (gpu, check):   # a host without nvidia-smi, as this one, wherever the test runs
        monkeypatch.setattr(module, "run_command", lambda argv: (None, ""))
    roomy = shutil.disk_usage("/")._replace(free=500 * 2**30)
    monkeypatch.setattr(check.shutil, "disk_usage", lambda path: roomy)
    path = write_matrix(tmp_path, small_matrix_data())
    doctor = CliRunner().invoke(main, ["doctor", "--matrix", str(path)])
    assert doctor.exit_code == 7 and "[FAIL] driver and GPUs" in doctor.output   # no GPU: the one failure
    assert f"[info] backend: venv: Docker skipped ({auto.SKIP_VARIABLE}=docker)" in doctor.output
    assert "(Docker)" not in doctor.output
    monkeypatch.setattr(venvs, "build_venvs", lambda matrix, names, **options: None)
    from matrixbench import environments

    monkeypatch.setitem(environments.FACTORIES, "venv", lambda build_options=None, run_id=None: RecordingBackend())
    result = CliRunner().invoke(main, ["run", "--matrix", str(path), "--backend", "auto", "--device", "cpu",
                                       "--results", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    assert read_manifest(tmp_path / "results" / "default")["note"].startswith(f"--backend auto ran {auto.HOW['venv']}")
