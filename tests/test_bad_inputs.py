"""Bad inputs a user can give: each row is one input -> the exit code -> words the message must hold.

Adding a case is one line in CASES. ``matrix`` replaces the small test matrix's text (None keeps
it); ``edit`` is applied to the small matrix's data instead; ``files`` are written beside it
(bytes or text); ``{dir}`` in an argument is the test's folder. ``user`` runs the command as that
uid in a subprocess (root ignores folder permissions, so "cannot write" needs another user).
"""
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pytest
import yaml
from click.testing import CliRunner

from host_helpers import RecordingBackend, small_matrix_data, use_backend
from matrixbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
IMAGE = 'stable: {torch: "torch==2.0.1", python: "3.10", transformers: "transformers==4.43.4"}'
VIT = "{id: google/vit-base-patch16-224, task: image-classification}"


def yaml_matrix(images=f"  {IMAGE}\n", models=f"  vit: {VIT}\n", rest="batch_sizes: [1]\nmodes: [eager]\n"):
    return f"images:\n{images}models:\n{models}{rest}"


def with_model(name, **entry):
    def edit(data):
        data["models"][name] = entry
    return edit


def with_key(key, value):
    def edit(data):
        data[key] = value
    return edit


@dataclass
class Case:
    name: str
    args: tuple
    code: int
    words: tuple
    matrix: Optional[object] = None            # the matrix file's text or bytes
    edit: Optional[Callable] = None            # or a change to the small matrix's data
    files: dict = field(default_factory=dict)  # more files beside the matrix
    user: Optional[int] = None                 # run as this uid (in a subprocess)


RUN = ("run", "--matrix", "{dir}/m.yaml", "--backend", "local", "--images", "stable")
VALIDATE = ("validate", "--matrix", "{dir}/m.yaml")

CASES = [
    Case("results folder not writable", RUN + ("--results", "{dir}/readonly"), 9,
         ("{dir}/readonly", "cannot write", "--results"), user=NOBODY),
    Case("results under a regular file", RUN + ("--results", "{dir}/afile/results"), 2,
         ("{dir}/afile", "is a file", "--results"), files={"afile": "x"}),
    Case("matrix not UTF-8", VALIDATE, 2, ("m.yaml", "UTF-8", "line 2"), matrix=b"images:\n\xff\xfe: 1\n"),
    Case("model named as a number", VALIDATE, 2, ("line 4", "50", "number", "quote"),
         matrix=yaml_matrix(models=f"  50: {VIT}\n")),
    Case("image named as a boolean", VALIDATE, 2, ("line 2", "yes", "true or false", "quote"),
         matrix=yaml_matrix(images=f"  yes: {IMAGE[len('stable: '):]}\n")),
    Case("duplicate model names", VALIDATE, 2, ("vit", "twice", "lines 4 and 5"),
         matrix=yaml_matrix(models=f"  vit: {VIT}\n  vit: {VIT}\n")),
    Case("duplicate top-level keys", VALIDATE, 2, ("modes", "twice", "lines 6 and 7"),
         matrix=yaml_matrix(rest="batch_sizes: [1]\nmodes: [eager]\nmodes: [default]\n")),
    Case("model with id and config", VALIDATE, 2, ("models.mine", "needs `id`", "`config`", "not both"),
         edit=with_model("mine", id="org/mine", config="c.json", task="image-classification"),
         files={"c.json": "{}"}),
    Case("unclosed [", VALIDATE, 2, ("line 5, column 14", "never closed"),
         matrix=yaml_matrix(rest="batch_sizes: [1\nmodes: [eager]\n")),
    Case("top-level list", VALIDATE, 2, ("top level must be a mapping", "a list"),
         matrix="- " + "a-long-item\n- " * 200 + "end\n"),
    Case("tiny and pretrained in the file", VALIDATE, 2, ("weights: pretrained", "size: tiny", "random"),
         edit=lambda data: data.update(size="tiny", weights="pretrained")),
    Case("config.json not JSON", VALIDATE, 2, ("models.mine.config", "c.json", "not valid JSON", "line 1"),
         edit=with_model("mine", config="c.json", task="image-classification"), files={"c.json": "{nope"}),
    Case("config.json without model_type", VALIDATE, 2, ("models.mine.config", "c.json", "model_type"),
         edit=with_model("mine", config="c.json", task="image-classification"), files={"c.json": "{}"}),
    Case("path that is no checkpoint", VALIDATE, 2, ("models.mine.path", "ckpt", "save_pretrained folder"),
         edit=with_model("mine", path="ckpt", task="image-classification")),
    Case("model with config and path", VALIDATE, 2, ("models.mine", "exactly one of them"),
         edit=with_model("mine", path="ckpt", config="c.json", task="image-classification"),
         files={"c.json": '{"model_type": "vit"}'}),
    Case("shipped model given the wrong task", VALIDATE, 2, ("models.vit.task", "'image-segmentation'",
         "whose task is 'image-classification'"),
         edit=with_model("vit", id="google/vit-base-patch16-224", task="image-segmentation")),
    Case("custom config with size tiny", VALIDATE, 2, ("models.mine", "size: tiny", "shipped models"),
         edit=lambda data: (with_model("mine", config="c.json", task="image-classification")(data),
                            data.update(size="tiny")), files={"c.json": '{"model_type": "vit"}'}),
    Case("10**12 iterations", VALIDATE, 2, ("iterations must be <= 1,000,000",),
         edit=with_key("iterations", 10**12)),
    Case("--iterations 10**12", VALIDATE + ("--iterations", str(10**12)), 2, ("--iterations must be <= 1,000,000",)),
    Case("dry run checks --device cuda", RUN + ("--dry-run", "--device", "cuda"), 5,
         ("--device cuda", "no NVIDIA GPU")),
]


def _prepare(case, folder):
    matrix_path = folder / "m.yaml"
    if case.matrix is not None:
        content = case.matrix
    else:
        data = small_matrix_data()
        if case.edit:
            case.edit(data)
        content = yaml.safe_dump(data, sort_keys=False)
    for name, text in {"m.yaml": content, **case.files}.items():
        (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return matrix_path


def _as_user(uid, args, folder):
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the command as another user")
    (folder / "readonly").mkdir()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           "HOME": str(folder), "HF_HUB_OFFLINE": "1"}
    command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
               sys.executable, "-m", "matrixbench.cli", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env, timeout=120)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def folder():
    """A folder any user can read (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="matrixbench-bad-input-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_is_a_named_error(case, folder, monkeypatch):
    monkeypatch.chdir(folder)
    _prepare(case, folder)
    args = [arg.replace("{dir}", str(folder)) for arg in case.args]
    if case.user is not None:
        code, output = _as_user(case.user, args, folder)
    else:
        use_backend(monkeypatch, RecordingBackend(gpus=False))
        result = CliRunner().invoke(main, args)
        code, output = result.exit_code, result.output
    assert "Traceback" not in output, output
    assert code == case.code, output
    for word in case.words:
        assert word.replace("{dir}", str(folder)) in output, output
    assert len(output) < 2000, "the message echoes too much"
