"""What a tiny model really runs for each attention implementation asked for, in this interpreter's
torch and transformers (not a test module: tests/test_venv_attention.py runs it with each venv's
Python, tests/test_runner_attention.py imports ``SdpaCalls``). It needs only torch, transformers and
the runner, as the runner does.

    python tests/attention_probe.py vit eager sdpa   # one JSON line per attention asked for
    python tests/attention_probe.py --every-seed-model eager sdpa   # the 11 seed models, witness only
"""
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from torch.overrides import TorchFunctionMode


class SdpaCalls(TorchFunctionMode):
    """Counts calls of torch's scaled_dot_product_attention during a forward: the witness, independent
    of any config string, of whether the model's attention layers run SDPA."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.count += 1
        return func(*args, **(kwargs or {}))


def sdpa_calls(built):
    """How often one forward of ``built`` (runner.models.Built) calls SDPA."""
    calls = SdpaCalls()
    with torch.no_grad(), calls:
        built.model(**built.inputs)
    return calls.count


def attention_layer_classes(model):
    """The class names of the model's modules that are attention layers, by name."""
    return sorted({type(module).__name__ for module in model.modules() if "Attention" in type(module).__name__})


def tiny_cell(model, attention):
    from runner.core import Cell
    from runner.registry import SEED_MODELS

    spec = SEED_MODELS[model]
    return Cell(model=model, model_id=spec.model_id, task=spec.task, weights="random", size="tiny", batch_size=1,
                mode="eager", fullgraph=False, dtype="float32", attention=attention)


def pretrained(built, attention):
    """The model saved and loaded back through from_pretrained (a local checkpoint), with ``attention``."""
    from runner.models import build

    with tempfile.TemporaryDirectory() as folder:
        built.model.save_pretrained(folder)
        cell = dataclasses.replace(tiny_cell("vit", attention), model="my-vit", model_id=None, size="full",
                                   weights="pretrained", config_path=str(Path(folder) / "config.json"))
        loaded = build(cell, "cpu", torch.float32)
        return {"used": loaded.attention, "sdpa_calls": sdpa_calls(loaded)}


def record_attention(model, attention):
    """The record's attention and status of a real (two-iteration) eager cell run."""
    from runner import records
    from runner.cell import run_cell

    settings = {"iterations": 2, "warmup": 1, "timeout_s": 600, "device": "cpu", "accuracy_tolerance": None,
                "cv_threshold": 0.1}
    job = {"cell": tiny_cell(model, attention), "settings": settings, "device": "cpu", "environment": None,
           "precision": {}, "started_at": records.utc_now(), "start_clock": records.clock()}
    record = run_cell(job)
    return {"status": str(getattr(record.status, "value", record.status)), "attention": record.attention}


def probe(model, attention):
    from runner.models import build

    built = build(tiny_cell(model, attention), "cpu", torch.float32)
    return {"model": model, "requested": attention, "used": built.attention, "sdpa_calls": sdpa_calls(built),
            "layers": attention_layer_classes(built.model), "record": record_attention(model, attention),
            "pretrained": pretrained(built, attention),
            "torch": torch.__version__, "transformers": transformers.__version__}


def witnessed(model, attention):
    """Only what ``build`` says ran and the SDPA calls of one forward (no cell, no reload): cheap."""
    from runner.models import build

    built = build(tiny_cell(model, attention), "cpu", torch.float32)
    return {"model": model, "requested": attention, "used": built.attention, "sdpa_calls": sdpa_calls(built)}


if __name__ == "__main__":
    if sys.argv[1] == "--every-seed-model":   # --every-seed-model eager sdpa
        from runner.registry import DEFAULT_MODELS

        for name in DEFAULT_MODELS:
            for asked in sys.argv[2:]:
                print(json.dumps(witnessed(name, asked)), flush=True)
    else:
        for asked in sys.argv[2:]:
            print(json.dumps(probe(sys.argv[1], asked)), flush=True)
