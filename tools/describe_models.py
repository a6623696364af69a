"""Print what runner.models.build makes of each shipped model: class, parameter count, input shapes.

A dev check of the shipped configs against the published model sizes, runnable under any
transformers (e.g. the 4.43 and the newest): construction happens on the meta device where that
transformers allows it, else on CPU; no forward pass.

    python tools/describe_models.py [--size tiny] [--batch-size 2] [NAME ...]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import transformers  # noqa: E402

from runner import models  # noqa: E402
from runner.core import SIZES, Cell  # noqa: E402


def construct(recipe):
    try:
        with torch.device("meta"):
            return models.instantiate(recipe), "meta"
    except (NotImplementedError, RuntimeError):
        return models.instantiate(recipe), "cpu"


def describe(name, size, batch_size):
    spec = models.SEED_MODELS[name]
    cell = Cell(model=name, task=spec.task, weights="random", size=size, batch_size=batch_size,
                mode="eager", fullgraph=False, dtype="float32")
    start = time.perf_counter()
    model, device = construct(models.make_recipe(cell))
    count = sum(parameter.numel() for parameter in model.parameters())
    shapes = models.input_shapes(cell)
    print(f"{name:17} {type(model).__name__:36} {count / 1e6:9.3f}M  {shapes}  "
          f"({device}, {time.perf_counter() - start:.1f}s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=list(models.SEED_MODELS))
    parser.add_argument("--size", choices=SIZES, default="full")
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    for name in args.names:
        describe(name, args.size, args.batch_size)


if __name__ == "__main__":
    main()
