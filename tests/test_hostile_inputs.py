"""Hostile inputs beyond the matrix's fields (issue 24): files that are not what they claim, YAML
that expands or nests without end, records of another version, hand-edited run files. Each row:
set the folder up -> run the CLI -> the exit code and the words of its one line, no traceback, no
hang, and (``after``) what must still hold on disk.

``setup(folder)`` makes whatever the case needs in the test's folder (the small test matrix is
``m.yaml`` there); ``{dir}`` in an argument is the folder. The backend is the recording one
registered as "local": these cases are about what the host reads, not what a runner measures.
"""
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest
import yaml
from click.testing import CliRunner

from host_helpers import RecordingBackend, make_record, small_matrix_data, tmpfs, use_backend
from matrixbench.cli import main
from matrixbench.matrix import expand_cells, load_matrix
from runner.core import SCHEMA_VERSION
from runner.schema import record_path, write_record

RUN = ("run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable")
VALIDATE = ("validate", "--matrix", "m.yaml")
REPORT = ("report", "{dir}/results/default", "--out", "{dir}/report", "--format", "md")


def matrix_text(**changes):
    return yaml.safe_dump({**small_matrix_data(), **changes}, sort_keys=False)


def write(name, content):
    def setup(folder):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return setup


def laughs(where):
    """A billion-laughs chain of 9 levels of 9 aliases (9**9 values), used as ``where``."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    body = matrix_text().replace("batch_sizes:", "old_batch_sizes:") if where == "batch_sizes" else matrix_text()
    return write("m.yaml", "\n".join(lines) + "\n" + body + f"{where}: *l9\n")


def record_file(folder, cell_index=0):
    """Where the first cell of the small matrix's stable image records repeat 0."""
    cell = expand_cells(load_matrix(folder / "m.yaml"))[cell_index]
    return record_path(folder / "results" / "default" / "stable", cell), cell


def recorded(change=None, kind="json"):
    """A record of the first cell, as ``change`` edits it (a dict), or a FIFO / link to /dev/zero."""
    def setup(folder):
        path, cell = record_file(folder)
        path.parent.mkdir(parents=True)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "zero":
            path.symlink_to("/dev/zero")
        else:
            data = make_record(cell).to_dict()
            change(data)
            path.write_text(json.dumps(data))
    return setup


def untouched(folder):
    """The newer record is still there, byte for byte as the case wrote it."""
    path, _ = record_file(folder)
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION + 1


def replaced(folder):
    """The corrupt record was replaced by a real one."""
    path, _ = record_file(folder)
    assert path.is_file() and not path.is_symlink() and json.loads(path.read_text())["status"] == "ok"


def run_json(content):
    return write("results/default/run.json", content)


def run_lock_folder(folder):
    (folder / "results" / "default" / "run.lock").mkdir(parents=True)


def fifo(name):
    return lambda folder: ((folder / name).unlink(missing_ok=True), os.mkfifo(folder / name))


def dangling(name):
    return lambda folder: ((folder / name).unlink(missing_ok=True), (folder / name).symlink_to(folder / "nowhere.yaml"))


def both(*setups):
    def setup(folder):
        for each in setups:
            each(folder)
    return setup


@dataclass
class Case:
    name: str
    args: tuple
    code: int
    words: tuple
    setup: Optional[Callable] = None
    after: Optional[Callable] = None


NEWER = {"schema_version": SCHEMA_VERSION + 1}
MANIFEST = {"schema_version": 1, "run": "default", "status": "finished"}

CASES = [
    # --- YAML that would take all the memory or the stack (item 5) ---
    Case("billion laughs in batch_sizes", VALIDATE, 2, ("m.yaml", "anchors and aliases", "100000"),
         laughs("batch_sizes")),
    Case("billion laughs in a description", VALIDATE, 2, ("m.yaml", "anchors and aliases"), laughs("description")),
    Case("20,000 nested [", VALIDATE, 2, ("m.yaml", "nested"), write("m.yaml", "a: " + "[" * 20000 + "]" * 20000)),
    Case("65 nested mappings", VALIDATE, 2, ("m.yaml", "nested more than 64 levels"),
         write("m.yaml", "".join("  " * i + f"k{i}:\n" for i in range(66)) + "  " * 66 + "x\n")),
    Case("matrix over 1 MiB", VALIDATE, 2, ("m.yaml", "over the limit of 1048576"),
         write("m.yaml", "# " + "x" * (1024 * 1024) + "\n")),
    Case("matrix is /dev/zero", ("validate", "--matrix", "/dev/zero"), 2, ("/dev/zero", "character device")),
    Case("matrix is a FIFO", VALIDATE, 2, ("m.yaml", "FIFO"), fifo("m.yaml")),
    Case("matrix is a dangling symlink", VALIDATE, 2, ("m.yaml", "symlink", "nowhere.yaml", "does not exist"),
         dangling("m.yaml")),
    # --- matrices too large to plan (item 3) ---
    Case("393k processes", VALIDATE, 2, ("393,216 processes", "over the limit of 250,000"),
         write("m.yaml", matrix_text(batch_sizes=list(range(1, 4097)), dtypes=["float32", "float16", "bfloat16"],
                                     repeats=4))),
    # --- records of a newer matrixbench are never overwritten (item 2) ---
    Case("record of a newer schema", RUN, 2, ("vit_bs1", f"schema_version {SCHEMA_VERSION + 1} is newer",
                                              "never overwritten"), recorded(lambda r: r.update(NEWER)), untouched),
    Case("record of a newer schema, --force", RUN + ("--force",), 2, ("vit_bs1", "is newer"),
         recorded(lambda r: r.update(NEWER)), untouched),
    Case("record of a newer schema, dry run", RUN + ("--dry-run",), 2, ("vit_bs1", "is newer"),
         recorded(lambda r: r.update(NEWER)), untouched),
    # --- hand-edited or partial records: named, replaced; never a crash or a hang (item 7) ---
    Case("record without status", RUN, 0, ("vit_bs1", "unreadable record", "status"),
         recorded(lambda r: r.pop("status")), replaced),
    Case("record without cell", RUN, 0, ("vit_bs1", "unreadable record", "cell"),
         recorded(lambda r: r.pop("cell")), replaced),
    Case("record whose cell is a string", RUN, 0, ("vit_bs1", "unreadable record"),
         recorded(lambda r: r.update(cell="vit")), replaced),
    Case("record that is a FIFO", RUN, 0, ("vit_bs1", "unreadable record", "FIFO"), recorded(kind="fifo"), replaced),
    Case("record linked to /dev/zero", RUN, 0, ("vit_bs1", "unreadable record", "character device"),
         recorded(kind="zero"), replaced),
    Case("report: record that is a FIFO", REPORT, 6, ("vit_bs1", "FIFO"), recorded(kind="fifo")),
    Case("report: record linked to /dev/zero", REPORT, 6, ("vit_bs1", "character device"), recorded(kind="zero")),
    # --- hand-edited run.json: one documented exit code, in run and report alike ---
    Case("run.json history a string", RUN, 8, ("run.json", "field history", "is not of type 'array'"),
         run_json(json.dumps({**MANIFEST, "history": "oops"}))),
    Case("report: run.json history a string", REPORT, 8, ("run.json", "field history"),
         both(recorded(lambda r: None), run_json(json.dumps({**MANIFEST, "history": "oops"})))),
    Case("run.json not JSON", RUN, 8, ("run.json", "not valid JSON"), run_json("{")),
    Case("run.json a FIFO", RUN, 8, ("run.json", "FIFO"), both(lambda folder: (folder / "results/default").mkdir(
        parents=True), fifo("results/default/run.json"))),
    # --- smaller (item 12) ---
    Case("--slots 0", VALIDATE + ("--slots", "0"), 2, ("--slots must be >= 1, got 0", "'auto'")),
    *[Case(f"a path as a model id: {path}", VALIDATE, 2, ("models.mine.id", "hub id", "path:"),
           write("m.yaml", matrix_text(models={"mine": {"id": path, "task": "image-classification"}})))
      for path in ("/models/vit", "./vit", "../vit", "~/vit", "a/b/c")],
    # --- filesystem conditions (item 6) ---
    Case("run.lock is a folder", RUN, 2, ("run.lock", "is a folder", "rmdir"), run_lock_folder),
    Case("a 300-character --run", RUN + ("--run", "r" * 300), 2, ("--run", "300 characters", "at most 100")),
    Case("--results a symlink loop", RUN + ("--results", "loop/results"), 2,
         ("loop", "Too many levels of symbolic links"),
         lambda folder: (folder / "loop").symlink_to(folder / "loop")),
    Case("--results a dangling symlink", RUN + ("--results", "gone"), 2, ("gone", "leads nowhere"),
         dangling("gone")),
    Case("an image folder that is a file", RUN, 9, ("results/default/stable", "File exists"),
         write("results/default/stable", "not a folder")),
    Case("report --out under a file", ("report", "{dir}/results/default", "--out", "{dir}/afile/report"), 9,
         ("afile", "Not a directory"), both(recorded(lambda r: None), write("afile", "x"))),
    Case("config a folder", VALIDATE, 2, ("models.mine.config", "is a folder", "config.json file"),
         both(write("m.yaml", matrix_text(models={"mine": {"config": "cfg", "task": "image-classification"}})),
              lambda folder: (folder / "cfg").mkdir())),
    Case("config a FIFO", VALIDATE, 2, ("models.mine.config", "FIFO"),
         both(write("m.yaml", matrix_text(models={"mine": {"config": "cfg", "task": "image-classification"}})),
              fifo("cfg"))),
    Case("config a device", VALIDATE, 2, ("models.mine.config", "character device"),
         write("m.yaml", matrix_text(models={"mine": {"config": "/dev/null", "task": "image-classification"}}))),
    Case("config a dangling symlink", VALIDATE, 2, ("models.mine.config", "symlink", "does not exist"),
         both(write("m.yaml", matrix_text(models={"mine": {"config": "cfg", "task": "image-classification"}})),
              dangling("cfg"))),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_input_is_one_named_line(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(matrix_text())
    if case.setup:
        case.setup(tmp_path)
    use_backend(monkeypatch, RecordingBackend(gpus=False))
    args = [arg.replace("{dir}", str(tmp_path)) for arg in case.args]
    result = CliRunner().invoke(main, args)
    output = result.output
    assert "Traceback" not in output and not isinstance(result.exception, (KeyError, TypeError, RecursionError,
                                                                           MemoryError)), output
    assert result.exit_code == case.code, output
    for word in case.words:
        assert word.replace("{dir}", str(tmp_path)) in output, output
    if case.after:
        case.after(tmp_path)


def test_planning_is_linear_in_the_processes(tmp_path, monkeypatch):
    """Each record is looked at a fixed number of times, however many processes a run has: a
    list membership test made planning quadratic (145 s for 7,680 processes)."""
    from matrixbench.run import pending

    matrix = load_matrix(write_small(tmp_path, repeats=5, batch_sizes=list(range(1, 33))))
    calls = []
    real = pending.needs_run
    monkeypatch.setattr(pending, "needs_run", lambda *a, **k: calls.append(1) or real(*a, **k))
    plans = pending.pending_work(matrix, tmp_path / "results" / "default")
    processes = sum(len(plan.all) for plan in plans)
    assert processes == 2 * 2 * 32 * 2 * 5 and len(calls) == processes
    for plan in plans[:1]:
        for repeat in plan.all[: len(plan.all) // 2]:
            write_record(plan.out_dir, _record_of(repeat))
    ids = []
    monkeypatch.setattr(pending, "_recorded_status", lambda out_dir, repeat: ids.append(repeat.id) or "ok")
    pending.pending_work(matrix, tmp_path / "results" / "default")
    assert len(ids) == len(set(ids)) == processes // 4


def write_small(folder, **changes):
    path = Path(folder) / "m.yaml"
    path.write_text(matrix_text(**changes))
    return path


def _record_of(repeat):
    record = make_record(repeat.cell)
    record.repeat = repeat.index
    return record


class RefusingBackend(RecordingBackend):
    """A runner that refuses its cells file, as argparse does: its message in runner.log, exit 2."""

    def run(self, request):
        request.paths.out_dir.mkdir(parents=True, exist_ok=True)
        (request.paths.out_dir / "runner.log").write_text(
            "usage: python -m runner ...\npython -m runner: error: --cells cells.json: settings.timeout_s "
            "must be a number > 0, got nan\n")
        return 2


def test_a_runner_refusal_is_shown_with_its_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_small(tmp_path)
    use_backend(monkeypatch, RefusingBackend())
    result = CliRunner().invoke(main, list(RUN))
    assert result.exit_code == 5, result.output
    assert "runner exit code 2: python -m runner: error: --cells cells.json: settings.timeout_s" in result.output


@pytest.mark.parametrize("args, words", [
    (("--timeout", "nan"), "--timeout must be a finite number, got nan"),
    (("--timeout", "inf"), "--timeout must be a finite number, got inf"),
    (("--timeout", "-inf"), "--timeout must be a finite number, got -inf"),
])
def test_non_finite_numbers_are_refused_where_declared(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    write_small(tmp_path)
    result = CliRunner().invoke(main, [*VALIDATE, *args])
    assert result.exit_code == 2 and words in result.output, result.output


@pytest.mark.parametrize("key, value", [("timeout_s", ".nan"), ("cv_threshold", ".inf"),
                                        ("accuracy_tolerance", ".nan")])
def test_non_finite_numbers_in_the_file_are_refused_naming_the_key(tmp_path, monkeypatch, key, value):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(matrix_text() + f"{key}: {value}\n")
    result = CliRunner().invoke(main, list(VALIDATE))
    assert result.exit_code == 2 and f"{key} must be a finite number" in result.output, result.output


def test_the_runner_settings_refuse_non_finite_numbers():
    from runner.settings import BY_NAME

    for value in (float("nan"), float("inf"), -float("inf")):
        assert BY_NAME["timeout_s"].problem(value) and BY_NAME["cv_threshold"].problem(value)


HOSTILE_HTML = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def test_report_md_escapes_user_text_as_the_html_report_does(tmp_path, charts_drawn_not_rendered):
    """A run's note and a record's model_type are user text: report.md shows them, as entities."""
    import shutil

    run = tmp_path / "gpu-run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "gpu-run", run)
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "note": HOSTILE_HTML}))
    record = sorted((run / "stable").glob("*.json"))[-1]
    data = json.loads(record.read_text())
    data["environment"]["torch"] = HOSTILE_HTML
    record.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "report"), "--format", "md"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "report" / "report.md").read_text()
    assert "<script>" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


TOKEN, URL_TOKEN = "hf_s3cretvalue42", "urlS3cret77"


def test_secrets_in_an_image_reach_no_file_of_the_run_nor_its_report(tmp_path, monkeypatch):
    """``env: {HF_TOKEN: ...}`` and an index URL with credentials: the runner gets the token at run
    time (the request's env), and no file the run or the report writes holds either secret."""
    monkeypatch.chdir(tmp_path)
    data = small_matrix_data()
    data["images"]["stable"]["env"] = {"HF_TOKEN": TOKEN, "PLAIN": "visible"}
    data["images"]["stable"]["index_url"] = f"https://user:{URL_TOKEN}@mirror.example/simple"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data))
    backend = use_backend(monkeypatch, RecordingBackend(gpus=False))
    result = CliRunner().invoke(main, [*RUN, "--note", f"see https://me:{URL_TOKEN}@host/x"])
    assert result.exit_code == 0, result.output
    assert backend.requests[0].env["HF_TOKEN"] == TOKEN   # the runner still gets it
    report = CliRunner().invoke(main, ["report", "results/default", "--out", "report"])
    assert report.exit_code == 0, report.output
    written = [path for path in tmp_path.rglob("*") if path.is_file() and path.name != "m.yaml"]
    assert any(path.name == "run.json" for path in written) and any(path.name == "cells.json" for path in written)
    for path in written:
        content = path.read_bytes()
        assert TOKEN.encode() not in content and URL_TOKEN.encode() not in content, path
    manifest = json.loads((tmp_path / "results" / "default" / "run.json").read_text())
    assert manifest["matrix"]["images"]["stable"]["env"] == {"HF_TOKEN": "***", "PLAIN": "visible"}
    assert manifest["matrix"]["images"]["stable"]["index_url"] == "https://***@mirror.example/simple"
    assert TOKEN not in result.output + report.output and URL_TOKEN not in result.output + report.output


@pytest.mark.parametrize("data, expected", [
    ({"env": {"HF_TOKEN": "abcd1234", "api_key": "k" * 8, "path": "/x"}},
     {"env": {"HF_TOKEN": "***", "api_key": "***", "path": "/x"}}),
    ({"index_url": "https://u:p4ssw0rd@h/simple"}, {"index_url": "https://***@h/simple"}),
    ({"command": ["run", "--index-url", "http://tok@h:8080/s"]}, {"command": ["run", "--index-url", "http://***@h:8080/s"]}),
    ({"note": "at https://a:b@c/d and http://plain/e"}, {"note": "at https://***@c/d and http://plain/e"}),
    ({"iterations": 5, "ok": None}, {"iterations": 5, "ok": None}),
])
def test_redact_data_hides_secret_keys_and_url_credentials_at_any_depth(data, expected):
    from matrixbench.redact import redact_data

    assert redact_data({"outer": [data]}) == {"outer": [expected]}


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs at ``tmp_path / "disk"`` (root only), unmounted after."""
    with tmpfs(tmp_path / "disk", "512k") as disk:
        yield disk


def test_a_full_disk_keeps_finished_records_leaves_no_temp_file_and_a_rerun_resumes(tmp_path, monkeypatch,
                                                                                     small_disk):
    monkeypatch.chdir(tmp_path)
    write_small(tmp_path)
    results = small_disk / "results"
    filler = small_disk / "filler"
    with open(filler, "wb") as handle:   # leave room for the run's own files and a few records, not all
        handle.write(b"x" * (os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize - 6 * 4096))
    use_backend(monkeypatch, RecordingBackend(gpus=False))
    args = [*RUN, "--results", str(results)]
    full = CliRunner().invoke(main, args)
    assert full.exit_code == 9 and "Traceback" not in full.output, full.output
    assert "no space left on device" in full.output and "bytes free there" in full.output, full.output
    assert str(results) in full.output
    leftovers = [path for path in small_disk.rglob("*") if ".tmp" in path.name]
    assert leftovers == []
    out_dir = results / "default" / "stable"
    kept = {path.name: path.read_bytes() for path in out_dir.glob("*.json") if path.name != "cells.json"}
    for content in kept.values():
        assert json.loads(content)["status"] == "ok"   # whole records only
    filler.unlink()
    rerun = CliRunner().invoke(main, args)
    assert rerun.exit_code == 0, rerun.output
    for name, content in kept.items():
        assert (out_dir / name).read_bytes() == content, f"{name} was rewritten"
    assert len([path for path in out_dir.glob("*.json") if path.name != "cells.json"]) == 8


@pytest.mark.parametrize("flags", [("--force", "--retry-failed"), ("--cold", "--cache-dir", "somewhere")])
def test_conflicting_flags_are_refused_not_ignored(tmp_path, monkeypatch, flags):
    monkeypatch.chdir(tmp_path)
    write_small(tmp_path)
    result = CliRunner().invoke(main, [*RUN, *flags])
    assert result.exit_code == 2 and f"{flags[0]} and {flags[1]} together" in result.output, result.output


@pytest.mark.parametrize("status, warned", [("interrupted", True), ("running", True), ("incomplete", True),
                                            ("finished", False)])
def test_report_on_an_unfinished_run_warns(tmp_path, status, warned):
    import shutil

    run = tmp_path / "cpu-run"   # 3 charts to draw where gpu-run has 13: what is checked is the warning (issue 35)
    shutil.copytree(Path(__file__).parent / "fixtures" / "cpu-run", run)
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "status": status}))
    result = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "report"), "--format", "md"])
    assert result.exit_code == 0, result.output
    assert (f"warning: {run}: the run is {status}" in result.output) == warned, result.output
