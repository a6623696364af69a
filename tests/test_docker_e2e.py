"""Real Docker: build two images with two real torch versions from PyPI, run tiny-model cells
on the CPU in both with `matrixbench run --backend docker`, and resume after a killed container.

Needs a Docker daemon and the base images .ci/make-base-images makes; skips, saying so, when
either is missing. The first build downloads torch from PyPI (about 2.5 GB for each image)
and takes minutes; later ones reuse Docker's layer cache (only runner/ changes).
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from matrixbench.build import docker_client
from matrixbench.build.images import image_tag
from matrixbench.matrix import load_matrix
from runner.schema import RECORD_SCHEMA, read_record

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[1]
MATRIX_PATH = REPO / "tests" / "data" / "docker-matrix.yaml"
TORCH = {"e2e-stable": "2.0.1", "e2e-latest": "2.13.0"}


@pytest.fixture(scope="module")
def client(docker_test_client):
    """The Docker client (tests/conftest.py: skips without a daemon or the base images)."""
    return docker_test_client


@pytest.fixture(scope="module")
def built(docker_e2e_images):
    """Both images, built once per session (or found in Docker's cache) through matrixbench's own build
    (tests/conftest.py's docker_e2e_images, shared with every test file that runs them)."""
    return docker_e2e_images


HF_TOKEN = "hf_e2eNeverPrintThis"


def matrixbench(*args, results, matrix=MATRIX_PATH, prefix=(), **popen):
    """`matrixbench run` in a subprocess, as a user types it (with an HF_TOKEN to keep secret); ``prefix`` (e.g.
    unshare) runs it."""
    argv = [*prefix, sys.executable, "-m", "matrixbench.cli", "run", "--matrix", str(matrix),
            "--results", str(results), "--backend", "docker", "--device", "cpu", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HF_TOKEN": HF_TOKEN}
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)


def finish(process, timeout=1500):
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def records(out_dir):
    return {path.stem: read_record(path) for path in sorted(Path(out_dir).glob("*.json"))
            if path.name != "cells.json"}


def containers_of(client, run_id, run_dir=None):
    """The containers Docker has of the run named ``run_id``; with ``run_dir``, only those of that run folder (another
    session on the same daemon may run the same test, so the same run name, meanwhile)."""
    labels = {docker_client.LABEL_MARK: None, docker_client.LABEL_RUN_ID: run_id}
    if run_dir is not None:
        labels[docker_client.LABEL_RUN_DIR] = str(Path(run_dir).resolve())
    return client.find_containers(labels)


def wait_for_records(out_dir, count, process, timeout=900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(records(out_dir)) >= count:
            return
        if process.poll() is not None:
            pytest.fail(f"matrixbench run ended early:\n{process.stdout.read()}")
        time.sleep(0.5)
    pytest.fail(f"no {count} record(s) in {out_dir} after {timeout} s")


def test_images_carry_labels_and_their_pip_freeze(client, built):
    import docker  # tests may look behind the wrapper

    sdk = docker.from_env()
    for name, version in TORCH.items():
        info = client.inspect_image(image_tag(name))
        assert info.labels[docker_client.LABEL_IMAGE] == name
        assert info.labels[docker_client.LABEL_TORCH] == version
        freeze = sdk.containers.run(image_tag(name), entrypoint=["cat", "/opt/matrixbench/pip-freeze.txt"],
                                    remove=True).decode()
        assert f"torch=={version}" in freeze.splitlines()


def test_each_image_runs_its_cells_with_its_own_torch(client, built, tmp_path):
    """resnet eager and compiled in both images (vit's cold compiles cost 250-465 s more at CI's load and showed
    nothing more: test_compiles_fill_the_images_compile_cache_folder_unless_cold compiles vit in e2e-stable)."""
    run_id = "e2e-versions"
    code, output = finish(matrixbench("--run", run_id, "--models", "resnet", "--cache-dir", str(tmp_path / "compile"),
                                      results=tmp_path / "results"))
    assert code == 0, output
    assert HF_TOKEN not in output
    for name, version in TORCH.items():
        out_dir = tmp_path / "results" / run_id / name
        found = records(out_dir)
        assert sorted(found) == ["resnet-tiny_bs1_default_float32", "resnet-tiny_bs1_eager_float32"], output
        image_id = client.inspect_image(image_tag(name)).id
        for cid, record in found.items():
            jsonschema.validate(record, RECORD_SCHEMA)
            assert record["status"] == "ok", (cid, record["error"])
            assert record["device"] == "cpu"
            assert record["environment"]["torch"].split("+")[0] == version
            assert record["environment"]["image_name"] == name
            assert record["environment"]["image_id"] == image_id
            assert (out_dir / f"{cid}.json").stat().st_uid == os.getuid()
        assert HF_TOKEN not in (out_dir / "runner.log").read_text()
    assert containers_of(client, run_id) == []


def test_two_images_containers_take_turns_over_a_bind_mounted_baton(client, built, tmp_path):
    """turns: true (issue 34, docs/turns.md) with real containers: each round, torch 2.0.1's and 2.13's runners
    start together, meet over a Unix socket in the bind-mounted /turns folder and time their blocks in turns; the
    report judges the image change on them."""
    run_id = "e2e-turns"
    results = tmp_path / "results"
    code, output = finish(matrixbench("--run", run_id, "--models", "resnet", "--modes", "eager", "--repeats", "2",
                                      "--iterations", "20", "--set", "turns=true", results=results))
    assert code == 0, output
    sides = {name: records(results / run_id / name) for name in TORCH}
    stems = ["resnet-tiny_bs1_eager_float32", "resnet-tiny_bs1_eager_float32.r1"]
    for stem in stems:
        stable, latest = (sides[name][stem] for name in TORCH)
        for record, partner in ((stable, "e2e-latest"), (latest, "e2e-stable")):
            jsonschema.validate(record, RECORD_SCHEMA)
            assert record["status"] == "ok", record["error"]
            turns = record["timing"]["turns"]
            assert turns["partner"] == partner and turns["lost"] is None, turns
            assert len(turns["block_ms"]) == turns["blocks"] == 10 and turns["block_calls"] == 2
        assert stable["timing"]["turns"]["pair_id"] == latest["timing"]["turns"]["pair_id"]
        assert {stable["timing"]["turns"]["role"], latest["timing"]["turns"]["role"]} == {"first", "second"}
    roles = [sides["e2e-stable"][stem]["timing"]["turns"]["role"] for stem in stems]
    assert roles == ["first", "second"]                     # the first role alternates by round
    assert not any((results / run_id / ".turns").glob("*"))   # each pair's baton folder removed
    assert containers_of(client, run_id) == []
    report = subprocess.run([sys.executable, "-m", "matrixbench.cli", "report", str(results / run_id), "--out",
                             str(tmp_path / "report")], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr
    rows = [row for row in (tmp_path / "report" / "comparisons.csv").read_text().splitlines()
            if "image_change" in row and "resnet" in row]
    assert rows and all("in turns" in row for row in rows), rows


def test_compiles_fill_the_images_compile_cache_folder_unless_cold(client, built, tmp_path, monkeypatch):
    one_compile = ("--images", "e2e-stable", "--models", "vit", "--modes", "default")
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    code, output = finish(matrixbench(*one_compile, "--run", "warm", "--cache-dir", str(warm),
                                      results=tmp_path / "results"))
    assert code == 0, output
    assert any((warm / "e2e-stable" / "inductor").rglob("*.py")), "Inductor wrote nothing to the mounted cache"
    # --cold with --cache-dir is refused (the folder would go unused), so the cold run gets the default
    # cache root, moved here through XDG_CACHE_HOME: it must stay without compiled code.
    monkeypatch.setenv("XDG_CACHE_HOME", str(cold))
    code, output = finish(matrixbench(*one_compile, "--run", "cold", "--cold", results=tmp_path / "results"))
    assert code == 0, output
    assert not any(cold.rglob("*.py")), "a --cold run wrote compiled code to the default cache root"


def test_a_killed_container_loses_nothing_and_the_rerun_redoes_nothing(client, built, tmp_path):
    run_id = "e2e-resume"
    results = tmp_path / "results"
    out_dir = results / run_id / "e2e-latest"
    narrow = ("--run", run_id, "--images", "e2e-latest", "--models", "vit,resnet",
              "--modes", "eager", "--batch-sizes", "1,2,3")
    process = matrixbench(*narrow, results=results)
    wait_for_records(out_dir, 1, process)
    for container in containers_of(client, run_id):
        container.kill()
    code, output = finish(process)
    assert code != 0, output
    before = records(out_dir)
    assert 1 <= len(before) < 6, output
    stamps = {cid: ((out_dir / f"{cid}.json").stat().st_mtime_ns, record["started_at"])
              for cid, record in before.items()}

    code, output = finish(matrixbench(*narrow, results=results))
    assert code == 0, output
    after = records(out_dir)
    assert len(after) == 6 and all(record["status"] == "ok" for record in after.values())
    for cid, (mtime, started_at) in stamps.items():
        assert (out_dir / f"{cid}.json").stat().st_mtime_ns == mtime, f"{cid} was run again"
        assert after[cid]["started_at"] == started_at
    assert containers_of(client, run_id) == []


def test_ctrl_c_removes_the_container_and_keeps_finished_records(client, built, tmp_path):
    run_id = "e2e-interrupt"
    out_dir = tmp_path / "results" / run_id / "e2e-stable"
    process = matrixbench("--run", run_id, "--images", "e2e-stable", "--models", "vit",
                          "--modes", "eager", "--batch-sizes", "1,2,3,4",
                          # long cells: the later ones cannot all finish before the SIGINT lands
                          "--iterations", "1500", results=tmp_path / "results")
    wait_for_records(out_dir, 1, process)
    process.send_signal(signal.SIGINT)
    code, output = finish(process, timeout=120)
    assert code != 0, output
    assert len(records(out_dir)) >= 1
    assert containers_of(client, run_id) == [], "the interrupted run left its container behind"
    assert json.loads((tmp_path / "results" / run_id / "run.json").read_text())["status"] == "interrupted"


def test_a_killed_host_leaves_a_container_the_next_run_stops_and_resumes_after(client, built, tmp_path):
    """`kill -9` of the host: its container runs on (the daemon owns it); the next run on the folder
    stops and removes it before anything runs (its owner is gone), keeps the finished record and
    runs the rest (issue 24). The host runs in a PID namespace of its own (as in a container, or a Ray node's
    namespaces), so its pid means nothing here: while it lives, a rerun's look leaves its container alone (its lease
    is held); once killed, its lease is free and the rerun stops the container. Without unshare(1) as root the host
    runs in this namespace and its pid answers (the line printed says which)."""
    from matrixbench.environments.docker import DockerBackend

    run_id = "e2e-host-killed"
    out_dir = tmp_path / "results" / run_id / "e2e-stable"
    # two long cells: the host is killed as the first record lands, while the second runs (the rerun redoes
    # only that one; each cell takes thousands of calls, seconds even on a quiet machine, against a 0.5 s poll)
    args = ("--run", run_id, "--images", "e2e-stable", "--models", "vit", "--modes", "eager",
            "--batch-sizes", "1,2", "--iterations", "1500")
    namespace = _own_pid_namespace()
    process = matrixbench(*args, results=tmp_path / "results", start_new_session=True, prefix=namespace)
    try:
        wait_for_records(out_dir, 1, process)
        first = {cid: (out_dir / f"{cid}.json").read_bytes() for cid in records(out_dir)}
        looked = DockerBackend(client=client).stop_leftovers(tmp_path / "results" / run_id)   # the host still runs
    finally:
        process.kill()          # (with unshare: it kills its child, the host, with SIGKILL)
        process.wait(timeout=60)
    print(f"the host ran in {'a PID namespace of its own' if namespace else 'this PID namespace'}: {looked}")
    assert len(looked) == 1 and looked[0].startswith("left container ")
    assert ("still holds its lease" if namespace else "still runs") in looked[0]
    assert containers_of(client, run_id) != [], "the daemon keeps the killed host's container"
    code, output = finish(matrixbench(*args, results=tmp_path / "results"))
    assert code == 0, output
    assert "left running by a killed run" in output and "Traceback" not in output, output
    assert ("no longer holds its lease" in output) == bool(namespace), output
    assert containers_of(client, run_id) == []
    for cid, content in first.items():
        assert (out_dir / f"{cid}.json").read_bytes() == content, f"{cid} was rewritten"
    assert len(records(out_dir)) == 2
    assert not list(out_dir.glob(".*.lease")), "the stopped container's lease was left"
    history = json.loads((tmp_path / "results" / run_id / "run.json").read_text())["history"]
    assert [entry["status"] for entry in history] == ["killed"]


def _own_pid_namespace():
    """The argv prefix that runs a command in a PID namespace of its own (killed with unshare), or () where
    unshare(1) cannot (not root)."""
    prefix = ("unshare", "--pid", "--fork", "--kill-child", "--mount-proc")
    try:
        done = subprocess.run([*prefix, "true"], capture_output=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return prefix if done.returncode == 0 else ()


def test_a_user_without_a_passwd_entry_in_the_image_runs_cells_and_owns_the_records(client, built, tmp_path):
    from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
    from matrixbench.environments.docker import DockerBackend
    from matrixbench.matrix import expand_cells, runner_settings

    matrix = load_matrix(MATRIX_PATH)
    cells = [cell for cell in expand_cells(matrix) if cell.model == "vit" and cell.mode == "eager"]
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # the stranger's uid must be able to write here
    out_dir, cache_dir = shared / "run" / "e2e-latest", shared / "compile"
    for folder in (out_dir, cache_dir):
        folder.mkdir(parents=True)
        folder.chmod(0o777)
    request = RunRequest(ImageRef("e2e-latest"), Work(cells, runner_settings(matrix, "cpu")),
                         Paths(out_dir, cache_dir=cache_dir), env={"HF_HUB_OFFLINE": "1"})
    assert DockerBackend(client=client, user="12345:12345").run(request) == 0
    (record_file,) = [path for path in out_dir.glob("*.json") if path.name != "cells.json"]
    assert read_record(record_file)["status"] == "ok"
    assert record_file.stat().st_uid == 12345


def _own_models(folder):
    """A tiny ViT as a config.json, and as a save_pretrained folder with its (random) weights."""
    import transformers

    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=37, image_size=32, patch_size=8, num_labels=3)
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32})
    for name in ("config", "checkpoint"):
        (folder / name).mkdir(parents=True)
        processor.save_pretrained(folder / name)
    config.save_pretrained(folder / "config")
    transformers.ViTForImageClassification(config).save_pretrained(folder / "checkpoint")


def test_your_own_model_reaches_the_container(client, built, tmp_path):
    _own_models(tmp_path / "own models")
    matrix = load_matrix(MATRIX_PATH)
    image = matrix.images["e2e-latest"]
    (tmp_path / "matrix.yaml").write_text(json.dumps({
        "images": {"e2e-latest": {"torch": image.torch, "python": image.python, "transformers": image.transformers,
                                  "base_image": image.base_image}},
        "models": {"own-config": {"config": "own models/config/config.json", "task": "image-classification"},
                   "own-checkpoint": {"path": "own models/checkpoint", "task": "image-classification"}},
        "batch_sizes": [1], "modes": ["eager"], "iterations": 3, "warmup": 1, "timeout_s": 600,
    }))
    argv = [sys.executable, "-m", "matrixbench.cli", "run", "--matrix", str(tmp_path / "matrix.yaml"),
            "--results", str(tmp_path / "results"), "--backend", "docker", "--device", "cpu"]
    done = subprocess.run(argv, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    found = records(tmp_path / "results" / "default" / "e2e-latest")
    config, checkpoint = found["own-config_bs1_eager_float32"], found["own-checkpoint_bs1_eager_float32"]
    assert (config["status"], checkpoint["status"]) == ("ok", "ok"), (config["error"], checkpoint["error"])
    assert config["cell"]["config_path"] == "/models/own-config/config.json"
    assert checkpoint["cell"]["config_path"] == "/models/own-checkpoint/config.json"
    assert (config["cell"]["weights"], checkpoint["cell"]["weights"]) == ("random", "pretrained")
