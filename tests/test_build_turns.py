"""Two builds of one image on one machine take turns (issue 35: two test workers; two users): the second waits,
says why, and builds only after the first has finished, so it finds the first's layers cached (a venv: the first's
venv complete)."""
import os
import subprocess
import sys
import threading
import time

from matrixbench.build import images, venvs

# A process that holds one of matrixbench's turns (argv[3], an expression using ``name`` and ``emit``) until told
# to let go; what it said while waiting, when it got in and when it left are files in ``marks``.
HOLD = """
import sys, time
from pathlib import Path
from matrixbench.build import images, venvs, wheelhouse
name, marks, turn = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
def emit(image, line):
    (marks / (name + ".said")).write_text(image + ": " + line)
with eval(turn):
    (marks / (name + ".in")).touch()
    while not (marks / (name + ".release")).exists():
        time.sleep(0.02)
(marks / (name + ".out")).touch()
"""
BUILDING = 'images.building("matrixbench:e2e-stable", emit=emit, name="e2e-stable")'


def _wait_for(path, *processes, seconds=300):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes), path
        time.sleep(0.02)


def _hold(name, marks, env, turn=BUILDING):
    return subprocess.Popen([sys.executable, "-c", HOLD, name, str(marks), turn], env=env)


def _two_take_turns(tmp_path, env, turn):
    """Two processes ask for ``turn``: the second waits, says why, and gets in only after the first let go;
    what the second said."""
    marks = tmp_path / "marks"
    marks.mkdir()
    first = _hold("first", marks, env, turn)
    _wait_for(marks / "first.in", first)
    second = _hold("second", marks, env, turn)
    _wait_for(marks / "second.said", first, second)
    assert not (marks / "second.in").exists()          # it waits while the first holds the turn
    (marks / "first.release").touch()
    _wait_for(marks / "second.in", second)             # and gets in once the first let go
    (marks / "second.release").touch()
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    assert (marks / "first.out").exists() and not (marks / "first.said").exists()
    return (marks / "second.said").read_text()


def test_two_processes_building_one_tag_take_turns_and_the_second_says_why(tmp_path):
    said = _two_take_turns(tmp_path, {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, BUILDING)
    assert said == "e2e-stable: waiting for another build of matrixbench:e2e-stable on this machine to finish"
    assert [path.name for path in (tmp_path / "cache" / "matrixbench" / "locks").iterdir()] == [
        "build-matrixbench_e2e-stable.lock"]


def test_builds_of_two_tags_do_not_wait_for_each_other(tmp_path):
    said = []
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    with images.building("matrixbench:a", emit=lambda name, line: said.append(line), name="a", environ=environ):
        with images.building("matrixbench:b", emit=lambda name, line: said.append(line), name="b", environ=environ):
            pass
    assert said == []


class _Reached(Exception):
    pass


class _FirstStepClient:
    """Records when run_build reaches the daemon (its first step inside the turn), then stops it there."""

    def __init__(self):
        self.reached = threading.Event()

    def inspect_image(self, tag):
        self.reached.set()
        raise _Reached(tag)


def test_run_build_reaches_the_daemon_only_in_its_turn(tmp_path, monkeypatch):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    marks = tmp_path / "marks"
    marks.mkdir()
    holder = _hold("holder", marks, env)
    _wait_for(marks / "holder.in", holder)
    plan = images.BuildSpec("e2e-stable", "matrixbench:e2e-stable", {"BASE_IMAGE": "base"}, {}, None)
    client, said, failures = _FirstStepClient(), [], []

    def build():
        try:
            images.run_build(client, plan, no_cache=False, emit=lambda name, line: said.append(line))
        except _Reached as exc:
            failures.append(exc)

    thread = threading.Thread(target=build)
    thread.start()
    deadline = time.monotonic() + 60
    while not said and time.monotonic() < deadline:
        time.sleep(0.02)
    assert said == ["waiting for another build of matrixbench:e2e-stable on this machine to finish"]
    assert not client.reached.is_set()
    (marks / "holder.release").touch()
    thread.join(timeout=60)
    assert client.reached.is_set() and len(failures) == 1
    assert holder.wait(timeout=60) == 0


def test_docker_builds_take_turns_in_being_served_the_wheelhouse_so_each_gets_the_cached_url(tmp_path):
    """Two builds of different images: the second is served the wheelhouse (at the fixed port, its URL part of
    the layer cache key) only after the first's build is done; the lock file is beside the wheelhouse."""
    said = _two_take_turns(tmp_path, {**os.environ, "MATRIXBENCH_WHEELHOUSE": str(tmp_path / "wheels")},
                           "wheelhouse.serving(name, emit=emit)")
    assert said == (f"second: wheelhouse: waiting for another Docker build served from {tmp_path / 'wheels'} to "
                    "finish (the URL is part of Docker's layer cache key)")
    assert (tmp_path / ".wheels.serve.lock").is_file()


def test_one_download_at_a_time_into_one_wheelhouse_across_processes(tmp_path):
    """Two real processes (two builds) ask to download into one wheelhouse: the second waits, says why, and
    enters only after the first left; the lock file is beside the wheelhouse, not in its find-links listing."""
    said = _two_take_turns(tmp_path, {**os.environ, "MATRIXBENCH_WHEELHOUSE": str(tmp_path / "wheels")},
                           "wheelhouse.downloading(name, emit=emit)")
    assert said == f"second: wheelhouse: waiting for another download into {tmp_path / 'wheels'} to finish"
    assert list((tmp_path / "wheels").iterdir()) == []
    assert (tmp_path / ".wheels.lock").is_file()


def test_two_processes_building_one_venv_take_turns_and_the_second_says_why(tmp_path):
    venv = tmp_path / "venvs" / "stable-0123456789ab"
    said = _two_take_turns(tmp_path, dict(os.environ), f'venvs.building({str(venv)!r}, name, emit=emit)')
    assert said == f"second: waiting for another build of the venv {venv} on this machine to finish"
    assert (tmp_path / "venvs" / ".stable-0123456789ab.lock").is_file()


def test_ensure_venv_looks_at_the_venv_only_in_its_turn_and_then_finds_the_first_builds_venv(tmp_path, monkeypatch):
    """While another process builds the venv (holds its turn), ensure_venv neither reads its marker nor builds;
    once the turn is free it finds the venv the first made complete and uses it: nothing removed, nothing built."""
    plan = venvs.VenvPlan("stable", "0123456789ab", tmp_path / "venvs" / "stable-0123456789ab", "3.10",
                          images.BuildSpec("stable", "matrixbench:stable", {}, {}, None))
    marks = tmp_path / "marks"
    marks.mkdir()
    holder = _hold("holder", marks, dict(os.environ), f'venvs.building({str(plan.path)!r}, name, emit=emit)')
    _wait_for(marks / "holder.in", holder)
    looked, said, got = threading.Event(), [], []
    made = venvs.Venv(plan.name, plan.path, plan.python_bin, plan.content_hash, "2.0.1",
                      venvs.build_facts.BuildFacts("2.0.1", "11.7", ()))

    def read_marker(asked):
        # the first's venv is complete once it was told to let go (inside its turn); "holder.out" is written
        # only after it left the turn, so under load this thread may be in its turn before that file exists
        looked.set()
        return made if (marks / "holder.release").exists() else None

    def build_venv(*args, **kwargs):
        raise AssertionError("built again beside the first build")

    monkeypatch.setattr(venvs, "read_marker", read_marker)
    monkeypatch.setattr(venvs, "build_venv", build_venv)
    thread = threading.Thread(target=lambda: got.append(venvs.ensure_venv(plan, emit=lambda name, line:
                                                                          said.append(line))))
    thread.start()
    deadline = time.monotonic() + 60
    while not said and time.monotonic() < deadline:
        time.sleep(0.02)
    assert said == [f"waiting for another build of the venv {plan.path} on this machine to finish"]
    assert not looked.is_set()
    (marks / "holder.release").touch()
    assert holder.wait(timeout=60) == 0
    thread.join(timeout=60)
    assert got == [made] and said[-1].startswith(f"using {plan.path}")


def _two_builders(image, plan, current, monkeypatch, ask_in_turn):
    """Two threads build ``plan`` at once after both found it stale; (builds made, results, lines said)."""
    from types import SimpleNamespace

    client = SimpleNamespace(built=None)
    client.inspect_image = lambda tag: client.built
    builds, said, results = [], [], []

    def fake_build(client, plan, *, no_cache, emit):
        builds.append(plan.tag)
        time.sleep(0.3)                       # the first build takes a while; the other worker waits its turn
        client.built = SimpleNamespace(labels=current)
        return plan.tag

    def worker():
        results.append(images.run_build(client, plan, no_cache=False, emit=lambda name, line: said.append(line),
                                        unless_current=image if ask_in_turn else None))

    monkeypatch.setattr(images, "_run_build", fake_build)
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return builds, results, said


def test_two_builders_that_found_an_image_stale_build_it_once(tmp_path, monkeypatch):
    """Two workers (two Ray units on one node, two test workers) both found an image stale before its turn: the
    second asks again in its turn (``unless_current``), finds the first's build current and keeps it. Asked only
    before the turn (the old way, ``unless_current=None``), both built, and the second build moved the tag under
    the first's running containers (CI, stop 23: a record's image_id no longer the tag's)."""
    from pathlib import Path

    from matrixbench.build import docker_client
    from matrixbench.matrix import load_matrix

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    image = load_matrix(Path(__file__).parent / "data" / "docker-matrix.yaml").images["e2e-stable"]
    plan = images.BuildSpec(image.name, images.image_tag(image.name), {"BASE_IMAGE": "base"}, {}, None)
    current = {docker_client.LABEL_CONTENT_HASH: image.content_hash(),
               docker_client.LABEL_RUNNER_HASH: images.runner_hash()}
    builds, results, said = _two_builders(image, plan, current, monkeypatch, ask_in_turn=True)
    assert builds == [plan.tag] and sorted(results, key=str) == [None, plan.tag], said
    assert f"{plan.tag} is current (content hash {image.content_hash()}): not built" in said
    builds, _, _ = _two_builders(image, plan, current, monkeypatch, ask_in_turn=False)
    assert builds == [plan.tag, plan.tag]      # the race the turn's own question closes
