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

from runner.core import Mode
from runner.versions import at_least

CUDAGRAPH_SKIPS_SINCE = "2.4"
MAX_REASONS = 50
MAX_REASON_CHARS = 1000


def compile_model(model, mode, fullgraph):
    """The callable to time: the model itself for eager, else a fresh torch.compile of it."""
    if not Mode(mode).compiled:
        return model
    return torch.compile(model, mode=None if mode == "default" else mode, fullgraph=fullgraph)


def reset():
    torch._dynamo.reset()


def use_cache_dirs(cache_dirs):
    """Set this process's Inductor and Triton cache variables (None: torch's default).

    The values come from the parent (driver.compile_cache_dirs), never from this process's
    own environment: importing torch sets TORCHINDUCTOR_CACHE_DIR to its default as a side
    effect. The cell runs in its own process, so this changes nothing outside the cell.
    """
    for variable, directory in cache_dirs.items():
        if directory is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = directory


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
        "cudagraph_skips": skips if counts_cudagraph_skips(torch.__version__) else None,
        "break_reasons": [_short(reason) for reason in sorted(breaks)][:MAX_REASONS],
    }


def counts_cudagraph_skips(torch_version):
    """Whether this torch counts ``inductor/cudagraph_skips`` (2.4 and later, 2.10 included)."""
    return at_least(torch_version, CUDAGRAPH_SKIPS_SINCE)


def _short(reason):
    reason = str(reason)
    return reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS] + "..."
