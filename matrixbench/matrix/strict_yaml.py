"""Reading a matrix file's YAML strictly: UTF-8, string keys, no key twice, the right line.

PyYAML accepts what a matrix must not hold: ``50:`` and ``yes:`` as keys (a number and a
boolean), and a key given twice (the last one silently wins). This loader refuses them, naming
the line. It reads only a regular file up to MAX_MATRIX_BYTES, and refuses anchors and aliases
that expand beyond MAX_YAML_VALUES values and nesting beyond MAX_YAML_DEPTH, one line each.
Syntax errors point at the line where the unclosed bracket or quote was opened.
"""
import os
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from matrixbench.errors import MatrixError
from runner.files import UnreadableFileError, read_bounded_text

_STR_TAG = "tag:yaml.org,2002:str"
_READ_AS = {
    "tag:yaml.org,2002:int": "a number", "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true or false", "tag:yaml.org,2002:null": "null",
}
_OPENERS = {"while parsing a flow sequence": "'['", "while parsing a flow mapping": "'{'"}


class StrictLoader(yaml.SafeLoader):
    """SafeLoader whose mappings must have string keys, each once."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            _check_keys(node)
        return super().construct_mapping(node, deep=deep)



def _check_keys(node):
    seen = {}
    for key, _ in node.value:
        if key.tag != _STR_TAG:
            kind = _READ_AS.get(key.tag, f"a {key.tag.rsplit(':', 1)[-1]}")
            raise ConstructorError(
                None, None,
                f"the key {key.value} is read by YAML as {kind}; names and keys must be strings: "
                f"quote it ('{key.value}':)", key.start_mark)
        if key.value in seen:
            raise ConstructorError(
                None, None,
                f"the key {key.value!r} appears twice (lines {seen[key.value] + 1} and "
                f"{key.start_mark.line + 1}); keep one", key.start_mark)
        seen[key.value] = key.start_mark.line


def value(text: str) -> Any:
    """One value as YAML reads it (``--set KEY=VALUE``): true, 0.05, [1, 4], a string otherwise;
    read with the matrix file's limits, so an alias bomb on the command line is refused alike."""
    try:
        return _load(text, Path("--set"))
    except yaml.YAMLError:
        return text


# A matrix is a few KB; these bound what a hostile file can cost before validation reads it.
MAX_MATRIX_BYTES = 1024 * 1024     # the file
MAX_YAML_VALUES = 100_000          # values after expanding anchors and aliases (a "billion laughs")
MAX_YAML_DEPTH = 64                # nesting of lists and mappings


def read_text(path: Path) -> str:
    try:
        return read_bounded_text(path, MAX_MATRIX_BYTES)
    except FileNotFoundError:
        if path.is_symlink():
            raise MatrixError(f"matrix file {path} is a symlink to {os.readlink(path)}, which does not "
                              "exist; fix the link or pass --matrix PATH") from None
        raise MatrixError(f"matrix file {path} not found; pass --matrix PATH") from None
    except UnicodeDecodeError as exc:
        raw = path.read_bytes()
        line = raw.count(b"\n", 0, exc.start) + 1
        raise MatrixError(f"{path}: not UTF-8 text: line {line} holds the byte 0x{raw[exc.start]:02x} "
                          f"(byte offset {exc.start}); save the file as UTF-8") from None
    except UnreadableFileError as exc:
        raise MatrixError(f"matrix file {exc}; pass --matrix PATH of a YAML file "
                          f"(at most {MAX_MATRIX_BYTES} bytes)") from None
    except OSError as exc:
        raise MatrixError(f"cannot read matrix file {path}: {exc.strerror or exc}") from None


def parse(text: str, path: Path) -> Any:
    """The YAML document in ``text``: a mapping, or MatrixError naming the line."""
    try:
        data = _load(text, path)
    except ConstructorError as exc:
        raise MatrixError(f"{path}: {problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise MatrixError(f"{path}: not valid YAML: {problem(exc)}") from None
    except RecursionError:
        raise MatrixError(f"{path}: lists or mappings nested too deeply to read (a matrix nests a few levels; "
                          f"at most {MAX_YAML_DEPTH})") from None
    if data is None:
        raise MatrixError(f"{path} is empty; see the repository's matrix.yaml for the keys")
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({type(data).__name__})"
        raise MatrixError(f"{path}: the top level must be a mapping of keys "
                          f"(images, models, batch_sizes, modes, ...), got {kind}")
    return data


def _load(text, path):
    """yaml.load with StrictLoader, refusing a node tree that nests or expands beyond the limits
    before anything is built from it."""
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expansion(root, path):
    """Walk the nodes as aliases expand them (an alias is its anchor's node again), up to
    MAX_YAML_VALUES values and MAX_YAML_DEPTH levels."""
    todo, seen = [(root, 1)], 0
    while todo:
        node, depth = todo.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise MatrixError(f"{path}: more than {MAX_YAML_VALUES} values once anchors and aliases (&name, *name) "
                              "are expanded; a matrix needs a few hundred: expand fewer aliases")
        if depth > MAX_YAML_DEPTH:
            raise MatrixError(f"{path}: {_where(node.start_mark)}: nested more than {MAX_YAML_DEPTH} levels deep; "
                              "a matrix nests a few levels")
        if isinstance(node, yaml.SequenceNode):
            todo += [(child, depth + 1) for child in node.value]
        elif isinstance(node, yaml.MappingNode):
            todo += [(child, depth + 1) for pair in node.value for child in pair]


def problem(exc):
    """"line L, column C: what" for a YAML error, at the line where the trouble started."""
    mark = getattr(exc, "problem_mark", None)
    what = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return what
    opened = getattr(exc, "context_mark", None)
    opener = _OPENERS.get(getattr(exc, "context", None))
    if opened is not None and opener and opened.line != mark.line:
        return (f"{_where(opened)}: the {opener} opened here is never closed "
                f"({what} at {_where(mark)})")
    return f"{_where(mark)}: {what}"


def _where(mark):
    return f"line {mark.line + 1}, column {mark.column + 1}"
