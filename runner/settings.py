"""Every setting the runner knows, declared once: name, default, type, allowed values, help text.

The runner's defaults and checks (``runner.cells_file``, ``runner.cli``) and the record's
``settings`` block (``runner.schema``) derive from the declarations below; the host adds its own
(``matrixbench.matrix.settings``: repeats, slots, calibration, GPU types) with the same ``Setting`` class,
so that editing a host setting never changes the runner's sources (and so every image's runner
hash). Stdlib only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from runner import axes
from runner.core import ATTENTION, DEVICES, DTYPES, MODES, SIZES, WEIGHTS

JSON = Dict[str, Any]
_KINDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false"}


@dataclass(frozen=True)
class Setting:
    """One setting. ``many``: a list of values (a matrix axis); ``flag``: its CLI override."""

    name: str
    help: str
    kind: str                                  # "integer", "number", "string" or "boolean"
    default: Any = None
    choices: Optional[Tuple[Any, ...]] = None
    minimum: Optional[float] = None
    exclusive_minimum: bool = False            # minimum itself not allowed
    maximum: Optional[float] = None            # sane limit: past it a value is a typo, not a measurement
    nullable: bool = False
    many: bool = False
    min_items: int = 1                         # of a list (many); 0: an empty list means "no such axis"
    required: bool = False                     # matrix.yaml must give it (default: for the runner's shorthand)
    flag: Optional[str] = None                 # the override flag of `matrixbench validate/run`
    runner: bool = False                       # in the runner's settings block
    matrix: bool = True                        # a key of matrix.yaml
    auto: bool = False                         # the string "auto" is allowed too (chosen at run time)

    def item_schema(self) -> JSON:
        """The JSON Schema of one value."""
        if self.auto:
            return {"anyOf": [{"const": "auto"}, Setting(self.name, self.help, self.kind, minimum=self.minimum,
                                                        maximum=self.maximum).item_schema()]}
        if self.choices is not None:
            return {"enum": list(self.choices) + ([None] if self.nullable else [])}
        schema: JSON = {"type": [self.kind, "null"] if self.nullable else self.kind}
        if self.minimum is not None:
            schema["exclusiveMinimum" if self.exclusive_minimum else "minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema

    def json_schema(self) -> JSON:
        if self.many:
            return {"type": "array", "minItems": self.min_items, "uniqueItems": True, "items": self.item_schema()}
        return self.item_schema()

    def problem(self, value: Any) -> Optional[str]:
        """Why ``value`` is not allowed ("must be ..., got ..."), or None (stdlib, for the runner)."""
        if value is None and self.nullable:
            return None
        if self.many:
            fits = isinstance(value, list) and len(value) >= self.min_items
            bad = [self.problem_of_item(item) for item in value] if fits else ["x"]
            kind = "a list" if self.min_items == 0 else "a non-empty list"
            return None if not any(bad) else f"must be {kind} of {self.describe()}, got {value!r}"
        return self.problem_of_item(value)

    def problem_of_item(self, value: Any) -> Optional[str]:
        return None if _allowed(self, value) else f"must be {self.describe()}, got {value!r}"

    def describe(self) -> str:
        """What a value must be: "one of [a, b]", "an integer >= 1", "a number > 0 or null"."""
        if self.auto:
            return "auto or " + Setting(self.name, self.help, self.kind, minimum=self.minimum,
                                        maximum=self.maximum).describe()
        if self.choices is not None:
            text = f"one of [{', '.join(map(str, self.choices))}]"
        else:
            text = _KINDS[self.kind]
            if self.minimum is not None:
                text += f" {'>' if self.exclusive_minimum else '>='} {self.minimum:g}"
            if self.maximum is not None:
                text += f" and <= {self.maximum:,}"
        return text + (" or null" if self.nullable else "")


def _allowed(setting: Setting, value: Any) -> bool:
    if setting.auto and value == "auto":
        return True
    if setting.choices is not None:
        return value in setting.choices
    if isinstance(value, bool) or setting.kind in ("boolean", "string"):
        return isinstance(value, {"boolean": bool, "string": str}.get(setting.kind, type(None)))
    if setting.kind == "integer" and not isinstance(value, int):
        return False
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if setting.maximum is not None and value > setting.maximum:
        return False
    if setting.minimum is None:
        return True
    return value > setting.minimum if setting.exclusive_minimum else value >= setting.minimum


# Maxima: sane limits (10**12 iterations fail as MemoryError, not as a measurement).
SETTINGS: Tuple[Setting, ...] = (
    Setting("weights", "Weights for every model: random (shipped config, no network) or pretrained.",
            "string", default="random", choices=WEIGHTS, flag="--weights"),
    Setting("size", "Model size: full, or tiny (a few-layer variant, for CPU tests).",
            "string", default="full", choices=SIZES, flag="--size"),
    Setting("batch_sizes", "Batch sizes, comma-separated (e.g. 1,4).",
            "integer", default=(1,), minimum=axes.BY_NAME["batch_size"].minimum,
            maximum=axes.BY_NAME["batch_size"].maximum, many=True, required=True, flag="--batch-sizes"),
    Setting("modes", f"Modes, comma-separated, from {', '.join(MODES)}.",
            "string", default=("eager", "default"), choices=MODES, many=True, required=True, flag="--modes"),
    Setting("fullgraph", "torch.compile(fullgraph=True) for the compiled modes.",
            "boolean", default=False),
    Setting("attention", "Attention implementation of every model: eager (default: the one every image "
            "can run, so images compare torch, not transformers), sdpa (eager where a model has no SDPA "
            "path), or auto (transformers' own choice). Records say which ran.",
            "string", default="eager", choices=ATTENTION, flag="--attention"),
    Setting("dtypes", f"Dtypes, comma-separated, from {', '.join(DTYPES)}.",
            "string", default=("float32",), choices=DTYPES, many=True, flag="--dtypes"),
    # the axes that declare their matrix-wide setting in runner.axes (one value for every cell)
    *(Setting(axis.name, axis.setting_help or "", axis.kind, default=axis.default, choices=axis.choices,
              flag="--" + axis.name.replace("_", "-")) for axis in axes.setting_axes()),
    Setting("iterations", "Timed iterations per cell.",
            "integer", default=300, minimum=1, maximum=1_000_000, flag="--iterations", runner=True),
    Setting("warmup", "Warm-up iterations per cell, after the first call (at least 3 run).",
            "integer", default=10, minimum=0, maximum=100_000, flag="--warmup", runner=True),
    Setting("timeout_s", "Per-cell time limit in seconds, compile included.",
            "number", default=900, minimum=0, exclusive_minimum=True, maximum=7 * 24 * 3600,
            flag="--timeout", runner=True),
    Setting("device", "auto: the GPU when there is one, else the CPU; cuda fails without a GPU.",
            "string", default="auto", choices=DEVICES, runner=True, matrix=False),
    Setting("accuracy_tolerance", "Largest relative error of compiled vs eager outputs that passes "
            "(null: the dtype's default, see runner.tolerance).",
            "number", default=None, minimum=0, nullable=True, runner=True),
    Setting("cv_threshold", "stdev/mean above which a cell's timing is flagged noisy.",
            "number", default=0.1, minimum=0, exclusive_minimum=True, runner=True),
    # issue 32 (record schema v4, cells file v3)
    Setting("paired", "After a compiled cell's timed loop, time the eager model and the compiled one alternately "
            "in short blocks in the same process (timing.paired: both sides see the same host); costs about one "
            "more eager loop per compiled process. --no-paired turns it off.",
            "boolean", default=True, flag="--paired", runner=True),
    Setting("min_time_s", "Minimum duration of the timed loop in seconds: calls go on past --iterations until it "
            "has lasted this long (as NVBench's --min-time); the published mean stays that of the first "
            "--iterations calls. auto: long enough for the energy counter's stated error to fall under 10% "
            "on a GPU (runner.energy), 0 on the CPU.",
            "number", default="auto", minimum=0, maximum=3600, auto=True, flag="--min-time", runner=True),
    Setting("target_stdrel", "Noise criterion: after the first --iterations calls (and --min-time), stop once the "
            "relative standard error of the mean is below this (as NVBench's --stdrel), else go on up to "
            "max_time_s; null: no noise criterion.",
            "number", default=None, minimum=0, exclusive_minimum=True, maximum=1, nullable=True,
            flag="--target-stdrel", runner=True),
    Setting("max_time_s", "Cap of the timed loop's duration in seconds under --target-stdrel.",
            "number", default=10.0, minimum=0, exclusive_minimum=True, maximum=3600, flag="--max-time",
            runner=True),
)
BY_NAME: Dict[str, Setting] = {setting.name: setting for setting in SETTINGS}
RUNNER_SETTINGS: Tuple[Setting, ...] = tuple(s for s in SETTINGS if s.runner)

# The runner's settings block when the cells file leaves a setting out.
DEFAULT_SETTINGS: JSON = {s.name: s.default for s in RUNNER_SETTINGS}

