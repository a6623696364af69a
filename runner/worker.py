"""Code that runs in the cells' processes, and the forkserver's preload.

The forkserver (see runner.isolation) imports this module once: torch, transformers
and the runner's own modules are then already loaded in every cell's process, which
starts as a fork of it. Importing must not touch CUDA or start threads: nothing here
runs torch code at import time.
"""
import os

import torch  # noqa: F401  (preloaded for the cells)
import transformers  # noqa: F401

from runner import records
from runner.cell import run_cell
from runner.compile import use_cache_dirs
from runner.environment import collect_environment, resolve_device
from runner.files import Room
from runner.precision import apply_precision, with_tf32_availability
from runner.schema import write_record_in


def _preload_models():
    """Import the shipped models' classes and processors: transformers imports them lazily,
    and the first costs ~2.5 s. A broken models module is reported by the cell itself."""
    try:
        from runner.models import SEED_MODELS, preload

        preload(SEED_MODELS)
    except Exception:
        pass


_preload_models()


def _freeze_preloaded_heap():
    """Move everything the preload made (torch, transformers, the models' modules: ~380k objects, twice a
    bare ``import torch``'s heap) into the permanent generation, so a cell's full gc collections never
    traverse it: in the cells forked from here a full collection costs what it costs in a bare process
    (benchmarks/results/runner_process.md, issue 30 item 2), and the pages stay shared (no copy-on-write)."""
    import gc

    gc.collect()
    gc.freeze()


_freeze_preloaded_heap()


def run_job(job, channel):
    """A cell's process: run the cell, write its record, report the phase marks."""
    _own_process_group()
    marks = {"process_started": records.clock()}
    use_cache_dirs(job["compile_cache_dirs"])
    reply = {}
    record = run_cell(job, marks, reply)
    try:   # the room the driver took before measuring: a disk that filled meanwhile still takes the record
        write_record_in(Room(job["room"]), job["out_dir"], record)
    except OSError as exc:   # not even then: the driver stops the runner, and no failure record stands in
        channel.send({"record_written": False, "unwritten": [exc.errno, exc.strerror, exc.filename]})
        channel.close()
        return
    channel.send({"record_written": True, "status": record.status.value, "marks": marks, **reply})
    channel.close()


def probe(device_requested, image_name, image_id, channel):
    """What every record of the run shares: the device, environment and precision flags."""
    _own_process_group()
    reply = {}
    try:
        reply["precision"] = apply_precision()
        reply["environment"] = collect_environment(image_name, image_id)
        reply["device"] = resolve_device(device_requested, image_name)
        reply["precision"] = with_tf32_availability(reply["precision"], reply["device"])
    except Exception as exc:
        reply["error"] = f"{type(exc).__name__}: {exc}"
    channel.send(reply)
    channel.close()


def _own_process_group():
    """Lead a process group, so the parent can kill this process and all it started."""
    os.setpgid(0, 0)
