"""``--backend auto`` (the policy ``make matrix`` runs): docker, else venv, else local, with the note that
says which ran and why; a GPU host with Docker never falls to the local backend. Every kind of machine
(GPU or not, Docker or not, builds ok or failed) with fake probes and builds; the CLI wiring with a
fake build and the local runner's stand-in."""
import itertools

import pytest
from click.testing import CliRunner

from host_helpers import RecordingBackend, small_matrix_data, use_backend, write_matrix
from matrixbench import docker_client, gpu
from matrixbench.cli import main
from matrixbench.environments import auto
from matrixbench.environments.auto import Machine, choose
from matrixbench.errors import BuildError
from matrixbench.manifest import read_manifest


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
    monkeypatch.setattr(auto, "choose", lambda machine, docker, venv, try_venv=True: choose(
        machine, builds.build("docker"), builds.build("venv"), try_venv))
    backend = use_backend(monkeypatch, RecordingBackend())
    data = small_matrix_data()
    result = CliRunner().invoke(main, ["run", "--matrix", str(write_matrix(tmp_path, data)), "--backend", "auto",
                                       "--device", "cpu", "--results", str(tmp_path / "results"), "--note", "mine"])
    assert result.exit_code == 0, result.output
    assert {request.image_name for request in backend.requests} == {"latest"}
    note = read_manifest(tmp_path / "results" / "default")["note"]
    assert note.startswith("mine --backend auto ran the local backend") and auto.NO_DOCKER in note
    assert "--backend auto ran the local backend" in result.output


def test_make_matrix_overrides_force_the_fallbacks(monkeypatch):
    assert auto.skipped({auto.SKIP_VARIABLE: "gpu, docker,venv"}) == {"gpu", "docker", "venv"}
    assert auto.skipped({}) == frozenset()
    monkeypatch.setattr(docker_client, "connect", lambda: pytest.fail("Docker asked though skipped"))
    monkeypatch.setattr(gpu, "host_gpus", lambda: pytest.fail("nvidia-smi asked though skipped"))
    assert auto.this_machine(frozenset({"gpu", "docker"})) == Machine(gpu=False, docker=False)
