"""Assembling a cell's record (schema v1, see runner.schema), on either side of the fork.

Stdlib only: the parent writes the records of cells whose process timed out or crashed,
with the environment its probe reported, so every record has the same shape.
"""
import datetime
import time
import traceback as traceback_module

from runner.schema import SCHEMA_VERSION, cell_id
from runner.tolerance import default_tolerance

MIN_WARMUP = 3   # cudagraph trees: warm-up run, record, then replay
MAX_TRACEBACK_CHARS = 20000
MAX_MESSAGE_CHARS = 4000

# cuBLAS/cuDNN report a failed workspace allocation with their own status, not torch's OOM.
OOM_MARKERS = ("out of memory", "can't allocate memory", "cublas_status_alloc_failed",
               "cudnn_status_alloc_failed")


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def clock():
    """CLOCK_MONOTONIC on Linux: one time base for the parent and the cell's process."""
    return time.monotonic()


def record_settings(settings, cell, device=None, precision=None):
    """The settings as they applied to this cell: effective warm-up and (relative) tolerance."""
    tolerance = settings["accuracy_tolerance"]
    if tolerance is None:
        tolerance = default_tolerance(cell["dtype"], device, precision)
    return {
        "iterations": settings["iterations"],
        "warmup": max(settings["warmup"], MIN_WARMUP),
        "timeout_s": settings["timeout_s"],
        "device_requested": settings["device"],
        "accuracy_tolerance": tolerance,
        "cv_threshold": settings["cv_threshold"],
    }


def new_record(job):
    """A record with every field present and nothing measured yet."""
    return {
        "schema_version": SCHEMA_VERSION,
        "cell_id": cell_id(job["cell"]),
        "cell": job["cell"],
        "status": "error",
        "error": None,
        "device": job["device"],
        "settings": record_settings(job["settings"], job["cell"], job["device"], job["precision"]),
        "timing": None,
        "memory": None,
        "dynamo": None,
        "accuracy": None,
        "precision": job["precision"],
        "environment": job["environment"],
        "started_at": job["started_at"],
        "duration_s": None,
    }


def finish(record, job):
    record["duration_s"] = clock() - job["start_clock"]
    return record


def fail(record, status, error_type, message, traceback=None):
    record["status"] = status
    record["error"] = {"type": error_type, "message": _clip(message, MAX_MESSAGE_CHARS),
                       "traceback": traceback}
    return record


def fail_with_exception(record, exc):
    status = "oom" if is_out_of_memory(exc) else "error"
    text = "".join(traceback_module.format_exception(type(exc), exc, exc.__traceback__))
    return fail(record, status, _qualified_name(type(exc)), str(exc) or repr(exc),
                _clip(text, MAX_TRACEBACK_CHARS, keep="end"))


def is_out_of_memory(exc):
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


def _qualified_name(cls):
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _clip(text, limit, keep="start"):
    if len(text) <= limit:
        return text
    return text[:limit] + " [...]" if keep == "start" else "[...] " + text[-limit:]
