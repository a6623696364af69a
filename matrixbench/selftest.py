"""``matrixbench selftest``: runs ``runner.selftest`` in the local interpreter (the one the local
backend runs cells in, or ``--python``) and keeps its result in the run folder
(``results/<run>/selftest.json``) for the report. Also run by ``doctor --measure`` and, on a GPU
host, first by ``make matrix``.
"""
import contextlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

from matrixbench import resources
from matrixbench.errors import MatrixbenchError
from matrixbench.run.layout import SELFTEST_FILENAME as RESULT_FILE
from matrixbench.run.manifest import now_iso
from matrixbench.run.results_files import Unvouched, read_selftest
from runner.schema import write_json_atomic

TIMEOUT_S = 300   # under five minutes, or it is a failure in itself


class SelftestError(MatrixbenchError):
    """The measuring apparatus failed a check (or the selftest could not run)."""

    exit_code = 10


def run_selftest(run_path, device="auto", python=None, emit=print):
    """Run the selftest, write RESULT_FILE under ``run_path``, emit its lines; return the result (None
    when the interpreter has no torch). Raises SelftestError when a check failed or it could not run.

    The child writes to a fresh hidden file of this attempt's own (``.selftest.<pid>.<hex>.tmp``), never to
    RESULT_FILE: a child that dies leaves no result to mistake for its own, and RESULT_FILE (written
    atomically, with the run's name, this attempt's id, its start time and the child's exit code) says it
    failed. A result counts as passed only when the child exited 0 and every check passed."""
    run_path = Path(run_path)
    run_path.mkdir(parents=True, exist_ok=True)
    out = run_path / RESULT_FILE
    attempt = secrets.token_hex(8)
    identity = {"run": run_path.name, "attempt": attempt, "started_at": now_iso()}
    fresh = run_path / f".selftest.{os.getpid()}.{attempt}.tmp"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(resources.runner_dir(SelftestError).parent),
                                                                    os.environ.get("PYTHONPATH")])))
    argv = [python or sys.executable, "-m", "runner.selftest", "--out", str(fresh), "--device", device]
    if not _has_torch(argv[0], env):
        emit(f"selftest: skipped: {argv[0]} has no torch (the docker and venv backends bring their own); "
             "give one with --python")
        return None
    try:
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _failed(out, identity, None, f"no result within {TIMEOUT_S} s")
            raise SelftestError(f"selftest: no result within {TIMEOUT_S} s ({' '.join(argv)})") from None
        except OSError as exc:
            raise SelftestError(f"selftest: cannot run {argv[0]}: {exc}; give an interpreter with torch "
                                "(--python)") from None
        for line in done.stdout.splitlines():
            emit(line)
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        if not os.path.lexists(fresh):
            _failed(out, identity, done.returncode,
                    f"the selftest process wrote no result (exit code {done.returncode})")
            raise SelftestError(f"selftest: {argv[0]} wrote no result (exit code {done.returncode}):\n{tail}")
        try:
            result = read_selftest(fresh)
        except Unvouched as exc:
            _failed(out, identity, done.returncode, f"its result is not readable ({exc.problem})")
            raise SelftestError(f"selftest: {exc.line()} (exit code {done.returncode}):\n{tail}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fresh)
    result.update(identity, exit_code=done.returncode)
    if done.returncode != 0 and result["passed"]:
        result["passed"] = False
        result["checks"] = [*result["checks"], _death(done.returncode)]
    write_json_atomic(out, result)
    if not result["passed"]:
        failed = [c["name"] for c in result["checks"] if c["status"] == "fail"]
        raise SelftestError(f"selftest failed ({', '.join(failed) or 'no check ran'}): the measuring apparatus is "
                            f"wrong here, and each failed check above says what that means and what to do; the "
                            f"numbers are in {out}")
    if result.get("warnings"):
        emit(f"selftest: passed with {len(result['warnings'])} warning(s): the timer is sound; the timings taken "
             "now will be noisier (see above)")
    return result


def _death(code):
    return {"name": "selftest process", "status": "fail",
            "detail": f"the selftest process ended with exit code {code}, so its result is not its outcome"}


def _failed(out, identity, code, why):
    """RESULT_FILE says this attempt failed (an earlier result there is never its outcome)."""
    write_json_atomic(out, {**identity, "exit_code": code, "passed": False, "device": None, "gpu_name": None,
                            "skipped": [], "checks": [{"name": "selftest process", "status": "fail", "detail": why}]})


def _has_torch(python, env):
    try:
        return subprocess.run([python, "-c", "import torch"], env=env, capture_output=True,
                              timeout=TIMEOUT_S).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False

