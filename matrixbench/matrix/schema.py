"""The JSON Schema of matrix.yaml, and the defaults of its optional keys.

The settings' properties (axes, iterations, ...) and defaults derive from their one
declaration in ``runner.settings``; images and models are described here.
Each subschema may carry ``x-message``: the sentence shown when it fails, for rules whose
jsonschema message would be cryptic (``anyOf``, ``pattern``).
"""
from typing import Any, Dict

from matrixbench.matrix.prices import PRICES_SCHEMA
from matrixbench.matrix.settings import MATRIX_SETTINGS, matrix_defaults
from runner.core import TASKS, WEIGHTS

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"
_NAME_RULE = "must use lowercase letters, digits, '.', '_' and '-', and start with a letter or digit"

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

# A hub id: "name" or "org/name"; never a filesystem path ("/x", "./x", "../x", "~/x", "a/b/c").
HUB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$"

# A hub revision: a branch, tag or commit, as git allows them in a ref (no "..", no leading "-" or "/").
REVISION_PATTERN = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._/-]*$"

MODEL_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["task"],
    "oneOf": [{"required": ["id"]}, {"required": ["config"]}, {"required": ["path"]}],
    "x-message": ("needs `id` (a hub model id) or `config` (a local config.json) or `path` (a "
                  "save_pretrained folder), exactly one of them, not both"),
    "properties": {
        "id": {"type": "string", "minLength": 1, "pattern": HUB_ID_PATTERN,
               "x-message": ("must be a Hugging Face hub id (name or org/name); for a folder on this machine "
                             "use `path:` (a save_pretrained folder) or `config:` (a config.json)")},
        "config": {"type": "string", "minLength": 1},
        "path": {"type": "string", "minLength": 1},
        "task": {"enum": list(TASKS)},
        "weights": {"enum": list(WEIGHTS)},
        # with `id`: the hub revision (a branch, tag or commit) every from_pretrained gets
        "revision": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": REVISION_PATTERN,
                     "x-message": "must be a hub revision: a branch, tag or commit hash (letters, digits, . _ - /)"},
    },
}


def _named(schema: Dict[str, Any], what: str) -> Dict[str, Any]:
    return {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": NAME_PATTERN, "x-message": f"{what} name {_NAME_RULE}", "x-name": True},
        "additionalProperties": schema,
    }


MATRIX_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "matrixbench matrix.yaml",
    "type": "object",
    "additionalProperties": False,
    "required": ["images", "models", *(s.name for s in MATRIX_SETTINGS if s.required)],
    "properties": {
        "images": _named(IMAGE_SCHEMA, "image"),
        "models": _named(MODEL_SCHEMA, "model"),
        **{s.name: s.json_schema() for s in MATRIX_SETTINGS},
        # The user's price per GPU-hour per GPU type, for the report's "What it costs" (matrixbench.matrix.prices).
        "prices": PRICES_SCHEMA,
    },
}

DEFAULTS = matrix_defaults()
