"""Issue 32 item 3, the GPU part: the runner's noise probe (runner.noise_probe) and its reading on the host
(matrixbench.host_noise: doctor --measure and the start of a GPU run).

The GPU branches cannot run here: their fakes are built from REAL GPU output, never invented numbers:
- the H100 (tests/data/gpu-evidence/h100-2026-11-26, copied from /work/shared/gpu-evidence): a matrixbench
  record of ResNet-50 eager at batch 1 with 2,000 per-call event times (``second/runner_sequential_...``:
  launch-bound, stall-laden, its level wandering), and ResNet-50 reduce-overhead (300 CUDA-graph replays);
- the H200 acceptance run (benchmarks/results/gpu/NVIDIA-H200-20261126-after): records of schema 4 with
  per-call event times (``samples_ms`` and ``extended.extra_samples_ms``) and per-call CPU-side launch times
  (``timing.host.launch_samples_ms``) of the same calls.
The CPU path runs for real (torch on this machine's CPU, a second or two).
"""
import itertools
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from matrixbench import host_noise
from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
from matrixbench.report.stats import detectable_at, judge
from matrixbench.run import noise_check
from runner import noise_probe

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
H100 = TESTS / "data" / "gpu-evidence" / "h100-2026-11-26"
H200 = REPO / "benchmarks" / "results" / "gpu" / "NVIDIA-H200-20261126-after" / "acceptance" / "latest"
H100_NAME = "NVIDIA H100 80GB HBM3"


def _timing(path):
    return json.loads(Path(path).read_text())["timing"]


def _calls(timing):
    """Every timed call of a schema-4 record, in order: the first N, then the loop's extension."""
    return list(timing["samples_ms"]) + list((timing.get("extended") or {}).get("extra_samples_ms") or [])


def h100_probe(launch_samples=None):
    """A probe result as runner.noise_probe writes it on a GPU, its calls the H100's: the launch-bound probe
    ResNet-50 eager at batch 1 (2,000 calls of one process), the GPU-bound one ResNet-50 reduce-overhead. The
    H100 records predate the launch timer: launch_ms is null (unknown), as the record's."""
    eager = _timing(H100 / "second" / "runner_sequential_resnet_eager_2000.json")["samples_ms"]
    graphs = _timing(H100 / "run-acc" / "acc" / "latest" / "resnet_bs1_reduce-overhead_float32.json")["samples_ms"]
    launch = launch_samples or eager
    return {"device": "cuda", "gpu_name": H100_NAME, "torch": "2.11.0+cu130", "seconds": None,
            "host": {"steal_share": None, "involuntary_ctx_switches": None},
            "launch_bound": {"calls": len(launch), "samples_ms": launch, "launch_ms": None},
            "gpu_bound": {"calls": len(graphs), "samples_ms": graphs, "launch_ms": None}, "gpu_bound_why": None}


def h200_probe(eager_record="resnet_bs1_eager_float32.json"):
    """The same from the H200's schema-4 records, with the real per-call launch times beside the event times."""
    eager, graphs = _timing(H200 / eager_record), _timing(H200 / "resnet_bs1_reduce-overhead_float32.json")
    return {"device": "cuda", "gpu_name": "NVIDIA H200", "seconds": None, "host": {},
            "launch_bound": {"samples_ms": _calls(eager), "launch_ms": eager["host"]["launch_samples_ms"]},
            "gpu_bound": {"samples_ms": _calls(graphs), "launch_ms": graphs["host"]["launch_samples_ms"]}}


def test_detectable_at_is_what_judge_reports_at_that_spread():
    import numpy as np

    levels = np.exp(np.array([-1.0, 0.0, 1.0]) * 0.08)   # SD of the logs 0.08 on both sides
    assert detectable_at(0.08, 3) == pytest.approx(judge(levels, levels, margin_pct=3.0).detectable_pct)
    assert detectable_at(0.0, 3) == 0.0 and detectable_at(0.05, 5) < detectable_at(0.05, 3)
    with pytest.raises(ValueError):
        detectable_at(0.05, 1)
    assert host_noise.resolvable_pct(0.08, 3) == detectable_at(0.08, 3)


def test_the_h100_launch_bound_samples_warn_that_launch_bound_verdicts_will_be_undecided():
    noise = host_noise.read_probe(h100_probe())
    launch = noise.launch
    assert launch["calls"] == 2000 and launch["stalls"] > 0 and launch["stall_laden"]   # the H100's stalls
    assert launch["launch_bound_share"] is None   # not recorded on the H100: unknown, not guessed
    assert launch["block_cv"] > 0.05 and noise.launch_resolvable_pct > host_noise.UNDECIDED_PCT
    assert noise.launch_resolvable_pct == pytest.approx(detectable_at(launch["block_cv"], 3))
    assert noise.gpu is not None and noise.gpu_resolvable_pct < host_noise.UNDECIDED_PCT < noise.launch_resolvable_pct
    assert noise.warns
    text = "\n".join(noise.lines())
    assert f"noise probe on cuda ({H100_NAME})" in text and "launch-bound share unknown" in text
    assert "launch-bound verdicts will mostly come out undecided" in text
    for helps in ("reduce-overhead", "bigger batches", "more repeats", "quieter machine"):
        assert helps in text
    assert "for GPU-bound cells (CUDA graphs, big batches)" in text


def test_a_reduce_overhead_cells_quiet_samples_do_not_warn():
    graphs = _timing(H100 / "run-acc" / "acc" / "latest" / "resnet_bs1_reduce-overhead_float32.json")["samples_ms"]
    noise = host_noise.read_probe(h100_probe(launch_samples=graphs))
    assert not noise.warns and noise.launch_resolvable_pct < host_noise.UNDECIDED_PCT
    assert noise.launch["stalls"] == 0
    assert not any("undecided" in line for line in noise.lines())


def test_the_h200_launch_times_say_which_probe_is_launch_bound():
    noise = host_noise.read_probe(h200_probe())
    assert noise.launch["launch_bound"] and noise.launch["launch_bound_share"] > 0.95   # eager at batch 1
    assert not noise.gpu["launch_bound"] and noise.gpu["launch_bound_share"] < 0.6      # CUDA-graph replays
    assert "launch-bound share 0.99" in noise.lines()[0]
    # the H200's two eager processes of one cell: the first wandered within itself, the second did not
    assert noise.warns and not host_noise.read_probe(h200_probe("resnet_bs1_eager_float32.r1.json")).warns


def test_the_probe_runs_for_real_on_the_cpu_with_the_same_fields():
    result = noise_probe.probe("cpu", seconds=1.0)
    assert result["device"] == "cpu" and result["gpu_name"] is None and result["torch"]
    assert result["gpu_bound"] is None and "no GPU" in result["gpu_bound_why"]
    launch = result["launch_bound"]
    assert launch["calls"] == len(launch["samples_ms"]) > 10 and launch["launch_ms"] is None
    summary = launch["summary"]
    gpu_summary = noise_probe.summarize(*[h200_probe()["launch_bound"][key] for key in ("samples_ms", "launch_ms")],
                                        "cuda")
    assert set(summary) == set(gpu_summary)   # the same fields on the CPU as on a GPU
    assert summary["launch_bound_share"] == 1.0 and len(summary["block_means_ms"]) == noise_probe.BLOCKS
    assert set(result["host"]) == {"steal_share", "involuntary_ctx_switches"}
    noise = host_noise.read_probe(result)
    assert noise.device == "cpu" and noise.gpu is None and noise.gpu_resolvable_pct is None
    assert noise.launch_resolvable_pct == pytest.approx(detectable_at(summary["block_cv"], 3))
    assert "GPU-bound cells: not measured (device cpu: no GPU" in "\n".join(noise.lines())


def test_the_runner_cli_writes_the_probe_through_the_local_backend(tmp_path):
    """The start of a run, for real on the CPU: the probe in the runner started by the local backend
    (``python -m runner --cells ... --noise-probe S``), its result judged and kept in the run folder."""
    from matrixbench.environments import create_backend
    from matrixbench.matrix import expand_cells, load_matrix
    from runner.cells_file import validate_settings

    cell = expand_cells(load_matrix(REPO / "matrix-cpu-smoke.yaml"))[0]
    request = RunRequest(ImageRef("local"), Work([cell], validate_settings({"device": "cpu"})),
                         Paths(tmp_path / "out", hf_cache_dir=tmp_path / "hf"))
    lines = []
    kept = noise_check.run_check(create_backend("local"), request, tmp_path / "run", lines.append, seconds=1.0)
    assert kept["status"] == "measured", lines
    assert kept["device"] == "cpu" and kept["gpu_bound_resolvable_pct"] is None
    written = json.loads((tmp_path / "run" / "noise_check.json").read_text())
    assert written["probe"]["launch_bound"]["samples_ms"] and written["judged"]["device"] == "cpu"
    assert any(line.startswith("noise probe on cpu") for line in lines)
    assert not list((tmp_path / "out").glob("*.json"))   # no record, nothing in the image's folder


class ProbeBackend:
    """A backend whose 'runner' writes a probe result built from real GPU samples where the real runner would
    (``<out_dir>/noise_probe.json``), or fails as a runner can."""

    name = "fake"

    def __init__(self, result=None, exit_code=0):
        self.result, self.exit_code, self.requests = result, exit_code, []

    def run(self, request):
        self.requests.append(request)
        assert request.work.mode_argv()[0] == "--noise-probe" and not request.work.runs_cells
        if self.result is not None:
            path = Path(request.paths.out_dir) / noise_probe.PROBE_FILENAME
            path.write_text(json.dumps(self.result))
        return self.exit_code


def _gpu_request(tmp_path):
    from matrixbench.matrix import expand_cells, load_matrix

    cell = expand_cells(load_matrix(REPO / "matrix-cpu-smoke.yaml"))[0]
    return RunRequest(ImageRef("stable", torch="torch==2.11.0"), Work([cell, cell], {"device": "cuda"},
                                                                          schedule=((0, 0), (1, 0))),
                      Paths(tmp_path / "stable", hf_cache_dir=tmp_path / "hf"))


def test_run_check_keeps_the_h100_statement_and_warning(tmp_path):
    backend = ProbeBackend(h100_probe())
    lines = []
    kept = noise_check.run_check(backend, _gpu_request(tmp_path), tmp_path, lines.append)
    assert kept["status"] == "measured" and kept["warns"] and kept["gpu_name"] == H100_NAME
    assert kept["launch_bound_resolvable_pct"] > host_noise.UNDECIDED_PCT > kept["gpu_bound_resolvable_pct"]
    assert kept["lines"] == lines and any("mostly come out undecided" in line for line in lines)
    sent = backend.requests[0]
    assert len(sent.work.cells) == 1 and sent.work.schedule == () and sent.paths.out_dir == tmp_path / ".noise-check"
    written = json.loads((tmp_path / "noise_check.json").read_text())
    assert written["probe"]["launch_bound"]["samples_ms"] == h100_probe()["launch_bound"]["samples_ms"]


@pytest.mark.parametrize("backend, why", [(ProbeBackend(None, exit_code=1), "exit code 1"),
                                          (ProbeBackend({"device": "cuda"}), "no calls")])
def test_a_check_that_cannot_measure_is_a_status_line_not_a_failure(tmp_path, backend, why):
    lines = []
    kept = noise_check.run_check(backend, _gpu_request(tmp_path), tmp_path, lines.append)
    assert kept["status"] == "not measured" and why in kept["why"]
    assert lines == [line for line in lines if line.startswith("noise check: not measured (")] and len(lines) == 1
    assert not (tmp_path / "noise_check.json").exists()


def test_a_gpu_run_checks_before_its_first_cell_unless_told_not_to(tmp_path):
    from matrixbench.matrix import load_matrix
    from matrixbench.run import command as run_module
    from matrixbench.run.manifest import read_manifest, start_manifest

    notes = []
    progress = SimpleNamespace(note=notes.append)
    work = SimpleNamespace(pending=[object()], image_name="stable", out_dir=tmp_path / "stable")   # no records yet
    request = _gpu_request(tmp_path)

    def a_run(noise_check=True, gpus=True, executor=None):
        options = SimpleNamespace(noise_check=noise_check, executor=executor)
        return SimpleNamespace(gpus=gpus, works=[work], options=options, path=tmp_path, request=lambda w: request)

    matrix = load_matrix(REPO / "matrix-cpu-smoke.yaml")
    manifest = start_manifest(tmp_path, run_name="r", matrix=matrix, backend="fake", device="cuda", gpus=True,
                              note=None, command=("matrixbench", "run"))
    checked = run_module._noise_check(ProbeBackend(h100_probe()), a_run(), manifest, progress)
    assert checked["noise_check"]["status"] == "measured" and checked["noise_check"]["warns"]
    assert read_manifest(tmp_path)["noise_check"]["file"] == "noise_check.json"
    assert notes[0].startswith("noise check: measuring") and any("undecided" in note for note in notes)

    notes.clear()
    skipped = run_module._noise_check(ProbeBackend(h100_probe()), a_run(noise_check=False), manifest, progress)
    assert skipped["noise_check"] == {"status": "skipped", "why": "--no-noise-check"}
    assert notes == ["noise check: skipped (--no-noise-check)"]
    notes.clear()
    assert run_module._noise_check(ProbeBackend(), a_run(gpus=False), manifest, progress) is manifest and not notes


def fake_python(tmp_path, probe):
    """An 'interpreter' with torch: ``-m runner.noise_probe --out F`` writes ``probe`` (real GPU samples) to F."""
    data = tmp_path / "probe.json"
    data.write_text(json.dumps(probe))
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n[ \"$1\" = -c ] && exit 0  # import torch: fine\n"
                      "while [ \"$1\" != --out ]; do shift; done\n"
                      f"cp '{data}' \"$2\"\n")
    script.chmod(0o755)
    return str(script)


def test_doctor_measure_states_the_gpu_probe_and_warns_on_the_h100_samples(tmp_path, monkeypatch):
    monkeypatch.setattr(host_noise, "CPU_LOOP_S", 0.2)
    lines = []
    found = host_noise.doctor_check(python=fake_python(tmp_path, h100_probe()), emit=lines.append)
    text = "\n".join(lines)
    assert found["probe"]["warns"] and found["probe_why"] is None
    assert "rounds of a fixed CPU workload" in text and f"noise probe on cuda ({H100_NAME})" in text
    assert text.count("processes a side resolves about") == 1   # the probe's statement, not the CPU loop's too
    assert "launch-bound verdicts will mostly come out undecided" in text


def test_doctor_measure_without_a_probe_says_so_and_states_the_cpu_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(host_noise, "CPU_LOOP_S", 0.2)
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexit 1\n")   # no torch
    script.chmod(0o755)
    lines = []
    found = host_noise.doctor_check(python=str(script), emit=lines.append)
    assert found["probe"] is None and "has no torch" in found["probe_why"]
    assert any(line.startswith("noise probe (a small launch-bound model") and "not measured" in line
               for line in lines)
    assert any("measured here by a CPU loop only; GPU-bound cells: not measured" in line for line in lines)


@pytest.mark.skipif(not os.path.exists(sys.executable), reason="needs this interpreter")
def test_doctor_measures_the_probe_for_real_in_this_interpreter(monkeypatch):
    monkeypatch.setattr(host_noise, "CPU_LOOP_S", 0.2)
    lines = []
    found = host_noise.doctor_check(emit=lines.append, probe_seconds=1.0)
    assert found["probe"] is not None, lines
    assert found["probe"]["device"] in ("cpu", "cuda") and any(line.startswith("noise probe on ") for line in lines)


def test_the_gpu_loop_pairs_each_calls_event_time_with_its_launch_time():
    """runner.noise_probe._loop's GPU branch without a GPU: a stand-in for torch.cuda whose events give the
    H200's real per-call event times, in order; the loop keeps one event time and one launch time per call."""
    measured = _calls(_timing(H200 / "resnet_bs1_eager_float32.json"))
    real = itertools.cycle(measured)
    synced = []

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            return None

        def synchronize(self):
            synced.append(1)

        def elapsed_time(self, other):
            return next(real)

    cuda = SimpleNamespace(Event=Event, synchronize=lambda: None)
    calls = []
    loop = noise_probe._loop(SimpleNamespace(cuda=cuda), lambda: calls.append(1), True, seconds=0.05)
    assert loop["calls"] == len(loop["samples_ms"]) == len(loop["launch_ms"]) == len(synced) > 0
    assert len(calls) == loop["calls"] + noise_probe.WARMUP_CALLS   # warm-up calls are not timed
    count = min(loop["calls"], len(measured))
    assert loop["samples_ms"][:count] == measured[:count]
    assert all(value >= 0.0 for value in loop["launch_ms"])


def test_the_graph_capture_warms_on_a_side_stream_and_captures_one_call():
    """runner.noise_probe._graph without a GPU: a stand-in for torch.cuda that logs what the probe asks of it, in
    torch's documented order for whole-network capture (warm-up on a side stream, the current stream waiting for
    it, one call under torch.cuda.graph); the probe's replay is the captured graph's."""
    from contextlib import contextmanager

    log = []

    class Stream:
        def __init__(self, name="side"):
            self.name = name

        def wait_stream(self, other):
            log.append(f"{self.name} waits for {other.name}")

    class CUDAGraph:
        def replay(self):
            log.append("replay")

    current = Stream("current")

    @contextmanager
    def on(stream):
        log.append(f"on {stream.name}")
        yield
        log.append(f"off {stream.name}")

    @contextmanager
    def graph(captured):
        log.append("capture")
        yield
        log.append("captured")

    cuda = SimpleNamespace(Stream=Stream, current_stream=lambda: current, stream=on, CUDAGraph=CUDAGraph, graph=graph,
                           synchronize=lambda: log.append("synchronize"))
    replay = noise_probe._graph(SimpleNamespace(cuda=cuda), lambda example: log.append(f"model({example})"), "x")
    assert log == ["side waits for current", "on side", *["model(x)"] * 3, "off side", "current waits for side",
                   "capture", "model(x)", "captured", "synchronize"]
    replay()
    assert log[-1] == "replay"


def _stand_in_torch(measured, graph, graph_class=object):
    """A stand-in torch for runner.noise_probe.measure without a GPU: its events give ``measured`` (real per-call
    event times) in turn, its CUDA-graph capture is ``graph`` (a context manager) and ``graph_class``."""
    from contextlib import nullcontext

    real = itertools.cycle(measured)

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            return None

        def synchronize(self):
            return None

        def elapsed_time(self, other):
            return next(real)

    class Stream:
        def wait_stream(self, other):
            return None

    cuda = SimpleNamespace(Event=Event, synchronize=lambda: None, Stream=Stream, current_stream=Stream,
                           stream=lambda stream: nullcontext(), CUDAGraph=graph_class, graph=graph,
                           get_device_name=lambda: "NVIDIA H200")
    return SimpleNamespace(cuda=cuda, no_grad=nullcontext, __version__="2.11.0+cu130")


def test_a_capture_that_fails_says_why_the_gpu_bound_probe_was_not_measured_and_keeps_the_launch_bound_one(tmp_path):
    """runner.noise_probe.measure without a GPU: a stand-in torch whose events give the H200's real per-call event
    times and whose CUDA-graph capture raises (as capture does where an op is not capturable): the launch-bound
    probe stands, the GPU-bound one is "not measured" with why, in the probe's result, the statement, run.json's
    summary and the report's note."""
    from contextlib import contextmanager

    from matrixbench.report import host_notes

    measured = _calls(_timing(H200 / "resnet_bs1_eager_float32.json"))

    @contextmanager
    def graph(captured):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nCompile with "
                           "TORCH_USE_CUDA_DSA to enable device-side assertions.")
        yield

    torch = _stand_in_torch(measured, graph=graph)
    result = json.loads(json.dumps(noise_probe.measure(torch, lambda example: None, "x", "cuda", seconds=0.05)))
    why = ("the CUDA graph could not be captured: RuntimeError: CUDA error: operation not permitted when stream "
           "is capturing")
    assert result["gpu_bound"] is None and result["gpu_bound_why"] == why
    launch = result["launch_bound"]
    assert launch["calls"] > 0 and launch["samples_ms"] == list(itertools.islice(itertools.cycle(measured),
                                                                                 launch["calls"]))
    assert result["device"] == "cuda" and result["gpu_name"] == "NVIDIA H200"

    noise = host_noise.read_probe(result)
    assert noise.gpu is None and noise.gpu_resolvable_pct is None and noise.gpu_why == why
    assert noise.launch_resolvable_pct == pytest.approx(detectable_at(noise.launch["block_cv"], 3))
    statement = noise.lines()[-2 if noise.warns else -1]
    assert f"resolves about {noise.launch_resolvable_pct:.1f}% here for launch-bound cells" in statement
    assert f"; GPU-bound cells: not measured ({why})" in statement

    kept = noise_check.run_check(ProbeBackend(result), _gpu_request(tmp_path), tmp_path, lambda line: None)
    assert kept["status"] == "measured" and kept["gpu_bound_resolvable_pct"] is None and kept["gpu_bound_why"] == why
    [note, *_] = host_notes.check_lines("r", host_notes.read_noise_check({"noise_check": kept}))
    assert f"resolves about {noise.launch_resolvable_pct:.1f}% there for launch-bound cells" in note
    assert f"GPU-bound cells: not measured ({why})" in note


def test_a_captured_graph_that_cannot_replay_says_why_and_keeps_the_launch_bound_probe():
    """The other failure of the GPU-bound probe: capture succeeds, the replay raises (an illegal access that shows
    only when the graph runs); the launch-bound probe stands, the GPU-bound one is not measured, the first line of
    the error says why."""
    from contextlib import nullcontext

    class Graph:
        def replay(self):
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                               "asynchronously reported")

    measured = _calls(_timing(H200 / "resnet_bs1_eager_float32.json"))
    torch = _stand_in_torch(measured, graph=lambda captured: nullcontext(), graph_class=Graph)
    result = noise_probe.measure(torch, lambda example: None, "x", "cuda", seconds=0.05)
    assert result["gpu_bound"] is None and result["launch_bound"]["calls"] > 0
    assert result["gpu_bound_why"] == ("the captured CUDA graph could not be replayed: RuntimeError: CUDA error: an "
                                       "illegal memory access was encountered")


def test_the_warning_threshold_is_where_launch_bound_verdicts_of_a_true_10_percent_change_turn_mostly_undecided():
    """host_noise.UNDECIDED_PCT, calibrated: on the host fitted to the H100 records (tests/hostsim.py, from the copy
    in tests/data), its noise scaled from quiet upwards, the probe figure at which the verdicts of a true 10% change
    of a launch-bound cell, 3 processes a side, come out half undecided lies within 10% of the threshold; hosts whose
    probes read well below it mostly decide, those well above mostly do not. Where processes differed only as the
    probe's blocks do (no spread between processes the blocks cannot see), the threshold would warn too early: the
    spread the probe misses is why it sits below that bound. The full sweep: benchmarks/bench_noise_threshold.py."""
    import numpy as np

    import hostsim
    from matrixbench.report import stats, verdicts

    host, _ = hostsim.fit(hostsim.REPO_EVIDENCE)
    calls = hostsim.probe_calls(hostsim.scaled(host, 0.13), np.random.default_rng(0))
    assert hostsim.block_cv(calls) == pytest.approx(noise_probe.summarize(calls.tolist(), None, "cuda")["block_cv"])

    assert hostsim.figures([0.05])[0] == pytest.approx(host_noise.resolvable_pct(0.05, 3))

    rows = hostsim.threshold_sweep(host, (0.04, 0.06, 0.08, 0.1, 0.13, 0.16, 0.2, 0.3), probes=201, trials=1000)
    crossing = hostsim.undecided_crossing(rows)   # 8.96% here; 8.4-9.0% over other seeds
    assert crossing / 1.1 <= host_noise.UNDECIDED_PCT <= crossing * 1.1, (crossing, rows)
    for row in rows:
        if row["probe_pct"] < host_noise.UNDECIDED_PCT / 1.5:
            assert row["undecided"] < 0.5, row
        if row["probe_pct"] > host_noise.UNDECIDED_PCT * 1.5:
            assert row["undecided"] > 0.5, row

    rng = np.random.default_rng(9)
    cv = next(step / 1000.0 for step in range(1, 200)
              if host_noise.resolvable_pct(step / 1000.0, 3) > host_noise.UNDECIDED_PCT)
    sides = [np.exp(rng.normal(0.0, cv, (4000, 3))) * factor for factor in (1.0, 1.1)]
    bound = np.mean(stats.judge_many(*sides, margin_pct=verdicts.MARGIN_PCT).verdict == "undecided")
    assert bound < 0.4, bound


def test_asking_for_cuda_where_torch_sees_no_gpu_is_refused_by_name():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="--device cuda: torch sees no GPU"):
        noise_probe.probe("cuda", seconds=0.01)
