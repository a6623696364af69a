"""A hostile-input sweep: the CLI over many bad matrices, flags and results folders. Whatever each
does, it ends with an exit code and words, never a traceback or an exception escaping a command
(a MatrixbenchError, a click usage error and an OSError all become one line)."""
import json
import os

import pytest
import yaml
from click.testing import CliRunner

from host_helpers import RecordingBackend, small_matrix_data, use_backend
from matrixbench.cli import main

GOOD = yaml.safe_dump(small_matrix_data(), sort_keys=False)
MATRICES = {
    "empty": "", "only a comment": "# nothing\n", "binary": "\x00\x01\x02", "a number": "42\n",
    "a list": "- a\n- b\n", "images a list": "images: [a, b]\nmodels: {}\n", "images an int": "images: 5\n",
    "image entry a string": GOOD.replace("stable:\n", "stable: oops\nunused:\n", 1),
    "models a list": GOOD.replace("models:\n", "models: [1, 2]\nold_models:\n", 1),
    "batch_sizes a string": GOOD + "batch_sizes: abc\n", "batch sizes floats": GOOD.replace("- 4\n", "- 4.5\n", 1),
    "tabs": "images:\n\tstable: {}\n", "unclosed quote": 'images: "abc\n',
    "huge int": GOOD + f"iterations: {10**400}\n",
    "negative repeats": GOOD + "repeats: -1\n", "zero iterations": GOOD + "iterations: 0\n",
    "unknown key": GOOD + "bogus: 1\n", "null images": "images:\nmodels:\n",
    "merge key": "a: &a {x: 1}\nb:\n  <<: *a\n",
    "unicode names": GOOD.replace("vit:", "ヴィット:", 1), "very long name": GOOD.replace("vit:", "v" * 5000 + ":", 1),
    "recursive alias": "a: &a [*a]\n", "undefined alias": "a: *nope\n", "tag": "a: !!python/object:os.system x\n",
    "dtype unknown": GOOD + "dtypes: [float64]\n", "mode unknown": GOOD + "modes: [fast]\n",
    "slots text": GOOD + "slots: many\n", "timeout nan": GOOD + "timeout_s: .nan\n",
}
FLAGS = [
    (), ("--run", ""), ("--run", "../up"), ("--run", "a/b"), ("--run", "x" * 300), ("--results", "/dev/null"),
    ("--results", "/proc/1/x"), ("--images", "nosuch"), ("--models", ","), ("--batch-sizes", "0"),
    ("--batch-sizes", "-1"), ("--batch-sizes", "abc"), ("--iterations", "0"), ("--timeout", "-1"),
    ("--timeout", "nan"), ("--warmup", "abc"), ("--device", "gpu"), ("--slots", "abc"), ("--slots", "0"),
    ("--repeats", "0"), ("--repeats", "10**9"), ("--gpu", "99"), ("--note", "\x00"), ("--backend", "nosuch"),
    ("--force", "--retry-failed"), ("--matrix", "/nonexistent/m.yaml"), ("--matrix", "/dev/null"),
    ("--matrix", "/etc"), ("--iterations", "1e9"),
]
RESULTS = {
    "garbage record": ("stable/vit_bs1_eager_float32.json", "{not json"),
    "record a list": ("stable/vit_bs1_eager_float32.json", "[1, 2]"),
    "record with a string cell": ("stable/vit_bs1_eager_float32.json", json.dumps({"schema_version": 2, "cell": "x",
                                                                                  "status": "ok"})),
    "run.json a list": ("run.json", "[]"),
    "run.json huge version": ("run.json", json.dumps({"schema_version": 10**30})),
    "cells.json garbage": ("stable/cells.json", "\x00"), "run.lock garbage": ("run.lock", "\x00\xff"),
}


def _invoke(args):
    result = CliRunner().invoke(main, list(args))
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    assert escaped is None and "Traceback" not in result.output, (args, repr(escaped), result.output[-2000:])
    return result


@pytest.fixture
def here(tmp_path, monkeypatch, charts_drawn_not_rendered):   # the sweeps check messages, no chart
    monkeypatch.chdir(tmp_path)
    use_backend(monkeypatch, RecordingBackend(gpus=False))
    return tmp_path


@pytest.mark.parametrize("name", MATRICES)
def test_every_bad_matrix_is_one_line(here, name):
    (here / "m.yaml").write_text(MATRICES[name])
    for command in (("validate",), ("run", "--dry-run", "--backend", "local"), ("run", "--backend", "local")):
        _invoke([*command, "--matrix", "m.yaml"])


@pytest.mark.parametrize("flags", FLAGS, ids=[" ".join(f)[:40] or "none" for f in FLAGS])
def test_every_bad_flag_is_one_line(here, flags):
    (here / "m.yaml").write_text(GOOD)
    for command in (("run", "--dry-run"), ("run",)):
        _invoke([*command, "--matrix", "m.yaml", "--backend", "local", "--images", "stable", *flags])


@pytest.mark.parametrize("name", RESULTS)
def test_every_bad_results_folder_is_one_line(here, name):
    (here / "m.yaml").write_text(GOOD)
    relative, content = RESULTS[name]
    path = here / "results" / "default" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    for args in (("run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable"),
                 ("report", "results/default", "--out", "report", "--format", "md"),
                 ("run", "--dry-run", "--matrix", "m.yaml", "--backend", "local")):
        _invoke(args)
    assert os.path.exists(path) or name == "run.lock garbage"
