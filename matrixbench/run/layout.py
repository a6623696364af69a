"""The results folder's layout, in one place: where a run, an image, a slot, a calibration phase,
the run's manifest, lock, log, cells file and timing board live.

    results/<run>/                         run_dir (the run name a folder name)
        run.json  run.lock  .timing-board/   MANIFEST_FILENAME, LOCK_FILENAME, TIMING_BOARD_DIRNAME
        [<gpu_type>/]<image>/              image_dir (a GPU-type axis adds its folder)
            <cell_id>[.r<k>].json          the records (runner.schema.record_path: the runner's contract)
            cells.json  runner.log         CELLS_FILENAME, LOG_FILENAME (in slot-<i>/ with slots)
            .scratch/                      runner.schema.SCRATCH_DIRNAME
            slot-<i>/                      slot_dir
            calibration/<phase>/slot-<i>/  calibration_dir
"""
import re
from pathlib import Path
from typing import Optional, Union

from matrixbench.errors import MatrixError
from runner.schema import SCRATCH_DIRNAME

PathLike = Union[str, Path]

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
MAX_RUN_NAME = 100   # a folder name (at most 255 bytes), with room for what goes under it
MANIFEST_FILENAME = "run.json"
LOCK_FILENAME = "run.lock"
TIMING_BOARD_DIRNAME = ".timing-board"
CELLS_FILENAME = "cells.json"
LOG_FILENAME = "runner.log"        # every environment appends the runner's output to it
SELFTEST_FILENAME = "selftest.json"   # `matrixbench selftest`'s result, in the run folder (the report shows it)
CALIBRATION_DIRNAME = "calibration"
# A calibration record's run folder is this many folders above its own: <run>/<image>/calibration/<phase>/slot-<i>
CALIBRATION_RUN_DEPTH = 4


def run_dir(results_root: PathLike, run_name: str) -> Path:
    """``results/<run>``; the run name must be usable as a folder name."""
    if len(run_name) > MAX_RUN_NAME:
        raise MatrixError(f"--run: a name of {len(run_name)} characters; use at most {MAX_RUN_NAME}")
    if not re.match(RUN_NAME_PATTERN, run_name):
        raise MatrixError(
            f"--run {run_name!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    return Path(results_root) / run_name


def gpu_folder(run_path: PathLike, gpu_type: Optional[str]) -> Path:
    """Where a GPU type's image folders go: ``results/<run>/<gpu_type>``, or the run folder itself."""
    return Path(run_path) if gpu_type is None else Path(run_path) / gpu_type


def image_dir(run_path: PathLike, image_name: str, gpu_type: Optional[str] = None) -> Path:
    """One image's records: ``results/<run>/[<gpu_type>/]<image>``."""
    return gpu_folder(run_path, gpu_type) / image_name


def slot_dir(folder: PathLike, slot_index: int) -> Path:
    """A slot's own folder under ``folder`` (its runner input and log, its compile cache)."""
    return Path(folder) / f"slot-{slot_index}"


def calibration_dir(image_folder: PathLike, phase: str, slot_index: int) -> Path:
    """Where one calibration phase's records of one slot land."""
    return slot_dir(Path(image_folder) / CALIBRATION_DIRNAME / phase, slot_index)


def scratch_dirs(run_path: PathLike) -> list[Path]:
    """The runners' scratch folders under a run folder (those a killed run leaves behind)."""
    return sorted(Path(run_path).glob(f"*/{SCRATCH_DIRNAME}"))


def timing_board_dir(run_path: PathLike) -> Path:
    return Path(run_path) / TIMING_BOARD_DIRNAME


def manifest_path(run_path: PathLike) -> Path:
    return Path(run_path) / MANIFEST_FILENAME


def lock_path(run_path: PathLike) -> Path:
    return Path(run_path) / LOCK_FILENAME
