"""``matrixbench selftest``: runs ``runner.selftest`` in the local interpreter (the one the local
backend runs cells in, or ``--python``) and keeps its result in the run folder
(``results/<run>/selftest.json``) for the report. Also run by ``doctor --measure`` and, on a GPU
host, first by ``make matrix``.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

from matrixbench import resources
from matrixbench.errors import MatrixbenchError
from matrixbench.layout import SELFTEST_FILENAME as RESULT_FILE

TIMEOUT_S = 300   # under five minutes, or it is a failure in itself


class SelftestError(MatrixbenchError):
    """The measuring apparatus failed a check (or the selftest could not run)."""

    exit_code = 10


def run_selftest(run_path, device="auto", python=None, emit=print):
    """Run the selftest, write RESULT_FILE under ``run_path``, emit its lines; return the result (None
    when the interpreter has no torch). Raises SelftestError when a check failed or it could not run."""
    run_path = Path(run_path)
    run_path.mkdir(parents=True, exist_ok=True)
    out = run_path / RESULT_FILE
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(resources.runner_dir(SelftestError).parent),
                                                                    os.environ.get("PYTHONPATH")])))
    argv = [python or sys.executable, "-m", "runner.selftest", "--out", str(out), "--device", device]
    if not _has_torch(argv[0], env):
        emit(f"selftest: skipped: {argv[0]} has no torch (the docker and venv backends bring their own); "
             "give one with --python")
        return None
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SelftestError(f"selftest: no result within {TIMEOUT_S} s ({' '.join(argv)})") from None
    except OSError as exc:
        raise SelftestError(f"selftest: cannot run {argv[0]}: {exc}; give an interpreter with torch "
                            "(--python)") from None
    for line in done.stdout.splitlines():
        emit(line)
    if not out.is_file():
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise SelftestError(f"selftest: {argv[0]} wrote no result (exit code {done.returncode}):\n{tail}")
    result = json.loads(out.read_text(encoding="utf-8"))
    if not result["passed"]:
        failed = [c["name"] for c in result["checks"] if c["status"] == "fail"]
        raise SelftestError(f"selftest failed ({', '.join(failed) or 'no check ran'}): the measuring apparatus is "
                            f"wrong here, and each failed check above says what that means and what to do; the "
                            f"numbers are in {out}")
    if result.get("warnings"):
        emit(f"selftest: passed with {len(result['warnings'])} warning(s): the timer is sound; the timings taken "
             "now will be noisier (see above)")
    return result


def _has_torch(python, env):
    try:
        return subprocess.run([python, "-c", "import torch"], env=env, capture_output=True,
                              timeout=TIMEOUT_S).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False

