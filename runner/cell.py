"""One cell, measured inside its own process: build, compile, time, check, record.

``run_cell(job)`` never raises: a failure becomes the record's status (oom or error,
with type, message and traceback). Phases, under torch.no_grad():
build the model and inputs (load_s); for compiled modes, an eager reference output;
the first call timed on its own, with the torch.compile() call before it (first_call_s:
compile time for compiled modes);
warm-up iterations (warmup_s: at least the warm-up count, and on GPU at least
MIN_WARMUP_S); one untimed call counting host syncs (GPU); then the timed iterations, with
CUDA-graph captures/replays counted per phase (runner.cudagraphs) and the GPU's clocks,
temperature, power and throttling read before and after (runner.gpu_state) and the energy and
violation counters read immediately around it (runner.energy). Peak memory
covers the first call onwards; the accuracy check compares the last timed output with the
eager one. ``timing.flags`` lists what makes a number other than its label says:
no_cudagraphs, cudagraph_recaptured, throttled, timer_mismatch. In a slot run the timing board
(runner.timing_board) marks warm-up and timed loop, and with exclusive timing the phases before
them hold the board shared.
"""
import contextlib
import time

import torch

from runner import accuracy, cudagraphs, energy, faults, gpu_state, memory, records, timing_board
from runner.archcheck import bf16_problem, triton_problem
from runner.compile import compile_model, counters_snapshot, dynamo_stats, reset
from runner.core import Mode, Status
from runner.precision import apply_precision
from runner.syncs import count_host_syncs, timing_regime
from runner.timing import flags as timing_flags
from runner.timing import self_check, summarize, synchronize, time_iterations

clock = records.clock
CUDAGRAPH_MODES = cudagraphs.CUDAGRAPH_MODES   # each call starts a cudagraph-trees step
MIN_WARMUP_S = 1.0


def run_cell(job, marks=None):
    """The record of one cell. ``marks`` (a dict) gets clock() stamps of phase starts."""
    marks = {} if marks is None else marks
    record = records.new_record(job)
    try:
        available = (job.get("precision") or {}).get("tf32_available")
        record.precision = dict(apply_precision(job["cell"]), tf32_available=available)
        reset()
        with torch.no_grad():
            _measure(job, record, marks)
        record.status = Status.OK
    except Exception as exc:
        records.fail_with_exception(record, exc)
    return records.finish(record, job)


def _measure(job, record, marks):
    cell, settings, device = job["cell"], record.settings, job["device"]
    compiled = Mode(cell.mode).compiled
    refuse_unsupported(cell, device)
    board = timing_board.from_env()
    preparing = contextlib.ExitStack()
    preparing.enter_context(timing_board.preparing(board))   # exclusive timing: shared until timing
    with preparing:
        built, load_s = _load(cell, device, marks)
        record.attention = attention_record(cell, built)
        reference = _reference(built) if compiled else None
        memory.reset_peak(device)
        before = counters_snapshot()
        graphs = cudagraphs.counter_for(device)
        with graphs or contextlib.nullcontext():
            compile_from = time.time()
            step, first_call_s = _compile_and_call_once(built, job, device, marks)
            compile_window = [compile_from, time.time()] if compiled else None
            after_first_call = counters_snapshot()
            preparing.close()
            with timing_board.timing(board) as seen:
                warmup_s, warmup_calls = warm_up(step, settings["warmup"], min_warmup_s(device), device)
                syncs = count_host_syncs(step, device)
                loop, state, counted = _timed_loop(step, settings["iterations"], device, job, graphs, marks, seen)
    timing_board.annotate(record.placement, board, seen)
    record.memory = memory.peak(device)
    record.timing = _timing(loop, settings, device, cell.mode, graphs, state,
                     dict(load_s=load_s, first_call_s=first_call_s, warmup_s=warmup_s,
                          warmup_calls=warmup_calls, host_syncs_per_call=syncs), counted,
                     graphs_per_call=after_first_call["graphs"] - before["graphs"] if compiled else None)
    record.timing["windows"] = {"compile": compile_window, "timed": marks.pop("timed_window")}
    if compiled:
        record.dynamo = dynamo_stats(before, after_first_call, counters_snapshot())
        with timing_board.preparing(board):   # the float64 reference runs on the GPU: never beside a timed loop
            record.accuracy = accuracy.compare(reference, loop.output, settings["accuracy_tolerance"],
                                               fp64=lambda: accuracy.fp64_reference(built.model, built.inputs, device))
    else:
        record.accuracy = accuracy.skipped()


def _timed_loop(step, iterations, device, job, graphs, marks, seen=None):
    """The timed iterations, with the GPU's state read just before and just after them, the
    energy and violation counters (runner.energy) read immediately around them, and (``seen``,
    runner.timing_board) the other slots timing then: (loop, gpu_state, counters' blocks)."""
    seen = seen or timing_board.Seen()
    monitor = gpu_state.open_monitor(device, visible_uuid=(job["environment"] or {}).get("gpu_uuid"))
    start = monitor.sample() if monitor else None
    counters = energy.open_counters(device, getattr(monitor, "nvml", None), getattr(monitor, "handle", None),
                                    clock=clock)
    if graphs is not None:
        graphs.timed()
    seen.look()
    marks["first_timed_iteration"] = clock()
    counters.start()
    timed_from = time.time()
    loop = time_iterations(step, iterations, device)
    marks["timed_window"] = [timed_from, time.time()]
    counted = counters.stop()
    seen.look()
    end = monitor.sample() if monitor else None
    return loop, gpu_state.summarize(start, end), counted


def _timing(loop, settings, device, mode, graphs, state, phases, counted=None, graphs_per_call=None):
    """The record's ``timing``: phases, statistics, the self-check, CUDA-graph counts, GPU
    state, the loop's energy and violation times, and the flags that say a number is not what
    its label claims."""
    counted = counted or {"energy": None, "violations": None}
    stats = summarize(loop.samples_ms, settings["cv_threshold"])
    check = self_check(stats["mean_ms"], loop.loop_wall_ms, stats["n"])
    counts = graphs.summary(graphs_per_call) if graphs is not None else None
    flags = (cudagraphs.flags(counts, mode, device, stats["n"]) + gpu_state.flags(state, counted["violations"])
             + timing_flags(check))
    return dict(phases, timer="cuda_event" if device == "cuda" else "perf_counter", **stats, **check,
                regime=timing_regime(device, phases.get("host_syncs_per_call")),
                cudagraphs=counts, gpu_state=state, energy=counted["energy"], violations=counted["violations"],
                flags=flags)


def min_warmup_s(device):
    """On GPU the warm-up lasts at least MIN_WARMUP_S, so that compiled cells (after a long,
    GPU-idle compile) and eager ones start their timed loops from comparable clocks."""
    return MIN_WARMUP_S if device == "cuda" else 0.0


def warm_up(step, min_calls, min_seconds, device):
    """At least ``min_calls`` calls and ``min_seconds`` of them; (seconds, calls)."""
    start = clock()
    calls = 0
    while calls < min_calls or clock() - start < min_seconds:
        step()
        calls += 1
        if calls >= min_calls:
            synchronize(device)   # so the duration counts finished device work
    synchronize(device)
    return clock() - start, calls


def attention_record(cell, built):
    """The attention implementation asked for and the one the model uses (with the record's
    environment.transformers, what an image-vs-image comparison must hold equal)."""
    from runner.models import requested_attention

    return {"requested": requested_attention(cell), "used": built.attention}


class UnsupportedOnThisGpu(RuntimeError):
    """A cell this GPU cannot run (natively, or at all with this image's Triton): bfloat16 below
    compute capability 8.0; max-autotune on Hopper with Triton 2.0. Refused before it runs."""


def refuse_unsupported(cell, device, cuda=None, triton_version=None):
    """Raise UnsupportedOnThisGpu for a cell this GPU cannot run with this image; checked before
    the model is built, never by trying (Triton 2.0 on Hopper dies with SIGABRT, losing the record)."""
    if device != "cuda":
        return
    cuda = cuda or torch.cuda
    capability, name = cuda.get_device_capability(0), cuda.get_device_name(0)
    problem = bf16_problem(capability, name) if cell.dtype == "bfloat16" else None
    if problem is None and cell.mode == "max-autotune":
        problem = triton_problem(triton_version or _triton_version(), capability, name, cell.mode)
    if problem:
        raise UnsupportedOnThisGpu(problem)


def _triton_version():
    try:
        import triton
    except ImportError:
        return None
    return getattr(triton, "__version__", None)


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


def _compile_and_call_once(built, job, device, marks):
    """The step to time, and first_call_s: torch.compile() itself plus the first call."""
    cell = job["cell"]
    marks["first_call"] = clock()
    faults.inject(job.get("fault"), job.get("out_dir"))
    step = _step(compile_model(built.model, cell.mode, cell.fullgraph), built.inputs, cell.mode, device)
    _timed(step, 1, device)
    return step, clock() - marks["first_call"]


def _build(cell, device):
    from runner import models  # imported here so a broken models module is a cell error

    return models.build(cell, device, getattr(torch, cell.dtype))


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
