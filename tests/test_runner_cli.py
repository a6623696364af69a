import json
import os
import subprocess
import sys

import pytest

from runner.cells_file import CellsFileError
from runner.cli import build_parser, cells_file_from_args, main


def parse(*argv):
    return build_parser().parse_args(["--out", "OUT", *argv])


def test_shorthand_makes_every_combination():
    plan = cells_file_from_args(parse("--models", "vit,resnet", "--modes", "eager,default",
                                "--batch-sizes", "1,8", "--size", "tiny", "--iterations", "20"))
    assert len(plan.cells) == 8
    vit = plan.cells[0]
    assert vit.model_id == "google/vit-base-patch16-224" and vit.task == "image-classification"
    assert {(c.model, c.batch_size, c.mode) for c in plan.cells} >= {("resnet", 8, "default")}
    assert all(c.size == "tiny" and c.dtype == "float32" for c in plan.cells)
    assert plan.settings["iterations"] == 20 and plan.settings["warmup"] == 10


def test_default_models_expand_to_the_default_matrix():
    from runner.models import DEFAULT_MODELS

    plan = cells_file_from_args(parse("--models", "default", "--modes", "eager"))
    assert [c.model for c in plan.cells] == list(DEFAULT_MODELS)


def test_other_model_needs_a_task():
    with pytest.raises(CellsFileError, match="add --task"):
        cells_file_from_args(parse("--models", "mine", "--model-id", "org/mine"))
    plan = cells_file_from_args(parse("--models", "mine", "--model-id", "org/mine", "--task", "object-detection"))
    assert plan.cells[0].model_id == "org/mine" and plan.cells[0].task == "object-detection"


def test_unknown_model_lists_the_shipped_ones():
    with pytest.raises(CellsFileError, match="'nosuch' is not a shipped model; valid: .*vit"):
        cells_file_from_args(parse("--models", "nosuch"))


def test_cells_file_and_shorthand_flags_do_not_mix(tmp_path):
    path = tmp_path / "cells.json"
    path.write_text(json.dumps({"cells": [{"model": "vit"}]}))
    with pytest.raises(CellsFileError, match="drop --iterations"):
        cells_file_from_args(parse("--cells", str(path), "--iterations", "3"))


def _cells_file(tmp_path):
    from runner_cells import settings, tiny_cell

    path = tmp_path / "cells.json"
    path.write_text(json.dumps({"schema_version": 1, "settings": settings(), "cells": [tiny_cell().to_dict()]}))
    return path


@pytest.mark.parametrize("argv, force", [
    (["--cells", "CELLS"], True),                       # the host chose these cells: all run
    (["--models", "resnet", "--size", "tiny"], False),  # no host: recorded cells are skipped
    (["--models", "resnet", "--size", "tiny", "--force"], True),
])
def test_a_cells_file_runs_whole_and_only_the_shorthand_resumes(tmp_path, monkeypatch, argv, force):
    import runner.cli

    calls = []
    monkeypatch.setattr(runner.cli, "run_cells_file", lambda plan, out, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(runner.cli.signal, "signal", lambda *args: None)
    argv = [str(_cells_file(tmp_path)) if arg == "CELLS" else arg for arg in argv]
    assert main(["--out", str(tmp_path / "out"), *argv]) == 0
    assert calls == [{"force": force, "retry_failed": False}]


def test_resume_flags_belong_to_the_shorthand(tmp_path):
    with pytest.raises(CellsFileError, match="drop --force"):
        cells_file_from_args(parse("--cells", str(_cells_file(tmp_path)), "--force"))


def test_bad_usage_exits_2_naming_the_problem(tmp_path, capsys):
    path = tmp_path / "cells.json"
    path.write_text(json.dumps({"schema_version": 1, "cells": [{"model": "vit", "mode": "eager"}]}))
    with pytest.raises(SystemExit) as exit_info:
        main(["--cells", str(path), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "missing required keys" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_info:
        main(["--models", "vit", "--modes", "fast", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "fast not in eager" in capsys.readouterr().err


def test_nothing_to_run_is_bad_usage(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", "x"])
    assert exit_info.value.code == 2
    assert "--cells FILE, or --models" in capsys.readouterr().err


def test_the_parent_leaves_the_compile_cache_variable_alone():
    """Importing torch._dynamo sets TORCHINDUCTOR_CACHE_DIR; the parent must not, or every
    cell would share torch's default cache instead of compiling cold (driver.compile_cache_dirs)."""
    code = ("import os; from runner.cli import build_parser, cells_file_from_args; "
            "cells_file_from_args(build_parser().parse_args(['--out', 'x', '--models', 'vit'])); "
            "print(os.environ.get('TORCHINDUCTOR_CACHE_DIR'))")
    env = {key: value for key, value in os.environ.items() if key != "TORCHINDUCTOR_CACHE_DIR"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None"


def test_sigterm_stops_the_running_cell_and_keeps_finished_records(tmp_path, monkeypatch):
    """docker stop / the host's Ctrl-C send SIGTERM: the hanging cell's process dies with the runner."""
    import signal
    import time

    from runner.schema import read_record, record_path
    from runner_cells import inject_faults, settings, tiny_cell

    done, hang = tiny_cell(), tiny_cell(batch_size=2)
    inject_faults(monkeypatch, {hang: "hang"})
    cells_file = tmp_path / "cells.json"
    cells_file.write_text(json.dumps({"schema_version": 1, "settings": settings(), "image_name": None, "image_id": None,
                                      "cells": [done.to_dict(), hang.to_dict()]}))
    out = tmp_path / "out"
    runner = subprocess.Popen([sys.executable, "-m", "runner", "--cells", str(cells_file), "--out", str(out)],
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not record_path(out, done).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert record_path(out, done).exists(), "the first cell never finished"
    time.sleep(1.0)  # the hanging cell is running now
    runner.send_signal(signal.SIGTERM)
    _, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 130, stderr
    assert read_record(record_path(out, done))["status"] == "ok"
    assert not record_path(out, hang).exists()
    leftovers = _session_processes(runner.pid)
    for _ in range(50):  # the forkserver exits once it sees its parent gone
        if not leftovers:
            break
        time.sleep(0.2)
        leftovers = _session_processes(runner.pid)
    assert leftovers == [], f"processes left in the runner's session: {leftovers}"


def _session_processes(session_id):
    return subprocess.run(["pgrep", "-s", str(session_id)], capture_output=True, text=True).stdout.split()
