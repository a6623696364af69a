"""The Markdown report of the fixture runs, compared with golden files exactly.

cpu-docker-run is a real recorded run (two Docker images, torch 2.0.1 and 2.13.0, tiny models on
the CPU); gpu-run and cpu-run are synthetic (tests/fixtures/make_fixtures.py) for the GPU paths.

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
    (["cpu-docker-run"], "cpu-docker-run.md"),
])
def test_markdown_matches_golden(tmp_path, runs, golden, charts_drawn_not_rendered):
    """The Markdown only: its chart links are the same whether the PNGs are rendered (tests/unrendered_charts.py)."""
    build_report([FIXTURES / run for run in runs], tmp_path, ["md"])
    rendered = (tmp_path / "report.md").read_text(encoding="utf-8")
    if os.environ.get("UPDATE_GOLDEN"):
        (GOLDEN / golden).write_text(rendered, encoding="utf-8")
    assert rendered == (GOLDEN / golden).read_text(encoding="utf-8")
