"""Manual use while cli.py is not wired: python -m matrixbench.report RESULTS_DIR... [--out DIR] [--format md,html,csv]."""
import argparse

from matrixbench.report import FORMATS, build_report

parser = argparse.ArgumentParser(prog="python -m matrixbench.report")
parser.add_argument("results_dirs", nargs="+")
parser.add_argument("--out", default="report")
parser.add_argument("--format", default=",".join(FORMATS))
arguments = parser.parse_args()
for path in build_report(arguments.results_dirs, arguments.out, arguments.format.split(",")):
    print(path)
