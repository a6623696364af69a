"""Which mode is whose baseline in the report, stated once with ``runner.core.Mode``.

A speed-up is a compiled mode's cell against the same cell in eager (``SPEEDUP_BASELINE``); a mode change
is another compiled mode against torch.compile's default mode (``MODE_CHANGE_BASELINE``) with the same
fullgraph: which cell is whose baseline is runner.axes' decision, and which comparisons exist the one list's
(matrixbench.matrix.comparisons). The report's mode labels add " fullgraph" to the mode (``records``: ``mode_label``);
these functions take either.
"""
from runner.core import Mode

SPEEDUP_BASELINE = Mode.EAGER.value          # the baseline mode of a speed-up
MODE_CHANGE_BASELINE = Mode.DEFAULT.value    # the baseline mode of a mode change
BASELINE_OF = {"speedup": SPEEDUP_BASELINE, "mode_change": MODE_CHANGE_BASELINE}   # by comparison kind


def mode_of(label: str) -> Mode:
    """The Mode of a mode or a mode label ("default fullgraph")."""
    return Mode(label.partition(" ")[0])


def compiled(label: str) -> bool:
    """Run through torch.compile: a mode with a speed-up over SPEEDUP_BASELINE."""
    return mode_of(label).compiled
