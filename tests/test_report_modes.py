"""report/modes.py: the one statement of which mode is whose baseline; no report module tests mode strings."""
from pathlib import Path

import pytest

import matrixbench.report
from matrixbench.report.modes import BASELINE_OF, compiled, mode_of
from runner import axes
from runner.core import Cell, Mode


@pytest.mark.parametrize("mode", list(Mode))
def test_each_mode_is_compared_with_the_baseline_its_kind_names(mode):
    for fullgraph in (False, True):
        label = mode.value + (" fullgraph" if fullgraph else "")
        assert mode_of(label) is mode and compiled(label) == mode.compiled
        cell = Cell("vit", "image-classification", "random", "full", 1, mode.value, fullgraph, "float32")
        speedup, change = axes.speedup_baseline(cell), axes.mode_change_baseline(cell)
        assert (speedup is not None) == mode.compiled and (change is not None) == (mode.compiled and mode is not
                                                                                   Mode.DEFAULT)
        assert speedup is None or (speedup.mode, speedup.fullgraph) == (BASELINE_OF["speedup"], False)
        # a mode change keeps fullgraph: "max-autotune fullgraph" against "default fullgraph"
        assert change is None or (change.mode, change.fullgraph) == (BASELINE_OF["mode_change"], fullgraph)
    assert not compiled(BASELINE_OF["speedup"])


def test_no_report_module_but_the_published_data_names_a_mode_by_its_string():
    folder = Path(matrixbench.report.__file__).parent
    named = {path.name for path in folder.glob("*.py") for mode in Mode if f'"{mode.value}"' in path.read_text()}
    assert named <= {"published.py"}, named   # the seed document's own tables, kept as data
