"""Everything one report shows, assembled in reading order (so footnotes number in order)."""
from dataclasses import dataclass, field

from matrixbench.report import share_tables, stats, tables
from matrixbench.report.published import DATASET_NOTES, source_for
from matrixbench.report.tables import Table
from matrixbench.versions import release

_FAILED = "Cells that did not run show their status (OOM, ERR, TIMEOUT, CRASH); the footnote gives the reason."
_SIGNIFICANT = (
    f"{tables.SIGNIFICANT_MARK} significant: the {round(stats.CONFIDENCE * 100)}% hierarchical bootstrap interval of "
    f"the ratio of means ({stats.RESAMPLES} resamples: processes, then samples within each) excludes no change. "
    f"Tested only when both cells ran in {stats.MIN_PROCESSES} or more processes (repeats); otherwise the change "
    f"is shown and marked \"{stats.NOT_TESTED}\": samples within one process are not independent draws of what a "
    f"rerun would give, so they cannot tell a real change from run-to-run noise.")
_MIXED = (
    f"Warning: the two sides differ in more than torch: \"{tables.MIXES_TRANSFORMERS}\" (another transformers "
    f"version) or \"{tables.MIXES_ATTENTION}\" (another attention implementation used); the change is not torch's "
    "alone. The summary counts these rows per image and mode.")
_MIXED_GPUS = (
    f"Warning \"{tables.MIXES_GPUS}\": the two sides (or some of their processes) ran on different GPUs, by "
    "UUID (a slot run places a model's every image on one GPU, but a resumed or merged run may not); the change "
    "then includes the difference between two GPUs. The summary counts these rows per image and mode.")
_COMPILE = (
    f"\"{tables.COMPILE_COLUMN}\": per cell, the first call of its first process (torch.compile and the first forward, "
    "the record's timing.first_call_s), median over the cells: a cold compile, unless the image's compile cache was "
    "already warm from an earlier run.")
_WARM_COMPILE = (
    f"\"{tables.WARM_COMPILE_COLUMN}\": the first call of each cell's second and later processes (repeats), which "
    "compile reading the cache the first process filled, median over those processes; beside the compile time it "
    "shows what the warm cache saves. With --cold every process compiles into an empty folder, so both are cold.")
LEGENDS = {
    "summary": (
        "Per device, image and mode. Speed-up: eager ms / compiled ms, as a geometric mean over the models and batch "
        "sizes where both ran and the compiled output passed the accuracy check (the number of cells in brackets). "
        "When images cover different cells, the geo-mean over common cells takes only the cells every image of the "
        "device has. Accuracy failures: compiled outputs further from eager than the tolerance, or NaN."),
    "per_device": (
        "Mean latency in ms. In compiled columns, in brackets, the speed-up over eager: eager ms / compiled ms - 1. "
        f"{tables.NOISY_MARK} noisy within a process: its samples' coefficient of variation above the run's threshold. "
        f"{tables.BETWEEN_NOISY_MARK} noisy between processes: the coefficient of variation of the cell's "
        f"per-process means above that threshold (cells with 2 or more repeats; the mean is over all their samples). "
        f"{tables.ACCURACY_MARK} accuracy check failed (compiled output off from eager, or NaN). "
        f"{tables.EAGER_FAILED_MARK} no speed-up: this row's eager cell did not run (its status is in the eager "
        f"column). {tables.NO_DATA} no record for this cell. {_FAILED}"),
    "image_pairs": (
        "Mean latency in ms of the same cell in two images, in matrix order. Change: later / earlier - 1; "
        f"negative is faster. {_SIGNIFICANT} {tables.NO_DATA} not comparable: a side did not run."),
    "compile_modes": (
        "Mean latency in ms; in brackets, the change against default (negative is faster). "
        f"{_SIGNIFICANT} {tables.NO_DATA} no record for this cell."),
    "published": (
        "Each image is compared with the page's source for its torch version: 2.0.x with the main tables "
        "(torch 2.0, eager and default); 2.1.x with the nightly tables (2.1.0dev nightly, eager and default) and "
        "the reduce-overhead tables (eager and reduce-overhead); other versions with none, unless matrix.yaml "
        "sets `published: main|nightly|none` for the image. Each table names its source. On a whole A100, V100 "
        "or T4: ms beside ms, deviation = measured / published - 1. Elsewhere: speed-up (eager ms / compiled ms) "
        f"beside the published ones; {tables.NO_DATA} not published. {tables.PUBLISHED_NOTE_MARK} the page's "
        "value is doubtful; the footnote says why. " + " ".join(DATASET_NOTES)),
    "calibration": (
        "The slots' interference (matrixbench run --calibrate): each cell ran on every slot alone (one slot "
        "busy), then on every slot at once (all busy), once per repeat; each slot's each round is one process. "
        "alone / loaded: the mean latency in ms over every sample of every process. loaded / alone: loaded ms / "
        "alone ms; above 1, a cell runs slower while the other slots run. "
        f"{tables.SIGNIFICANT_MARK} its {round(stats.CONFIDENCE * 100)}% hierarchical bootstrap interval "
        f"({stats.RESAMPLES} resamples: processes, then samples within each) excludes 1; tested only when both "
        f"phases have {stats.MIN_PROCESSES} or more processes. Other slots timing: per loaded process, the most "
        "other slots its timed loop saw timing at its start or end (the run's timing board), as value ×processes; "
        "below slots - 1, the phase was less loaded than asked. These cells are not part of the matrix's tables."),
}


@dataclass
class Report:
    runs: list
    record_count: int
    notes: list
    summary: Table
    per_device: list
    image_pairs: list
    compile_modes: list
    published: list
    environment: Table
    charts: list
    footnotes: list
    legends: dict = field(default_factory=lambda: dict(LEGENDS))
    calibration: list = field(default_factory=list)   # the interference calibration's tables, if it ran
    attribution: list = field(default_factory=list)   # per mixed pair: how much of its change each factor explains


def image_sources(cells, overrides=None):
    """{image: "main" | "nightly" | "none"}: the published source each image is compared with."""
    overrides = overrides or {}
    return {image: source_for(release(cells.torch_version(image)), overrides.get(image))
            for image in cells.images()}


def assemble(cells, published, notes, charts, sources=None, calibration=()):
    """Build every table from a CellIndex and the published dataset; charts are already drawn.
    ``sources`` (image -> published source) defaults to each image's torch version's;
    ``calibration``: the interference calibration's tables (report.calibration)."""
    sources = image_sources(cells) if sources is None else sources
    footnotes = tables.Footnotes()
    legends = dict(LEGENDS)
    summary = tables.summary_table(cells)
    legends["summary"] += "".join(f" {text}" for column, text in (
        (tables.COMPILE_COLUMN, _COMPILE), (tables.WARM_COMPILE_COLUMN, _WARM_COMPILE)) if column in summary.header)
    flags = tables.flags_in(cells)
    if flags:
        legends["per_device"] += " " + tables.flag_legend(flags)
    if tables.mixed_rows(cells):
        legends["image_pairs"] += " " + _MIXED
    if cells.attribution:
        legends["image_pairs"] += " " + share_tables.LEGEND
        legends["attribution"] = share_tables.SUMMARY_LEGEND
    if tables.mixed_rows(cells, tables.gpu_mismatch):
        legends["image_pairs"] += " " + _MIXED_GPUS
    return Report(
        runs=sorted({row["run"] for row in cells.rows}),
        record_count=len(cells.rows),
        notes=list(notes),
        summary=summary,
        per_device=tables.per_device_tables(cells, footnotes),
        image_pairs=tables.image_pair_tables(cells, footnotes),
        compile_modes=tables.compile_mode_tables(cells, footnotes),
        published=tables.published_tables(cells, footnotes, published, sources),
        environment=tables.environment_table(cells),
        charts=list(charts),
        footnotes=footnotes.texts,
        legends=legends,
        calibration=list(calibration),
        attribution=share_tables.summary_tables(cells),
    )
