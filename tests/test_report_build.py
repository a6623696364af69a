"""build_report: formats, files written, self-contained HTML."""
import re
import shutil
from pathlib import Path

import pytest

from matrixbench.errors import ReportError
from matrixbench.report import build_report

FIXTURES = Path(__file__).parent / "fixtures"


def test_every_format_writes_its_files(tmp_path):
    written = build_report([FIXTURES], tmp_path, ["md", "html", "csv"])
    names = [path.relative_to(tmp_path).as_posix() for path in written]
    assert names[-7:] == ["report.md", "report.html", "results.csv", "results.jsonl", "comparisons.csv",
                          "costs.csv", "bill.csv"]
    charts = [name for name in names if name.startswith("charts/")]
    assert charts and all(name.endswith(".png") for name in charts)
    assert all(path.stat().st_size > 0 for path in written)
    markdown = (tmp_path / "report.md").read_text()
    assert all(f"]({name})" in markdown for name in charts)


def test_csv_only_writes_no_documents(tmp_path):
    written = build_report([FIXTURES / "cpu-run"], tmp_path, ["csv"])
    assert [path.name for path in written] == ["results.csv", "results.jsonl", "comparisons.csv", "costs.csv",
                                               "bill.csv"]
    assert not (tmp_path / "charts").exists()


@pytest.fixture(scope="module")
def gpu_run_html(tmp_path_factory):
    """gpu-run's HTML report, built once for the tests below that only read it (13 charts: about 12 s of CPU
    a build on this project's 2-core machine, issue 35)."""
    out = tmp_path_factory.mktemp("gpu-run-html")
    build_report([FIXTURES / "gpu-run"], out, ["html"])
    return (out / "report.html").read_text()


def test_html_is_one_self_contained_file(gpu_run_html):
    html = gpu_run_html
    sources = re.findall(r'(?:src|href)="([^"]*)"', html)
    images = [source for source in sources if source.startswith("data:image/png;base64,")]
    # per batch size: latency, % faster, image against image (ms), % change against the previous
    # image, % change against the default mode, compile break-even (What it costs); and measured
    # against published
    assert len(images) == html.count("<img ") == 13
    assert all(source.startswith(("data:image/png;base64,", "#note-")) for source in sources)
    assert "<link" not in html and "<script" not in html


def test_html_escapes_text_from_records(gpu_run_html):
    html = gpu_run_html
    assert "backend=&#39;inductor&#39;" in html


@pytest.mark.parametrize("formats", [["pdf"], [], ["md", "xlsx"]])
def test_unknown_formats_are_refused_with_the_valid_ones(tmp_path, formats):
    with pytest.raises(ReportError, match=r"subset of \['md', 'html', 'csv'\]"):
        build_report([FIXTURES], tmp_path, formats)


@pytest.mark.parametrize("keep", ["eager", "oom"])
def test_partial_runs_build_every_format(tmp_path, keep):
    run = tmp_path / "run" / "stable"
    run.mkdir(parents=True)
    for path in (FIXTURES / "gpu-run" / "stable").glob("*.json"):
        text = path.read_text()
        if f'"mode": "{keep}"' in text or f'"status": "{keep}"' in text:
            (run / path.name).write_text(text)
    written = build_report([tmp_path / "run"], tmp_path / "out", ["md", "html", "csv"])
    charts = [path.name for path in written if path.suffix == ".png"]
    assert charts and not any(name.endswith("_speedup.png") for name in charts)
    assert (tmp_path / "out" / "report.html").read_text().count("<img ") == len(charts)


def test_one_corrupt_record_is_listed_and_the_rest_reported(tmp_path):
    run = Path(shutil.copytree(FIXTURES / "cpu-run", tmp_path / "cpu-run"))
    corrupt = sorted(run.rglob("*_float32.json"))[0]
    corrupt.write_text('{"schema_version": 1, ')
    build_report([run], tmp_path / "out", ["md", "csv"])
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert f"Left out, not a readable record: {corrupt}: not a readable record" in markdown
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(rows) - 1 == len(list((FIXTURES / "cpu-run").rglob("*_float32.json"))) - 1


def test_a_folder_given_twice_is_reported_once_with_a_note(tmp_path, charts_drawn_not_rendered):
    """docs/contract.md: a folder given twice counts once, and a note says so (it was deduplicated silently)."""
    once, twice, link = tmp_path / "once", tmp_path / "twice", tmp_path / "link"
    build_report([FIXTURES / "cpu-run"], once, ["md"])
    build_report([FIXTURES / "cpu-run", FIXTURES / "cpu-run"], twice, ["md"])
    note = f"> **Note:** Folder {FIXTURES / 'cpu-run'} was given 2 times; its records count once.\n\n"
    assert (twice / "report.md").read_text().replace(note, "") == (once / "report.md").read_text()
    link.symlink_to(FIXTURES / "cpu-run")   # another spelling of the same folder: both named
    build_report([FIXTURES / "cpu-run", link], tmp_path / "linked", ["md"])
    assert (f"Folder {FIXTURES / 'cpu-run'} was given 2 times (as {FIXTURES / 'cpu-run'}, {link}); its records "
            "count once.") in (tmp_path / "linked" / "report.md").read_text()


def test_results_csv_gives_each_records_schema_version_as_its_file_was_written(tmp_path):
    """A converted record reads as the current version, but results.csv says the version its file holds (a v2
    record's v3-v5 fields are absent because they were not measured, not lost); results.jsonl likewise."""
    import json

    import pandas as pd

    from runner.core import SCHEMA_VERSION

    folder = tmp_path / "runs"
    shutil.copytree(FIXTURES / "cpu-run", folder / "cpu-run")
    source = folder / "cpu-run" / "local" / "vit_bs1_default_float32.json"
    written = json.loads(source.read_text())["schema_version"]
    assert written < SCHEMA_VERSION
    current = json.loads(source.read_text())
    current["schema_version"] = SCHEMA_VERSION
    source.with_name("vit_bs1_default_float32.r1.json").write_text(json.dumps({**current, "repeat": 1}))
    build_report([folder], tmp_path / "out", ["csv"])
    table = pd.read_csv(tmp_path / "out" / "results.csv")
    vit = table[table["source"].str.contains("vit_bs1_default_float32")].set_index("repeat")
    assert vit.loc[0, "schema_version"] == written and vit.loc[1, "schema_version"] == SCHEMA_VERSION
    lines = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(line["schema_version"] for line in lines if "vit_bs1_default" in line["source"]) == [
        written, SCHEMA_VERSION]


def test_results_csv_says_tf32_false_for_cells_that_leave_the_axis_out(tmp_path):
    """A cell leaves the tf32 axis out at its default (off), as every record before the axis did: results.csv
    says false there, not an empty field a reader could take for unknown."""
    import pandas as pd

    build_report([FIXTURES / "cpu-run"], tmp_path, ["csv"])
    table = pd.read_csv(tmp_path / "results.csv")
    assert len(table) and table["cell.tf32"].tolist() == [False] * len(table)
