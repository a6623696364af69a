"""report/modes.py: the one statement of which mode is whose baseline; no report module tests mode strings."""
from pathlib import Path

import pytest

import matrixbench.report
from matrixbench.report.modes import BASELINE_OF, compiled, has_mode_change, mode_of
from runner.core import Mode


@pytest.mark.parametrize("mode", list(Mode))
def test_each_mode_is_compared_with_the_baseline_its_kind_names(mode):
    for label in (mode.value, f"{mode.value} fullgraph"):
        assert mode_of(label) is mode and compiled(label) == mode.compiled
        assert has_mode_change(label) == (mode.compiled and label != BASELINE_OF["mode_change"])
    assert not compiled(BASELINE_OF["speedup"]) and not has_mode_change(BASELINE_OF["mode_change"])
    assert has_mode_change("default fullgraph")   # the default mode with fullgraph is judged against default


def test_no_report_module_but_the_published_data_names_a_mode_by_its_string():
    folder = Path(matrixbench.report.__file__).parent
    named = {path.name for path in folder.glob("*.py") for mode in Mode if f'"{mode.value}"' in path.read_text()}
    assert named <= {"published.py"}, named   # the seed document's own tables, kept as data
