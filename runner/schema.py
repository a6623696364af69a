"""The record and the cells file on disk: their JSON Schemas, reading and writing them.

One JSON record per process of a matrix cell, written by the runner into the output folder as
``<cell_id>.json`` (repeat 0) or ``<cell_id>.r<k>.json`` (repeat k >= 1) with sorted keys. The
host reads only these files. The typed objects (``Cell``, ``Record``, ``Status``, ``Repeat``)
live in ``runner.core``; the settings in ``runner.settings``.

This module is stdlib-only: the host imports it (with ``runner.core`` and ``runner.settings``)
to validate and read records. ``RECORD_SCHEMA`` is a JSON Schema (draft 2020-12)
that the host validates with ``jsonschema``; the runner itself only checks the version.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from runner import axes
from runner.baton import ROLES as BATON_ROLES
from runner.core import (
    ACCURACY_STATUSES,
    REGIMES,
    SCHEMA_VERSION,
    STATUSES,
    SUPPORTED_VERSIONS,
    USED_DEVICES,
    Cell,
    Record,
    cell_id,
    repeat_stem,
    upgrade_record,
)
from runner.files import MIB, Room, read_bounded_text, write_atomic
from runner.settings import RUNNER_SETTINGS

JSON = Dict[str, Any]
CellLike = Union[Cell, Mapping[str, Any]]

# The runner's per-cell scratch folders live in <out_dir>/.scratch/matrixbench-cell-*, under the
# run folder rather than the system temp folder: the host removes what a killed run left there.
SCRATCH_DIRNAME = ".scratch"
# ``python -m runner --check`` writes <out>/check.json: each model built on the meta device, or why not.
CHECK_FILENAME = "check.json"
# check.json's own version. History: none (validate --build's first answer: image_name, torch, models); 1 (the
# run's model check): ``schema_version`` and ``transformers``, the host refuses any other version and asks for a
# rebuild of the image or venv whose runner wrote it.
CHECK_SCHEMA_VERSION = 1


# The runner's input file (cells.json), written by the host once per image: its own version.
# History: 1; 2 (optional ``repeats``, the run order as [cell index, repeat index] pairs, and
# ``order_seed``): a runner of version 1 refuses a version 2 file and asks for a rebuild.
# 3 (issue 32: the settings ``paired``, ``min_time_s``, ``target_stdrel``, ``max_time_s``): a runner of
# version 2 refuses it (unknown settings) and asks for a rebuild.
# 4 (issue 34: the optional ``turns``, the pair this runner takes turns with, runner.cells_file.Turns): a runner
# of version 3 refuses it and asks for a rebuild.
# 5 (issue 34: the optional ``turns.cores``, the CPU cores both sides' blocks are pinned to): a runner of version 4
# refuses it and asks for a rebuild.
CELLS_SCHEMA_VERSION = 5
SUPPORTED_CELLS_VERSIONS = (1, 2, 3, 4, 5)


# Settings a record of schema v3 or older lacks: not required in a record's settings block.
V4_SETTINGS = ("paired", "min_time_s", "target_stdrel", "max_time_s")


# A record holds every timed sample: 64 MiB is millions of iterations; a larger file is not a record.
MAX_RECORD_BYTES = 64 * MIB


class RecordError(Exception):
    """A record file that cannot be read: bad JSON, not a regular file, too large, not a record,
    or an unknown schema version."""


class NewerRecordError(RecordError):
    """A record of a newer schema version than this matrixbench writes: never replaced, the run is refused."""


def record_path(out_dir: Union[str, Path], cell: CellLike, repeat: int = 0) -> Path:
    """Where the record of a cell's repeat lives: ``<cell_id>.json``, ``<cell_id>.r<k>.json``."""
    return Path(out_dir) / f"{repeat_stem(cell_id(cell), repeat)}.json"


def write_json_atomic(path: Union[str, Path], data: Any) -> Path:
    """Write JSON with sorted keys via a temp file + rename (runner.files.write_atomic), so a killed
    run or a full disk never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json_bytes(data))
    return path


def json_bytes(data: Any) -> bytes:
    """What a results file holds: sorted keys, one-space indents, a final newline."""
    return (json.dumps(data, sort_keys=True, indent=1, allow_nan=True) + "\n").encode()


def write_record(out_dir: Union[str, Path], record: Record) -> Path:
    return write_json_atomic(record_path(out_dir, record.cell, record.repeat), record.to_dict())


UNWRITTEN_MARK = "matrixbench-unwritten-record: "   # a record the disk refused, whole, on one stderr line


def write_record_in(room: Room, out_dir: Union[str, Path], record: Record) -> Path:
    """A measured record, written with ``room`` (runner.files.Room, taken before measuring) to fall back on
    when the disk is full. Should even that fail, the whole record goes to stderr on one line after
    UNWRITTEN_MARK (the runner's log, which the host shows) before the OSError propagates: the numbers
    are never silently gone."""
    path = record_path(out_dir, record.cell, record.repeat)
    try:
        room.write(path, json_bytes(record.to_dict()))
    except OSError:
        with contextlib.suppress(OSError):   # stderr may be a file on the same full disk
            print(UNWRITTEN_MARK + json.dumps(record.to_dict(), sort_keys=True, allow_nan=True), file=sys.stderr,
                  flush=True)
        raise
    return path


def read_record(path: Union[str, Path]) -> JSON:
    """A record file as a dict of the current schema version (older versions converted).

    RecordError when it is not a regular file of at most MAX_RECORD_BYTES holding a JSON object
    with a known ``status`` and a ``cell`` object; NewerRecordError when a newer matrixbench wrote it.
    """
    path = Path(path)
    try:
        record = json.loads(read_bounded_text(path, MAX_RECORD_BYTES))
    except (OSError, ValueError, RecursionError) as exc:
        raise RecordError(f"{path}: not a readable record ({exc})") from exc
    version = record.get("schema_version") if isinstance(record, dict) else None
    if _newer(version):
        raise NewerRecordError(
            f"{path}: schema_version {version} is newer than this matrixbench's {SCHEMA_VERSION} (a newer "
            "matrixbench wrote it); it is never overwritten: upgrade matrixbench, or use another --run name")
    if version not in SUPPORTED_VERSIONS:
        raise RecordError(
            f"{path}: schema_version {version!r} is not supported; this matrixbench reads "
            f"versions {list(SUPPORTED_VERSIONS)}. Upgrade matrixbench or rerun the cell."
        )
    if record.get("status") not in STATUSES or not isinstance(record.get("cell"), dict):
        raise RecordError(f"{path}: not a complete record (needs a 'status' of {', '.join(STATUSES)} "
                          "and a 'cell' object)")
    return upgrade_record(record)


def _newer(version: Any) -> bool:
    return isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION


def load_record(path: Union[str, Path]) -> Record:
    """A record file as a typed Record; RecordError when it lacks what a record has."""
    data = read_record(path)
    try:
        return Record.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{path}: not a complete record ({type(exc).__name__}: {exc})") from exc


def needs_run(out_dir: Union[str, Path], cell: CellLike, force: bool = False,
              retry_failed: bool = False, repeat: int = 0) -> bool:
    """The one resume rule: does this repeat of a cell still need running? (No record, an
    unreadable one, ``force``, or a failed one with ``retry_failed``.) Each repeat counts alone.
    Raises NewerRecordError for a record a newer matrixbench wrote, ``force`` or not: this
    version never replaces what it cannot read."""
    path = record_path(out_dir, cell, repeat)
    if not os.path.lexists(path):
        return True
    try:
        record = read_record(path)
    except NewerRecordError:
        raise
    except RecordError:
        return True
    return force or (retry_failed and record["status"] != "ok")


_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}
_BOOL = {"type": ["boolean", "null"]}
_WINDOW = {"type": ["array", "null"], "items": {"type": "number"}, "minItems": 2, "maxItems": 2}


def _obj(properties: JSON, required: Optional[List[str]] = None, nullable: bool = False) -> JSON:
    schema: JSON = {
        "type": ["object", "null"] if nullable else "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }
    return schema


def _record_settings_schema() -> JSON:
    """Each runner setting's schema, as applied: tolerance resolved, device as asked for."""
    applied = {"device": ("device_requested", None),
               "accuracy_tolerance": ("accuracy_tolerance", {"type": "number", "minimum": 0})}
    properties: JSON = {}
    for setting in RUNNER_SETTINGS:
        name, schema = applied.get(setting.name, (setting.name, None))
        properties[name] = schema or setting.json_schema()
    return properties


_GPU_SAMPLE = _obj({"sm_clock_mhz": _NUM, "mem_clock_mhz": _NUM, "temperature_c": _NUM, "power_w": _NUM,
                    "throttle_reasons": {"type": ["array", "null"], "items": {"type": "string"}}})

_CUDAGRAPH_COUNTS = ("warmup_captures", "warmup_replays", "timed_captures", "timed_replays")
_TIMING_REQUIRED = ["load_s", "first_call_s", "warmup_s", "timer", "n", "mean_ms", "median_ms", "p90_ms",
                    "p99_ms", "stdev_ms", "min_ms", "max_ms", "cv", "noisy", "samples_ms"]
# timing.turns: the v5 fields every record in turns has (the pinning ones came later, optional)
_TURNS_REQUIRED = ["role", "partner", "pair_id", "blocks", "block_calls", "block_ms", "block_median_ms", "lost",
                   "omp_wait_policy", "waited_s"]

_ENVIRONMENT_REQUIRED = ["python", "torch", "torch_git", "transformers", "cuda", "cudnn", "gpu_name", "gpu_count",
                         "driver", "cpu_model", "threads", "platform", "hostname", "image_name", "image_id"]

# A cell: each axis of runner.axes, declared there once.
CELL_SCHEMA = axes.cell_schema()

RECORD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "matrixbench cell record",
    "type": "object",
    "required": [
        "schema_version", "cell_id", "cell", "status", "error", "device", "settings",
        "timing", "memory", "dynamo", "accuracy", "precision", "environment",
        "started_at", "duration_s",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "cell_id": {"type": "string"},
        "cell": CELL_SCHEMA,
        "status": {"enum": list(STATUSES)},
        # null when ok; else what went wrong, for the report's footnotes.
        "error": _obj({"type": {"type": "string"}, "message": {"type": "string"}, "traceback": _STR},
                      required=["type", "message"], nullable=True),
        # The device actually used: "cuda" or "cpu" (device="auto" picks cuda when available).
        "device": {"enum": list(USED_DEVICES)},
        # The runner settings as they applied to this cell (runner.records.record_settings).
        "settings": _obj(_record_settings_schema(),
                         required=[name for name in _record_settings_schema() if name not in V4_SETTINGS]),
        # null unless the cell got as far as timing. All latencies in milliseconds.
        "timing": _obj({
            "load_s": _NUM,          # build model + inputs, move to device
            "first_call_s": _NUM,    # the first call on its own, torch.compile() included (eager cells too)
            "warmup_s": _NUM,
            "timer": {"enum": ["cuda_event", "perf_counter"]},
            "n": {"type": "integer"},
            "mean_ms": {"type": "number"},   # the published statistic
            "median_ms": {"type": "number"},
            "p90_ms": {"type": "number"},
            "p99_ms": {"type": "number"},
            "stdev_ms": {"type": "number"},
            "min_ms": {"type": "number"},
            "max_ms": {"type": "number"},
            "cv": {"type": "number"},        # stdev / mean
            "noisy": {"type": "boolean"},    # cv > settings.cv_threshold
            "samples_ms": {"type": "array", "items": {"type": "number"}},
            # The self-check: the whole loop on the wall clock, synchronized before and after.
            "loop_wall_ms": _NUM,
            "wall_mean_ms": _NUM,        # loop_wall_ms / n
            "timer_mismatch": _BOOL,     # wall mean and timer mean disagree beyond launch overhead
            "warmup_calls": _INT,        # at least settings.warmup, and on GPU at least 1 s of calls
            "host_syncs_per_call": _INT,  # synchronizing CUDA ops in one call; null on CPU
            # what the mean means (runner.syncs): pipelined throughput (no host sync in a GPU call) or
            # per-call latency (syncs, or the CPU); null where syncs were not counted
            "regime": {"enum": [*REGIMES, None]},
            # CUDA-graph captures and replays (warmup_* include the first call); null on CPU
            # graphs_per_call: graphs Dynamo compiled for the first call (replays expected per call)
            "cudagraphs": _obj({**{key: {"type": "integer"} for key in _CUDAGRAPH_COUNTS}, "graphs_per_call": _INT},
                               required=list(_CUDAGRAPH_COUNTS), nullable=True),
            # NVML readings just before and after the timed loop; null without pynvml or on CPU
            "gpu_state": _obj({"start": _GPU_SAMPLE, "end": _GPU_SAMPLE, "throttled": {"type": "boolean"}},
                              nullable=True),
            # wall-clock (Unix time, s) [start, end] of the compile and first call (compiled modes; else
            # null) and of the timed loop: the report flags a timed loop that overlapped another slot's compile
            "windows": _obj({"compile": _WINDOW, "timed": _WINDOW}, nullable=True),
            # schema v3, optional (runner.energy): the loop's energy from a cumulative counter read
            # immediately around it (NVML total energy on GPU, RAPL packages on CPU); numbers null
            # with the reason where the counter is missing or unreadable
            "energy": _obj({
                "source": {"enum": ["nvml_total_energy", "rapl", None]},
                "energy_j": _NUM,           # joules the counter advanced over the loop
                "loop_s": _NUM,             # seconds between the two readings
                "average_power_w": _NUM,    # energy_j / loop_s
                "max_error_j": _NUM,        # counter step + staleness at both ends (runner.energy)
                "uncertain": _BOOL,         # max_error_j above 10% of energy_j
                "wrapped": _BOOL,           # the counter wrapped once during the loop
                "reason": _STR,             # why energy_j is null
                "calls": _INT,              # schema v4: calls the counter covered (timing.extended.n); absent: n
            }, required=["source", "energy_j", "loop_s", "average_power_w", "max_error_j", "uncertain", "wrapped",
                         "reason"], nullable=True),
            # schema v3, optional: NVML's power and thermal violation times over the loop, in ms
            # (counted_ms: what NVML's reference stamps cover); null on CPU
            "violations": _obj({"power_ms": _NUM, "thermal_ms": _NUM, "counted_ms": _NUM, "reason": _STR},
                               nullable=True),
            # schema v4, optional (runner.timing.extended_block): every call of the loop, the first n (the
            # statistics above, the seed's published mean) and those past them (min_time_s, target_stdrel)
            "extended": _obj({
                "n": {"type": "integer"}, "extra_calls": {"type": "integer"}, "mean_ms": _NUM, "median_ms": _NUM,
                "loop_s": _NUM, "stop": {"enum": ["iterations", "min_time", "stdrel", "max_time"]},
                "min_time_s": _NUM, "target_stdrel": _NUM, "stdrel": _NUM,
                "extra_samples_ms": {"type": "array", "items": {"type": "number"}},
            }, required=["n", "stop"], nullable=True),
            # schema v4, optional (runner.cell.paired_blocks): eager and compiled alternately in short blocks
            # in the same process after the timed loop; null for eager cells and with --no-paired
            "paired": _obj({
                "blocks": {"type": "integer"}, "block_calls": {"type": "integer"},
                "pairs": {"type": "array", "items": _obj({
                    "first": {"enum": ["eager", "compiled"]}, "eager_ms": {"type": "number"},
                    "compiled_ms": {"type": "number"}, "eager_median_ms": _NUM, "compiled_median_ms": _NUM,
                    "eager_launch_ms": _NUM, "compiled_launch_ms": _NUM},
                    required=["first", "eager_ms", "compiled_ms"])},
                "speedup_median": _NUM, "speedup_median_of_medians": _NUM, "eager_warmup_calls": _INT,
                "eager_warmup_s": _NUM, "duration_s": _NUM,
            }, required=["blocks", "block_calls", "pairs"], nullable=True),
            # schema v4, optional (runner.host): what the host did to the loop; null/absent where unknown
            "host": _obj({
                "launch_median_ms": _NUM,     # CPU-side time of a call (clock around it, no sync); CPU: the call
                "launch_mean_ms": _NUM,
                # min(1, median launch / median event time): 1 = the GPU waited for the host
                "launch_bound_share": _NUM,
                "launch_bound": _BOOL,        # share >= runner.host.LAUNCH_BOUND_SHARE
                "launch_samples_ms": {"type": ["array", "null"], "items": {"type": "number"}},   # per call (GPU)
                "stall_k": _NUM,              # a stall: a call beyond stall_k x the median
                "stalls": _INT,
                "stall_share": _NUM,          # share of the loop's time the stalls took
                "stall_calls_share": _NUM,    # share of the calls that stalled
                "stall_laden": _BOOL,         # stall_share > runner.host.STALL_LADEN_SHARE
                "steal_share": _NUM,          # /proc/stat steal ticks / all ticks over the loop (all CPUs)
                "host_steal": _BOOL,          # steal_share > runner.host.STEAL_SHARE
                "involuntary_ctx_switches": _INT,   # getrusage over the loop (this process)
                "voluntary_ctx_switches": _INT,
                "gc_collections": {"type": ["array", "null"], "items": {"type": "integer"}},   # per generation
                "cpu_share": _NUM,            # process CPU time / loop wall time
                "loop_s": _NUM,
                "speed_ref_ms": _obj({"before": _NUM, "after": _NUM}, nullable=True),   # fixed CPU workload
                "speed_change": _NUM,         # after / before - 1
                "speed_moved": _BOOL,         # |speed_change| > runner.host.SPEED_MOVED
                "marks": {"type": "array", "items": {"type": "string"}},
            }, required=[], nullable=True),
            # schema v5, optional (runner.turns): the cell's process took turns with another image's process of
            # the same cell (runner.baton): its own part, then blocks of the step, alternately with the partner's
            "turns": _obj({
                "role": {"enum": list(BATON_ROLES)},   # first: this side's turns were 0, 2, 4...; second: 1, 3...
                "partner": {"type": "string"},          # the other image's name
                "pair_id": {"type": "string"},              # one per pair launch (the cells file's)
                "blocks": {"type": "integer"},          # planned (runner.turns.TURN_BLOCKS)
                "block_calls": {"type": "integer"},     # calls of the step in each block
                "block_ms": {"type": "array", "items": {"type": "number"}},          # each measured block's mean
                "block_median_ms": {"type": "array", "items": {"type": "number"}},   # ... and median call
                "lost": _STR,                           # why the turns stopped early; null when all were taken
                "omp_wait_policy": _STR,                # the process's OMP_WAIT_POLICY, if set (docs/turns.md)
                "waited_s": _NUM,                       # in the baton (for the partner, for turns): in duration_s
                # optional (records before pinning lack them: unknown): the cores the blocks ran pinned to, as
                # the process's affinity read back after pinning (null: not pinned), the torch threads during
                # the blocks, and why a requested pin failed (the blocks then ran unpinned)
                "cores": {"type": ["array", "null"], "items": {"type": "integer"}},
                "threads": _INT,
                "pin_error": _STR,
            }, required=_TURNS_REQUIRED, nullable=True),
            # no_cudagraphs, partial_cudagraphs, cudagraph_recaptured, throttled (edge readings or violation
            # time), timer_mismatch
            "flags": {"type": "array", "items": {"type": "string"}},
        }, required=_TIMING_REQUIRED, nullable=True),
        "memory": _obj({
            "peak_bytes": _INT,
            "kind": {"enum": ["cuda_max_allocated", "cpu_max_rss", None]},
        }, nullable=True),
        # torch._dynamo counters; null for eager. Fields are null where a torch version lacks them.
        "dynamo": _obj({
            "graphs": _INT,
            "graph_breaks": _INT,
            "recompiles": _INT,
            "cudagraph_skips": _INT,
            "break_reasons": {"type": "array", "items": {"type": "string"}},
        }, nullable=True),
        # compiled vs eager outputs on the same inputs; status "skipped" for eager.
        "accuracy": _obj({
            "max_abs_diff": _NUM,
            "tolerance": _NUM,           # relative: see criterion (runner.tolerance)
            "status": {"enum": list(ACCURACY_STATUSES)},
            "criterion": _STR,
            "max_rel_error": _NUM,       # the worst output tensor's max abs diff / its max abs value
            "min_cosine": _NUM,
            # per output tensor; the *_fp64 fields only where it was beyond the tolerance and judged
            # against the float64 reference (runner.accuracy)
            "outputs": {"type": "array", "items": _obj({
                "shape": {"type": "array", "items": {"type": "integer"}},
                "max_abs_diff": _NUM, "ref_max_abs": _NUM, "rel_error": _NUM, "cosine": _NUM,
                "flag": {"enum": [None, "nan", "fail", "shape"]},
                "eager_rmse_fp64": _NUM, "compiled_rmse_fp64": _NUM, "eager_max_fp64": _NUM,
                "compiled_max_fp64": _NUM, "fp64_multiplier": _NUM, "fp64_pass": _BOOL,
            }, required=["shape", "max_abs_diff", "ref_max_abs", "rel_error", "cosine", "flag"])},
        }, required=["max_abs_diff", "tolerance", "status"], nullable=True),
        "precision": _obj({
            "float32_matmul_precision": _STR,
            "cuda_matmul_allow_tf32": _BOOL,
            "cudnn_allow_tf32": _BOOL,
            "tf32_available": _BOOL,   # the GPU has TF32 (capability 8.0+); false on the CPU
        }, required=["float32_matmul_precision", "cuda_matmul_allow_tf32", "cudnn_allow_tf32"]),
        "environment": _obj({
            "python": {"type": "string"},
            "torch": {"type": "string"},
            "torch_git": _STR,
            "transformers": {"type": "string"},
            "cuda": _STR,
            "cudnn": _INT,
            "gpu_name": _STR,
            "gpu_capability": _STR,   # "9.0"; keys the compile caches by GPU
            "gpu_uuid": _STR,            # schema v2; the GPU the cells ran on, "GPU-..." as nvidia-smi names it
            "gpu_count": {"type": "integer"},
            "driver": _STR,
            "cpu_model": _STR,
            "threads": {"type": "integer"},
            "platform": {"type": "string"},
            "hostname": {"type": "string"},
            "image_name": _STR,
            "image_id": _STR,
        }, required=_ENVIRONMENT_REQUIRED),
        # schema v2: the attention implementation asked for (cell) and used (model config); null
        # when the cell failed before its model was built
        "attention": _obj({"requested": _STR, "used": _STR}, nullable=True),
        "started_at": {"type": "string"},   # ISO 8601, UTC
        # schema v2, optional: the slot the host ran the cell in (matrixbench.run.placement) and the
        # cores the runner could use (os.sched_getaffinity(0)); absent or null outside slots.
        "placement": _obj({
            "slot": {"type": "integer"},
            "cores": {"type": "array", "items": {"type": "integer"}},
            "gpu_index": _INT,
            "gpu_uuid": _STR,
            "numa_node": _INT,
            "slots": {"type": "integer"},         # slots of the run
            "busy_units": {"type": "integer"},    # slots running a unit when this cell's unit started (itself too)
            # other slots seen timing at the start and end of this cell's timed loop (the run's
            # timing board, runner.timing_board); null when the cell never reached it
            "busy_slots": _INT,
            "timing": {"enum": ["concurrent", "exclusive"]},   # --exclusive-timing: timed alone
            "affinity": {"type": ["array", "null"], "items": {"type": "integer"}},
            # a Ray task's node (matrixbench.cluster, --backend ray): which node, GPU type and GPU ids
            "node_id": _STR,
            "node_ip": _STR,
            "gpu_type": _STR,
            "ray_gpu_ids": {"type": "array", "items": {"type": "string"}},
        }, required=["slot", "cores", "affinity"], nullable=True),
        # schema v2, optional: a record of the slots' interference calibration (matrixbench.calibrate),
        # not of the matrix: its phase (alone: one slot busy; loaded: every slot) and the run's slots.
        "calibration": _obj({
            "phase": {"enum": ["alone", "loaded"]},
            "slots": {"type": "integer", "minimum": 1},
        }, required=["phase", "slots"], nullable=True),
        # optional: the hub commit a hub model's files came from (transformers' config._commit_hash: the cell's
        # revision resolved, or the cache's main); absent for a shipped model's random weights or a local model.
        "model_commit": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
        "duration_s": {"type": "number"},   # wall time of the whole cell, process start to record
        "repeat": {"type": "integer", "minimum": 0},   # which of the cell's processes; missing = 0
    },
}

CELLS_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "matrixbench cells file (the runner's input)",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema_version", "settings", "cells"],
    "properties": {
        "schema_version": {"const": CELLS_SCHEMA_VERSION},
        # The runner settings; left-out ones take runner.settings' defaults.
        "settings": {"type": "object", "additionalProperties": False,
                     "properties": {s.name: s.json_schema() for s in RUNNER_SETTINGS}},
        "image_name": _STR,
        "image_id": _STR,
        "cells": {"type": "array", "minItems": 1, "items": dict(CELL_SCHEMA, additionalProperties=False)},
        # The run order: [index into cells, repeat index], one process each; absent: each cell once.
        "repeats": {"type": "array", "minItems": 1, "items": {
            "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0}}},
        "order_seed": _INT,   # the seed the host shuffled the order with (recorded only)
        # v4: the pair this runner takes turns with (runner.cells_file.Turns); absent or null: no turns
        "turns": {"type": ["object", "null"], "additionalProperties": False,
                  "required": ["folder", "role", "partner", "pair_id"],
                  "properties": {"folder": {"type": "string", "minLength": 1}, "role": {"enum": list(BATON_ROLES)},
                                 "partner": {"type": "string", "minLength": 1},
                                 "pair_id": {"type": "string", "minLength": 1},
                                 # v5: both sides' blocks pinned to these cores (runner.turns.pin)
                                 "cores": {"type": "array", "uniqueItems": True,
                                           "items": {"type": "integer", "minimum": 0}}}},
    },
}

CHECK_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "matrixbench model check (the runner's --check answer)",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema_version", "image_name", "torch", "transformers", "models"],
    "properties": {
        "schema_version": {"const": CHECK_SCHEMA_VERSION},
        "image_name": {"type": ["string", "null"]},
        "torch": {"type": "string", "maxLength": 200},
        "transformers": {"type": "string", "maxLength": 200},
        # one entry per distinct model of the cells file: its error (type: message), or null when it builds
        "models": {"type": "array", "maxItems": 10000, "items": {
            "type": "object", "additionalProperties": False, "required": ["model", "size", "weights", "error"],
            "properties": {"model": {"type": "string", "minLength": 1, "maxLength": 200},
                           "size": {"type": "string", "maxLength": 50},
                           "weights": {"type": "string", "maxLength": 50},
                           "error": {"type": ["string", "null"], "maxLength": 20000}}}},
    },
}
