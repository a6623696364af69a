"""What the report shows of schema v2's evidence: timing flags, mixed transformers/attention, GPU UUID.

Records are built by the runner's own record builder (runner.records.new_record, runner.timing.summarize)
with SYNTHETIC round latencies on a SYNTHETIC GPU; the flags, CUDA-graph counts, clocks and wall-clock
means are what the runner would write, never measured here.
"""
import json
from pathlib import Path

import pytest

from host_helpers import synthetic_record
from matrixbench.report import build_report, records
from matrixbench.report.cells import CellIndex
from matrixbench.report.document import assemble
from matrixbench.report.published import load_published
from matrixbench.report.tables import FLAGGED_COLUMN, FLAGS, MIXES_ATTENTION, MIXES_TRANSFORMERS, PER_CALL_MARK
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.syncs import timing_regime
from runner.timing import summarize

FIXTURES = Path(__file__).parent / "fixtures"
GPU = "SYNTHETIC GPU"
UUID = "GPU-00000000-SYNTHETIC-0000-000000000000"
IMAGES = {"old": {"torch": "2.0.1", "transformers": "4.43.4"}, "new": {"torch": "2.1.0", "transformers": "4.43.4"}}
# (image, model, mode) -> flags; ATTENTION: (image, model) -> attention used
FLAGGED = {("new", "vit", "reduce-overhead"): ["no_cudagraphs"],
           ("new", "resnet", "reduce-overhead"): ["cudagraph_recaptured", "throttled"],
           ("old", "resnet", "default"): ["timer_mismatch"],
           ("old", "resnet", "reduce-overhead"): ["partial_cudagraphs"],
           ("new", "vit", "eager"): ["compile_overlap"],
           ("old", "vit", "default"): ["compile_cache_repaired"]}
ATTENTION = {("new", "vit"): "sdpa"}
SYNCS = {("old", "resnet"): 3}   # host syncs per call: these cells are timed as per-call latency
MODES = ("eager", "default", "reduce-overhead")


def _record(image, model, mode, transformers=None):
    cell = {"model": model, "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": mode, "fullgraph": False, "dtype": "float32", "attention": "eager"}
    plan = cells_file_from_dict({"settings": {"iterations": 10}, "image_name": image, "cells": [cell]})
    environment = {"python": "3.10", "torch": IMAGES[image]["torch"], "torch_git": None,
                   "transformers": transformers or IMAGES[image]["transformers"], "cuda": "11.8", "cudnn": 8700,
                   "gpu_name": GPU, "gpu_uuid": UUID, "gpu_count": 1, "driver": "SYNTHETIC",
                   "cpu_model": "SYNTHETIC CPU", "threads": 1, "platform": "SYNTHETIC", "hostname": "synthetic",
                   "image_name": image, "image_id": None}
    record = synthetic_record(plan, "cuda", environment)
    mean = {"eager": 100.0, "default": 80.0, "reduce-overhead": 50.0}[mode]
    flags = FLAGGED.get((image, model, mode), [])
    syncs = SYNCS.get((image, model), 0)
    record.status, record.duration_s = Status.OK, 1.0
    record.memory = {"peak_bytes": 1, "kind": "cuda_max_allocated"}
    record.accuracy = {"max_abs_diff": None, "tolerance": None, "status": "skipped" if mode == "eager" else "pass"}
    record.attention = {"requested": "eager", "used": ATTENTION.get((image, model), "eager")}
    sample = {"sm_clock_mhz": 1000.0, "mem_clock_mhz": 1000.0, "temperature_c": 50.0, "power_w": 100.0,
              "throttle_reasons": ["sw_power_cap"] if "throttled" in flags else []}
    record.timing = {"load_s": 1.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "cuda_event",
                     **summarize([mean - 1.0, mean + 1.0] * 5, 0.1),
                     "loop_wall_ms": mean * 20, "wall_mean_ms": mean * 2 if "timer_mismatch" in flags else mean,
                     "timer_mismatch": "timer_mismatch" in flags, "warmup_calls": 10,
                     "host_syncs_per_call": syncs, "regime": timing_regime("cuda", syncs),
                     "cudagraphs": {"warmup_captures": 1, "warmup_replays": 9,
                                    "timed_captures": 1 if "cudagraph_recaptured" in flags else 0,
                                    "timed_replays": 0 if "no_cudagraphs" in flags else 10,
                                    "graphs_per_call": 2 if "partial_cudagraphs" in flags else 1},
                     "gpu_state": {"start": sample, "end": sample, "throttled": "throttled" in flags},
                     "flags": flags}
    return record.to_dict()


def _write_run(root, transformers_new=None):
    run = root / "run"
    for image in IMAGES:
        (run / image).mkdir(parents=True)
        for model in ("vit", "resnet"):
            for mode in MODES:
                data = _record(image, model, mode, transformers_new if image == "new" else None)
                (run / image / f"{data['cell_id']}.json").write_text(json.dumps(data))
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": list(IMAGES)}))
    return run


def _report(folder):
    frame = records.load_results([folder])
    return assemble(CellIndex(frame, records.image_order(records.read_manifests([folder]))), load_published(),
                    [], charts=[])


def _cell(table, first_column, header, mode=None):
    row = next(row for row in table.rows if row[0].text == first_column and (mode is None or row[1].text == mode))
    return row[table.header.index(header)]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return _report(_write_run(tmp_path_factory.mktemp("flags")))


def test_flagged_cells_carry_each_flags_mark_and_a_footnote_saying_what_it_means(report):
    new = next(table for table in report.per_device if "new" in table.title)
    vit = _cell(new, "Image Classification/ViT", "reduce-overhead")
    assert vit.marks == FLAGS["no_cudagraphs"][0]
    text = report.footnotes[vit.footnote - 1]
    assert "this reduce-overhead/max-autotune number is a default-mode number" in text
    assert "timed loop 0/0" in text and "new (torch 2.1.0)" in text
    resnet = _cell(new, "Image Classification/ResNet", "reduce-overhead")
    assert resnet.marks == FLAGS["cudagraph_recaptured"][0] + FLAGS["throttled"][0]
    assert "sw_power_cap" in report.footnotes[resnet.footnote - 1]
    old = next(table for table in report.per_device if "old" in table.title)
    mismatch = report.footnotes[_cell(old, "Image Classification/ResNet", "default").footnote - 1]
    assert "event mean 80.000 ms, wall-clock mean 160.000 ms" in mismatch
    unflagged = _cell(old, "Image Classification/ViT", "reduce-overhead")
    assert not unflagged.marks and unflagged.footnote is None


def test_the_legend_explains_every_flag_present(report):
    for flag, (mark, meaning) in FLAGS.items():
        assert f"{mark} {flag}: {meaning}" in report.legends["per_device"]


def test_the_summary_counts_flagged_cells_per_image_and_mode(report):
    summary = report.summary
    counts = {(row[1].text, row[2].text): row[summary.header.index(FLAGGED_COLUMN)].text for row in summary.rows}
    assert counts[("new (torch 2.1.0)", "reduce-overhead")] == f"2 ({FLAGS['no_cudagraphs'][0]} 1, " \
        f"{FLAGS['cudagraph_recaptured'][0]} 1, {FLAGS['throttled'][0]} 1)"
    assert counts[("old (torch 2.0.1)", "default")] == \
        f"2 ({FLAGS['compile_cache_repaired'][0]} 1, {FLAGS['timer_mismatch'][0]} 1)"
    assert counts[("old (torch 2.0.1)", "eager")] == "0"


def test_a_row_whose_sides_used_different_attention_warns(report):
    table = report.image_pairs[0]
    assert _cell(table, "Image Classification/ViT", "Warning", "eager").text == f"{MIXES_ATTENTION} (eager → sdpa)"
    assert _cell(table, "Image Classification/ResNet", "Warning", "eager").kind == "missing"
    summary = report.summary_details   # the summary's detail table holds the image-pair counts
    mixed = {(row[1].text, row[2].text): row[-1].text for row in summary.rows}
    assert summary.header[-1] == "image-pair rows mixing transformers/attention"
    assert mixed[("new (torch 2.1.0)", "eager")] == "1" and mixed[("old (torch 2.0.1)", "eager")] == "—"
    assert MIXES_ATTENTION in report.legends["image_pairs"]


def test_a_row_whose_sides_ran_different_transformers_warns(tmp_path):
    report = _report(_write_run(tmp_path, transformers_new="5.23.0"))
    warning = _cell(report.image_pairs[0], "Image Classification/ResNet", "Warning", "default").text
    assert warning == f"{MIXES_TRANSFORMERS} (4.43.4 → 5.23.0)"
    assert {row[-1].text for row in report.summary_details.rows if row[1].text.startswith("new")} == {"2"}


def test_the_environment_shows_the_gpu_uuid_and_the_attention_per_image(report):
    environment = report.environment
    assert _cell(environment, GPU, "GPU UUID").text == UUID
    attention = {row[1].text: row[environment.header.index("Attention")].text for row in environment.rows}
    assert attention == {"old (torch 2.0.1)": "eager", "new (torch 2.1.0)": "eager, sdpa"}


def test_records_without_the_fields_show_nothing_new(tmp_path):
    report = _report(FIXTURES / "gpu-run")
    assert FLAGGED_COLUMN not in report.summary.header
    assert not any(table.header[-1] == "Warning" for table in report.image_pairs)
    assert not {"GPU UUID", "Attention"} & set(report.environment.header)
    assert not any(mark in report.legends["per_device"] for mark, _ in FLAGS.values())


def test_the_markdown_shows_marks_footnotes_and_warnings(tmp_path):
    build_report([_write_run(tmp_path)], tmp_path / "out", ["md", "html"])
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert f"50.000 (+100.0%){FLAGS['no_cudagraphs'][0]}[^" in markdown
    assert "measured without CUDA graphs" in markdown and UUID in markdown
    assert MIXES_ATTENTION in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")


def test_cells_timed_as_per_call_latency_are_marked_and_explained(report):
    table = next(table for table in report.per_device if "old" in table.title)
    assert PER_CALL_MARK in _cell(table, "Image Classification/ResNet", "eager").marks
    assert PER_CALL_MARK not in _cell(table, "Image Classification/ViT", "eager").marks
    assert f"{PER_CALL_MARK} per-call latency" in report.legends["per_device"]
