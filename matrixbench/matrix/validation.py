"""Schema validation of matrix.yaml with messages that name the field path, its line and the fix."""
from pathlib import Path
from typing import Any, Mapping, Optional

import jsonschema
import yaml

from matrixbench.errors import MatrixError

MAX_SHOWN = 10
MAX_VALUE_CHARS = 60

_TYPE_NAMES = {
    "object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
    "number": "a number", "boolean": "true or false", "null": "null",
}


def validate(data: Any, schema: Mapping[str, Any], text: str, path: Path,
             flags: Optional[Mapping[str, str]] = None) -> None:
    """Raise MatrixError listing every schema violation of ``data`` (parsed from ``text``).

    ``flags`` maps top-level keys whose value came from a command-line flag to that flag:
    their problems name the flag; the others name ``file:line:col``.
    """
    flags = flags or {}
    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(data))
    if not errors:
        return
    from_flags = [error for error in errors if _flag_of(error, flags)]
    if from_flags:   # one line per problem: jsonschema reports each missing key of one mapping on its own
        raise MatrixError("invalid option:\n" + "\n".join(dict.fromkeys(
            f"  {describe(error, _flag_of(error, flags))}" for error in from_flags)))
    root = _compose(text)
    located = sorted({(_location(root, error), describe(error)) for error in errors})
    lines = [f"  {path}:{line}:{column}: {message}" for (line, column), message in located]
    more = len(lines) - MAX_SHOWN
    shown = lines[:MAX_SHOWN] + ([f"  ... and {more} more"] if more > 0 else [])
    raise MatrixError(f"{path} is invalid:\n" + "\n".join(shown))


def describe(error, where=None):
    """One sentence for one jsonschema error: field path (or ``where``), what is wrong, what is allowed."""
    where = where or dotted(error.absolute_path)
    rule = _RULES.get(error.validator, _default)
    return rule(where or "top level", error)


def _flag_of(error, flags):
    path = list(error.absolute_path)
    return flags.get(path[0]) if path else None


def dotted(parts):
    """["images", "stable", "torch"] -> "images.stable.torch"; list indexes as [i]."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


YAML_WORDS = {True: "true (a boolean)", False: "false (a boolean)", None: "null (no value)"}


def _shown(value):
    """A value for a message, cut short: an error never echoes a whole file. A boolean or null as YAML spells it,
    which is how matrix.yaml and --set KEY=VALUE gave it ("true", not Python's "True")."""
    if value is None or isinstance(value, bool):
        return YAML_WORDS[value]
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "..."


def _hint(error):
    return error.schema.get("x-message")


def _type(where, error):
    if _hint(error):
        return f"{where} {_hint(error)}, got {_shown(error.instance)}"
    wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
    names = " or ".join(_TYPE_NAMES.get(name, name) for name in wanted)
    return f"{where} must be {names}, got {_shown(error.instance)}"


def _enum(where, error):
    allowed = ", ".join(str(value) for value in error.validator_value)
    return f"{where} must be one of [{allowed}], got {_shown(error.instance)}"


def _unknown_keys(where, error):
    extra = [key for key in error.instance if key not in error.schema.get("properties", {})]
    allowed = ", ".join(error.schema.get("properties", {}))
    return f"{where}: unknown key(s) {', '.join(map(str, extra))}; allowed keys: {allowed}"


def _required(where, error):
    missing = [key for key in error.validator_value if key not in error.instance]
    return f"{where}: missing required key(s) {', '.join(missing)}"


def _minimum(where, error):
    sign = ">" if error.validator == "exclusiveMinimum" else ">="
    return f"{where} must be {sign} {error.validator_value}, got {_shown(error.instance)}"


def _maximum(where, error):
    return (f"{where} must be <= {error.validator_value:,}, got {_shown(error.instance)}: "
            "more is a typo, not a measurement")


def _empty(where, error):
    return f"{where} must not be empty"


def _duplicates(where, error):
    return f"{where} lists a value twice: {error.instance!r}"


def _with_hint(where, error):
    if error.schema.get("x-name"):
        return f"{where}: {error.instance!r}: {_hint(error)}"
    if _hint(error):
        return f"{where} {_hint(error)}, got {_shown(error.instance)}"
    return _default(where, error)


def _any_of(where, error):
    """The alternatives' own rule where one of them is about the value's range ("must be >= 1, got 0, or
    'auto'"), not "matches none of the allowed forms"."""
    if _hint(error):
        return f"{where} {_hint(error)}"
    ranged = [sub for sub in error.context or () if sub.validator in ("minimum", "exclusiveMinimum", "maximum")]
    forms = [_form(schema) for schema in error.validator_value]
    if not ranged and all(forms):
        return f"{where} must be {' or '.join(forms)}, got {_shown(error.instance)}"
    if not ranged:
        return f"{where} matches none of the allowed forms"
    words = [repr(sub.validator_value) for sub in error.context if sub.validator == "const"]
    return _RULES[ranged[0].validator](where, ranged[0]) + (f", or {' or '.join(words)}" if words else "")


def _form(schema):
    """One alternative of an anyOf in words ("'auto'", "an integer >= 1 and <= 1,000"); None when it has no
    simple wording."""
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return f"one of [{', '.join(map(str, schema['enum']))}]"
    if set(schema) - {"type", "minimum", "exclusiveMinimum", "maximum"} or "type" not in schema:
        return None
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    text = " or ".join(_TYPE_NAMES.get(kind, kind) for kind in kinds)
    if "minimum" in schema or "exclusiveMinimum" in schema:
        text += f" > {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else f" >= {schema['minimum']}"
    if "maximum" in schema:
        text += f" and <= {schema['maximum']:,}"
    return text


def _default(where, error):
    return f"{where}: {error.message}"


_RULES = {
    "type": _type,
    "enum": _enum,
    "const": _enum,
    "additionalProperties": _unknown_keys,
    "required": _required,
    "minimum": _minimum,
    "exclusiveMinimum": _minimum,
    "maximum": _maximum,
    "minItems": _empty,
    "minProperties": _empty,
    "minLength": _empty,
    "uniqueItems": _duplicates,
    "pattern": _with_hint,
    "anyOf": _any_of,
    "oneOf": _any_of,
}


# --- where in the file ---------------------------------------------------------------------

def where_key(text, path, key, flags):
    """How a message names top-level ``key``: the flag that gave it, else ``file:line:col: key`` of its value."""
    if key in flags:
        return flags[key]
    node = _child(_compose(text), key)
    return f"{path}:{node.start_mark.line + 1}:{node.start_mark.column + 1}: {key}" if node else f"{path}: {key}"


def _compose(text):
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def _location(root, error):
    """(line, column), 1-based, of the YAML node the error is about."""
    node = root
    for part in error.absolute_path:
        child = _child(node, part)
        if child is None:
            break
        node = child
    node = _offending_key(node, error) or node
    if node is None:
        return (1, 1)
    return (node.start_mark.line + 1, node.start_mark.column + 1)


def _child(node, part):
    if isinstance(node, yaml.MappingNode):
        return next((value for key, value in node.value if key.value == str(part)), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None


def _offending_key(node, error):
    """For unknown keys and bad names, point at the key itself rather than its mapping."""
    if not isinstance(node, yaml.MappingNode):
        return None
    if error.validator == "pattern" and isinstance(error.instance, str):
        bad = {error.instance}  # a bad name (propertyNames) is reported at its mapping
    elif error.validator == "additionalProperties":
        bad = {str(key) for key in error.instance if key not in error.schema.get("properties", {})}
    else:
        return None
    return next((key for key, _ in node.value if key.value in bad), None)
