"""What the report shows of a slot run's placement (issue 15): the environment table lists each image's
slots, GPUs, cores, NUMA nodes and busy slots, and an image-against-image row whose sides ran on different
GPUs (by UUID) carries a warning, counted in the summary and explained in the legend.

Records are built by the runner's own record builder (host_helpers.synthetic_record) with SYNTHETIC
latencies, GPUs and placements: nothing here was measured.
"""
import json

import pytest

from host_helpers import synthetic_record
from matrixbench.report import build_report, records
from matrixbench.report.cells import CellIndex
from matrixbench.report.document import assemble
from matrixbench.report.published import load_published
from matrixbench.report.tables import MIXES_GPUS
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.timing import summarize

GPU_A = "GPU-aaaaaaaa-SYNTHETIC-0000-000000000000"
GPU_B = "GPU-bbbbbbbb-SYNTHETIC-0000-000000000001"
TORCH = {"old": "2.0.1", "new": "2.1.0"}
SLOTS = {0: (GPU_A, [0, 1, 2, 3], 0), 1: (GPU_B, [4, 5, 6, 7], 1)}   # slot -> (GPU, cores, NUMA node)


def _record(image, model, mode, slot, device="cuda", repeat=0):
    cell = {"model": model, "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": mode, "fullgraph": False, "dtype": "float32", "attention": "eager"}
    plan = cells_file_from_dict({"settings": {"iterations": 10}, "image_name": image, "cells": [cell]})
    gpu = device == "cuda"
    uuid, cores, numa = SLOTS[slot]
    environment = {"python": "3.10", "torch": TORCH[image], "torch_git": None, "transformers": "4.43.4",
                   "cuda": "11.8" if gpu else None, "cudnn": None, "gpu_name": "SYNTHETIC GPU" if gpu else None,
                   "gpu_uuid": uuid if gpu else None, "gpu_count": 1 if gpu else 0, "driver": None,
                   "cpu_model": "SYNTHETIC CPU", "threads": len(cores), "platform": "SYNTHETIC",
                   "hostname": "synthetic", "image_name": image, "image_id": None}
    record = synthetic_record(plan, device, environment)
    mean = {"eager": 100.0, "default": 80.0}[mode] + slot
    record.status, record.duration_s, record.repeat = Status.OK, 1.0, repeat
    record.memory = {"peak_bytes": 1, "kind": "cuda_max_allocated" if gpu else "cpu_max_rss"}
    record.accuracy = {"max_abs_diff": None, "tolerance": None, "status": "skipped" if mode == "eager" else "pass"}
    record.timing = {"load_s": 1.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "perf_counter",
                     **summarize([mean - 1.0, mean + 1.0] * 5, 0.1)}
    record.placement = {"slot": slot, "cores": cores, "gpu_index": slot if gpu else None,
                        "gpu_uuid": uuid if gpu else None, "numa_node": numa, "slots": 2, "busy_slots": 2 - slot,
                        "affinity": cores}
    return record.to_dict()


# (image, model) -> slot: vit ran on slot 0 in both images; resnet moved from slot 0 to slot 1
PLACED = {("old", "vit"): 0, ("new", "vit"): 0, ("old", "resnet"): 0, ("new", "resnet"): 1}


def _write_run(root, device="cuda", placed=PLACED):
    run = root / "run"
    for (image, model), slot in placed.items():
        (run / image).mkdir(parents=True, exist_ok=True)
        for mode in ("eager", "default"):
            data = _record(image, model, mode, slot, device)
            (run / image / f"{data['cell_id']}.json").write_text(json.dumps(data))
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": list(TORCH)}))
    return run


def _report(folder):
    frame = records.load_results([folder])
    return assemble(CellIndex(frame, records.image_order(records.read_manifests([folder]))), load_published(),
                    [], charts=[])


def _column(table, header):
    return {row[1].text: row[table.header.index(header)].text for row in table.rows}


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    return _report(_write_run(tmp_path_factory.mktemp("placed")))


def test_the_environment_shows_each_images_slots_gpus_cores_numa_and_busy_slots(gpu_report):
    environment = gpu_report.environment
    assert _column(environment, "Slot") == {"old (torch 2.0.1)": "0", "new (torch 2.1.0)": "0, 1"}
    assert _column(environment, "Slot GPU index") == {"old (torch 2.0.1)": "0", "new (torch 2.1.0)": "0, 1"}
    assert _column(environment, "Slot GPU UUID")["new (torch 2.1.0)"] == f"{GPU_A}, {GPU_B}"
    assert _column(environment, "Cores") == {"old (torch 2.0.1)": "0-3", "new (torch 2.1.0)": "0-3, 4-7"}
    assert _column(environment, "NUMA node")["new (torch 2.1.0)"] == "0, 1"
    assert _column(environment, "Other slots timing")["new (torch 2.1.0)"] == "1, 2"


def test_a_row_whose_sides_ran_on_different_gpus_warns(gpu_report):
    table = gpu_report.image_pairs[0]
    warnings = {(row[0].text, row[1].text): row[table.header.index("Warning")] for row in table.rows}
    for mode in ("eager", "default"):
        assert warnings[("Image Classification/ResNet", mode)].text == f"{MIXES_GPUS} ({GPU_A} → {GPU_B})"
        assert warnings[("Image Classification/ViT", mode)].kind == "missing"
    assert MIXES_GPUS in gpu_report.legends["image_pairs"]


def test_the_summary_counts_the_rows_on_different_gpus(gpu_report):
    summary = gpu_report.summary_details   # the summary's detail table holds the image-pair counts
    counts = {(row[1].text, row[2].text): row[summary.header.index("image-pair rows on different GPUs")].text
              for row in summary.rows}
    assert counts[("new (torch 2.1.0)", "eager")] == "1" and counts[("new (torch 2.1.0)", "default")] == "1"
    assert counts[("old (torch 2.0.1)", "eager")] == "—"
    assert "image-pair rows mixing transformers/attention" not in summary.header   # nothing else mixes


def test_a_cell_whose_processes_ran_on_two_gpus_warns_even_beside_one_of_them(tmp_path):
    run = _write_run(tmp_path, placed={("old", "vit"): 0, ("new", "vit"): 0})
    data = _record("new", "vit", "eager", 1, repeat=1)               # a resumed run put repeat 1 on GPU B
    (run / "new" / f"{data['cell_id']}.r1.json").write_text(json.dumps(data))
    table = _report(run).image_pairs[0]
    eager = next(row for row in table.rows if row[1].text == "eager")
    assert eager[table.header.index("Warning")].text == f"{MIXES_GPUS} ({GPU_A} → {GPU_A}, {GPU_B})"


def test_cpu_records_have_no_uuid_and_no_gpu_warning(tmp_path):
    report = _report(_write_run(tmp_path, device="cpu"))
    assert not any("Warning" in table.header for table in report.image_pairs)
    assert MIXES_GPUS not in report.legends["image_pairs"]
    assert "image-pair rows on different GPUs" not in report.summary_details.header
    assert _column(report.environment, "Cores")["new (torch 2.1.0)"] == "0-3, 4-7"
    assert "Slot GPU UUID" not in report.environment.header


def test_the_markdown_shows_the_placement_and_the_warning(tmp_path):
    build_report([_write_run(tmp_path)], tmp_path / "out", ["md"])
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "| Slot | Slot GPU index | Slot GPU UUID | Cores | NUMA node | Other slots timing |" in markdown
    assert f"{MIXES_GPUS} ({GPU_A} → {GPU_B})" in markdown
