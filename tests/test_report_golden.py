"""The Markdown report of the recorded fixture runs, compared with golden files exactly.

Regenerate after an intended change: UPDATE_GOLDEN=1 pytest tests/test_report_golden.py
"""
import os
from pathlib import Path

import pytest

from matrixbench.report import build_report

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("runs, golden", [
    (["gpu-run"], "gpu-run.md"),
    (["cpu-run"], "cpu-run.md"),
    (["gpu-run", "cpu-run"], "gpu-and-cpu-runs.md"),
])
def test_markdown_matches_golden(tmp_path, runs, golden):
    build_report([FIXTURES / run for run in runs], tmp_path, ["md"])
    rendered = (tmp_path / "report.md").read_text(encoding="utf-8")
    if os.environ.get("UPDATE_GOLDEN"):
        (GOLDEN / golden).write_text(rendered, encoding="utf-8")
    assert rendered == (GOLDEN / golden).read_text(encoding="utf-8")
