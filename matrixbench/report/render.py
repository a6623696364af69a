"""Render a Report with the Jinja templates in templates/: Markdown, and self-contained HTML."""
import base64
import html
import re
from pathlib import Path

import jinja2
import markupsafe

from matrixbench import resources
from matrixbench.errors import ReportError


def render_markdown(report):
    return _template("report.md.j2", autoescape=False).render(report=report)


def render_html(report):
    """HTML with CSS inline and every chart embedded as a base64 PNG: one file, nothing to fetch."""
    images = {chart.relative: _data_uri(chart.path) for chart in [*report.charts, *report.cost_charts]}
    return _template("report.html.j2", autoescape=True).render(report=report, images=images)


def _template(name, autoescape):
    """A template of the installed package; its absence is a ReportError, not a traceback."""
    try:
        return _environment(autoescape).get_template(name)
    except jinja2.TemplateNotFound:
        raise ReportError(f"report template {name} not found in {resources.templates_dir()}; "
                          "reinstall matrixbench") from None


def _environment(autoescape):
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resources.templates_dir()), undefined=jinja2.StrictUndefined,
        autoescape=autoescape, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    environment.filters.update(md_cell=md_cell, md_escape=md_escape, code_spans=code_spans)
    environment.globals.update(aligns=aligns)
    return environment


def _data_uri(path):
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def md_escape(text):
    """Text that cannot break a Markdown table row nor smuggle HTML into the rendered page (notes,
    model types, error messages are user text): ``& < >`` as entities, as the HTML report escapes."""
    text = html.escape(str(text), quote=False)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def code_spans(text):
    """HTML of a legend: the text escaped, its Markdown code spans (`x`) as <code>x</code>, as the
    Markdown report shows them."""
    escaped = html.escape(str(text), quote=False)
    return markupsafe.Markup(re.sub(r"`([^`\n]+)`", r"<code>\1</code>", escaped))


def md_cell(cell):
    note = f"[^{cell.footnote}]" if cell.footnote else ""
    return f"{md_escape(cell.text)}{cell.marks}{note}"


def aligns(table):
    """"left" for columns of labels (dashes aside), "right" for columns with numbers or statuses."""
    return ["left" if all(row[i].kind in ("label", "missing") for row in table.rows)
            and any(row[i].kind == "label" for row in table.rows) else "right"
            for i in range(len(table.header))]
