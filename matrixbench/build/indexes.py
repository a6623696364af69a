"""Which of an image's indexes pip is given: those that answer from this host (matrixbench/build/reachable.py).

An unreachable torch index (``images.<name>.index_url``, the build arg TORCH_INDEX_URL) or extra index
(EXTRA_INDEX_URLS) is left out of pip's call, and one line says so: the field, the URL, why, and
where pip then takes the wheels from (what it would have done itself after minutes of retries). The main
index (INDEX_URL: the ``index_url`` build setting, PyPI by default) is not left out: when it does not
answer and the wheelhouse lacks wheels, ``require_main`` raises at once. The host's pip (a venv's, the
wheelhouse's downloads) and a Docker build's own pip get the same choice (images.py): the build is taken to
reach what this host reaches (it runs on the host's network when the wheelhouse is served to it). What a
build used (``Indexes.record``) is kept in a venv's marker and in an image's label ``LABEL``.
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

from matrixbench.build.reachable import Checker, Reach, check
from matrixbench.errors import IndexUnreachableError
from matrixbench.redact import redact_urls

LABEL = "matrixbench.indexes"   # a built Docker image's Indexes.record, one JSON label
HOST_PIP = "this host's pip download"
MAIN_FIELD = "the build setting index_url: matrix.yaml, --set index_url=URL or build --index-url"
PYPI_NOTE = "; note: PyPI's Linux torch wheels are CUDA builds"


@dataclass(frozen=True)
class LeftOut:
    """An index left out of pip's call: its field, its URL (redacted) and why."""

    field: str
    url: str
    reason: str

    def to_dict(self) -> Dict[str, str]:
        return {"field": self.field, "url": self.url, "reason": self.reason}


Used = Union[None, str, List[str], List[Dict[str, str]]]   # a value of Indexes.record


@dataclass(frozen=True)
class Indexes:
    """One image's indexes as pip gets them."""

    name: str
    buildargs: Dict[str, str]      # the build args less the indexes left out
    left_out: Tuple[LeftOut, ...]
    main: Reach                    # INDEX_URL's answer

    @property
    def torch_index(self) -> str:
        """The index pip is told to take torch from (redacted): the torch index, else INDEX_URL."""
        return redact_urls(self.buildargs["TORCH_INDEX_URL"] or self.buildargs["INDEX_URL"])

    def lines(self, of: str = HOST_PIP) -> List[str]:
        """One progress line for each index left out ``of`` a pip call ("this host's pip download")."""
        main = redact_urls(self.buildargs["INDEX_URL"])
        note = PYPI_NOTE if urlsplit(self.buildargs["INDEX_URL"]).hostname == "pypi.org" else ""
        instead = {
            "torch": f"{self.buildargs['TORCH_SPEC']} comes from {main} instead, as pip would after its retries{note}",
            "extra": f"what it serves comes from {main} and the other indexes instead, as pip would after its retries",
        }
        return [f"{out.field} {out.url} is left out of {of} ({out.reason}): "
                f"{instead['torch' if out.field.endswith('.index_url') else 'extra']}" for out in self.left_out]

    def record(self, from_wheelhouse: Sequence[str] = ()) -> Dict[str, Used]:
        """What a build used, for a venv's marker or an image's label: the index torch came from (None: the
        wheelhouse held it, ``from_wheelhouse`` naming the layers it held), the indexes left out."""
        return {"torch_index_used": None if "torch" in from_wheelhouse else self.torch_index,
                "indexes_left_out": [out.to_dict() for out in self.left_out],
                "layers_from_wheelhouse": list(from_wheelhouse)}

    def require_main(self, layer: str, wheelhouse: Path) -> None:
        """IndexUnreachableError when INDEX_URL does not answer (the wheelhouse lacked ``layer``'s wheels)."""
        if self.main.ok:
            return
        url = redact_urls(self.buildargs["INDEX_URL"])
        raise IndexUnreachableError(
            f"image {self.name!r}: the index {url} ({MAIN_FIELD}) does not answer from this host "
            f"({self.main.reason}), and the wheelhouse {wheelhouse} lacks some of the {layer} layer's wheels: pip "
            f"would retry it for minutes, then fail. Give an index this host reaches (--index-url "
            "https://mirror.example/simple, or --set index_url=...), set HTTPS_PROXY if it is reached through a "
            "proxy, or put the wheels into the wheelhouse ($MATRIXBENCH_WHEELHOUSE)")


def choose(name: str, buildargs: Mapping[str, str], environ: Mapping[str, str],
           checker: Optional[Checker] = None) -> Indexes:
    """Image ``name``'s indexes, those that do not answer left out (``checker``: reachable.check's by default)."""
    def reach(url: str) -> Reach:
        return checker.check(url, environ) if checker else check(url, environ)

    args = {key: str(value) for key, value in buildargs.items()}
    left_out = []
    torch_index = args["TORCH_INDEX_URL"]
    if torch_index and not (answer := reach(torch_index)).ok:
        left_out.append(LeftOut(f"images.{name}.index_url", redact_urls(torch_index), answer.reason))
        args["TORCH_INDEX_URL"] = ""
    kept = []
    for url in args["EXTRA_INDEX_URLS"].split():
        if (answer := reach(url)).ok:
            kept.append(url)
        else:
            left_out.append(LeftOut(f"images.{name}.extra_index_urls / --extra-index-url", redact_urls(url),
                                    answer.reason))
    args["EXTRA_INDEX_URLS"] = " ".join(kept)
    return Indexes(name, args, tuple(left_out), reach(args["INDEX_URL"]))


def from_labels(labels: Mapping[str, str]) -> Dict[str, object]:
    """The record (``Indexes.record``) of an image's labels; {} when absent or malformed (built before images
    recorded it)."""
    try:
        data = json.loads(labels.get(LABEL) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) and "torch_index_used" in data else {}
