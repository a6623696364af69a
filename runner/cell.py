"""One cell, measured inside its own process: build, compile, time, check, record.

``run_cell(job)`` never raises: a failure becomes the record's status (oom or error,
with type, message and traceback). Phases, under torch.no_grad():
build the model and inputs (load_s); for compiled modes, an eager reference output;
the first call timed on its own, with the torch.compile() call before it (compile_s:
compile time for compiled modes);
warm-up iterations (warmup_s); then the timed iterations. Peak memory covers the
first call onwards; the accuracy check compares the last timed output with the eager one.
"""
import torch

from runner import accuracy, faults, memory, records
from runner.archcheck import bf16_problem
from runner.compile import compile_model, counters_snapshot, dynamo_stats, reset
from runner.precision import apply_precision
from runner.timing import self_check, summarize, synchronize, time_iterations

clock = records.clock
# Modes whose Inductor config turns on CUDA graphs (cudagraph trees): each call starts a step.
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")


def run_cell(job, marks=None):
    """The record of one cell. ``marks`` (a dict) gets clock() stamps of phase starts."""
    marks = {} if marks is None else marks
    record = records.new_record(job)
    try:
        record["precision"] = apply_precision()
        reset()
        with torch.no_grad():
            _measure(job, record, marks)
        record["status"] = "ok"
    except Exception as exc:
        records.fail_with_exception(record, exc)
    return records.finish(record, job)


def _measure(job, record, marks):
    cell, settings, device = job["cell"], record["settings"], job["device"]
    compiled = cell["mode"] != "eager"
    refuse_unsupported(cell, device)
    built, load_s = _load(cell, device, marks)
    reference = _reference(built) if compiled else None
    memory.reset_peak(device)
    before = counters_snapshot()
    step, compile_s = _compile_and_call_once(built, cell, device, marks)
    after_first_call = counters_snapshot()
    warmup_s = _timed(step, settings["warmup"], device)
    marks["first_timed_iteration"] = clock()
    samples_ms, output, loop_wall_ms = time_iterations(step, settings["iterations"], device)
    record["memory"] = memory.peak(device)
    stats = summarize(samples_ms, settings["cv_threshold"])
    record["timing"] = dict(load_s=load_s, compile_s=compile_s, warmup_s=warmup_s,
                            timer="cuda_event" if device == "cuda" else "perf_counter",
                            **stats, **self_check(stats["mean_ms"], loop_wall_ms, stats["n"]))
    if compiled:
        record["dynamo"] = dynamo_stats(before, after_first_call, counters_snapshot())
        record["accuracy"] = accuracy.compare(reference, output, settings["accuracy_tolerance"])
    else:
        record["accuracy"] = accuracy.skipped()


class UnsupportedOnThisGpu(RuntimeError):
    """A cell this GPU cannot run natively (bfloat16 below compute capability 8.0)."""


def refuse_unsupported(cell, device, cuda=None):
    if device != "cuda" or cell["dtype"] != "bfloat16":
        return
    cuda = cuda or torch.cuda
    problem = bf16_problem(cuda.get_device_capability(0), cuda.get_device_name(0))
    if problem:
        raise UnsupportedOnThisGpu(problem)


class ReferenceOutOfMemory(RuntimeError):
    """The eager reference call of a compiled cell ran out of memory (not the compiled mode)."""


def _reference(built):
    """The eager output the compiled one is checked against, as CPU tensors."""
    try:
        return accuracy.to_cpu(built.model(**built.inputs))
    except Exception as exc:
        if records.is_out_of_memory(exc):
            raise ReferenceOutOfMemory(f"out of memory in the eager reference call (before compiling; "
                                       f"the compiled mode never ran): {exc}") from exc
        raise


def _load(cell, device, marks):
    marks["build"] = clock()
    built = _build(cell, device)
    synchronize(device)
    return built, clock() - marks["build"]


def _compile_and_call_once(built, cell, device, marks):
    """The step to time, and compile_s: torch.compile() itself plus the first call."""
    marks["first_call"] = clock()
    faults.inject(cell["fault"])
    step = _step(compile_model(built.model, cell["mode"], cell["fullgraph"]), built.inputs,
                 cell["mode"], device)
    _timed(step, 1, device)
    return step, clock() - marks["first_call"]


def _build(cell, device):
    from runner import models  # imported here so a broken models module is a cell error

    return models.build(cell, device, getattr(torch, cell["dtype"]))


def _step(model, inputs, mode, device):
    """One inference call. CUDA-graph modes on GPU mark a new cudagraph-trees step first."""
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    if mode in CUDAGRAPH_MODES and device == "cuda" and mark_step is not None:
        def step():
            mark_step()
            return model(**inputs)
        return step
    return lambda: model(**inputs)


def _timed(step, calls, device):
    """Wall seconds for ``calls`` calls, device work included."""
    start = clock()
    for _ in range(calls):
        step()
    synchronize(device)
    return clock() - start
