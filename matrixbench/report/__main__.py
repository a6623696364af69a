"""For manual use: python -m matrixbench.report RESULTS_DIR... [--out DIR] [--format md,html,csv].

`matrixbench report` (cli.py) is the real entry point; both call build_report.
"""
import argparse
import sys

from matrixbench.errors import MatrixbenchError
from matrixbench.report import FORMATS, build_report

parser = argparse.ArgumentParser(prog="python -m matrixbench.report")
parser.add_argument("results_dirs", nargs="+", help="run folders, or folders holding runs")
parser.add_argument("--out", default="report", help="folder to write the report into")
parser.add_argument("--format", default=",".join(FORMATS), help="comma-separated subset of md,html,csv")
arguments = parser.parse_args()
try:
    for path in build_report(arguments.results_dirs, arguments.out, arguments.format.split(",")):
        print(path)
except MatrixbenchError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(error.exit_code)
