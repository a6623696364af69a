"""The one convention for speed-ups, changes and deviations (matrixbench.report.arithmetic)."""
import ast
from pathlib import Path

import pytest

from matrixbench.report import arithmetic

REPORT = Path(arithmetic.__file__).parent


def test_speedup_is_eager_over_compiled_and_percent_faster_derives_from_it():
    assert arithmetic.speedup(10.0, 4.0) == pytest.approx(2.5)
    assert arithmetic.percent_faster(10.0, 4.0) == pytest.approx(150.0)
    assert arithmetic.percent_faster(10.0, 12.5) == pytest.approx(-20.0)


def test_change_is_candidate_over_baseline_negative_is_faster():
    assert arithmetic.change_ratio(10.0, 9.0) == pytest.approx(0.9)
    assert arithmetic.change_pct(10.0, 9.0) == pytest.approx(-10.0)
    assert arithmetic.deviation_pct(published_ms=8.0, measured_ms=10.0) == pytest.approx(25.0)


def test_no_other_report_module_divides_latencies_itself():
    # Every "a / b" between two latency-like names lives in arithmetic.py.
    offenders = []
    for path in REPORT.glob("*.py"):
        if path.name == "arithmetic.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                text = ast.unparse(node)
                if "_ms" in text or "latency" in text:
                    offenders.append(f"{path.name}: {text}")
    assert offenders == []
