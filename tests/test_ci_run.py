""".ci/run's phases (issue 35): a background phase runs beside the next one, and its time and exit status reach the
summary. Sourcing .ci/run defines its steps without running them."""
import re
import subprocess
from pathlib import Path

CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"


def _bash(script, tmp_path, timeout=60):
    return subprocess.run(["bash", "-c", f"source {CI_RUN}\ncd {tmp_path}\n{script}"], capture_output=True,
                          text=True, timeout=timeout)


def test_a_background_phase_runs_beside_the_next_and_its_time_reaches_the_summary(tmp_path):
    # The background phase waits for a file that only the foreground phase makes: run one after the other,
    # this never ends (the timeout fails the test).
    done = _bash("background_phase slow bash -c 'until [ -e flag ]; do sleep 0.05; done; touch slow-done'\n"
                 "phase fast touch flag\n"
                 "wait_phase slow\n"
                 "summary", tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "slow-done").exists()
    summary = done.stderr.split("phase times on", 1)[1]
    assert re.search(r"fast \d+ s \(exit 0\)", summary), summary   # its whole seconds (0 or 1, as the clock ticks)
    assert "slow " in summary and "(exit 0), waited for" in summary
    assert summary.index("fast ") < summary.index("slow ")     # in the order they ended


def test_a_failing_background_phase_fails_its_wait_and_says_its_exit_status(tmp_path):
    done = _bash("background_phase broken bash -c 'exit 3'\n"
                 "code=0; wait_phase broken || code=$?\n"
                 "echo \"wait: $code\"\nsummary", tmp_path)
    assert "wait: 3" in done.stdout
    assert re.search(r"broken \d+ s \(exit 3\), waited for", done.stderr), done.stderr


def test_waiting_for_a_phase_never_started_is_a_no_op(tmp_path):
    done = _bash("wait_phase base-images; echo \"wait: $?\"", tmp_path)
    assert "wait: 0" in done.stdout
