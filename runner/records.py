"""Assembling a cell's Record (runner.core; schema in runner.schema), on either side of the fork.

Stdlib only: the parent writes the records of cells whose process timed out or crashed,
with the environment its probe reported, so every record has the same shape.
"""
from __future__ import annotations

import datetime
import json
import os
import time
import traceback as traceback_module
from typing import Any, Dict, Mapping, Optional

from runner.core import Cell, CellError, Record, Status
from runner.tolerance import default_tolerance

JSON = Dict[str, Any]

MIN_WARMUP = 3   # cudagraph trees: warm-up run, record, then replay
MAX_TRACEBACK_CHARS = 20000
MAX_MESSAGE_CHARS = 4000

# The host's slot for this runner (matrixbench.run.placement), JSON; absent: not placed in a slot.
PLACEMENT_ENV = "MATRIXBENCH_PLACEMENT"
# The calibration phase of this runner's cells (matrixbench.calibrate), JSON; absent: matrix cells.
CALIBRATION_ENV = "MATRIXBENCH_CALIBRATION"

# cuBLAS/cuDNN report a failed workspace allocation with their own status, not torch's OOM.
OOM_MARKERS = ("out of memory", "can't allocate memory", "cublas_status_alloc_failed",
               "cudnn_status_alloc_failed")
# A record's precision block when the cell never reached the point of setting it (a crash before it).
NO_PRECISION = {"float32_matmul_precision": None, "cuda_matmul_allow_tf32": None,
                "cudnn_allow_tf32": None}


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def clock() -> float:
    """CLOCK_MONOTONIC on Linux: one time base for the parent and the cell's process."""
    return time.monotonic()


def effective_warmup(requested: int) -> int:
    """The warm-up calls a cell really makes: at least MIN_WARMUP, whatever was asked."""
    return max(requested, MIN_WARMUP)


def record_settings(settings: Mapping[str, Any], cell: Cell, device: Optional[str] = None,
                    precision: Optional[Mapping[str, Any]] = None) -> JSON:
    """The settings as they applied to this cell: effective warm-up and (relative) tolerance."""
    tolerance = settings["accuracy_tolerance"]
    if tolerance is None:
        tolerance = default_tolerance(cell.dtype, device, precision)
    return {
        "iterations": settings["iterations"],
        "warmup": effective_warmup(settings["warmup"]),
        "timeout_s": settings["timeout_s"],
        "device_requested": settings["device"],
        "accuracy_tolerance": tolerance,
        "cv_threshold": settings["cv_threshold"],
    }


def new_record(job: Mapping[str, Any]) -> Record:
    """A record with every field present and nothing measured yet (status error)."""
    cell, device, precision = job["cell"], job["device"], job["precision"]
    return Record(cell=cell, device=device, settings=record_settings(job["settings"], cell, device, precision),
                  precision=precision, environment=job["environment"], started_at=job["started_at"],
                  repeat=job.get("repeat", 0),
                  placement=placement(), calibration=calibration())


def calibration(environ: Optional[Mapping[str, str]] = None) -> Optional[JSON]:
    """The interference calibration's phase the host ran these cells in (``MATRIXBENCH_CALIBRATION``),
    or None for the matrix's own cells."""
    text = (os.environ if environ is None else environ).get(CALIBRATION_ENV)
    return dict(json.loads(text)) if text else None


def placement(environ: Optional[Mapping[str, str]] = None) -> Optional[JSON]:
    """Where this process ran: the host's slot (``MATRIXBENCH_PLACEMENT``) and the cores it may
    really use (``os.sched_getaffinity(0)``, as seen here: inside a container too); None when the
    host placed it in no slot."""
    text = (os.environ if environ is None else environ).get(PLACEMENT_ENV)
    if not text:
        return None
    block: JSON = dict(json.loads(text))
    try:
        block["affinity"] = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        block["affinity"] = None
    return block


def finish(record: Record, job: Mapping[str, Any]) -> Record:
    record.duration_s = clock() - job["start_clock"]
    return record


def fail(record: Record, status: Status, error_type: str, message: str,
         traceback: Optional[str] = None) -> Record:
    record.status = status
    record.error = CellError(type=error_type, message=_clip(message, MAX_MESSAGE_CHARS),
                             traceback=traceback)
    return record


def fail_with_exception(record: Record, exc: BaseException) -> Record:
    status = Status.OOM if is_out_of_memory(exc) else Status.ERROR
    text = "".join(traceback_module.format_exception(type(exc), exc, exc.__traceback__))
    return fail(record, status, _qualified_name(type(exc)), str(exc) or repr(exc),
                _clip(text, MAX_TRACEBACK_CHARS, keep="end"))


def is_out_of_memory(exc: Optional[BaseException]) -> bool:
    """torch's OutOfMemoryError, or an error mentioning OOM, anywhere in the cause chain
    (dynamo wraps backend errors in BackendCompilerFailed)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        message = str(exc).lower()
        if type(exc).__name__ == "OutOfMemoryError" or any(m in message for m in OOM_MARKERS):
            return True
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return False


def _qualified_name(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _clip(text: str, limit: int, keep: str = "start") -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + " [...]" if keep == "start" else "[...] " + text[-limit:]
