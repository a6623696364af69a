"""Proof that CUDA graphs ran: captures and replays counted per phase of a cell.

torch 2.0.1 and 2.1.0 skip CUDA graphs for a graph with a CPU tensor input or an input
mutation and only log it, so a reduce-overhead cell can silently time default mode. Every
CUDA graph torch makes (cudagraph trees, ``torch.cuda.graph``, ``make_graphed_callables``)
is a ``torch.cuda.CUDAGraph`` whose ``capture_begin`` and ``replay`` are Python methods
since torch 2.0.1 (``torch/cuda/graphs.py``); ``GraphCounter`` wraps them on the class for
the cell's process and counts the calls of each phase ("warmup" until ``timed()``).

Inside the timed loop a replay costs one extra Python call and one integer increment
(~0.1 us), against a replay's own launch of tens of microseconds.
"""
import functools

from runner.core import Mode

PHASES = ("warmup", "timed")
# Modes whose Inductor config turns on CUDA graphs.
CUDAGRAPH_MODES = tuple(mode.value for mode in Mode if mode.cudagraphs)


class GraphCounter:
    """Counts ``capture_begin`` and ``replay`` calls on ``graph_class`` while entered."""

    def __init__(self, graph_class):
        self._class = graph_class
        self._saved = {}
        self.phase = PHASES[0]
        self.counts = {phase: {"captures": 0, "replays": 0} for phase in PHASES}

    def __enter__(self):
        for method, kind in (("capture_begin", "captures"), ("replay", "replays")):
            original = self._class.__dict__.get(method, getattr(self._class, method))
            self._saved[method] = (method in self._class.__dict__, original)
            setattr(self._class, method, self._counting(original, kind))
        return self

    def __exit__(self, *exc_info):
        for method, (own, original) in self._saved.items():
            if own:
                setattr(self._class, method, original)
            else:
                delattr(self._class, method)
        self._saved.clear()
        return False

    def timed(self):
        """From now on, calls count for the timed loop."""
        self.phase = "timed"

    def _counting(self, original, kind):
        counter = self

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            counter.counts[counter.phase][kind] += 1
            return original(*args, **kwargs)
        return wrapper

    def summary(self, graphs_per_call=None):
        """The record's ``cudagraphs`` object; ``graphs_per_call``: the graphs Dynamo compiled for
        the first call, each of which a CUDA-graph mode replays once per call."""
        counts = {f"{phase}_{kind}": count for phase, kinds in self.counts.items() for kind, count in kinds.items()}
        return dict(counts, graphs_per_call=graphs_per_call)


def counter_for(device):
    """A GraphCounter on torch's CUDAGraph on GPU; None on CPU (no graph can run there)."""
    if device != "cuda":
        return None
    import torch

    return GraphCounter(torch.cuda.CUDAGraph)


def flags(summary, mode, device, iterations=None):
    """Flags a record gets from its counts.

    no_cudagraphs: a CUDA-graph mode on GPU whose timed loop replayed no graph (it timed
    default mode under another name); partial_cudagraphs: it replayed fewer than one CUDA graph
    per compiled graph per call (``graphs_per_call`` x ``iterations``: some graphs ran without,
    e.g. skipped for a CPU input or a mutation on 2.0.1/2.1.0); cudagraph_recaptured: a capture
    inside the timed loop (re-recording: the loop timed capture work).
    """
    if summary is None or device != "cuda":
        return []
    found = []
    expected = (summary.get("graphs_per_call") or 0) * (iterations or 0)
    if mode in CUDAGRAPH_MODES and summary["timed_replays"] == 0:
        found.append("no_cudagraphs")
    elif mode in CUDAGRAPH_MODES and summary["timed_replays"] < expected:
        found.append("partial_cudagraphs")
    if summary["timed_captures"] > 0:
        found.append("cudagraph_recaptured")
    return found
