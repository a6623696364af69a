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
import statistics
import time

import torch

from runner import (
    accuracy,
    cudagraphs,
    energy,
    faults,
    gpu_state,
    hash_cache,
    host,
    memory,
    records,
    timing_board,
    turns,
)
from runner.archcheck import bf16_problem, triton_problem
from runner.compile import compile_model, counters_snapshot, dynamo_stats, reset
from runner.compile_cache import mark_repaired, note_repair
from runner.core import Mode, Status
from runner.precision import apply_precision
from runner.syncs import count_host_syncs, timing_regime
from runner.timing import TimedLoop, extend_loop, extended_block, self_check, summarize, synchronize, time_iterations
from runner.timing import flags as timing_flags

clock = records.clock
CUDAGRAPH_MODES = cudagraphs.CUDAGRAPH_MODES   # each call starts a cudagraph-trees step
MIN_WARMUP_S = 1.0


def run_cell(job, marks=None, reply=None):
    """The record of one cell. ``marks`` (a dict) gets clock() stamps of phase starts. A job with ``turns``
    (runner.cells_file.Turns) takes turns with its partner (runner.turns): the baton is met before anything is
    built, the cell's whole measurement is this side's first turn, its blocks follow; ``reply`` (a dict, for the
    driver) gets ``no_partner``: true where the partner never came."""
    marks = {} if marks is None else marks
    session = turns.Session.connect(job.get("turns"), job["settings"]["timeout_s"])
    if session is not None:
        session.own_turn()
    record = records.new_record(job)
    step, board = None, None
    try:
        board = timing_board.from_env()   # read once: the cell's timed loop and its blocks in turns mark the same board
        available = (job.get("precision") or {}).get("tf32_available")
        record.precision = dict(apply_precision(job["cell"]), tf32_available=available)
        reset()
        with torch.no_grad():
            step = _measure(job, record, marks, board)
        record.status = Status.OK
    except Exception as exc:
        records.fail_with_exception(record, exc)
        if Mode(job["cell"].mode).compiled and record.status is Status.ERROR:
            mark_repaired(record, exc, job.get("compile_cache_dirs") or {})
    note_repair(record, job.get("compile_cache_repaired"))
    if session is not None:
        _take_turns(session, step, record, job, board)
        if reply is not None:
            reply["no_partner"] = session.no_partner
    return records.finish(record, job)


def _take_turns(session, step, record, job, board):
    """This side's blocks after its own part (a failed own part closes the baton at once); ``timing.turns``
    where the cell got as far as timing."""
    own_ok = record.status is Status.OK
    with torch.no_grad():
        session.blocks(step if own_ok else None, own_ok, record.settings["iterations"], job["device"],
                       threads=_torch_threads, timing=lambda: timing_board.timing(board))
    if isinstance(record.timing, dict):
        record.timing["turns"] = session.record()


def _torch_threads(count):
    """torch's intra-op threads: set to ``count`` (None: left as they are); returns them."""
    if count is not None:
        torch.set_num_threads(count)
    return torch.get_num_threads()


def _measure(job, record, marks, board):
    """The cell's measurement into ``record``; returns the step it timed (the compiled one for compiled cells).
    ``board``: the slot's timing board (runner.timing_board), None without slots."""
    cell, settings, device = job["cell"], record.settings, job["device"]
    compiled = Mode(cell.mode).compiled
    refuse_unsupported(cell, device)
    preparing = contextlib.ExitStack()
    preparing.enter_context(timing_board.preparing(board))   # exclusive timing: shared until timing
    with preparing:
        built, load_s = _load(cell, device, marks, job.get("out_dir"))
        record.attention = attention_record(cell, built)
        record.model_commit = built.commit
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
                watch = host.Watch()
                watch.speed_before = host.speed_reference()   # the host's speed, before the warm-up re-warms the GPU
                warmup_s, warmup_calls = warm_up(step, settings["warmup"], min_warmup_s(device), device)
                syncs = count_host_syncs(step, device)
                loop, state, counted = _timed_loop(step, settings["iterations"], device, job, graphs, marks, seen,
                                                   watch)
    timing_board.annotate(record.placement, board, seen)
    record.memory = memory.peak(device)
    record.timing = _timing(loop, settings, device, cell.mode, graphs, state,
                     dict(load_s=load_s, first_call_s=first_call_s, warmup_s=warmup_s,
                          warmup_calls=warmup_calls, host_syncs_per_call=syncs), counted,
                     graphs_per_call=after_first_call["graphs"] - before["graphs"] if compiled else None)
    record.timing["windows"] = {"compile": compile_window, "timed": marks.pop("timed_window")}
    extended = marks.pop("extended")
    record.timing["extended"] = extended
    record.timing["host"] = host_record(watch, loop, device, extended["extra_samples_ms"],
                                        marks.pop("extra_launch_ms", None))
    if compiled:
        record.dynamo = dynamo_stats(before, after_first_call, counters_snapshot())
        with timing_board.preparing(board):   # the float64 reference runs on the GPU: never beside a timed loop
            record.accuracy = accuracy.compare(reference, loop.output, settings["accuracy_tolerance"],
                                               fp64=lambda: accuracy.fp64_reference(built.model, built.inputs, device))
        loop = None   # the last output (CUDA-graph memory under reduce-overhead) is no longer needed
        if settings.get("paired", True):
            # the eager module, still there under the compiled one
            eager_step = _step(built.model, built.inputs, Mode.EAGER.value, device)
            with timing_board.timing(board):
                record.timing["paired"] = paired_blocks(eager_step, step, settings["iterations"], device,
                                                        settings["warmup"])
    else:
        record.accuracy = accuracy.skipped()
    return step


# Paired blocks (issue 32 item 2): PAIRED_BLOCKS block pairs of iterations // PAIRED_BLOCKS calls a side, the
# order alternating (eager first, then compiled first) so that a drift falls on both sides alike.
PAIRED_BLOCKS = 10


def paired_blocks(eager_step, compiled_step, iterations, device, warmup, time_loop=time_iterations, now=None):
    """Eager and compiled alternately in short blocks in this process, after the cell's own timed loop: the
    record's ``timing.paired``. Each block's time is the mean per call of its per-call timer (events on the GPU);
    ``eager_launch_ms`` / ``compiled_launch_ms`` the median CPU-side launch time (GPU; null on the CPU).
    ``eager_median_ms`` / ``compiled_median_ms``: the block's median call (a preemption inside a short block moves
    its mean, not its median). ``speedup_median``: the median over pairs of eager / compiled block means;
    ``speedup_median_of_medians`` of block medians (the verdict's statistics are the host's).
    The eager model is warmed first (``warmup`` calls, and on the GPU MIN_WARMUP_S)."""
    now = now or clock
    started = now()
    calls = max(1, iterations // PAIRED_BLOCKS)
    warmup_s, warmup_calls = warm_up(eager_step, warmup, min_warmup_s(device), device)
    sides = {"eager": eager_step, "compiled": compiled_step}
    pairs = []
    for index in range(PAIRED_BLOCKS):
        order = ("eager", "compiled") if index % 2 == 0 else ("compiled", "eager")
        pair = {"first": order[0]}
        for side in order:
            block = time_loop(sides[side], calls, device)
            pair[f"{side}_ms"] = statistics.fmean(block.samples_ms)
            pair[f"{side}_median_ms"] = statistics.median(block.samples_ms)
            pair[f"{side}_launch_ms"] = statistics.median(block.launch_ms) if block.launch_ms else None
            block = None
        pairs.append(pair)
    ratios = [p["eager_ms"] / p["compiled_ms"] for p in pairs if p["compiled_ms"] > 0]
    robust = [p["eager_median_ms"] / p["compiled_median_ms"] for p in pairs if p["compiled_median_ms"] > 0]
    return {"blocks": PAIRED_BLOCKS, "block_calls": calls, "pairs": pairs,
            "speedup_median": statistics.median(ratios) if ratios else None,
            "speedup_median_of_medians": statistics.median(robust) if robust else None,
            "eager_warmup_calls": warmup_calls, "eager_warmup_s": warmup_s, "duration_s": now() - started}


def host_record(watch, loop, device, extra_samples=(), extra_launch=None):
    """The record's ``timing.host`` (runner.host) over every call of the loop: launch-bound share, stalls,
    steal, context switches, speed reference before and after; ``marks`` lists what stands out."""
    launches = list(loop.launch_ms) + list(extra_launch or []) if loop.launch_ms is not None else None
    block = watch.block(list(loop.samples_ms) + list(extra_samples), launches, device)
    block["marks"] = host.flags(block)
    return block


def _timed_loop(step, iterations, device, job, graphs, marks, seen=None, watch=None):
    """The timed iterations, with the GPU's state read just before and just after them, the
    energy and violation counters (runner.energy) read immediately around them, and (``seen``,
    runner.timing_board) the other slots timing then: (loop, gpu_state, counters' blocks).
    ``watch`` (runner.host.Watch) takes the host's counters immediately around the loop and the
    speed reference after it."""
    seen = seen or timing_board.Seen()
    watch = watch or host.Watch()
    monitor = gpu_state.open_monitor(device, visible_uuid=(job["environment"] or {}).get("gpu_uuid"))
    start = monitor.sample() if monitor else None
    counters = energy.open_counters(device, getattr(monitor, "nvml", None), getattr(monitor, "handle", None),
                                    clock=clock)
    if graphs is not None:
        graphs.timed()
    seen.look()
    marks["first_timed_iteration"] = clock()
    settings = job.get("settings") or {}
    min_time = loop_min_time_s(settings.get("min_time_s", "auto"), counters)
    watch.start = host.snapshot()
    counters.start()
    timed_from = time.time()
    loop = time_iterations(step, iterations, device)
    if min_time > loop.loop_wall_ms / 1000.0 or settings.get("target_stdrel") is not None:
        # more calls may follow: no output of the first N stays alive through them (under reduce-overhead the
        # next CUDA-graph replays reuse its memory); the accuracy check takes the last call's output
        loop = TimedLoop.of(loop.samples_ms, None, loop.loop_wall_ms, loop.launch_ms)
    extra, reason = extend_loop(step, loop, device, min_time, settings.get("target_stdrel"),
                                settings.get("max_time_s", 10.0))
    marks["timed_window"] = [timed_from, time.time()]
    counted = counters.stop()
    watch.end = host.snapshot()
    watch.speed_after = host.speed_reference()
    seen.look()
    end = monitor.sample() if monitor else None
    if isinstance(counted.get("energy"), dict):
        counted["energy"]["calls"] = len(loop.samples_ms) + (len(extra.samples_ms) if extra else 0)
    marks["extended"] = extended_block(loop, extra, reason, settings.get("target_stdrel"), min_time)
    if extra is not None:   # the last output is the extension's (CUDA-graph outputs are overwritten by later calls)
        loop = TimedLoop.of(loop.samples_ms, extra.output, loop.loop_wall_ms, loop.launch_ms)
        marks["extra_launch_ms"] = extra.launch_ms
    elif loop.output is None:   # dropped for an extension that the noise criterion did not need: one more call
        loop = TimedLoop.of(loop.samples_ms, step(), loop.loop_wall_ms, loop.launch_ms)
    return loop, gpu_state.summarize(start, end), counted


def loop_min_time_s(setting, counters):
    """The timed loop's minimum duration: the setting, or for "auto" energy.ENERGY_MIN_S where an energy
    counter is open (so that its figure's stated error stays under 10%), else 0."""
    if setting == "auto":
        return energy.ENERGY_MIN_S if getattr(counters, "has_energy", False) else 0.0
    return float(setting or 0.0)


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


def _load(cell, device, marks, out_dir=None):
    marks["build"] = clock()
    built = _build(cell, device, out_dir)
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


def _build(cell, device, out_dir=None):
    from runner import models  # imported here so a broken models module is a cell error

    hashes = hash_cache.runner_cache(out_dir) if out_dir else None   # a local model's files read once a folder
    return models.build(cell, device, getattr(torch, cell.dtype), hashes)


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
