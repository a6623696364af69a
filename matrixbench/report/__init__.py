"""The report: merge result records, compare with the published tables, render md/html/csv.

``build_report`` is the one entry point (``matrixbench report`` calls it).
"""
import os
import sys
from pathlib import Path

import pandas as pd

from matrixbench.errors import ReportError
from matrixbench.matrix.prices import from_matrix, merged
from matrixbench.report import charts, host_notes, records, render, shares, verdicts
from matrixbench.report.calibration import calibration_tables, phase_pairs
from matrixbench.report.cells import CellIndex
from matrixbench.report.comparisons import calibration_comparisons, comparisons, write_comparisons
from matrixbench.report.cost import unmatched_price_notes
from matrixbench.report.cost_charts import write_cost_charts
from matrixbench.report.cost_tables import write_costs
from matrixbench.report.document import assemble, image_sources
from matrixbench.report.precision_notes import precision_notes
from matrixbench.report.published import load_published
from matrixbench.report.selftest_notes import selftest_notes
from matrixbench.report_formats import REPORT_FORMATS
from matrixbench.report_writer import relocate, staged_report
from matrixbench.run.manifest import unfinished


def build_report(results_dirs, out_dir, formats=REPORT_FORMATS, prices=(), margin_pct=None):
    """Read every record under ``results_dirs``; write the requested formats into ``out_dir``.

    md: report.md + charts/*.png; html: report.html (self-contained); csv: results.csv and
    results.jsonl (the merged table, one line per record, images in matrix order),
    comparisons.csv (every derived number), costs.csv and bill.csv (report.cost_tables).
    ``prices``: matrixbench.matrix.prices.Price from ``--price``; they replace the run manifests'
    matrix ``prices:`` of the same GPU type. ``margin_pct`` (``--margin-pct``): the equivalence margin every
    verdict is made at, in place of the runs' (run.json's matrix, else the default); the report's notes say
    so. Returns the paths written, in that order.
    """
    formats = _check_formats(formats)
    unreadable = []   # files that are not readable records: left out, listed in the notes
    # folders given twice, then what merging the runs did (records.merge): measurements reached twice, runs together
    merging = given_twice_notes(results_dirs)
    by_folder = records.manifests_by_folder(results_dirs)
    manifests = list(by_folder.values())
    frame, calibration = records.split_calibration(records.load_results(results_dirs, unreadable, merging, by_folder))
    selftests, selftest_problems = selftest_notes(results_dirs)
    for line in unreadable + selftest_problems:
        print(f"warning: {line}; left out of the report", file=sys.stderr, flush=True)
    runs_margin = records.margin_pct(manifests)
    cells = CellIndex(frame, records.image_order(manifests), records.aa_twins(manifests),
                      margin_pct or runs_margin, shares.plan_of(manifests))
    sources = image_sources(cells, records.published_overrides(manifests))
    given_prices, prices = prices, merged_prices(manifests, prices)
    with staged_report(Path(out_dir)) as stage:
        written = _write_all(stage.folder, formats, frame, calibration, cells, sources, prices, given_prices,
                             by_folder, unreadable, merging, selftests, selftest_problems, margin_pct, runs_margin)
        written = relocate(written, stage)
    return written


def _write_all(out_dir, formats, frame, calibration, cells, sources, prices, given_prices, by_folder, unreadable,
               merging, selftests, selftest_problems, margin_pct, runs_margin):
    written = []
    manifests = list(by_folder.values())
    if "md" in formats or "html" in formats:
        notes = unfinished_notes(by_folder) + records.run_notes(manifests)
        notes += [f"Left out, not a readable record: {error}" for error in unreadable]
        notes += merging + selftests + [f"Left out, not a readable selftest result: {line}"
                                        for line in selftest_problems]
        notes += precision_notes(frame) + margin_notes(margin_pct, runs_margin)
        notes += unmatched_price_notes(given_prices, cells)
        notes += host_notes.noise_check_lines(by_folder)   # beside the host notes assemble adds next
        written += _write_documents(cells, sources, notes, out_dir, formats, calibration_tables(calibration), prices)
    if "csv" in formats:
        written += records.write_merged(pd.concat([frame, calibration], ignore_index=True), out_dir, cells.images())
        derived = comparisons(cells, load_published(), sources) + calibration_comparisons(phase_pairs(calibration))
        written.append(write_comparisons(derived, out_dir))
        written += write_costs(cells, prices, out_dir)
    return written


def given_twice_notes(results_dirs):
    """A note per folder given more than once (by its real path: "a a", "a ./a", a link to it): its records
    count once (docs/contract.md)."""
    spellings = {}
    for folder in results_dirs:
        spellings.setdefault(os.path.realpath(folder), []).append(str(folder))
    return [f"Folder {given[0]} was given {len(given)} times"
            + (f" (as {', '.join(dict.fromkeys(given))})" if len(set(given)) > 1 else "")
            + "; its records count once." for given in spellings.values() if len(given) > 1]


def unfinished_notes(by_folder):
    """A note per run whose run.json says it did not finish (run.manifest.Unfinished.note): its name, how it
    stopped, how many of its planned processes have a record, and the command that resumes it. A run.json
    without a status (an older matrixbench's) gets only report's warning: whether it finished is not known."""
    found = (unfinished(Path(folder), manifest) for folder, manifest in by_folder.items())
    return [run.note() for run in found if run is not None and run.status is not None]


def margin_notes(given, runs):
    """The note that says the verdicts' margin came from ``report --margin-pct`` (none without it)."""
    if given is None:
        return []
    recorded = f"±{runs:g}% recorded by the runs" if runs is not None else f"the default ±{verdicts.MARGIN_PCT:g}%"
    return [f"Verdicts are made at the equivalence margin ±{given:g}% given to \"matrixbench report --margin-pct\", "
            f"in place of {recorded}."]


def merged_prices(manifests, given=()):
    """{GPU type: Price}: the run manifests' matrix ``prices:`` in order, then ``given`` (--price)."""
    return merged(*(from_matrix((manifest.get("matrix") or {}).get("prices")).values() for manifest in manifests),
                  given)


def _check_formats(formats):
    unknown = [name for name in formats if name not in REPORT_FORMATS]
    if unknown or not formats:
        raise ReportError(f"--format must be a comma-separated subset of {list(REPORT_FORMATS)}, got {list(formats)}")
    return list(formats)


def _write_documents(cells, sources, notes, out_dir, formats, calibration=(), prices=None):
    drawn = charts.write_charts(cells, out_dir, load_published(), sources)
    drawn_costs = write_cost_charts(cells, out_dir, prices)
    report = assemble(cells, load_published(), notes, drawn, sources, calibration, prices, drawn_costs)
    written = []
    if "md" in formats:
        written += [chart.path for chart in drawn + drawn_costs] + [
            _write(out_dir / "report.md", render.render_markdown(report))]
    if "html" in formats:
        written.append(_write(out_dir / "report.html", render.render_html(report)))
    return written


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path
