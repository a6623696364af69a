"""The JSON Schema of matrix.yaml, and the defaults of its optional keys.

Each subschema may carry ``x-message``: the sentence shown when it fails, for rules whose
jsonschema message would be cryptic (``anyOf``, ``pattern``).
"""
from runner.schema import DTYPES, MODES, SIZES, TASKS, WEIGHTS

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"
_NAME_RULE = "must use lowercase letters, digits, '.', '_' and '-', and start with a letter or digit"

# Sane limits: past them a run is a typo, not a measurement (10**12 iterations fail as MemoryError).
NUMBER_BOUNDS = {
    "iterations": (1, 1_000_000),
    "warmup": (0, 100_000),
    "timeout_s": (1e-9, 7 * 24 * 3600),
    "batch_size": (1, 4096),
}

_STRING_LIST = {"type": "array", "items": {"type": "string", "minLength": 1}}

IMAGE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["torch", "python", "transformers"],
    "properties": {
        "description": {"type": "string"},
        "torch": {
            "type": "string",
            "pattern": r"^torch(\s*(==|>=|<=|~=|!=|>|<)\s*[0-9][^\s,]*(\s*,\s*(==|>=|<=|~=|!=|>|<)\s*[0-9][^\s,]*)*)?$",
            "x-message": 'must be a pip requirement for torch, e.g. "torch==2.0.1"',
        },
        "index_url": {
            "type": ["string", "null"],
            "pattern": r"^https?://",
            "x-message": "must be an http(s) URL, e.g. https://download.pytorch.org/whl/cu118",
        },
        "extra_index_urls": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^https?://", "x-message": "must be an http(s) URL"},
        },
        "python": {
            "type": "string",
            "pattern": r"^3\.[0-9]+$",
            "x-message": 'must be a Python version such as "3.10" (quoted: YAML reads 3.10 as 3.1)',
        },
        "base_image": {"type": "string", "minLength": 1},
        "transformers": {
            "type": "string",
            "pattern": r"^transformers\b",
            "x-message": 'must be a pip requirement for transformers, e.g. "transformers==4.43.4"',
        },
        "extra_pins": _STRING_LIST,
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        # Which published tables the report compares this image with (report/published.py
        # PUBLISHED_SOURCES); absent: chosen by the image's torch version.
        "published": {"enum": ["main", "nightly", "none"]},
    },
}

MODEL_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["task"],
    "oneOf": [{"required": ["id"]}, {"required": ["config"]}, {"required": ["path"]}],
    "x-message": ("needs `id` (a hub model id) or `config` (a local config.json) or `path` (a "
                  "save_pretrained folder), exactly one of them, not both"),
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "config": {"type": "string", "minLength": 1},
        "path": {"type": "string", "minLength": 1},
        "task": {"enum": list(TASKS)},
        "weights": {"enum": list(WEIGHTS)},
    },
}


def _named(schema, what):
    return {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": NAME_PATTERN, "x-message": f"{what} name {_NAME_RULE}", "x-name": True},
        "additionalProperties": schema,
    }


def _unique_list(items):
    return {"type": "array", "minItems": 1, "uniqueItems": True, "items": items}


MATRIX_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "matrixbench matrix.yaml",
    "type": "object",
    "additionalProperties": False,
    "required": ["images", "models", "batch_sizes", "modes"],
    "properties": {
        "images": _named(IMAGE_SCHEMA, "image"),
        "models": _named(MODEL_SCHEMA, "model"),
        "weights": {"enum": list(WEIGHTS)},
        "size": {"enum": list(SIZES)},
        "batch_sizes": _unique_list({"type": "integer", "minimum": 1, "maximum": NUMBER_BOUNDS["batch_size"][1]}),
        "modes": _unique_list({"enum": list(MODES)}),
        "fullgraph": {"type": "boolean"},
        "dtypes": _unique_list({"enum": list(DTYPES)}),
        "iterations": {"type": "integer", "minimum": 1, "maximum": NUMBER_BOUNDS["iterations"][1]},
        "warmup": {"type": "integer", "minimum": 0, "maximum": NUMBER_BOUNDS["warmup"][1]},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": NUMBER_BOUNDS["timeout_s"][1]},
        "accuracy_tolerance": {"type": ["number", "null"], "minimum": 0},
        "cv_threshold": {"type": "number", "exclusiveMinimum": 0},
    },
}

DEFAULTS = {
    "weights": "random",
    "size": "full",
    "fullgraph": False,
    "dtypes": ["float32"],
    "iterations": 300,
    "warmup": 10,
    "timeout_s": 900,
    "accuracy_tolerance": None,  # the runner picks the dtype's default
    "cv_threshold": 0.1,
}
