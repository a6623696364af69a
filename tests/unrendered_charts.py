"""Charts drawn, not rendered (issue 35): for a test of a report's text (its tables, notes, warnings,
comparisons.csv) that checks no chart. Every chart is still built and drawn in full (matplotlib lays out each
artist and its text, so a label that cannot be drawn still fails the test), but neither drawn a second time for
savefig's tight bounding box nor rasterised to PNG: its file holds UNRENDERED_PNG. That is about half of a
report's chart time (0.6 s of CPU a chart on this project's 2-core machine). Tests that check the charts
themselves (test_report_charts, test_report_change_charts, test_report_build, ...) render them as the report
does. A test asks for the fixture ``charts_drawn_not_rendered`` (tests/conftest.py); a module-scoped fixture
builds inside ``with drawn_not_rendered():``."""
import contextlib

import pytest

UNRENDERED_PNG = b"not rendered: tests/unrendered_charts.py"


@contextlib.contextmanager
def drawn_not_rendered():
    import matplotlib.pyplot as plt

    from matrixbench.report import charts, cost_charts

    def drawn(figure, folder, name, title):
        path = folder / name
        try:
            figure.draw_without_rendering()
            path.write_bytes(UNRENDERED_PNG)
        finally:
            plt.close(figure)
        return charts.Chart(title, path, f"{charts.CHART_DIR}/{path.name}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(charts, "_save", drawn)
        patch.setattr(cost_charts, "_save", drawn)
        yield
