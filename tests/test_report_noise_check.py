"""Issue 32 item 3 in the report: each run folder's noise check (run.json's ``noise_check``, written by
matrixbench.run.noise_check before the run's first cell) cited beside the host notes (report.host_notes).

The measured summary is the one run_check keeps for the H100's real samples (tests/test_host_noise_probe.py's
``h100_probe``); run.json is untrusted input, so what cannot be read says "unknown", never a crash or a guess.
"""
import json
import math
import shutil
from pathlib import Path

import pytest

from matrixbench import host_noise
from matrixbench.report import build_report, host_notes
from matrixbench.run import noise_check
from test_host_noise_probe import ProbeBackend, _gpu_request, h100_probe

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def h100_kept(tmp_path_factory):
    """What run.json keeps of a measured check on the H100's samples (launch-bound 2,000 eager calls, GPU-bound
    300 CUDA-graph replays)."""
    folder = tmp_path_factory.mktemp("check")
    return noise_check.run_check(ProbeBackend(h100_probe()), _gpu_request(folder), folder, lambda line: None)


def _run(tmp_path, name, **fields):
    """A copy of the cpu-run fixture named ``name`` whose run.json has ``fields`` added."""
    run = Path(shutil.copytree(FIXTURES / "cpu-run", tmp_path / name))
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, **fields}))
    return run


def _notes(tmp_path, runs, formats=("md",)):
    build_report(runs, tmp_path / "out", list(formats))
    text = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    return [line[len("> **Note:** "):] for line in text.splitlines() if line.startswith("> **Note:** ")]


def test_the_report_cites_each_run_folders_noise_check(tmp_path, h100_kept):
    launch, gpu = h100_kept["launch_bound_resolvable_pct"], h100_kept["gpu_bound_resolvable_pct"]
    assert launch > host_noise.UNDECIDED_PCT > gpu   # the H100's host: a warning
    runs = [_run(tmp_path, "a-h100", gpus=True, noise_check=h100_kept),
            _run(tmp_path, "b-skipped", gpus=True, noise_check={"status": "skipped", "why": "--no-noise-check"}),
            _run(tmp_path, "c-ray", gpus=True, noise_check={"status": "not measured", "why": "--executor ray"}),
            _run(tmp_path, "d-cpu", gpus=False)]
    notes = [note for note in _notes(tmp_path, runs, ("md", "html")) if "oise check" in note]
    assert notes == [
        f"Noise check of run a-h100, before its first cell on cuda (NVIDIA H100 80GB HBM3): a comparison of 3 "
        f"processes a side resolves about {launch:.1f}% there for launch-bound cells (eager and default at small "
        f"batches) and about {gpu:.1f}% for GPU-bound cells (CUDA graphs, big batches) (from the wander between "
        "blocks of one process: separate processes usually differ more).",
        f"Warning from run a-h100's noise check: launch-bound verdicts will mostly come out undecided on that host "
        f"(they resolve {launch:.0f}%, more than {host_noise.UNDECIDED_PCT:.0f}%): {host_noise.HELPS}.",
        "Noise check of run b-skipped: skipped (--no-noise-check).",
        "Noise check of run c-ray: not measured (--executor ray).",
    ]   # d-cpu: a CPU run checks nothing, and says nothing
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<strong>Note:</strong> Noise check of run b-skipped: skipped (--no-noise-check)." in html
    assert "Warning from run a-h100&#39;s noise check" in html or "Warning from run a-h100's noise check" in html


def test_a_gpu_run_without_a_check_is_unknown_and_a_resume_cites_the_invocation_that_checked(tmp_path, h100_kept):
    assert host_notes.check_lines("old", host_notes.read_noise_check({"gpus": True})) == [
        "Noise check of run old: unknown (run.json has none: the run predates the check)."]
    assert host_notes.read_noise_check({"gpus": False}) is None and host_notes.read_noise_check({}) is None
    resumed = {"gpus": True, "history": [{"gpus": True, "noise_check": {"status": "skipped"}},
                                         {"gpus": True, "noise_check": h100_kept}]}
    assert host_notes.read_noise_check(resumed).status == "measured"   # the latest invocation that checked
    assert host_notes.read_noise_check({**resumed, "noise_check": {"status": "skipped"}}).status == "skipped"


UNREADABLE = "unknown (run.json's noise_check is not one the report can read)"
NO_PROCESSES = "unknown (run.json's noise_check does not say how many processes its figures are for)"


@pytest.mark.parametrize("value, said", [
    ("measured", UNREADABLE), ([1, 2], UNREADABLE), (None, UNREADABLE), ({}, UNREADABLE),
    ({"status": "done"}, UNREADABLE), ({"status": ["measured"]}, UNREADABLE),
    ({"status": "measured"}, NO_PROCESSES), ({"status": "measured", "processes": True}, NO_PROCESSES),
    ({"status": "measured", "processes": "3"}, NO_PROCESSES), ({"status": "measured", "processes": 1}, NO_PROCESSES),
])
def test_a_malformed_noise_check_is_unknown(value, said):
    assert host_notes.check_lines("r", host_notes.read_noise_check({"noise_check": value})) == \
        [f"Noise check of run r: {said}."]


@pytest.mark.parametrize("figure", ["40", True, -3.0, math.nan, math.inf, None, {"pct": 40}])
def test_a_measured_check_with_an_unreadable_figure_says_unknown_and_does_not_warn(figure):
    check = host_notes.read_noise_check({"noise_check": {
        "status": "measured", "processes": 3, "launch_bound_resolvable_pct": figure, "gpu_bound_resolvable_pct": figure,
        "warns": True, "device": ["cuda"], "gpu_name": 7, "gpu_bound_why": None}})
    assert check.launch_pct is None and check.gpu_pct is None and not check.warns   # never a guess
    [line] = host_notes.check_lines("r", check)
    assert line.startswith("Noise check of run r, before its first cell: a comparison of 3 processes a side "
                           "resolves an unknown change there for launch-bound cells")
    assert "and an unknown change for GPU-bound cells" in line


def test_a_long_or_odd_reason_is_shown_in_one_short_line():
    why = "the probe\n failed: " + "x" * 500
    check = host_notes.read_noise_check({"noise_check": {"status": "not measured", "why": why}})
    [line] = host_notes.check_lines("r", check)
    assert "\n" not in line and len(check.why) == host_notes.TEXT_LIMIT and check.why.endswith("...")
    assert host_notes.check_lines("r", host_notes.read_noise_check({"noise_check": {"status": "skipped", "why": 3}})) \
        == ["Noise check of run r: skipped."]


def test_a_malformed_noise_check_does_not_stop_the_report(tmp_path):
    runs = [_run(tmp_path, "bad", gpus=True, noise_check=[1, 2]),
            _run(tmp_path, "old", gpus=True, history=[{"gpus": True}]),
            _run(tmp_path, "odd", noise_check={"status": "measured", "processes": 3,
                                               "launch_bound_resolvable_pct": "a lot"})]
    notes = [note for note in _notes(tmp_path, runs, ("md", "html")) if "oise check" in note]
    assert notes[0] == f"Noise check of run bad: {UNREADABLE}."
    assert notes[1] == "Noise check of run old: unknown (run.json has none: the run predates the check)."
    assert notes[2].startswith("Noise check of run odd, before its first cell: a comparison of 3 processes a side "
                               "resolves an unknown change there")
