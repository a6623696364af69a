"""The parent's loop: skip recorded repeats, run each other repeat of a cell in a fresh process
(in the cells_file's order), log progress.

Stdlib only. A cell's process writes its own record; when it cannot (killed at the time
limit, crashed), this loop writes the record instead, with the same shape and the
environment the probe reported. A failed cell never stops the others.

In turns (the cells file's ``turns``, runner.turns) each repeat's process meets its partner's in the repeat's
own baton folder and may wait up to timeout_s for it: its time limit is TURNS_LIMIT x timeout_s. A repeat failed
here, without a process, releases its baton; a partner that never came ends the turns for the rest of the run.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from runner import compile_cache, records, turns
from runner.cells_file import CellsFile, Turns
from runner.core import Cell, Record, Repeat, Status
from runner.faults import fault_for
from runner.files import Room
from runner.isolation import Launcher
from runner.machine import fallback_environment
from runner.schema import SCRATCH_DIRNAME, RecordError, load_record, needs_run, record_path, write_record

JSON = Dict[str, Any]
Log = Callable[[str], None]

# The probe's own limit: the runner's one-time start (the forkserver's imports, the probe's
# environment queries) never counts against a cell's timeout_s, which covers the cell only.
PROBE_TIMEOUT_S = 600
# A cell's process in turns waits up to timeout_s for its partner (its own part, or meeting it) besides its own.
TURNS_LIMIT = 2


@dataclass
class Context:
    """What every record of a run shares, as the probe process reported it."""

    device: str
    environment: JSON
    precision: JSON
    error: Optional[str] = None   # why cells cannot run at all (e.g. device "cuda" without a GPU)


class Pairing:
    """This runner's turns with its partner (runner.turns): each repeat's baton folder, until a partner that
    never came ends them for the rest of the run."""

    def __init__(self, turns: Optional[Turns], log: Log):
        self.turns, self.log = turns, log

    def for_repeat(self, repeat: Repeat) -> Optional[Turns]:
        return self.turns.for_repeat(repeat.id) if self.turns else None

    def stop(self, repeat: Repeat) -> None:
        if self.turns is not None:
            self.log(f"{repeat.id}: the partner {self.turns.partner!r} never met this runner's turns: the "
                     "remaining cells run alone, without turns")
        self.turns = None


def run_cells_file(cells_file: CellsFile, out_dir: Union[str, Path], force: bool = False, retry_failed: bool = False,
             log: Optional[Log] = None, launcher: Optional[Launcher] = None,
             compile_cache_dir: Optional[Union[str, Path]] = None) -> List[Tuple[str, str]]:
    """Run the cells_file's repeats that need running, in order; return [(record stem, status)] for
    those run (the stem is the cell id for repeat 0, ``<cell_id>.r<k>`` after).

    compile_cache_dir: one Inductor/Triton cache shared by the cells (warm compiles, for
    tests). See compile_cache_dirs for the default.
    """
    log = log or _stderr
    pending = [repeat for repeat in cells_file.repeats
               if needs_run(out_dir, repeat.cell, force, retry_failed, repeat=repeat.index)]
    log(f"{len(cells_file.cells)} cells, {len(cells_file.repeats)} processes: {len(cells_file.repeats) - len(pending)} "
        f"already recorded, {len(pending)} to run -> {out_dir}")
    if not pending:
        return []
    launcher = launcher or Launcher()
    launcher.start()
    context = probe(launcher, cells_file)
    log(f"device {context.device}, torch {context.environment['torch']}, "
        f"transformers {context.environment['transformers']}")
    results = []
    pairing = Pairing(cells_file.turns, log)
    if cells_file.turns:
        log(f"in turns with {cells_file.turns.partner!r} as {cells_file.turns.role} (pair {cells_file.turns.pair_id})")
    try:
        for index, repeat in enumerate(pending, 1):
            prefix = f"[{index}/{len(pending)}] {repeat.id}"
            log(f"{prefix}: running")
            run = functools.partial(run_one, launcher, repeat.cell, cells_file, context, out_dir, compile_cache_dir,
                                    repeat.index)
            record = run(pairing=pairing)
            log(f"{prefix}: {summary_line(record)}")
            record = _rerun_if_repaired(record, prefix, run, log, in_turns=pairing.for_repeat(repeat) is not None)
            results.append((repeat.id, record.status.value))
    finally:
        _remove_if_empty(os.path.join(out_dir, SCRATCH_DIRNAME))
    return results


def _rerun_if_repaired(record: Record, prefix: str, run_again: Callable[..., Record], log: Log,
                       in_turns: bool = False) -> Record:
    """A repeat whose process repaired the compile cache (runner.compile_cache), run once more at once in a fresh
    process, whose record is the one kept and says so; a second failure stays as recorded. A repeat in turns runs
    again alone (its partner went on without it, its record saying the baton was lost): the record has no turns."""
    if not compile_cache.was_repaired(record):
        return record
    alone = " alone (its partner in turns went on without it)" if in_turns else ""
    log(f"{prefix}: the compile cache held unloadable compiled modules, now removed: running the repeat once more "
        f"in a fresh process{alone}")
    record = run_again(pairing=None, repaired=record.error.message if record.error else "")
    log(f"{prefix}: {summary_line(record)} (rerun after a first attempt repaired the compile cache)")
    return record


def _remove_if_empty(folder: str) -> None:
    try:
        os.rmdir(folder)
    except OSError:
        pass


def probe(launcher: Launcher, cells_file: CellsFile) -> Context:
    settings = cells_file.settings
    outcome = launcher.run("probe", (settings["device"], cells_file.image_name, cells_file.image_id),
                           PROBE_TIMEOUT_S)
    reply = outcome.reply or {}
    failure = outcome.failure()
    error = reply.get("error") or (failure and f"the probe process failed: {failure[1]}")
    requested = settings["device"]
    return Context(
        device=reply.get("device") or ("cpu" if requested == "auto" else requested),
        environment=reply.get("environment") or fallback_environment(cells_file.image_name, cells_file.image_id),
        precision=reply.get("precision") or records.NO_PRECISION,
        error=error or None,
    )


def run_one(launcher: Launcher, cell: Cell, cells_file: CellsFile, context: Context, out_dir: Union[str, Path],
            compile_cache_dir: Optional[Union[str, Path]] = None, repeat: int = 0,
            pairing: Optional[Pairing] = None, repaired: Optional[str] = None) -> Record:
    """Run one repeat of a cell in a fresh process; return its record (written by the child or here).
    ``repaired``: the message of a first attempt that repaired the compile cache, for the record to say so."""
    scratch_root = os.path.join(out_dir, SCRATCH_DIRNAME)
    os.makedirs(scratch_root, exist_ok=True)
    timeout_s = cells_file.settings["timeout_s"]
    pairing = pairing or Pairing(None, _stderr)
    job_turns = pairing.for_repeat(Repeat(cell, repeat))
    with tempfile.TemporaryDirectory(prefix="matrixbench-cell-", dir=scratch_root) as scratch_dir:
        job = make_job(cell, cells_file, context, out_dir, scratch_dir, compile_cache_dir, repeat, job_turns)
        job["compile_cache_repaired"] = repaired
        if context.error:
            if job_turns and not turns.release(job_turns, timeout_s):
                pairing.stop(Repeat(cell, repeat))
            return _write_failure(job, Status.ERROR, "RunnerSetupError", context.error)
        with Room.take(out_dir) as room:   # a full disk stops the runner here, before the cell is measured
            outcome = launcher.run("run_job", ({**job, "room": str(room.path)},),
                                   timeout_s * (TURNS_LIMIT if job_turns else 1))
    if job_turns and outcome.reply and outcome.reply.get("no_partner"):
        pairing.stop(Repeat(cell, repeat))
    if outcome.reply and outcome.reply.get("unwritten"):
        raise OSError(*outcome.reply["unwritten"])   # measured, refused by the disk: its numbers are on stderr
    if outcome.reply and outcome.reply.get("record_written"):
        return _read_own_record(out_dir, Repeat(cell, repeat), job)
    status, message = outcome.failure() or (Status.CRASHED, "the cell's process wrote no record")
    return _write_failure(job, status, "CellProcess" + status.value.capitalize(), message)


def make_job(cell: Cell, cells_file: CellsFile, context: Context, out_dir: Union[str, Path], scratch_dir: str,
             compile_cache_dir: Optional[Union[str, Path]] = None, repeat: int = 0,
             job_turns: Optional[Turns] = None) -> JSON:
    """Everything a cell's process needs (picklable); ``fault`` only where a test asked for one; ``turns``: the
    repeat's baton (its own folder), or None."""
    return {
        "cell": cell, "repeat": repeat, "settings": cells_file.settings, "device": context.device,
        "fault": fault_for(cell.id), "turns": job_turns,
        "environment": context.environment, "precision": context.precision,
        "out_dir": str(out_dir), "scratch_dir": scratch_dir,
        "compile_cache_dirs": compile_cache_dirs(compile_cache_dir, scratch_dir,
                                                 gpu_key=gpu_cache_key(context.environment)),
        "started_at": records.utc_now(), "start_clock": records.clock(),
    }


def compile_cache_dirs(shared_dir: Optional[Union[str, Path]], scratch_dir: str,
                       environ: Optional[Mapping[str, str]] = None,
                       gpu_key: Optional[str] = None) -> Dict[str, Optional[str]]:
    """Inductor's and Triton's cache folders for one cell.

    - shared_dir given: its inductor/ and triton/ subfolders;
    - else TORCHINDUCTOR_CACHE_DIR set in this (torch-free) process's environment: the caller's
      shared cache (the host sets it per image, unless asked for cold runs), TRITON_CACHE_DIR too;
    - else the cell's scratch folder: the cell compiles cold, whatever ran before it.
    A shared cache is keyed by the GPU (``gpu_key``, see ``gpu_cache_key``): Triton 2.0's cache key has no
    architecture, and 2.0.1/2.1.0 would reuse another GPU's autotuned configs.
    """
    environ = os.environ if environ is None else environ
    if shared_dir is None and environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return {variable: _keyed(environ.get(variable), gpu_key)
                for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    if shared_dir is None:
        return {"TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch_dir, "inductor"),
                "TRITON_CACHE_DIR": os.path.join(scratch_dir, "triton")}
    return {"TORCHINDUCTOR_CACHE_DIR": _keyed(os.path.join(str(shared_dir), "inductor"), gpu_key),
            "TRITON_CACHE_DIR": _keyed(os.path.join(str(shared_dir), "triton"), gpu_key)}


def gpu_cache_key(environment: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The GPU's name and compute capability as a folder name ("NVIDIA-H100-80GB-HBM3-sm90"); None on the CPU."""
    if not environment or not environment.get("gpu_name"):
        return None
    name = re.sub(r"[^A-Za-z0-9]+", "-", str(environment["gpu_name"])).strip("-")
    capability = str(environment.get("gpu_capability") or "").replace(".", "")
    return f"{name}-sm{capability}" if capability else name


def _keyed(folder: Optional[str], key: Optional[str]) -> Optional[str]:
    return os.path.join(folder, key) if folder and key else folder


def summary_line(record: Record) -> str:
    duration = record.duration_s or 0.0
    if record.status is not Status.OK:
        message = (record.error.message if record.error else "").strip().splitlines() or [""]
        return f"{record.status.value}: {message[0][:160]} ({duration:.1f} s)"
    timing, accuracy = record.timing or {}, record.accuracy or {}
    noisy = " NOISY" if timing["noisy"] else ""
    return (f"ok  mean {timing['mean_ms']:.3f} ms (cv {timing['cv']:.2f}{noisy})  "
            f"first call {timing['first_call_s']:.2f} s  accuracy {accuracy['status']}  "
            f"({duration:.1f} s)")


def _write_failure(job: JSON, status: Status, error_type: str, message: str) -> Record:
    record = records.fail(records.new_record(job), status, error_type, message)
    compile_cache.note_repair(record, job.get("compile_cache_repaired"))
    records.finish(record, job)
    write_record(job["out_dir"], record)
    return record


def _read_own_record(out_dir: Union[str, Path], repeat: Repeat, job: JSON) -> Record:
    try:
        return load_record(record_path(out_dir, repeat.cell, repeat.index))
    except RecordError as exc:
        return _write_failure(job, Status.CRASHED, "CellProcessCrashed", str(exc))


def _stderr(line: str) -> None:
    print(f"matrixbench runner: {line}", file=sys.stderr, flush=True)
