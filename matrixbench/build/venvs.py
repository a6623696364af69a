"""The venv backend's environments: one virtual environment per matrix image, built from its pins.

A venv lives in ``<cache>/venvs/<image>-<content hash>/`` (``paths.cache_home()``): the hash is
``Image.content_hash()``, so changed pins get a new folder and a venv is never reused for other
pins. It is built with the Docker build's own pip logic (images/pip-install.sh,
fed the build args ``images.build_spec`` derives) in two steps per layer (torch, then the rest): ``pip download`` into
the shared wheelhouse (``wheelhouse.wheelhouse_dir()``; offline first, then from the indexes that answer:
``wheelhouse.Download``), then ``pip install --no-index`` from
there (the indexes only for what it lacks), so each wheel is downloaded once for every venv and test. A marker file
(``MARKER_FILENAME``, written last) holds the hash, the installed torch, the indexes really used (``torch_index_used``,
``indexes_left_out``) and a hash of pip-install.sh:
a folder without it is a half-built venv and is rebuilt, and so is one made by another version of
the script.
"""
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from matrixbench import resources
from matrixbench.build import facts as build_facts
from matrixbench.build import images, pip_script, turns
from matrixbench.build.interpreters import find_interpreter
from matrixbench.build.versions import pinned_version, same_release
from matrixbench.build.wheelhouse import Download, downloading, wheelhouse_dir
from matrixbench.errors import BuildError, RunError
from matrixbench.paths import cache_home
from matrixbench.redact import redact_urls
from runner.schema import write_json_atomic

MARKER_FILENAME = "matrixbench-venv.json"
RUNNER_LINK_DIR = "matrixbench-runner"
FREEZE_FILENAME = "pip-freeze.txt"
# As the Dockerfile's last check: both import, and torch says its version as records will.
TORCH_VERSION = "import torch, transformers; print(torch.__version__)"


def venvs_root(environ=None):
    """Where the venvs live: ``<cache>/venvs``."""
    return cache_home(environ) / "venvs"


@dataclass(frozen=True)
class VenvPlan:
    """One image's venv: where it lives and what goes into it (the Docker build's args)."""

    name: str
    content_hash: str
    path: Path
    python: str                 # "3.10"
    build: images.BuildSpec     # its buildargs feed pip-install.sh, as they feed the Dockerfile

    @property
    def python_bin(self):
        return self.path / "bin" / "python"

    @property
    def marker(self):
        return self.path / MARKER_FILENAME

    def describe(self):
        args = self.build.buildargs
        lines = [f"{self.path}  (image {self.name!r}, Python {self.python})"]
        lines += [f"  {key}={redact_urls(args[key])}" for key in pip_script.PIP_BUILDARGS]
        lines.append(f"  wheelhouse: {wheelhouse_dir()}")
        lines.append(f"  ca bundle: {self.build.ca_bundle or 'none'}")
        return "\n".join(lines)


def plan_venv(image, *, root=None, ca_bundle=None, index_url=None, extra_index_urls=()):
    """The venv of a matrix Image; the options override the entry as they do for Docker builds."""
    content_hash = image.content_hash()
    build = images.build_spec(image, ca_bundle=ca_bundle, index_url=index_url,
                              extra_index_urls=extra_index_urls)
    return VenvPlan(name=image.name, content_hash=content_hash,
                    path=Path(root or venvs_root()) / f"{image.build_of or image.name}-{content_hash}",
                    python=str(image.python), build=build)


@dataclass(frozen=True)
class Venv:
    """A complete venv: its interpreter, its identity (the image's content hash) and its torch."""

    name: str
    path: Path
    python_bin: Path
    image_id: str
    torch: str
    facts: Optional[build_facts.BuildFacts] = None   # asked of its python when built; None: built before that


def read_marker(plan):
    """The built venv of ``plan``, or None when it is missing, half-built or built for other pins."""
    try:
        marker = json.loads(plan.marker.read_text())
    except (OSError, ValueError):
        return None
    if (marker.get("image_id") != plan.content_hash or marker.get("recipe") != recipe_hash()
            or not plan.python_bin.exists()):
        return None
    return Venv(plan.name, plan.path, plan.python_bin, marker["image_id"], marker.get("torch", "unknown"),
                build_facts.from_dict(marker.get("build")))


def recipe_hash():
    """A short hash of pip-install.sh: a venv made by another version of the script is made again
    (in its folder: the image's pins, and so its identity, are the same), as Docker rebuilds."""
    script = resources.docker_build_file("pip-install.sh").read_bytes()
    return hashlib.sha256(script).hexdigest()[:12]


def ensure_venv(plan, *, emit, rebuild=False, finder=None, environ=None, checker=None):
    """The venv of ``plan``: reused when complete (and not ``rebuild``), else built afresh; in its turn
    (``building``), so a venv another process is building is waited for and then found complete. ``checker``
    replaces reachable's (tests)."""
    with building(plan.path, plan.name, emit=emit):
        venv = None if rebuild else read_marker(plan)
        if venv is not None and venv.facts is None:   # built before venvs recorded their build: ask it now
            venv = record_facts(plan)
        if venv is not None:
            emit(plan.name, f"using {plan.path} ({venv.facts.describe() if venv.facts else f'torch {venv.torch}'})")
            return venv
        return build_venv(plan, emit=emit, finder=finder, environ=environ, checker=checker)


def building(path, name, *, emit):
    """Held while the venv at ``path`` (image ``name``) is looked at and built: two processes asking for one venv
    (two users' runs, two test workers) take turns, so the second finds the first's venv complete instead of
    removing it as half-built (it has no marker yet) and building it again beside it. The lock file is beside
    the venv's folder (``clean --venvs`` removes folders only)."""
    path = Path(path)
    return turns.taking_turns(path.parent / f".{path.name}.lock", say=lambda line: emit(name, line),
                              waiting=f"waiting for another build of the venv {path} on this machine to finish")


def build_venv(plan, *, emit, finder=None, environ=None, checker=None):
    """Make the venv from nothing, streaming pip's lines to ``emit``; BuildError with the tail on failure."""
    environ = os.environ if environ is None else environ
    interpreter = find_interpreter(plan.python, finder)
    if plan.path.exists():
        emit(plan.name, f"removing {plan.path}: half-built, or made by another pip-install.sh")
        shutil.rmtree(plan.path)
    emit(plan.name, f"creating {plan.path} from {interpreter.path} (found on {interpreter.found_by})")
    started = datetime.now(timezone.utc)
    wheelhouse_dir(environ).mkdir(parents=True, exist_ok=True)
    _step(plan, create_command(interpreter, plan.path, environ), environ, emit)
    download = Download(plan.name, plan.build.buildargs, lambda action, args: pip_env(plan, action, environ, args),
                        wheelhouse_dir(environ), emit=emit, environ=environ, checker=checker)
    for layer in pip_script.LAYERS:
        download_action, install = pip_actions(environ)
        with downloading(plan.name, emit=emit, environ=environ):
            _check_step(plan, pip_script.command(layer), download.layer(layer, download_action))
        _step(plan, pip_script.command(layer), pip_env(plan, install, environ, download.host_buildargs), emit)
    torch = _torch_installed(plan)
    _check_torch(plan, torch)
    facts = build_facts.probe_python(plan.python_bin, f"venv {plan.name!r} ({plan.path})")
    (plan.path / FREEZE_FILENAME).write_text(_output(plan, [str(plan.python_bin), "-m", "pip", "freeze"]))
    write_json_atomic(plan.marker, marker(plan, interpreter, torch, started, facts, download.record()))
    emit(plan.name, f"built {plan.path} ({facts.describe()}) in "
                    f"{(datetime.now(timezone.utc) - started).total_seconds():.0f} s")
    return read_marker(plan)


def record_facts(plan):
    """Add what the venv's torch says it is to an older marker; the venv as it reads now."""
    facts = build_facts.probe_python(plan.python_bin, f"venv {plan.name!r} ({plan.path})")
    old = json.loads(plan.marker.read_text())
    write_json_atomic(plan.marker, {**old, "build": facts.to_dict()})
    return read_marker(plan)


def create_command(interpreter, path, environ):
    """``uv venv --seed`` where uv is installed (faster), else the interpreter's own venv module."""
    uv = shutil.which("uv", path=environ.get("PATH", os.defpath))
    if uv:
        return [uv, "venv", "--seed", "--python", str(interpreter.path), str(path)]
    return [str(interpreter.path), "-m", "venv", str(path)]


def pip_actions(environ):
    """Download into the wheelhouse first, then install finding every wheel there."""
    return (f"download --dest {wheelhouse_dir(environ)}", "install")


def pip_env(plan, action, environ, buildargs=None):
    """pip-install.sh's environment for this venv: its bin/ first on PATH, so `pip` and `python`
    are the venv's; ``buildargs`` (those of the indexes that answer) replace the plan's."""
    env = pip_script.environment(buildargs or plan.build.buildargs, environ, action=action,
                                 find_links=wheelhouse_dir(environ), ca_bundle=plan.build.ca_bundle)
    env.update(PATH=os.pathsep.join([str(plan.path / "bin"), environ.get("PATH", os.defpath)]),
               VIRTUAL_ENV=str(plan.path))
    return env


def _step(plan, argv, env, emit):
    """Run one build command, its output line by line to ``emit``; BuildError when it fails."""
    _check_step(plan, argv, pip_script.run_streamed(argv, env, lambda line: emit(plan.name, line)))


def _check_step(plan, argv, result):
    """BuildError with the tail when a build command's (exit code, last lines) say it failed."""
    code, tail = result
    if code != 0:
        raise BuildError(
            f"building the venv of image {plan.name!r} ({plan.path}) failed: `{' '.join(argv[:4])} ...` "
            f"exited with {code}; the folder stays incomplete and is rebuilt next time\n"
            f"--- last {len(tail)} lines ---\n" + "\n".join(tail)
        )


def _output(plan, argv):
    done = subprocess.run(argv, capture_output=True, text=True, env={"PATH": os.defpath}, check=False)
    if done.returncode != 0:
        raise BuildError(f"venv {plan.name!r}: `{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done.stdout


def _torch_installed(plan):
    return _output(plan, [str(plan.python_bin), "-c", TORCH_VERSION]).strip()


def _check_torch(plan, installed):
    spec = plan.build.buildargs["TORCH_SPEC"]
    if not torch_matches(spec, installed):
        raise BuildError(f"venv {plan.name!r}: pip installed torch {installed}, but the image pins {spec}")


def torch_matches(torch_spec, installed):
    """Whether the installed torch ("2.0.1+cu117") is the one an exact pin names ("torch==2.0.1");
    a spec that pins no exact version matches any."""
    pinned = pinned_version(torch_spec)
    return pinned is None or same_release(installed, pinned)


def marker(plan, interpreter, torch, started, facts=None, used=None):
    """What the marker file says: written last, so its presence means the venv is complete; ``build``:
    what its torch says it is (build_facts), read by doctor and the run's pre-flight; ``used``: what the
    downloads used (``wheelhouse.Download.record``: ``torch_index_used``, ``indexes_left_out``,
    ``layers_from_wheelhouse``), which may differ from the buildargs when an index did not answer."""
    return {
        "image_name": plan.name,
        "image_id": plan.content_hash,
        "recipe": recipe_hash(),
        "torch": torch,
        "python": plan.python,
        "interpreter": str(interpreter.path),
        "buildargs": {key: redact_urls(plan.build.buildargs[key]) for key in pip_script.PIP_BUILDARGS},
        "built_at": started.isoformat(timespec="seconds"),
        "build": facts.to_dict() if facts else None,
        **(used or {}),
    }


def build_venvs(matrix, image_names, *, no_cache=False, dry_run=False, ca_bundle=None, index_url=None,
                extra_index_urls=(), root=None, on_progress=None):
    """`matrixbench build --backend venv`: make the named images' venvs (all when None); return their paths."""
    emit = on_progress or images.print_progress
    plans = [plan_venv(image, root=root, ca_bundle=ca_bundle, index_url=index_url,
                       extra_index_urls=extra_index_urls)
             for image in images.select_images(matrix, image_names)]
    if dry_run:
        for plan in plans:
            for line in plan.describe().splitlines():
                emit(plan.name, line)
        return [plan.path for plan in plans]
    return [ensure_venv(plan, emit=emit, rebuild=no_cache).path for plan in plans]


def remove_venvs(*, root=None, dry_run=False):
    """`matrixbench clean --venvs`: remove every venv folder; return "venv <path>" lines."""
    root = Path(root or venvs_root())
    folders = sorted(path for path in root.iterdir() if path.is_dir()) if root.is_dir() else []
    for folder in folders:
        if not dry_run:
            shutil.rmtree(folder)
    return [f"venv {folder}" for folder in folders]



def link_runner(venv_path):
    """A folder in the venv holding only a link to this matrixbench's runner package: the runner's
    PYTHONPATH. (The runner's parent folder may be the host's site-packages, with its own torch.)"""
    folder = Path(venv_path) / RUNNER_LINK_DIR
    folder.mkdir(exist_ok=True)
    link, target = folder / "runner", resources.runner_dir(error=RunError)
    if not (link.is_symlink() and Path(os.readlink(link)) == target):
        staged = folder / f".runner-{os.getpid()}"
        if staged.is_symlink():
            staged.unlink()
        staged.symlink_to(target, target_is_directory=True)
        os.replace(staged, link)  # atomic: a run starting now sees the old link or the new
    return folder
