"""The selftest's results (``matrixbench selftest``, in each run folder) as notes of the report."""
import json
from pathlib import Path

from matrixbench.layout import SELFTEST_FILENAME as RESULT_FILE


def selftest_notes(results_dirs):
    """One note per selftest result under ``results_dirs`` (each run folder's RESULT_FILE), for the
    report: where it ran, pass or fail, and each check's line with its numbers."""
    notes = []
    for folder in map(Path, results_dirs):
        for path in sorted(folder.rglob(RESULT_FILE)):
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
                checks = "; ".join(f"{c['name']} {c['status']}: {c['detail']}" for c in result["checks"])
                verdict = "passed" if result["passed"] else "FAILED"
            except (OSError, ValueError, KeyError, TypeError) as exc:
                notes.append(f"Selftest {path}: unreadable ({exc})")
                continue
            notes.append(f"Selftest of the measuring apparatus ({path.parent.name}, "
                         f"{result.get('gpu_name') or result.get('device')}) {verdict}: {checks}.")
    return notes
