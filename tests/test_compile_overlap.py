"""Timed loops that overlapped another slot's compile (matrixbench.report.overlap), from the windows
the runner records (runner.cell), on synthetic rows of known overlap."""
from matrixbench.report.overlap import FLAG, flag_compile_overlaps
from matrixbench.report.tables import FLAGS


def row(slot, compile_window, timed, run="r", calibration=None, flags=()):
    return {"run": run, "placement.slot": slot, "calibration.phase": calibration, "timing.flags": list(flags),
            "timing.windows.compile": compile_window, "timing.windows.timed": timed}


def test_a_timed_loop_during_another_slots_compile_is_flagged():
    rows = flag_compile_overlaps([
        row(0, [100.0, 160.0], [170.0, 180.0]),     # slot 0 times while slot 1 compiles (150-200)
        row(1, [150.0, 200.0], [210.0, 220.0]),     # slot 1 times after every compile ended
        row(2, None, [300.0, 310.0]),               # eager: no compile of its own, nobody compiling
    ])
    assert rows[0]["timing.flags"] == [FLAG] and rows[1]["timing.flags"] == [] and rows[2]["timing.flags"] == []


def test_own_compile_other_runs_unslotted_and_calibration_rows_are_not_flagged():
    rows = flag_compile_overlaps([
        row(0, [100.0, 160.0], [170.0, 180.0], flags=["throttled"]),
        row(0, [165.0, 175.0], [190.0, 195.0]),                       # its own slot's next cell
        row(1, [150.0, 200.0], [300.0, 310.0], run="other"),          # another run
        row(None, [150.0, 200.0], [170.0, 180.0]),                    # no slots: one runner at a time
        row(3, [150.0, 200.0], [170.0, 180.0], calibration="loaded"),  # overlaps on purpose
    ])
    assert [r["timing.flags"] for r in rows] == [["throttled"], [], [], [], []]


def test_the_flag_says_what_to_do():
    assert "--exclusive-timing" in FLAGS[FLAG][1]
