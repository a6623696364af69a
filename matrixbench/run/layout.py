"""The results folder's layout, in one place: where a run, an image, a slot, a calibration phase,
the run's manifest, lock, log, cells file and timing board live.

    results/<run>/                         run_dir (the run name a folder name)
        run.json  run.lock  .timing-board/   MANIFEST_FILENAME, LOCK_FILENAME, TIMING_BOARD_DIRNAME
        .turns/<pair_id>/                      turns_dir: one pair of runners in turns (matrixbench.executors.turns)
        noise_check.json  .noise-check/    NOISE_CHECK_FILENAME, NOISE_CHECK_DIRNAME (a GPU run's noise check)
        [<gpu_type>/]<image>/              image_dir (a GPU-type axis adds its folder)
            <cell_id>[.r<k>].json          the records (runner.schema.record_path: the runner's contract)
            cells.json  runner.log         CELLS_FILENAME, LOG_FILENAME (in slot-<i>/ with slots)
            .<container>.lease             lease_path: a docker runner's owner's lease (matrixbench.run.owner)
            .scratch/                      runner.schema.SCRATCH_DIRNAME
            .model-check/                  MODEL_CHECK_DIRNAME: the run's model check there (check.json, runner.log)
            slot-<i>/                      slot_dir
            calibration/<phase>/slot-<i>/  calibration_dir
"""
import hashlib
import os
import re
from pathlib import Path
from typing import Iterable, Optional, Union

from matrixbench.errors import MatrixError
from runner.schema import SCRATCH_DIRNAME

PathLike = Union[str, Path]

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
MAX_RUN_NAME = 100   # a folder name (at most 255 bytes), with room for what goes under it
# An image's, model's or GPU type's name: a folder of every run, or the start of its records' file names
# (``<model>-<size>_bs<n>_<mode>_..._<dtype>.r<k>.json`` and its ``.<name>.<pid>.<hex>.tmp``), with room for
# what is added to it: the A/A twin's "-aa" and run "aa-<image>" (at most MAX_RUN_NAME), the axes.
MAX_NAME = 96
MANIFEST_FILENAME = "run.json"
LOCK_FILENAME = "run.lock"
TIMING_BOARD_DIRNAME = ".timing-board"
TURNS_DIRNAME = ".turns"   # the batons of runners in turns, one folder per pair launch (removed after it)
CELLS_FILENAME = "cells.json"
LOG_FILENAME = "runner.log"        # every environment appends the runner's output to it
SELFTEST_FILENAME = "selftest.json"   # `matrixbench selftest`'s result, in the run folder (the report shows it)
NOISE_CHECK_FILENAME = "noise_check.json"   # the run's host-noise check (matrixbench.host_noise), in the run folder
# The .json files of a results folder that are no record: every other *.json is one cell's process.
NOT_RECORDS = (CELLS_FILENAME, MANIFEST_FILENAME, SELFTEST_FILENAME, NOISE_CHECK_FILENAME)
NOISE_CHECK_DIRNAME = ".noise-check"        # its runner's work folder (cells.json, runner.log, the probe's output)
MODEL_CHECK_DIRNAME = ".model-check"   # the run's model check (matrixbench.build.check), in an image folder
CALIBRATION_DIRNAME = "calibration"
# A calibration record's run folder is this many folders above its own: <run>/<image>/calibration/<phase>/slot-<i>
CALIBRATION_RUN_DEPTH = 4


def run_dir(results_root: PathLike, run_name: str) -> Path:
    """``results/<run>``; the run name must be usable as a folder name. An over-long one is refused with a
    shorter name that no run folder under ``results_root`` has yet (a name cut short could be another run's,
    which a rerun would resume)."""
    if len(run_name) > MAX_RUN_NAME:
        suggested = shorter_name(run_name, MAX_RUN_NAME, taken=folder_entries(results_root))
        raise MatrixError(f"--run: a name of {len(run_name)} characters; use at most {MAX_RUN_NAME}, e.g. "
                          f"--run {suggested} (no run in {results_root} has it yet)")
    if not re.match(RUN_NAME_PATTERN, run_name):
        raise MatrixError(
            f"--run {run_name!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    return Path(results_root) / run_name


def shorter_name(name: str, limit: int, taken: Iterable[str] = ()) -> str:
    """A name of at most ``limit`` characters for the over-long ``name``: its start and a hash of all of it,
    so two long names that start alike get two names; never one of ``taken`` (the other names, the folders
    already there), case aside (a case-insensitive file system takes "A" for "a"). The same name gives the
    same suggestion while nothing takes it: a run that renamed it finds its own folder again."""
    taken_folded = {other.casefold() for other in taken}
    digest = hashlib.sha256(name.encode()).hexdigest()
    for length in range(8, len(digest) + 1, 4):
        for counter in ("", *(f"-{n}" for n in range(2, 100))):
            tail = f"-{digest[:length]}{counter}"
            candidate = name[:max(limit - len(tail), 1)].rstrip("._-") + tail
            if candidate.casefold() not in taken_folded and candidate != name:
                return candidate
    raise ValueError(f"no free name for {name!r} among {len(taken_folded)} taken")


def folder_entries(folder: PathLike) -> list[str]:
    """The names in ``folder`` ([] where it cannot be listed: not there yet, not a folder)."""
    try:
        return os.listdir(folder)
    except OSError:
        return []


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


def turns_dir(run_path: PathLike, pair_id: Optional[str] = None) -> Path:
    """Where a pair of runners in turns keeps its batons: ``<run>/.turns/<pair_id>`` (no pair_id: all of them)."""
    folder = Path(run_path) / TURNS_DIRNAME
    return folder / pair_id if pair_id is not None else folder


def lease_path(work_dir: PathLike, container_name: str) -> Path:
    """The lease file the host process holds while its container ``container_name`` may run (owner.holding_lease),
    beside the container's cells file and log."""
    return Path(work_dir) / f".{container_name}{LEASE_SUFFIX}"


LEASE_SUFFIX = ".lease"
LEASE_PATTERN = f".*{LEASE_SUFFIX}"   # every lease file's name (lease_path), for owner.sweep_leases


def timing_board_dir(run_path: PathLike) -> Path:
    return Path(run_path) / TIMING_BOARD_DIRNAME


def manifest_path(run_path: PathLike) -> Path:
    return Path(run_path) / MANIFEST_FILENAME


def lock_path(run_path: PathLike) -> Path:
    return Path(run_path) / LOCK_FILENAME
