"""The published dataset agrees with the seed page's Markdown tables, cell by cell."""
import csv
import re
from collections import Counter
from pathlib import Path

import pytest

from matrixbench.report.published import (
    COLUMNS,
    DATASET_PATH,
    GPUS,
    MODEL_NAMES,
    SEED_PATH,
    SeedFormatError,
    load_published,
    match_gpu,
    parse_seed_tables,
    write_dataset,
)

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


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA A100-SXM4-40GB", "A100"), ("Tesla V100-SXM2-16GB", "V100"), ("Tesla T4", "T4"),
    ("NVIDIA H100 80GB HBM3", None), ("NVIDIA GeForce RTX 4090", None), (None, None),
])
def test_match_gpu(name, expected):
    assert match_gpu(name) == expected
