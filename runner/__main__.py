"""``python -m runner --cells CELLS_JSON --out OUT_DIR`` (or the shorthand: see runner.cli)."""
import sys

from runner.cli import main

if __name__ == "__main__":
    sys.exit(main())
