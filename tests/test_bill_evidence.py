"""The bill and the dry run's order against the first real GPU run (tests/data/gpu/h100-2026-11-26,
issue 30 item 3): with that run's records in the results folder, the estimate for the rest of the run
lands within 25% of the pace those records show (the model alone billed 2.2x); and the dry run lists
the processes in the order the run took them (model by model), from the executors' own order."""
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from matrixbench.cli import main
from matrixbench.executors.adaptive import bill_seconds, policy_of
from matrixbench.executors.scheduler import Estimates, make_units, run_order, takes_units
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.run.dry_run import describe_plan
from matrixbench.run.pending import pending_work
from runner.schema import read_record

EVIDENCE = Path(__file__).parent / "data" / "gpu" / "h100-2026-11-26"
MODELS = ("vit", "resnet", "detr-resnet-101")   # run.log's `run --models vit,resnet,detr-resnet-101`


def matrix():
    return load_matrix(EVIDENCE / "acceptance.yaml", Overrides(models=list(MODELS)))


def results_with_the_h100_records(tmp_path):
    shutil.copytree(EVIDENCE / "run-acc", tmp_path / "results")
    return tmp_path / "results" / "acc"


def pace_the_records_show(run_path):
    """Seconds per process as the records ran: from the first record's start to the last one's end
    (runner starts between them included), over the number of records."""
    records = [read_record(path) for path in sorted((run_path / "latest").glob("*.json"))]
    spans = [(datetime.fromisoformat(r["started_at"]).timestamp(), float(r["duration_s"])) for r in records]
    wall = max(start + duration for start, duration in spans) - min(start for start, _ in spans)
    return wall / len(records)


def test_the_bill_for_the_rest_of_the_h100_run_is_within_25_percent_of_its_records(tmp_path):
    run_path = results_with_the_h100_records(tmp_path)
    m = matrix()
    works = pending_work(m, run_path)
    pending = sum(len(work.pending) for work in works)
    assert pending == 7   # the 18 processes of run.log less the 11 records: ViT's 6 and ResNet default's 2nd
    truth = pending * pace_the_records_show(run_path)
    order = run_order(works, takes_units(None, m.slots, gpus=True))
    estimate, _ = bill_seconds(policy_of(m), works, estimates=Estimates(), runners=len(order))
    assert abs(estimate / truth - 1) <= 0.25, (estimate, truth)


def test_the_scheduler_model_alone_bills_the_h100_run_far_too_high(tmp_path):
    """What the bill did before (no pace of this machine, no runner starts): the same folder read by
    the model's seconds for ViT; shows the 25% test above can fail."""
    run_path = results_with_the_h100_records(tmp_path)
    works = pending_work(matrix(), run_path)

    class ModelOnly(Estimates):
        def pace_here(self, work, mode):
            return None
    old, _ = bill_seconds(policy_of(matrix()), works, estimates=ModelOnly())
    truth = sum(len(work.pending) for work in works) * pace_the_records_show(run_path)
    assert old / truth > 1.5


def test_the_runner_start_is_measured_from_the_gaps_between_runners(tmp_path):
    run_path = results_with_the_h100_records(tmp_path)
    works = pending_work(matrix(), run_path)
    start = Estimates().runner_start_s(works)
    records = [read_record(path) for path in (run_path / "latest").glob("*.json")]
    longest = max(float(r["duration_s"]) for r in records)
    assert start is not None and 2.0 <= start < longest


def test_a_new_run_bills_runner_starts_as_the_earlier_run_beside_it_measured_them(tmp_path):
    """A new run has no records of its own, so no gaps: its runner starts are the newest earlier run's (the H100
    run under the same results root), not 0 (the make-matrix bill left them out); with no earlier run, None."""
    run_path = results_with_the_h100_records(tmp_path)
    earlier = Estimates().runner_start_s(pending_work(matrix(), run_path))
    new_works = pending_work(matrix(), run_path.parent / "acc2")
    assert all(work.done == 0 for work in new_works)
    assert earlier is not None and Estimates().runner_start_s(new_works) == earlier
    assert Estimates().runner_start_s(pending_work(matrix(), tmp_path / "elsewhere" / "acc2")) is None


def test_an_image_folders_cells_file_is_no_record_and_no_warning(tmp_path, capsys):
    """Every image folder holds its cells.json beside the records (the backends write it): the bill reads the
    folder's records and leaves it out, without the "not a complete record" warning a new run printed."""
    run_path = results_with_the_h100_records(tmp_path)
    before = Estimates().runner_start_s(pending_work(matrix(), run_path.parent / "acc2"))
    (run_path / "latest" / "cells.json").write_text('{"schema_version": 5, "cells": []}')
    capsys.readouterr()
    assert Estimates().runner_start_s(pending_work(matrix(), run_path.parent / "acc2")) == before
    assert "cells.json" not in capsys.readouterr().err


def test_the_dry_run_lists_the_order_the_slots_executor_takes(tmp_path):
    """On a GPU the run went model by model (run.log: DETR's six processes, then ResNet's): the dry run
    prints make_units' order, the one the slots executor runs, not the images' interleaved one."""
    m = matrix()
    run_path = tmp_path / "results" / "acc"
    text = describe_plan(m, run_path, False, False, executor=None, device="cuda")
    listed = re.findall(r"\[runner (\d+)\] latest: (\S+) (\S+) bs=1 float32 repeat (\d)", text)
    assert len(listed) == 18
    taken = [(work.label, repeat.cell.model, repeat.cell.mode, repeat.index)
             for unit in make_units(pending_work(m, run_path)) for work, repeats in unit.rounds() for repeat in repeats]
    assert [(model, mode, int(index) - 1) for _, model, mode, index in listed] == [t[1:] for t in taken]
    models = [model for _, model, _, _ in listed]
    assert models == sorted(models, key=lambda name: models.index(name))   # model by model, never interleaved
    assert "model by model" in text


def test_the_dry_run_order_matches_the_h100_runs_log():
    """run.log's [i/18] lines name each process's model as it ran: the dry run's first 11 agree."""
    log = (EVIDENCE / "run.log").read_text(encoding="utf-8")
    ran = re.findall(r"\[\d+/18\] slot 0 latest (\S+) (\S+) bs=1", log)
    text = describe_plan(matrix(), Path("/nonexistent/results/acc"), False, False, executor=None, device="cuda")
    listed = re.findall(r"\[runner (\d+)\] latest: (\S+) (\S+) bs=1", text)
    assert [model for model, _ in ran] == [model for _, model, _ in listed][:len(ran)]
    # within a runner the modes are the same set (their order is the run's seed's)
    assert sorted(ran[:3]) == sorted((model, mode) for _, model, mode in listed[:3])


def test_the_cli_dry_run_prints_the_order_and_this_machines_bill(tmp_path):
    run_path = results_with_the_h100_records(tmp_path)
    result = CliRunner().invoke(main, ["run", "--matrix", str(EVIDENCE / "acceptance.yaml"), "--models",
                                       ",".join(MODELS), "--results", str(run_path.parent), "--run", "acc",
                                       "--backend", "venv", "--executor", "sequential", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "latest: 7 to run, 11 done" in result.output
    assert "image by image, round by round" in result.output
    assert "this machine's pace" in result.output and "runner start(s)" in result.output


def _timeline(run_path, spans):
    """Records of one cell in two image folders at the given (image, repeat, start s, duration s)."""
    from types import SimpleNamespace

    from host_helpers import make_record
    from matrixbench.run.layout import image_dir
    from runner.core import Cell
    from runner.schema import write_record

    cell = Cell("vit", "image-classification", "random", "tiny", 1, "eager", False, "float32")
    for image, repeat, start, duration in spans:
        record = make_record(cell)
        record.repeat, record.duration_s = repeat, duration
        record.started_at = datetime.fromtimestamp(1_780_000_000 + start).astimezone().isoformat()
        write_record(image_dir(run_path, image), record)
    return [SimpleNamespace(out_dir=image_dir(run_path, image)) for image in ("stable", "latest")]


def test_runner_starts_are_read_on_one_timeline_across_the_images(tmp_path):
    """A sequential run takes the images in turn: one image's folder alone would count the other image's runner
    (20 s here) as its own start (5 s)."""
    works = _timeline(tmp_path / "r", [("stable", 0, 0, 10), ("latest", 0, 15, 10), ("stable", 1, 30, 10),
                                       ("latest", 1, 45, 10)])
    assert Estimates().runner_start_s(works) == 5


def test_a_pair_in_turns_overlaps_and_its_next_start_counts_from_the_later_end(tmp_path):
    """Two runners in turns run at once (their records overlap): the next pair's start is counted from the end of
    the later one, and the overlap is no gap."""
    works = _timeline(tmp_path / "r", [("stable", 0, 0, 10), ("latest", 0, 1, 12), ("stable", 1, 17, 10),
                                       ("latest", 1, 18, 9)])
    assert Estimates().runner_start_s(works) == 4


GPU_RESULTS = Path(__file__).parents[1] / "benchmarks" / "results" / "gpu"
GPU_RUNS = [EVIDENCE / "run-acc" / "acc" / "latest", *sorted(GPU_RESULTS.glob("NVIDIA-H200-*/acceptance/latest"))]


def test_the_generic_runner_start_is_what_the_committed_gpu_runs_measured():
    """scheduler.RUNNER_START_S["full"] (a new folder's runner start, and the noise check's PROBE_START_S) is the
    median of the runner gaps in the committed H100 and H200 runs, each folder on its own timeline; tiny is make
    matrix's CPU smoke run's median gap (benchmarks/results/model_s_tiny_cpu.json)."""
    import json
    import statistics

    from matrixbench.executors.scheduler import RUNNER_START_S
    from matrixbench.run.noise_check import PROBE_START_S

    # H100 11-26, H200 11-26 before and after, H200 11-28 (one runner, so no gap: its budget cut the run short)
    assert len(GPU_RUNS) == 4 and all(folder.is_dir() for folder in GPU_RUNS)
    gaps = [gap for folder in GPU_RUNS for gap in Estimates()._runner_gaps([folder])]
    assert len(gaps) == 7
    assert RUNNER_START_S["full"] == round(statistics.median(gaps), 1) == PROBE_START_S
    tiny = json.loads((Path(__file__).parents[1] / "benchmarks" / "results" / "model_s_tiny_cpu.json").read_text())
    assert RUNNER_START_S["tiny"] == round(tiny["runs"][0]["runner_start_s"], 1)


def test_a_new_folder_with_no_run_beside_it_bills_a_typical_runner_start_and_says_so(tmp_path):
    """Where no record here or beside shows a start, the bill counts RUNNER_START_S a runner (it counted 0) and
    its line says the figure is typical, not measured; with the H100 records beside, the line says measured."""
    from matrixbench.executors.adaptive import bill
    from matrixbench.executors.scheduler import RUNNER_START_S

    m = matrix()
    works = pending_work(m, tmp_path / "elsewhere" / "acc2")
    none, _ = bill_seconds(policy_of(m), works, estimates=Estimates(), runners=0)
    three, _ = bill_seconds(policy_of(m), works, estimates=Estimates(), runners=3)
    assert three - none == pytest.approx(3 * RUNNER_START_S["full"])
    assert Estimates().start_s(works) == (RUNNER_START_S["full"], False)
    assert "3 runner start(s) at 9 s each, a typical start: no record here shows one yet" in \
        bill(policy_of(m), works, estimates=Estimates(), runners=3)
    beside = pending_work(m, results_with_the_h100_records(tmp_path).parent / "acc2")
    measured = Estimates().runner_start_s(beside)
    assert Estimates().start_s(beside) == (measured, True)
    assert f"3 runner start(s) at {measured:.0f} s as measured here" in \
        bill(policy_of(m), beside, estimates=Estimates(), runners=3)
