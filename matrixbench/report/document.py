"""Everything one report shows, assembled in reading order (so footnotes number in order)."""
from dataclasses import dataclass, field
from typing import Optional

from matrixbench.build.versions import release
from matrixbench.matrix.comparisons import MODE_CHANGE
from matrixbench.report import (
    cost_tables,
    host_notes,
    model_table,
    paired_tables,
    round_notes,
    share_tables,
    stats,
    tables,
    verdicts,
)
from matrixbench.report.cells import BETWEEN_CV_THRESHOLD
from matrixbench.report.comparisons import comparisons as comparison_rows
from matrixbench.report.published import DATASET_NOTES, source_for
from matrixbench.report.tables import Table
from matrixbench.report.verdict_summary import aa_line, multiplicity_line, verdict_table
from matrixbench.words import count

_FAILED = "Cells that did not run show their status (OOM, ERR, TIMEOUT, CRASH); the footnote gives the reason."
# What an untested change looks like: the tables put no verdict mark after its % (verdicts.MARKS); where a table
# has an interval column (image against image), it reads the not-tested text
_UNTESTED = (f"the change is shown without a mark: \"{verdicts.NOT_TESTED_TEXT}\" (comparisons.csv's verdict "
             f"\"{stats.UNTESTED}\"; an interval column, where the table has one, says so).")


def _verdict_legend(margin_pct):
    return (
        f"{verdicts.STAR} faster or slower: the {round(stats.CONFIDENCE * 100)}% interval of the ratio excludes 1. "
        f"{verdicts.NO_CHANGE_MARK} no change within ±{margin_pct:g}%: the whole interval lies inside "
        f"[1/(1+m), 1+m] for the margin m = {margin_pct:g}%, so any real change is smaller than that. "
        f"{verdicts.UNDECIDED_MARK} undecided: the interval holds no change but reaches past the margin; more "
        f"processes (repeats) would decide. The interval: Welch's t, at Welch-Satterthwaite's degrees of freedom "
        f"less {stats.WELCH_DF_LESS:g} (at least the smaller side's processes less 1), on the two cells' log "
        f"per-process estimates "
        f"(each process, a repeat, is one independent draw; samples within one process are not), as a ratio of "
        f"geometric means. Tested only when both cells ran in {stats.MIN_PROCESSES} or more processes; otherwise "
        f"{_UNTESTED} See docs/verdicts.md.")


_BY_ROUND = (
    f"Pairing: \"paired by round\" where both cells ran in one run and share {stats.MIN_PROCESSES} or more rounds "
    "(repeat indexes both ran): each shared round's two processes ran one after the other, so their ratio cancels a "
    "machine state the round shared (drift, a step, another tenant); the interval is Student's t on the shared "
    "rounds' log ratios (rounds - 1 degrees of freedom). A round only one side ran (a failed process, or one "
    "repeats: auto added for another comparison) is left out and counted: \"paired by round (5 of 7 rounds; 2 only "
    "one side ran)\". \"unpaired\": Welch's t as above, where the two cells share fewer rounds (another run, "
    "failed processes).")
_IN_TURNS = (
    "\"in turns\": the two images' processes of a round ran at the same time and, after their own timed loops, "
    "timed blocks of calls in turns (docs/turns.md), so the host's state fell on both sides of each block pair; a "
    "round's log ratio is the median over the blocks both measured, and the interval Student's t on those rounds' log "
    f"ratios (rounds - 1 degrees of freedom), with {stats.MIN_PROCESSES} or more such rounds. Its % is the blocks' "
    "change, not the ratio of the two cells' ms (their own loops, which did not take turns). A round without turns "
    "(a side lost the baton before its first block, or the two did not take turns together) is left out and counted: "
    "\"in turns (2 of 3 rounds; 1 not in turns)\".")
_MODE_BY_ROUND = (
    "A mode's change against default is judged paired by round on the rounds both cells ran in one run "
    "(comparisons.csv's pairing: \"paired by round\", Student's t on the shared rounds' log ratios; paired_rounds: "
    "how many), else unpaired.")
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
_FLAGGED = (
    f"\"{tables.FLAGGED_COLUMN}\": the cells whose records carry a runner's timing.flags (no CUDA graphs, recaptured, "
    "throttled, timer mismatch, ...), with each flag's mark and count; a noisy cell (†, ¶) is counted under \"noisy\" "
    "in the table after it, not here.")
_CELL_MS = "per cell, the geometric mean of the processes' mean ms; with one process, its mean"


def _mode_pairing_counts(derived):
    """"Here 12 of 14 tested mode changes were paired by round, 3 of them leaving out rounds only one side
    ran.": how the compile-mode tables' changes were judged (comparisons.csv's pairing and paired_rounds)."""
    tested = [row for row in derived if row.get("kind") == MODE_CHANGE and row.get("pairing")]
    paired = [row for row in tested if row["pairing"] == stats.PAIRED_BY_ROUND]
    partial = sum(row["baseline_processes"] + row["candidate_processes"] > 2 * row["paired_rounds"] for row in paired)
    left = f", {partial} of them leaving out rounds only one side ran" if partial else ""
    return f"Here {len(paired)} of {len(tested)} tested mode changes were paired by round{left}."


def legends_for(margin_pct=verdicts.MARGIN_PCT):
    """Every section's legend, the verdicts' at the report's equivalence margin (in %)."""
    significant = _verdict_legend(margin_pct)
    return {
        "models": (
            "Each model the records measured, a row per kind of files (another revision, commit or files' hash of one "
            "name is a row of its own, as its processes are in the tables above). Source: shipped (the config in "
            "runner/configs, or its hub id with pretrained weights), a hub id at its revision (main: none asked), "
            "or a local config or save_pretrained folder as the runner saw it. Files: a local model's files' hash "
            "(its config, preprocessor config and, with its own weights, its weights), a hub model's commit."),
        "verdicts": (
            "Every comparison of two cells gets a verdict (comparisons.csv has each one's interval): "
            f"{significant} The true change a comparison would star 80% of the time is in comparisons.csv "
            "(detectable_pct). Verdicts and their % judge each process by the mean of its calls, the number the ms "
            "show, and compare geometric means of those, not mean latencies; where host stalls moved a process, "
            "the host notes say so."),
        "summary": (
            f"Per device, image and mode. Speed-up: eager ms / compiled ms ({_CELL_MS}), as a geometric mean "
            "over the models and batch sizes where both ran and the compiled output passed the accuracy check "
            "(the number of cells in brackets). "
            "When images cover different cells, the geo-mean over common cells takes only the cells every image of the "
            "device has. Cells ran: the cells that ran of those recorded (the others' statuses in brackets). "
            "Accuracy failures: compiled outputs further from eager than the tolerance, or NaN. The table after it "
            "has the rest: each status's count, noise, warm compile, graph breaks, image-pair rows that mix "
            "something."),
        "per_device": (
            f"Latency in ms: {_CELL_MS}. In compiled columns, in brackets, % faster than eager: "
            "eager ms / compiled ms - 1 (the speed-up, as the summary and the speed-up chart give it, less 1: "
            "+100% is 2×). "
            f"{tables.NOISY_MARK} noisy within a process: its samples' coefficient of variation above the run's "
            "threshold. "
            f"{tables.BETWEEN_NOISY_MARK} noisy between processes: the coefficient of variation of the cell's "
            f"per-process means above {BETWEEN_CV_THRESHOLD:g} (the report's between_cv_threshold; cells with 2 or "
            "more repeats). The speed-up carries its verdict's mark: "
            f"{verdicts.STAR} faster (or slower) than eager, {verdicts.NO_CHANGE_MARK} no change within "
            f"±{margin_pct:g}%, {verdicts.UNDECIDED_MARK} undecided (see the verdicts legend); with one process "
            f"on a side, {_UNTESTED} "
            f"{tables.ACCURACY_MARK} accuracy check failed (compiled output off from eager, or NaN). "
            f"{tables.PER_CALL_MARK} per-call latency: the model makes the host wait for the GPU inside a call "
            "(timing.host_syncs_per_call above 0), so its GPU mean is one call's latency; unmarked GPU cells are "
            "pipelined throughput (calls queued back to back, one sync after the loop), CPU cells per-call latency. "
            f"{tables.EAGER_FAILED_MARK} no speed-up: this row's eager cell did not run (its status is in the eager "
            f"column). {tables.NO_DATA} no record for this cell. {_FAILED}"),
        "image_pairs": (
            f"Latency in ms ({_CELL_MS}) of the same cell in two images, in matrix order. Change: "
            f"later / earlier - 1; negative is faster. {significant} {tables.NO_DATA} not "
            "comparable: a side did not run. A/A tables compare one image run twice under two names (run --aa): "
            "every star there is a false alarm."),
        "compile_modes": (
            f"Latency in ms ({_CELL_MS}); in brackets, the change against default (negative is faster). "
            f"{significant} {tables.NO_DATA} no record for this cell."),
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
            f"alone / loaded: the latency in ms, {_CELL_MS}. loaded / alone: loaded ms / alone ms; above 1, a "
            "cell runs slower while the other slots run. "
            f"Judged like every comparison (the verdicts legend): {verdicts.STAR} its "
            f"{round(stats.CONFIDENCE * 100)}% interval excludes 1; tested only when both "
            f"phases have {stats.MIN_PROCESSES} or more processes. Other slots timing: per loaded process, the most "
            "other slots its timed loop saw timing at its start or end (the run's timing board), as value ×processes; "
            "below slots - 1, the phase was less loaded than asked. These cells are not part of the matrix's tables."),
        "costs": cost_tables.LEGEND,
    }


LEGENDS = legends_for()


@dataclass
class Section:
    """One section of the report between the summary and the environment: a title, its legend, a line
    before its tables (``intro``), its tables and its charts. Each template renders every section in one
    loop; a section with nothing to show is left out unless ``always``."""

    title: str
    legend: str = ""
    tables: list = field(default_factory=list)
    charts: list = field(default_factory=list)
    intro: str = ""
    always: bool = False

    @property
    def shown(self):
        return self.always or bool(self.tables or self.charts)


@dataclass
class Report:
    runs: list
    record_count: int
    notes: list
    summary: Table
    verdicts: Table
    verdict_lines: list
    per_device: list
    image_pairs: list
    compile_modes: list
    published: list
    environment: Table
    charts: list
    footnotes: list
    legends: dict = field(default_factory=lambda: dict(LEGENDS))
    calibration: list = field(default_factory=list)   # the interference calibration's tables, if it ran
    costs: list = field(default_factory=list)         # "What it costs" (report.cost_tables)
    cost_charts: list = field(default_factory=list)   # its charts (report.cost_charts)
    prices: list = field(default_factory=list)        # the prices used, as sentences
    attribution: list = field(default_factory=list)   # per mixed pair: how much of its change each factor explains
    summary_details: Optional[Table] = None           # the summary's other columns (tables.summary_details_table)
    paired: list = field(default_factory=list)        # speed-ups paired in one process (report.paired_tables)
    models: Optional[Table] = None                    # each model measured, its source and files (report.model_table)

    @property
    def cells_line(self):
        """The report's first line: "12 cells from run-a, run-b." ("1 cell from ...")."""
        return f"{count(self.record_count, 'cell')} from {', '.join(self.runs)}."

    @property
    def sections(self):
        """The sections in report order (a new table is one producer and one entry here)."""
        legends = self.legends
        prices = f"Prices (yours, not matrixbench's): {'; '.join(self.prices)}." if self.prices else ""
        return [
            Section("Charts", charts=self.charts),
            Section("Latency per device and batch size", legends["per_device"], self.per_device, always=True),
            Section("Speed-ups paired in one process", paired_tables.LEGEND, self.paired),
            Section("Image against image", legends["image_pairs"], self.image_pairs),
            Section("Whose change is it?", legends.get("attribution", ""), self.attribution),
            Section("Compile modes against default", legends["compile_modes"], self.compile_modes),
            Section("Measured against published", legends["published"], self.published),
            Section("What it costs", legends["costs"], self.costs, self.cost_charts if self.costs else [],
                    intro=prices),
            Section("Interference calibration", legends["calibration"], self.calibration),
        ]


def image_sources(cells, overrides=None):
    """{image: "main" | "nightly" | "none"}: the published source each image is compared with."""
    overrides = overrides or {}
    return {image: source_for(release(cells.torch_version(image)), overrides.get(image))
            for image in cells.images()}


def assemble(cells, published, notes, charts, sources=None, calibration=(), prices=None, cost_charts=()):
    """Build every table from a CellIndex and the published dataset; charts are already drawn.
    ``sources`` (image -> published source) defaults to each image's torch version's;
    ``calibration``: the interference calibration's tables (report.calibration); ``prices``:
    {GPU type: matrixbench.matrix.prices.Price}; ``cost_charts``: report.cost_charts' drawn charts."""
    prices = prices or {}
    sources = image_sources(cells) if sources is None else sources
    footnotes = tables.Footnotes()
    legends = legends_for(cells.margin_pct)
    summary, details = tables.summary_table(cells), tables.summary_details_table(cells)
    derived = comparison_rows(cells, published, sources)
    legends["summary"] += "".join(f" {text}" for column, text in (
        (tables.FLAGGED_COLUMN, _FLAGGED), (tables.COMPILE_COLUMN, _COMPILE),
        (tables.WARM_COMPILE_COLUMN, _WARM_COMPILE))
        if column in summary.header + details.header)
    flags = tables.flags_in(cells)
    if flags:
        legends["per_device"] += " " + tables.flag_legend(flags)
    if any(row.get("pairing") == stats.PAIRED_BY_ROUND for row in derived):
        legends["image_pairs"] += " " + _BY_ROUND
    if any(row.get("pairing") == stats.IN_TURNS for row in derived):
        legends["image_pairs"] += " " + _IN_TURNS
    if any(row.get("pairing") == stats.PAIRED_BY_ROUND and row.get("kind") == MODE_CHANGE for row in derived):
        legends["compile_modes"] += " " + _MODE_BY_ROUND + " " + _mode_pairing_counts(derived)
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
        notes=list(notes) + host_notes.lines(cells.rows) + round_notes.lines(cells.rows),
        summary=summary,
        verdicts=verdict_table(derived, cells.margin_pct),
        verdict_lines=[line for line in [multiplicity_line(derived), aa_line(derived)] if line],
        per_device=tables.per_device_tables(cells, footnotes),
        image_pairs=tables.image_pair_tables(cells, footnotes, share_tables.split_rows),
        compile_modes=tables.compile_mode_tables(cells, footnotes),
        published=tables.published_tables(cells, footnotes, published, sources),
        environment=tables.environment_table(cells),
        charts=list(charts),
        footnotes=footnotes.texts,
        legends=legends,
        calibration=list(calibration),
        costs=cost_tables.cost_tables(cells, prices, footnotes),
        cost_charts=list(cost_charts),
        prices=[price.describe() for price in prices.values()],
        attribution=share_tables.summary_tables(cells),
        summary_details=details,
        paired=paired_tables.paired_tables(derived),
        models=model_table.models_table(cells),
    )
