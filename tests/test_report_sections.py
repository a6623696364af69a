"""The report as sections (report.document.Section): each template renders every section in one loop, so a
new table is one producer and one entry of Report.sections; Markdown and HTML show the same sections."""
import re
from pathlib import Path

from matrixbench.report import build_report
from matrixbench.report.document import Section

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATES = Path(__file__).parents[1] / "templates"


def test_the_templates_name_no_section_of_their_own():
    for name in ("report.md.j2", "report.html.j2"):
        text = (TEMPLATES / name).read_text(encoding="utf-8")
        assert "report.sections" in text
        for kind in ("per_device", "image_pairs", "compile_modes", "published", "costs", "calibration", "attribution"):
            assert f"report.{kind}" not in text and f"legends.{kind}" not in text, (name, kind)


def test_a_section_shows_when_it_has_something_or_always():
    assert not Section("x").shown and Section("x", always=True).shown
    assert Section("x", tables=[object()]).shown and Section("x", charts=[object()]).shown


def test_markdown_and_html_show_the_same_sections(tmp_path):
    build_report([FIXTURES / "gpu-run", FIXTURES / "cpu-run"], tmp_path, ["md", "html"])
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    titles = re.findall(r"^## (.+)$", markdown, re.M)
    assert titles == [title.replace("&#39;", "'") for title in re.findall(r"<h2>(.+?)</h2>", page)]
    assert {"Charts", "Latency per device and batch size", "Image against image", "Summary"} <= set(titles)
