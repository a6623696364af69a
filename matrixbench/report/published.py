"""The published reference: the seed page's latency tables as a tidy dataset.

``matrixbench/data/perf_torch_compile.md`` is a vendored copy of the seed page
(Apache-2.0, The HuggingFace Team). ``parse_seed_tables`` reads its Markdown tables
into one row per published number; ``python tools/regenerate_published.py`` (which calls
``regenerate_dataset``) writes ``published_torch_compile.csv`` from it, so no number is typed twice.
Both files are found by ``matrixbench.resources`` (importlib.resources), installed or not.
"""
import csv
import re
from pathlib import Path

import pandas as pd

from matrixbench import resources
from matrixbench.report import arithmetic
from matrixbench.report.modes import SPEEDUP_BASELINE
from runner import axes

COLUMNS = ("table", "torch", "gpu", "batch_size", "model_label", "model", "mode", "status", "latency_ms", "note")
GPUS = ("A100", "V100", "T4")

# The seed's row labels -> our model short names (runner/models).
MODEL_NAMES = {
    "Image Classification/ViT": "vit",
    "Image Classification/BeiT": "beit",
    "Image Classification/ConvNeXT": "convnext",
    "Image Classification/ResNet": "resnet",
    "Image Segmentation/Segformer": "segformer",
    "Image Segmentation/Mask2former": "mask2former",
    "Image Segmentation/Maskformer": "maskformer",
    "Image Segmentation/MobileNet": "mobilenet",
    "Object Detection/OwlViT": "owlvit",
    "Object Detection/DETR": "detr",
    "Object Detection/Resnet-101": "detr-resnet-101",
    "Object Detection/Conditional-DETR": "conditional-detr",
}

# Which published table a "## " section holds: (table, torch, compiled mode).
_MAIN = ("main", "2.0", "default")
_SECTIONS = {
    "PyTorch Nightly": ("nightly", "2.1.0dev nightly", "default"),
    "Reduce Overhead": ("reduce-overhead", "2.1.0dev nightly", "reduce-overhead"),
}
_HEADING = re.compile(r"^(?P<gpu>A100|V100|T4)(?: \(batch size: (?P<batch>\d+)\))?$")

# The page's own anomalies, kept beside its numbers (the ``note`` column), never silently trusted.
# Key: (table, gpu, batch size, model) of a published row.
KNOWN_ANOMALIES = {
    ("nightly", "T4", 16, "beit"): (
        "repeats the A100 nightly BeiT batch size 16 values (42.179 / 42.147): almost certainly a copy error "
        "on the page"),
}
TWO_DECIMALS_NOTE = "given with two decimals on the page (the others have three)"
# What the page leaves out, as whole rows; shown in the report's legend.
DATASET_NOTES = (
    "The page has no OwlViT rows for batch sizes 4 and 16; its text says OwlViT runs out of memory there.",
)


class SeedFormatError(ValueError):
    """The seed page's tables are not laid out as this parser expects."""


def parse_seed_tables(markdown):
    """One dict per published number, in page order (see COLUMNS); latency kept as its text.

    Headings are read with Unicode whitespace normalised (the page writes one as ``###`` + a
    no-break space); a table row under a heading that names no GPU is an error, never skipped.
    """
    rows, section, heading = [], _MAIN, None
    for number, raw in enumerate(markdown.splitlines(), start=1):
        line = normalise_space(raw)
        if line.startswith("## "):
            section, heading = _SECTIONS.get(line[3:].strip(), _MAIN), None
        elif line.startswith("### "):
            heading = (line[4:].strip(), _HEADING.match(line[4:].strip()))
        elif line.startswith("|") and not _is_table_header(line):
            rows += _parse_row(_split_row(line), section, _placed(heading, number), number)
    return rows


def normalise_space(line):
    """Every run of Unicode whitespace (no-break spaces included) as one ASCII space."""
    return re.sub(r"\s+", " ", line, flags=re.UNICODE).strip()


def _placed(heading, line_number):
    if heading is None or heading[1] is None:
        text = "no heading" if heading is None else f"heading {heading[0]!r}"
        raise SeedFormatError(f"line {line_number}: a table row under {text}, which names no GPU "
                              f"(expected e.g. 'A100' or 'A100 (batch size: 1)')")
    return heading[1]


def _is_table_header(line):
    return "**" in line or ":---" in line


def _split_row(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _parse_row(cells, section, heading, line_number):
    table, torch, compiled_mode = section
    if heading["batch"]:
        label, eager, compiled = _expect(cells, 3, line_number)
        batch = heading["batch"]
    else:
        label, batch, eager, compiled = _expect(cells, 4, line_number)
    if label not in MODEL_NAMES:
        raise SeedFormatError(f"line {line_number}: unknown model row {label!r}; add it to MODEL_NAMES")
    common = {"table": table, "torch": torch, "gpu": heading["gpu"], "model_label": label,
              "batch_size": 1 if batch == "Unbatched" else int(batch), "model": MODEL_NAMES[label]}
    return [_number(common, SPEEDUP_BASELINE, eager, line_number),
            _number(common, compiled_mode, compiled, line_number)]


def _expect(cells, count, line_number):
    if len(cells) != count:
        raise SeedFormatError(f"line {line_number}: expected {count} cells, got {len(cells)}: {cells}")
    return cells


def _number(common, mode, text, line_number):
    note = KNOWN_ANOMALIES.get((common["table"], common["gpu"], common["batch_size"], common["model"]), "")
    if text == "OOM":
        return {**common, "mode": mode, "status": "oom", "latency_ms": "", "note": note}
    if not re.fullmatch(r"\d+(\.\d+)?", text):
        raise SeedFormatError(f"line {line_number}: {text!r} is neither a latency nor OOM")
    if len(text.partition(".")[2]) == 2:
        note = "; ".join(filter(None, (note, TWO_DECIMALS_NOTE)))
    return {**common, "mode": mode, "status": "ok", "latency_ms": text, "note": note}


def write_dataset(rows, path):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def load_published(path=None):
    """The published dataset (default: the shipped one) as a DataFrame; latency_ms is NaN where
    the page says OOM."""
    frame = pd.read_csv(path or resources.published_dataset(),
                        dtype={"torch": str, "batch_size": int, "latency_ms": float, "note": str})
    return frame.assign(note=frame["note"].fillna(""))


# A whole GPU the page measured, as nvidia-smi / torch name it: an optional vendor prefix, the
# model, then only form-factor and memory words. Anything else (a MIG slice "... MIG 1g.5gb",
# V100S, A100X, T4G, A800, a vGPU profile) is another device: compared by speed-up ratios only.
_PUBLISHED_GPU_NAME = re.compile(
    r"^(?:NVIDIA |Tesla )?(?P<gpu>A100|V100|T4)(?:[- ](?:SXM[0-9]?|PCIE|FHHL|[0-9]+GB|HBM2E?))*$", re.IGNORECASE)


def match_gpu(gpu_name):
    """The published GPU ("A100", "V100", "T4") a measured GPU name is exactly, or None."""
    found = _PUBLISHED_GPU_NAME.match(normalise_space(gpu_name or ""))
    return found.group("gpu").upper() if found else None


# The page's three sources, and which of its tables each compares a mode with. An image on the
# 2.0 line is compared with the main tables; one on the 2.1 line (the page's "2.1.0dev nightly")
# with the nightly tables (eager vs default: BeiT, DETR) and the reduce-overhead tables (eager vs
# reduce-overhead); others with none, unless matrix.yaml says ``published:`` for the image.
PUBLISHED_SOURCES = ("main", "nightly", "none")
SOURCE_TABLES = {
    "main": {"eager": ("main",), "default": ("main",)},
    "nightly": {"eager": ("nightly", "reduce-overhead"), "default": ("nightly",),
                "reduce-overhead": ("reduce-overhead",)},
    "none": {},
}
SOURCE_BY_TORCH_LINE = {(2, 0): "main", (2, 1): "nightly"}
TABLE_TITLES = {"main": "main tables (torch 2.0)", "nightly": "nightly tables (torch 2.1.0dev nightly)",
                "reduce-overhead": "reduce-overhead tables (torch 2.1.0dev nightly)"}


def source_for(torch_release, override=None):
    """The published source an image is compared with: its matrix.yaml override, else by torch line."""
    if override is not None:
        return override
    return SOURCE_BY_TORCH_LINE.get(tuple(torch_release[:2]), "none")


def source_title(source):
    """How a table names its source, e.g. "main tables (torch 2.0)"."""
    tables = dict.fromkeys(table for names in SOURCE_TABLES[source].values() for table in names)
    return " and ".join(TABLE_TITLES[table] for table in tables) or "no published tables"


class PublishedReference:
    """Published numbers looked up by source (main / nightly / none), GPU, batch size, model and mode."""

    def __init__(self, published):
        self._by_key = {(r["table"], r["gpu"], r["batch_size"], r["model"], r["mode"]): r
                        for r in published.to_dict("records")}
        self._models = {r["model"] for r in self._by_key.values()}

    def comparable(self, row, source):
        """Cells like the page's (runner.axes.published: full size, float32, no fullgraph, ...) of models it
        benchmarked, in a mode the source publishes."""
        cell = {axis.name: row.get(f"cell.{axis.name}") for axis in axes.AXES}
        return (axes.published(cell) and row["cell.model"] in self._models
                and row["cell.mode"] in SOURCE_TABLES[source])

    def number(self, source, gpu, batch, model, mode):
        """The published row (a dict with table, status, latency_ms, note) for a cell, or None."""
        for table in SOURCE_TABLES[source].get(mode, ()):
            found = self._by_key.get((table, gpu, batch, model, mode))
            if found is not None:
                return found
        return None

    def pair(self, source, gpu, batch, model, mode):
        """(eager row, compiled row) from the one table that publishes this compiled mode, or None."""
        compiled = self.number(source, gpu, batch, model, mode)
        if compiled is None:
            return None
        eager = self._by_key.get((compiled["table"], gpu, batch, model, SPEEDUP_BASELINE))
        return (eager, compiled) if eager is not None else None

    def speedup(self, source, gpu, batch, model, mode):
        """The published speed-up (eager ms / compiled ms) of a compiled cell, or None."""
        pair = self.pair(source, gpu, batch, model, mode)
        if pair is None or "oom" in (pair[0]["status"], pair[1]["status"]):
            return None
        return arithmetic.speedup(pair[0]["latency_ms"], pair[1]["latency_ms"])


def regenerate_dataset(seed=None, out=None):
    """Parse the seed page and write the dataset (default: the shipped ones); returns the number
    of published values."""
    rows = parse_seed_tables(Path(seed or resources.published_seed()).read_text(encoding="utf-8"))
    write_dataset(rows, out or resources.published_dataset())
    return len(rows)
