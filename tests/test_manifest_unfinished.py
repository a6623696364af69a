"""The report's warning about runs that did not finish (run.json's status), one line per run folder."""
import json
import shutil
from pathlib import Path

import markupsafe

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


def test_the_report_of_an_interrupted_run_says_so_in_its_notes_with_its_records_and_the_rerun(
        tmp_path, charts_drawn_not_rendered):
    """The audit: the report of a run stopped after some of its processes said "cells ran 1 of 1" and nothing
    else; a reader of report.md or report.html alone now learns the run is unfinished, how much of its plan has
    records, and the command that finishes it (a real run.json: interrupted by SIGTERM, 3 of 18 recorded)."""
    from matrixbench.report import build_report

    run = tmp_path / "results" / "acc"
    shutil.copytree(Path(__file__).parent / "data" / "h100-acc" / "acc", run)
    build_report([run], tmp_path / "out", ["md", "html"])
    rerun = ("`matrixbench run --matrix /tmp/mbwork/acceptance.yaml --backend local --device cuda --results "
             "/tmp/mbwork/results --run acc --models vit,resnet,detr-resnet-101 --modes eager,default,reduce-overhead "
             "--note 'first GPU run'`")
    note = (f"Run acc did not finish: it is interrupted by SIGTERM (run.json). 3 of its 18 planned processes have "
            f"records; this report shows only those. To finish it, rerun {rerun} (from the folder it ran in): it "
            f"runs only what has no record yet. Folder: {run}.")
    assert f"> **Note:** {note}" in (tmp_path / "out" / "report.md").read_text()
    assert f"<strong>Note:</strong> {markupsafe.escape(note)}</p>" in (tmp_path / "out" / "report.html").read_text()


def test_a_finished_run_and_one_without_a_status_get_no_such_note(tmp_path):
    from matrixbench.report import unfinished_notes

    assert unfinished_notes({str(_run(tmp_path, "done", status="finished")): {"status": "finished"},
                             str(_run(tmp_path, "old")): {}}) == []
    still = _run(tmp_path, "live", status="running", run="live", command=["matrixbench", "run"])
    (still / "stable").mkdir()
    (still / "stable" / "vit_bs1_eager_float32.json").write_text("{}")
    (still / "stable" / "cells.json").write_text("{}")
    note, = unfinished_notes({str(still): json.loads((still / "run.json").read_text())})
    assert note.startswith("Run live did not finish: it is still running, or killed before it recorded its end "
                           "(run.json). 1 of its 1 planned process has a record;")
    assert "rerun `matrixbench run` (from the folder it ran in)" in note
