"""Regenerate matrixbench/data/published_torch_compile.csv from the vendored seed page.

    python tools/regenerate_published.py [SEED.md [OUT.csv]]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from matrixbench.report.published import regenerate_dataset  # noqa: E402
from matrixbench.resources import published_dataset, published_seed  # noqa: E402


def main(argv):
    seed = Path(argv[0]) if argv else published_seed()
    out = Path(argv[1]) if len(argv) > 1 else published_dataset()
    count = regenerate_dataset(seed, out)
    print(f"wrote {count} published numbers from {seed} to {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
