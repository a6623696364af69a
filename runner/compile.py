"""torch.compile for a cell's mode, and what dynamo did while the cell ran.

Counters come from ``torch._dynamo.utils.counters``, which every torch 2.x has:
- graphs: ``stats/unique_graphs``, graphs dynamo handed to the backend;
- graph_breaks and break_reasons: the ``graph_break`` counter, keyed by reason;
- recompiles: frames dynamo compiled after the first call (a guard failed while warming
  up or timing: the timed loop then measured a changed program). Portable from 2.0.1 on,
  which has no recompile counter of its own;
- cudagraph_skips: ``inductor/cudagraph_skips``, added in torch 2.4; null before.
"""
import os

import torch
import torch._dynamo

CUDAGRAPH_SKIPS_SINCE = "2.4"
MAX_REASONS = 50
MAX_REASON_CHARS = 1000


def compile_model(model, mode, fullgraph):
    """The callable to time: the model itself for eager, else a fresh torch.compile of it."""
    if mode == "eager":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode, fullgraph=fullgraph)


def reset():
    torch._dynamo.reset()


def use_cache_dir(directory):
    """Point Inductor's and Triton's caches into ``directory`` (for this process only).

    The runner gives each cell a fresh folder, so every cell compiles cold: a cache left by
    an earlier cell would make compile_s depend on run order. Tests and benchmarks may share
    one folder across cells to compile warm (driver.run_plan's compile_cache_dir).
    """
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(directory, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton")


def counters_snapshot():
    from torch._dynamo.utils import counters

    return {
        "graphs": counters["stats"]["unique_graphs"],
        "frames": counters["frames"]["ok"],
        "graph_breaks": dict(counters["graph_break"]),
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
    }


def dynamo_stats(before, after_first_call, end):
    """The record's ``dynamo`` object from three snapshots around the cell's calls."""
    breaks = {reason: count - before["graph_breaks"].get(reason, 0)
              for reason, count in end["graph_breaks"].items()}
    breaks = {reason: count for reason, count in breaks.items() if count > 0}
    skips = end["cudagraph_skips"] - before["cudagraph_skips"]
    return {
        "graphs": end["graphs"] - before["graphs"],
        "graph_breaks": sum(breaks.values()),
        "recompiles": end["frames"] - after_first_call["frames"] if after_first_call else None,
        "cudagraph_skips": skips if torch.__version__ >= CUDAGRAPH_SKIPS_SINCE else None,
        "break_reasons": [_short(reason) for reason in sorted(breaks)][:MAX_REASONS],
    }


def _short(reason):
    reason = str(reason)
    return reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS] + "..."
