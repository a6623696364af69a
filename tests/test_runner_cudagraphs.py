"""The CUDA-graph capture/replay counter, against a fake CUDAGraph class shaped like torch's."""
import torch

from runner.cudagraphs import GraphCounter, counter_for, flags


class _BaseGraph:
    """Stands in for torch._C._CUDAGraph: the C++ methods the Python class calls."""

    def capture_begin(self, pool=None, capture_error_mode="global"):
        self.log.append("capture")

    def replay(self):
        self.log.append("replay")


class FakeCUDAGraph(_BaseGraph):
    """Shaped like torch.cuda.CUDAGraph (torch/cuda/graphs.py): Python overrides calling super()."""

    def __init__(self):
        self.log = []

    def capture_begin(self, pool=None, capture_error_mode="global"):
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def replay(self):
        super().replay()


def _tree_step(graphs):
    """What a cudagraph-trees step does: record the first time, replay afterwards."""
    if not graphs:
        graph = FakeCUDAGraph()
        graph.capture_begin(pool=None)
        graphs.append(graph)
    graphs[0].replay()


def test_counts_warmup_and_timed_separately():
    graphs = []
    with GraphCounter(FakeCUDAGraph) as counter:
        for _ in range(3):
            _tree_step(graphs)
        counter.timed()
        for _ in range(5):
            _tree_step(graphs)
    assert counter.summary(1) == {"warmup_captures": 1, "warmup_replays": 3,
                                  "timed_captures": 0, "timed_replays": 5, "graphs_per_call": 1}
    assert graphs[0].log == ["capture"] + ["replay"] * 8  # the real methods still ran


def test_restores_the_class_on_exit_even_after_an_error():
    own_replay = FakeCUDAGraph.__dict__["replay"]
    try:
        with GraphCounter(FakeCUDAGraph):
            raise RuntimeError("cell failed")
    except RuntimeError:
        pass
    assert FakeCUDAGraph.__dict__["replay"] is own_replay


def test_inherited_methods_are_wrapped_and_removed_again():
    class Subclass(FakeCUDAGraph):
        pass

    with GraphCounter(Subclass) as counter:
        Subclass().replay()
    assert counter.summary()["warmup_replays"] == 1
    assert "replay" not in Subclass.__dict__


def test_wraps_torchs_real_class_and_restores_it():
    original = torch.cuda.CUDAGraph.__dict__["replay"]
    with GraphCounter(torch.cuda.CUDAGraph):
        assert torch.cuda.CUDAGraph.__dict__["replay"] is not original
    assert torch.cuda.CUDAGraph.__dict__["replay"] is original


def test_no_counter_on_cpu():
    assert counter_for("cpu") is None
    assert isinstance(counter_for("cuda"), GraphCounter)


def test_flags():
    ran = {"warmup_captures": 1, "warmup_replays": 2, "timed_captures": 0, "timed_replays": 300}
    skipped = dict(ran, warmup_captures=0, warmup_replays=0, timed_replays=0)
    recaptured = dict(ran, timed_captures=2)
    assert flags(ran, "reduce-overhead", "cuda") == []
    assert flags(skipped, "reduce-overhead", "cuda") == ["no_cudagraphs"]
    assert flags(skipped, "max-autotune", "cuda") == ["no_cudagraphs"]
    assert flags(skipped, "default", "cuda") == []
    assert flags(recaptured, "reduce-overhead", "cuda") == ["cudagraph_recaptured"]
    assert flags(None, "reduce-overhead", "cpu") == []


def _model_step(graphs, graphed):
    """One call of a model compiled into len(graphs) graphs, of which only ``graphed`` got a
    CUDA graph (the others skipped: a CPU input or a mutation on 2.0.1/2.1.0)."""
    for index in range(len(graphs)):
        if index < graphed:
            if not graphs[index]:
                graph = FakeCUDAGraph()
                graph.capture_begin()
                graphs[index].append(graph)
            graphs[index][0].replay()


def test_partial_cudagraph_skips_are_flagged():
    for graphed, expected in ((3, []), (2, ["partial_cudagraphs"]), (0, ["no_cudagraphs"])):
        graphs = [[], [], []]
        with GraphCounter(FakeCUDAGraph) as counter:
            _model_step(graphs, graphed)
            counter.timed()
            for _ in range(50):
                _model_step(graphs, graphed)
        assert flags(counter.summary(graphs_per_call=3), "reduce-overhead", "cuda", iterations=50) == expected
    # older records (no graphs_per_call) are judged as before
    assert flags({"warmup_captures": 1, "warmup_replays": 1, "timed_captures": 0, "timed_replays": 5},
                 "reduce-overhead", "cuda", iterations=50) == []


def test_the_report_says_what_was_expected(monkeypatch):
    from matrixbench.report import tables

    monkeypatch.setattr(tables, "_where", lambda row: "here")
    row = {"timing.flags": ["partial_cudagraphs"], "timing.n": 50, "timing.cudagraphs.graphs_per_call": 3,
           "timing.cudagraphs.warmup_captures": 2, "timing.cudagraphs.warmup_replays": 2,
           "timing.cudagraphs.timed_captures": 0, "timing.cudagraphs.timed_replays": 100}
    note = tables._flag_note(row)
    assert f"{tables.FLAGS['partial_cudagraphs'][0]} partial_cudagraphs" in note
    assert "timed loop 0/100 of 3 graph(s) x 50 calls" in note
