"""The selftest's results (``matrixbench selftest``, in each run folder) as notes of the report."""
import os
from pathlib import Path

from matrixbench.run.layout import SELFTEST_FILENAME as RESULT_FILE
from matrixbench.run.results_files import Unvouched, read_selftest


def selftest_notes(results_dirs):
    """(notes, problems): one note per selftest result under ``results_dirs`` (each run folder's
    RESULT_FILE), read by matrixbench.run.results_files (a FIFO or a link to /dev/zero is refused, not
    read): where it ran, pass or fail, and each check's line with its numbers; one problem line per
    file that reader cannot vouch for."""
    notes, problems, seen = [], [], set()
    for folder in map(Path, results_dirs):
        for path in sorted(folder.rglob(RESULT_FILE)):
            if os.path.realpath(path) in seen:   # a folder given twice: its selftest once
                continue
            seen.add(os.path.realpath(path))
            try:
                result = read_selftest(path, folder)
            except Unvouched as exc:
                problems.append(exc.line())
                continue
            checks = "; ".join(f"{c['name']} {c['status']}: {c['detail']}" for c in result["checks"])
            verdict = "passed" if result["passed"] else "FAILED"
            when = f", started {result['started_at']}" if result.get("started_at") else ""
            notes.append(f"Selftest of the measuring apparatus ({path.parent.name}, "
                         f"{result.get('gpu_name') or result.get('device')}{when}) {verdict}: {checks}.")
    return notes, problems
