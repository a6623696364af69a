"""Resume: which cells of a run still need running, per image.

Records land in ``results/<run>/<image>/<cell_id>.json``; ``runner.schema.needs_run`` is the one
rule that says whether a cell needs running again (no record, an unreadable one, ``--force``, or
a failed one with ``--retry-failed``).
"""
import re
from dataclasses import dataclass
from pathlib import Path

from matrixbench.errors import MatrixError
from matrixbench.matrix import cells_by_image
from runner.schema import RecordError, needs_run, read_record, record_path

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


@dataclass(frozen=True)
class ImagePlan:
    """One image's share of a run: all its cells, and those still to run."""

    image_name: str
    out_dir: Path
    cells: list
    pending: list
    recorded_failures: int = 0   # cells skipped because recorded, whose record is a failure
    unreadable: tuple = ()       # (record path, why) of pending cells whose record is corrupt

    @property
    def done(self):
        return len(self.cells) - len(self.pending)


def run_dir(results_root, run_name):
    """``results/<run>``; the run name must be usable as a folder name."""
    if not re.match(RUN_NAME_PATTERN, run_name):
        raise MatrixError(
            f"--run {run_name!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    return Path(results_root) / run_name


def plan_run(matrix, run_path, *, force=False, retry_failed=False):
    """One ImagePlan per image of ``matrix``, in the matrix's image order."""
    return [
        _plan_image(name, cells, Path(run_path) / name, force, retry_failed)
        for name, cells in cells_by_image(matrix).items()
    ]


def _plan_image(name, cells, out_dir, force, retry_failed):
    pending = [cell for cell in cells if needs_run(out_dir, cell, force, retry_failed)]
    failures = sum(_recorded_status(out_dir, cell) != "ok" for cell in cells if cell not in pending)
    return ImagePlan(image_name=name, out_dir=out_dir, cells=cells, pending=pending,
                     recorded_failures=failures, unreadable=tuple(_unreadable(out_dir, pending)))


def _unreadable(out_dir, cells):
    for cell in cells:
        path = record_path(out_dir, cell)
        if path.exists():
            try:
                read_record(path)
            except RecordError as exc:
                yield path, str(exc)


def unreadable_lines(plan):
    """What a rerun says of each corrupt record it replaces."""
    return [f"{path}: unreadable record, its cell reruns and replaces it ({why})" for path, why in plan.unreadable]


def _recorded_status(out_dir, cell):
    try:
        return read_record(record_path(out_dir, cell))["status"]
    except RecordError:
        return None


def recorded_failures_line(count):
    """What a rerun says of the failures it skips."""
    return f"{count} recorded cells are failures; --retry-failed reruns them"
