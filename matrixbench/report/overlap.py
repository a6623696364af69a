"""Timed loops that overlapped another slot's compile on the same host, from the records' windows.

On a multi-GPU host each slot runs its own cells; one slot compiling (Inductor's workers on every core)
steals CPU from another slot's launch-bound timed loop and inflates its latency. Each record carries
the wall-clock windows of its compile and its timed loop (``timing.windows``); a record of a slot run
whose timed loop overlapped a compile of another slot of the same run gets the flag
``compile_overlap``. ``--exclusive-timing`` is the barrier that rules it out (slots compile together
and time one at a time). Calibration records overlap on purpose and are left alone.
"""
FLAG = "compile_overlap"


def flag_compile_overlaps(rows):
    """Add FLAG to ``timing.flags`` of every row (flattened record) whose timed loop overlapped another
    slot's compile in the same run; returns the rows."""
    compiles = [(row.get("run_id", row["run"]), row.get("placement.slot"), window) for row in rows if _slotted(row)
                for window in [_window(row, "compile")] if window]
    for row in rows:
        timed = _window(row, "timed")
        if not _slotted(row) or timed is None:
            continue
        if any(run == row.get("run_id", row["run"]) and slot != row.get("placement.slot") and _overlap(timed, window)
               for run, slot, window in compiles):
            row["timing.flags"] = list(row.get("timing.flags") or []) + [FLAG]
    return rows


def _slotted(row):
    return row.get("placement.slot") is not None and not row.get("calibration.phase")


def _window(row, name):
    value = row.get(f"timing.windows.{name}")
    return tuple(value) if value is not None and len(value) == 2 else None


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]
