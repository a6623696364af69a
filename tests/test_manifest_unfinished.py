"""The report's warning about runs that did not finish (run.json's status), one line per run folder."""
import json

from matrixbench.run.manifest import unfinished_runs


def _run(root, name, **manifest):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"schema_version": 1, **manifest}))
    return folder


def test_each_unfinished_run_is_named_with_its_status_and_a_finished_one_is_not(tmp_path):
    _run(tmp_path, "done", status="finished")
    _run(tmp_path, "bad", status="failed")
    stopped = _run(tmp_path, "stopped", status="interrupted")
    lines = unfinished_runs([tmp_path])
    assert lines == [f"{stopped}: the run is interrupted (run.json), not finished; the report covers the records "
                     "it has: rerun the same `matrixbench run` to finish it"]


def test_a_run_json_without_a_status_says_so_and_never_prints_none(tmp_path):
    old = _run(tmp_path, "old")
    line, = unfinished_runs([tmp_path])
    assert line.startswith(f"{old}: run.json records no status") and "None" not in line
