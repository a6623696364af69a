"""The report's output formats, declared once: the CLI offers them, the report writes them.

A module of its own so that ``cli.py`` can list them without importing the report (pandas).
"""
REPORT_FORMATS = ("md", "html", "csv")
