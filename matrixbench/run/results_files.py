"""The one reader of every file under a results folder: records, ``run.json``, ``cells.json``,
``selftest.json`` (and whatever comes next goes through ``read_json`` too).

A file there may have been copied, merged, hand-edited, replaced by a link or a FIFO, or cut short;
nothing it says reaches the planner, the bill or the statistics unless this module vouches for it:

1. **the file**: a regular file (opened without blocking, then checked with ``fstat``: a FIFO, a
   device or a folder is refused; a symlink is followed only when it stays inside the results folder
   it was found under), at most ``MAX_BYTES[kind]`` bytes, read once (memory bound: the cap; time
   bound: one linear parse of at most that many bytes);
2. **the parse**: UTF-8 JSON, nesting bounded by the interpreter's recursion limit;
3. **the schema**: the kind's JSON Schema (``runner.schema.RECORD_SCHEMA``, ``MANIFEST_SCHEMA``,
   ``runner.schema.CELLS_SCHEMA``, ``SELFTEST_SCHEMA``), checked with ``jsonschema``;
4. **the numbers**: a second schema of limits (``RECORD_LIMITS`` ...) with a ``finite`` keyword of our
   own: durations, latencies and counts finite, not negative, not absurdly large.

A file that fails is ``Unvouched`` (a ``RecordError`` for records, so every caller's existing
``except RecordError`` leaves it out): ``line()`` names the file and what is wrong with it. ``warn``
prints that line on stderr once per file per process, so a run, a dry run and a report each say it.
"""
from __future__ import annotations

import json
import math
import os
import stat
import sys
from datetime import datetime
from pathlib import Path
from typing import Dict, Iterator, Optional, Set, Tuple, Union, cast

import jsonschema
from jsonschema import validators

from runner.core import SCHEMA_VERSION, STATUSES, SUPPORTED_VERSIONS, upgrade_record
from runner.files import MIB, describe_kind
from runner.schema import (
    CELLS_SCHEMA,
    CHECK_SCHEMA,
    CHECK_SCHEMA_VERSION,
    MAX_RECORD_BYTES,
    RECORD_SCHEMA,
    NewerRecordError,
    RecordError,
)

PathLike = Union[str, Path]
JSONObject = Dict[str, object]   # a JSON object as read (the schemas say what each field holds)
MAX_BYTES = {"record": MAX_RECORD_BYTES, "run.json": 64 * MIB, "cells.json": 64 * MIB, "selftest.json": 1 * MIB,
             "run.lock": 1 * MIB, "check.json": 16 * MIB}


class Unvouched(RecordError):
    """A file under a results folder this reader cannot vouch for; ``line()`` names it and says why."""

    def __init__(self, path: PathLike, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}")

    def line(self) -> str:
        return f"{self.path}: {self.problem}"


class NewerUnvouched(Unvouched, NewerRecordError):
    """A record a newer matrixbench wrote: never read, never overwritten."""


def _finite(validator: object, wanted: object, instance: object,
            schema: object) -> Iterator[jsonschema.ValidationError]:
    if wanted and isinstance(instance, float) and not math.isfinite(instance):
        yield jsonschema.ValidationError(f"{instance!r} is not a finite number")


def _iso_time(validator: object, wanted: object, instance: object,
              schema: object) -> Iterator[jsonschema.ValidationError]:
    if wanted and isinstance(instance, str):
        try:
            datetime.fromisoformat(instance)
        except ValueError:
            yield jsonschema.ValidationError(f"{instance[:80]!r} is not an ISO date and time")


Checker = validators.extend(jsonschema.Draft202012Validator, {"finite": _finite, "iso_time": _iso_time})

# Limits: ranges a measurement can have. ``minimum``/``maximum`` test numbers only, nulls pass.
_SECONDS = {"finite": True, "minimum": 0, "maximum": 1e7}        # 115 days
_MS = {"finite": True, "minimum": 0, "maximum": 1e9}             # 11 days for one call
_COUNT = {"minimum": 0, "maximum": 1e12}
_TIMING_MS = ("mean_ms", "median_ms", "p90_ms", "p99_ms", "stdev_ms", "min_ms", "max_ms", "loop_wall_ms",
              "wall_mean_ms")
RECORD_LIMITS: JSONObject = {
    "properties": {
        "duration_s": _SECONDS,
        "started_at": {"iso_time": True},
        "repeat": {"maximum": 1_000_000},
        "cell": {"properties": {"batch_size": {"minimum": 1, "maximum": 1_000_000}}},
        "timing": {"properties": {
            **{name: _MS for name in _TIMING_MS},
            "samples_ms": {"items": _MS},
            "n": {"minimum": 1, "maximum": 1e9},
            "load_s": _SECONDS, "first_call_s": _SECONDS, "warmup_s": _SECONDS,
            "cv": {"finite": True, "minimum": 0},
            "warmup_calls": _COUNT,
        }},
        "memory": {"properties": {"peak_bytes": {**_COUNT, "finite": True}}},
    },
    # an ok record is a measurement: a positive finite mean the statistics may use
    "if": {"properties": {"status": {"const": "ok"}}},
    "then": {"properties": {"timing": {"type": "object", "required": ["mean_ms"],
                                       "properties": {"mean_ms": {"exclusiveMinimum": 0}}}},
             "required": ["timing"]},
}

_TEXT = {"type": ["string", "null"]}
_TEXTS = {"type": "object", "additionalProperties": {"type": "string"}}
_PRICE = {"type": "object", "required": ["usd_per_hour", "looked_up"],
          "properties": {"usd_per_hour": {"type": "number", "finite": True, "minimum": 0, "maximum": 1e6},
                         "looked_up": {"type": "string"}, "source": _TEXT}}
_CORNER = {"type": "object", "required": ["torch_of", "transformers_of", "name"],
           "properties": {"torch_of": {"type": "string"}, "transformers_of": {"type": "string"},
                          "name": {"type": "string"}, "reason": {"type": "string"}}}
# run.json (matrixbench.run.manifest): the fields a reader uses, typed; anything else is free.
MANIFEST_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["schema_version"],
    "properties": {
        "schema_version": {"type": "integer"},
        "run": _TEXT, "note": _TEXT, "status": _TEXT, "backend": _TEXT, "device": _TEXT,
        "started_at": {"type": ["string", "null"], "iso_time": True},
        "ended_at": {"type": ["string", "null"], "iso_time": True},
        "command": {"type": "array", "items": {"type": "string"}},
        "images": {"type": "array", "items": {"anyOf": [
            {"type": "string"}, {"type": "object", "properties": {"name": {"type": "string"}}}]}},
        "image_hashes": _TEXTS,
        "aa_twins": _TEXTS,
        "history": {"type": "array", "items": {"type": "object"}},
        "order_seed": {"type": ["integer", "null"]},
        "matrix": {"type": ["object", "null"], "properties": {
            "margin_pct": {"type": ["number", "null"], "finite": True, "exclusiveMinimum": 0, "maximum": 100},
            "images": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "published": {"enum": ["main", "nightly", "none", None]}}}},
            "prices": {"type": ["object", "null"], "additionalProperties": _PRICE},
            "bridges": {"type": ["array", "null"], "items": _CORNER},
            "refused": {"type": ["array", "null"], "items": {**_CORNER, "required": [*_CORNER["required"], "reason"]}},
        }},
    },
}

SELFTEST_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["passed", "checks"],
    "properties": {
        "passed": {"type": "boolean"},
        "device": {"type": ["string", "null"]},
        "gpu_name": {"type": ["string", "null"]},
        "checks": {"type": "array", "maxItems": 1000, "items": {
            "type": "object", "required": ["name", "status", "detail"],
            "properties": {"name": {"type": "string"}, "status": {"type": "string"}, "detail": {"type": "string"}}}},
        # written by matrixbench.selftest (absent in older files): whose result this is, and when it began
        "run": {"type": ["string", "null"]},
        "attempt": {"type": "string"},
        "started_at": {"type": "string", "iso_time": True},
        "exit_code": {"type": ["integer", "null"]},
    },
}

_RECORD = Checker(RECORD_SCHEMA)
_RECORD_LIMITS = Checker(RECORD_LIMITS)
_MANIFEST = Checker(MANIFEST_SCHEMA)
_CELLS = Checker(CELLS_SCHEMA)
_SELFTEST = Checker(SELFTEST_SCHEMA)
_CHECK = Checker(CHECK_SCHEMA)


def read_json(path: PathLike, kind: str = "record", root: Optional[PathLike] = None) -> object:
    """The JSON value in ``path``; Unvouched naming the file when it is not a regular file (a link
    leading outside ``root`` is refused), is over MAX_BYTES[kind], or is not UTF-8 JSON."""
    path = Path(path)
    limit = MAX_BYTES[kind]
    try:
        if os.path.islink(path):
            target = Path(os.path.realpath(path))
            if root is not None and not _inside(target, Path(os.path.realpath(root))):
                kind_of = os.stat(path).st_mode
                what = "" if stat.S_ISREG(kind_of) else f" ({describe_kind(kind_of)})"
                raise Unvouched(path, f"a link to {target}{what}, outside the results folder {root}; not followed")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))   # a FIFO: no wait
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Unvouched(path, f"{describe_kind(info.st_mode)}, not a regular file; not read")
            if info.st_size > limit:
                raise Unvouched(path, f"{info.st_size} bytes, over the limit of {limit} for a {kind}; not read")
            data = _read_at_most(fd, limit + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise Unvouched(path, f"not a readable {kind} (cannot be read: {exc.strerror or exc})") from None
    if len(data) > limit:
        raise Unvouched(path, f"grew over the limit of {limit} bytes for a {kind} while being read; not read")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise Unvouched(path, f"not a readable {kind} (not UTF-8 text)") from None
    except RecursionError:
        raise Unvouched(path, f"not a readable {kind} (JSON nested too deep)") from None
    except ValueError as exc:
        raise Unvouched(path, f"not a readable {kind} (not valid JSON: {exc})") from None


def _read_at_most(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check(value: object, validator: jsonschema.protocols.Validator, path: PathLike, what: str) -> None:
    """Unvouched naming the field when ``value`` fails ``validator``."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        field = ".".join(map(str, error.absolute_path)) or "(top level)"
        raise Unvouched(path, f"field {field}: {_short(error.message)}; {what}")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def read_record(path: PathLike, root: Optional[PathLike] = None) -> JSONObject:
    """A record as a dict of the current schema version (older versions converted), vouched for:
    the file, its JSON, RECORD_SCHEMA and RECORD_LIMITS. NewerUnvouched for a newer version."""
    return read_record_as_written(path, root)[0]


def read_record_as_written(path: PathLike, root: Optional[PathLike] = None) -> Tuple[JSONObject, int]:
    """``read_record``'s record, and the schema version its file was written in (the converted record says the
    current one): what results.csv gives, so that a v3 record's absent v4 and v5 fields read as not measured."""
    record = read_json(path, "record", root)
    if not isinstance(record, dict):
        raise Unvouched(path, f"a JSON {type(record).__name__}, not a record object")
    version = record.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerUnvouched(path, f"schema_version {version} is newer than this matrixbench's {SCHEMA_VERSION} "
                                   "(a newer matrixbench wrote it); it is never overwritten: upgrade matrixbench, "
                                   "or use another --run name")
    if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
        raise Unvouched(path, f"schema_version {_short(repr(version), 60)} is not supported; this matrixbench reads "
                              f"versions {list(SUPPORTED_VERSIONS)}")
    if record.get("status") not in STATUSES or not isinstance(record.get("cell"), dict):
        raise Unvouched(path, f"not a complete record (needs a 'status' of {', '.join(STATUSES)} and a 'cell' object)")
    written = cast(int, version)
    try:
        record = upgrade_record(record)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Unvouched(path, f"not a complete record ({type(exc).__name__}: {exc})") from None
    shallow = _without_samples(record, path)   # thousands of samples: checked in one loop, not item by item
    check(shallow, _RECORD, path, f"the record does not match schema v{record.get('schema_version')}")
    check(shallow, _RECORD_LIMITS, path, "a value no measurement has")
    _check_numbers(shallow, path)
    return record, written


def _without_samples(record: JSONObject, path: PathLike) -> JSONObject:
    """The record with ``timing.samples_ms`` checked here (a list of finite numbers in _MS's range) and
    left out of the copy the schemas check."""
    timing = record.get("timing")
    if not isinstance(timing, dict) or not isinstance(timing.get("samples_ms"), list):
        return record
    for index, value in enumerate(timing["samples_ms"]):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Unvouched(path, f"field timing.samples_ms.{index}: {_short(repr(value), 60)} is not of type "
                                  "'number'; the record does not match its schema")
        if not math.isfinite(value) or not 0 <= value <= _MS["maximum"]:
            raise Unvouched(path, f"field timing.samples_ms.{index}: {value!r} is not a finite number of ms "
                                  f"from 0 to {_MS['maximum']:g}; a value no measurement has")
    return {**record, "timing": {**timing, "samples_ms": []}}


MAX_MAGNITUDE = 2 ** 53          # the largest integer a float holds exactly: no count, byte size or time is larger
NON_FINITE_ALLOWED = ("accuracy",)   # a NaN output is what accuracy.status "nan" reports


def _check_numbers(value: object, path: PathLike, where: Tuple[Union[str, int], ...] = ()) -> None:
    """Every number of a record finite (but under NON_FINITE_ALLOWED) and at most MAX_MAGNITUDE."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_numbers(item, path, where + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_numbers(item, path, where + (index,))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        field = ".".join(map(str, where))
        if isinstance(value, float) and not math.isfinite(value):
            if where[:1] not in [(name,) for name in NON_FINITE_ALLOWED]:
                raise Unvouched(path, f"field {field}: {value!r} is not a finite number; a value no measurement has")
        elif abs(value) > MAX_MAGNITUDE:
            raise Unvouched(path, f"field {field}: {value!r} is over {MAX_MAGNITUDE:.0e}; a value no measurement has")


def read_manifest_file(path: PathLike, root: Optional[PathLike] = None) -> JSONObject:
    """A run.json, vouched for (the file, its JSON, MANIFEST_SCHEMA); the version check is the
    caller's (matrixbench.run.manifest.read_manifest says which versions it reads)."""
    manifest = read_json(path, "run.json", root)
    if not isinstance(manifest, dict):
        raise Unvouched(path, f"a JSON {type(manifest).__name__}, not a run manifest object")
    return manifest


def check_manifest(manifest: JSONObject, path: PathLike) -> None:
    check(manifest, _MANIFEST, path, "the run manifest is not what matrixbench writes")


def read_cells(path: PathLike, root: Optional[PathLike] = None) -> JSONObject:
    """A cells.json (the runner's input), vouched for against runner.schema.CELLS_SCHEMA."""
    cells = read_json(path, "cells.json", root)
    check(cells, _CELLS, path, "not a cells file of this matrixbench")
    return _object(cells, path, "a cells object")


def read_selftest(path: PathLike, root: Optional[PathLike] = None) -> JSONObject:
    """A selftest.json, vouched for against SELFTEST_SCHEMA."""
    result = read_json(path, "selftest.json", root)
    check(result, _SELFTEST, path, "not a selftest result")
    return _object(result, path, "a selftest object")


def read_check(path: PathLike) -> JSONObject:
    """A runner's check.json (``--check``: each model built on the meta device), vouched for against
    runner.schema.CHECK_SCHEMA; another version (a runner older or newer than this host) is named with the fix."""
    result = read_json(path, "check.json")
    version = result.get("schema_version") if isinstance(result, dict) else None
    if version != CHECK_SCHEMA_VERSION:
        raise Unvouched(path, f"schema_version {version!r}, not {CHECK_SCHEMA_VERSION}: its runner is not this "
                              "matrixbench's; rebuild the image or venv (`matrixbench build`, or `matrixbench clean "
                              "--venvs` and run again)")
    check(result, _CHECK, path, "not a model check's answer")
    return _object(result, path, "a model check object")


def _object(value: object, path: PathLike, what: str) -> JSONObject:
    """``value`` (checked by a schema that asks for a JSON object) as one; Unvouched for anything else."""
    if not isinstance(value, dict):
        raise Unvouched(path, f"a JSON {type(value).__name__}, not {what}")
    return dict(value)


_warned: Set[str] = set()


def warn(problem: Unvouched, consequence: str = "left out") -> None:
    """``warning: <file>: <what is wrong>; <consequence>`` on stderr, once per file per process."""
    line = f"{problem.line()}; {consequence}"
    if line in _warned:
        return
    _warned.add(line)
    print(f"warning: {line}", file=sys.stderr, flush=True)
