"""Render a Report with the Jinja templates in templates/: Markdown, and one self-contained HTML."""
import base64
from pathlib import Path

import jinja2

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"


def render_markdown(report):
    return _environment(autoescape=False).get_template("report.md.j2").render(report=report)


def render_html(report):
    """HTML with CSS inline and every chart embedded as a base64 PNG: one file, nothing to fetch."""
    images = {chart.relative: _data_uri(chart.path) for chart in report.charts}
    return _environment(autoescape=True).get_template("report.html.j2").render(report=report, images=images)


def _environment(autoescape):
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
        autoescape=autoescape, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    environment.filters.update(md_cell=md_cell, md_escape=md_escape)
    environment.globals.update(aligns=aligns)
    return environment


def _data_uri(path):
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def md_escape(text):
    """Text that cannot break a Markdown table row."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def md_cell(cell):
    note = f"[^{cell.footnote}]" if cell.footnote else ""
    return f"{md_escape(cell.text)}{cell.marks}{note}"


def aligns(table):
    """"left" for columns of labels (dashes aside), "right" for columns with numbers or statuses."""
    return ["left" if all(row[i].kind in ("label", "missing") for row in table.rows)
            and any(row[i].kind == "label" for row in table.rows) else "right"
            for i in range(len(table.header))]
