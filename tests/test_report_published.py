"""The published dataset agrees with the seed page's Markdown tables, cell by cell."""
import csv
import re
from collections import Counter
from pathlib import Path

import pytest

from matrixbench import resources
from matrixbench.report.published import (
    COLUMNS,
    DATASET_NOTES,
    GPUS,
    MODEL_NAMES,
    SeedFormatError,
    load_published,
    match_gpu,
    parse_seed_tables,
    write_dataset,
)

SEED_PATH = resources.published_seed()
DATASET_PATH = resources.published_dataset()
SHARED_SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "perf_torch_compile.md"


def _dataset_rows():
    with open(DATASET_PATH, newline="") as handle:
        return list(csv.DictReader(handle))


def test_vendored_seed_equals_the_shared_one():
    if not SHARED_SEED.exists():
        pytest.skip(f"{SHARED_SEED} is not checked out beside the repo")
    assert SEED_PATH.read_bytes() == SHARED_SEED.read_bytes()


def test_vendored_seed_keeps_its_license_header():
    assert "Licensed under the Apache License, Version 2.0" in SEED_PATH.read_text(encoding="utf-8")


def test_dataset_equals_the_parsed_seed_tables_cell_by_cell():
    parsed = [{key: str(value) for key, value in row.items()} for row in parse_seed_tables(SEED_PATH.read_text())]
    dataset = _dataset_rows()
    assert len(dataset) == len(parsed)
    for number, (expected, actual) in enumerate(zip(parsed, dataset), start=2):
        assert actual == expected, f"published_torch_compile.csv line {number}"


def test_every_number_in_the_seed_tables_is_in_the_dataset_once():
    # Independent of the parser: every value cell of every table row, read with one regex.
    seed = SEED_PATH.read_text(encoding="utf-8")
    table_rows = [line for line in seed.splitlines() if re.match(r"\|\s*(Image|Object)", line)]
    values = Counter(cell.strip() for line in table_rows for cell in line.strip(" |").split("|")[-2:])
    published = Counter(row["latency_ms"] or "OOM" for row in _dataset_rows())
    assert published == values


def test_dataset_covers_the_published_gpus_batch_sizes_and_tables():
    frame = load_published()
    assert set(frame["gpu"]) == set(GPUS)
    assert set(frame["batch_size"]) == {1, 4, 16}
    assert set(frame["table"]) == {"main", "nightly", "reduce-overhead"}
    assert set(frame["mode"]) == {"eager", "default", "reduce-overhead"}
    assert set(frame["model"]) <= set(MODEL_NAMES.values())
    assert list(frame.columns) == list(COLUMNS)


def test_oom_is_kept_as_a_status_without_a_latency():
    frame = load_published()
    oom = frame[frame["status"] == "oom"]
    assert not oom.empty and oom["latency_ms"].isna().all()
    assert frame[frame["status"] == "ok"]["latency_ms"].gt(0).all()


def test_unbatched_rows_are_batch_size_one():
    seed = "## PyTorch Nightly\n### T4\n| **Task/Model** | **Batch Size** | **a** | **b** |\n" \
           "|:---:|:---:|:---:|:---:|\n| Object Detection/DETR | Unbatched | 68.382 | 53.481 |\n"
    rows = parse_seed_tables(seed)
    assert [(row["batch_size"], row["mode"], row["model"], row["torch"]) for row in rows] == [
        (1, "eager", "detr", "2.1.0dev nightly"), (1, "default", "detr", "2.1.0dev nightly")]


def test_unknown_model_rows_are_refused():
    seed = "### A100 (batch size: 1)\n| Image Classification/Swin | 1.0 | 2.0 |\n"
    with pytest.raises(SeedFormatError, match="Image Classification/Swin"):
        parse_seed_tables(seed)


def test_a_value_that_is_neither_latency_nor_oom_is_refused():
    seed = "### A100 (batch size: 1)\n| Image Classification/ViT | 1.0 | n/a |\n"
    with pytest.raises(SeedFormatError, match="'n/a'"):
        parse_seed_tables(seed)


def test_write_dataset_round_trips(tmp_path):
    rows = parse_seed_tables(SEED_PATH.read_text())
    write_dataset(rows, tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_bytes() == DATASET_PATH.read_bytes()


# GPU names as nvidia-smi --query-gpu=name / torch.cuda.get_device_name() print them.
REAL_GPU_NAMES = {
    "NVIDIA A100-SXM4-40GB": "A100", "NVIDIA A100-SXM4-80GB": "A100", "NVIDIA A100-PCIE-40GB": "A100",
    "NVIDIA A100 80GB PCIe": "A100", "A100-SXM4-40GB": "A100",
    "Tesla V100-SXM2-16GB": "V100", "Tesla V100-SXM2-32GB": "V100", "Tesla V100-PCIE-16GB": "V100",
    "Tesla V100-PCIE-32GB": "V100", "Tesla V100-FHHL-16GB": "V100",
    "Tesla T4": "T4", "NVIDIA T4": "T4",
    # not one of the page's GPUs: compared by speed-up ratios
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb": None, "NVIDIA A100-SXM4-80GB MIG 3g.40gb": None,
    "NVIDIA A100 80GB PCIe MIG 7g.80gb": None,
    "Tesla V100S-PCIE-32GB": None, "NVIDIA A800-SXM4-80GB": None, "NVIDIA A100X": None, "NVIDIA T4G": None,
    "GRID A100X-4C": None, "GRID T4-16Q": None,
    "NVIDIA H100 80GB HBM3": None, "NVIDIA H100 PCIe": None, "NVIDIA H100 NVL": None, "NVIDIA H200": None,
    "NVIDIA L4": None, "NVIDIA A10G": None, "NVIDIA A10": None, "NVIDIA L40S": None,
    "NVIDIA GeForce RTX 4090": None, "Tesla P100-PCIE-16GB": None, "": None, None: None,
}


@pytest.mark.parametrize("name, expected", REAL_GPU_NAMES.items())
def test_match_gpu(name, expected):
    assert match_gpu(name) == expected


# ---- issue 12: the dataset can catch misfiled sections ------------------------------------

KEY = ("table", "gpu", "batch_size", "model", "torch", "mode")


def test_dataset_key_is_unique():
    keys = Counter(tuple(row[column] for column in KEY) for row in _dataset_rows())
    assert [key for key, count in keys.items() if count > 1] == []


@pytest.mark.parametrize("table, values, oom", [("main", 204, 4), ("nightly", 36, 4), ("reduce-overhead", 32, 0)])
def test_exact_value_count_per_section(table, values, oom):
    rows = [row for row in _dataset_rows() if row["table"] == table]
    assert len(rows) == values
    assert sum(row["status"] == "oom" for row in rows) == oom


def test_eight_values_are_oom_in_all():
    assert sum(row["status"] == "oom" for row in _dataset_rows()) == 8


# Typed from the page (matrixbench/data/perf_torch_compile.md), one or more per section and GPU.
SPOT_VALUES = [
    ("main", "A100", 1, "vit", "eager", "9.325"), ("main", "A100", 16, "maskformer", "default", "579.826"),
    ("main", "V100", 4, "detr", "eager", "88.529"), ("main", "V100", 16, "detr", "default", ""),
    ("main", "T4", 1, "owlvit", "default", "51.105"), ("main", "T4", 16, "detr-resnet-101", "eager", "1619.505"),
    ("nightly", "A100", 1, "beit", "default", "6.954"), ("nightly", "A100", 16, "detr", "eager", "163.749"),
    ("nightly", "T4", 1, "beit", "default", "14.052"), ("nightly", "T4", 4, "detr", "default", "204.785"),
    ("nightly", "V100", 1, "beit", "default", "7.926"), ("nightly", "V100", 4, "detr", "default", "62.949"),
    ("nightly", "V100", 16, "beit", "eager", "52.517"), ("nightly", "V100", 16, "detr", "eager", ""),
    ("reduce-overhead", "A100", 4, "resnet", "reduce-overhead", "2.187"),
    ("reduce-overhead", "A100", 1, "conditional-detr", "eager", "32.823"),
    ("reduce-overhead", "T4", 1, "convnext", "reduce-overhead", "31.84"),
    ("reduce-overhead", "T4", 4, "mobilenet", "eager", "78.311"),
]


@pytest.mark.parametrize("table, gpu, batch, model, mode, value", SPOT_VALUES)
def test_spot_values_typed_from_the_page(table, gpu, batch, model, mode, value):
    [row] = [row for row in _dataset_rows() if (row["table"], row["gpu"], int(row["batch_size"]), row["model"],
                                                 row["mode"]) == (table, gpu, batch, model, mode)]
    assert row["latency_ms"] == value
    assert row["status"] == ("ok" if value else "oom")


def test_every_section_has_every_gpu_it_publishes():
    found = {(row["table"], row["gpu"]) for row in _dataset_rows()}
    assert found == {("main", gpu) for gpu in GPUS} | {("nightly", gpu) for gpu in GPUS} | {
        ("reduce-overhead", "A100"), ("reduce-overhead", "T4")}


def test_a_no_break_space_in_a_heading_is_read_as_a_space():
    seed = ("## PyTorch Nightly\n### T4\n| Object Detection/DETR | Unbatched | 1.000 | 2.000 |\n"
            "###\u00a0V100\n| Object Detection/DETR | Unbatched | 3.000 | 4.000 |\n")
    assert [(row["gpu"], row["latency_ms"]) for row in parse_seed_tables(seed)] == [
        ("T4", "1.000"), ("T4", "2.000"), ("V100", "3.000"), ("V100", "4.000")]


@pytest.mark.parametrize("heading", ["### H100", "### A100 (bs 1)", "#### Results"])
def test_a_table_under_a_heading_naming_no_gpu_is_refused(heading):
    seed = f"### T4 (batch size: 1)\n| Image Classification/ViT | 1.0 | 2.0 |\n{heading}\n" \
           "| Image Classification/ViT | 1.0 | 2.0 |\n"
    if heading.startswith("####"):
        assert len(parse_seed_tables(seed)) == 4   # a deeper heading does not replace the GPU heading
        return
    with pytest.raises(SeedFormatError, match="line 4: a table row under heading"):
        parse_seed_tables(seed)


def test_the_pages_anomalies_are_noted_in_the_dataset():
    rows = _dataset_rows()
    noted = {(row["table"], row["gpu"], row["batch_size"], row["model"], row["mode"]): row for row in rows
             if row["note"]}
    copied = [noted[("nightly", "T4", "16", "beit", mode)] for mode in ("eager", "default")]
    assert all("copy error" in row["note"] for row in copied)
    a100 = [row for row in rows if (row["table"], row["gpu"], row["batch_size"], row["model"]) ==
            ("nightly", "A100", "16", "beit")]
    assert [row["latency_ms"] for row in copied] == [row["latency_ms"] for row in a100]   # the note is true
    two_decimals = [row["latency_ms"] for row in noted.values() if "two decimals" in row["note"]]
    assert sorted(two_decimals) == sorted(["6.00", "53.99", "2656.88", "31.84"])
    assert not [row for row in rows if row["model"] == "owlvit" and row["batch_size"] != "1"]
    assert any("OwlViT" in note for note in DATASET_NOTES)
