"""Which of an image's indexes this host's pip is given when it downloads into the wheelhouse: those that
answer (matrixbench/build/reachable.py).

An unreachable torch index (``images.<name>.index_url``, the build arg TORCH_INDEX_URL) or extra index
(EXTRA_INDEX_URLS) is left out of the host's pip call, and one line says so: the field, the URL, why, and
where pip then takes the wheels from (what it would have done itself after minutes of retries). The main
index (INDEX_URL: the ``index_url`` build setting, PyPI by default) is not left out: when it does not
answer and the wheelhouse lacks wheels, ``require_main`` raises at once. Only the host's pip is concerned:
a Docker build's own pip gets the build args as they are.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from matrixbench.build.reachable import Checker, Reach, check
from matrixbench.errors import IndexUnreachableError
from matrixbench.redact import redact_urls

MAIN_FIELD = "the build setting index_url: matrix.yaml, --set index_url=URL or build --index-url"
PYPI_NOTE = "; note: PyPI's Linux torch wheels are CUDA builds"


@dataclass(frozen=True)
class LeftOut:
    """An index left out of the host's pip call: its field, its URL (redacted) and why."""

    field: str
    url: str
    reason: str

    def to_dict(self) -> Dict[str, str]:
        return {"field": self.field, "url": self.url, "reason": self.reason}


@dataclass(frozen=True)
class Indexes:
    """One image's indexes as the host's pip gets them."""

    name: str
    buildargs: Dict[str, str]      # the build args less the indexes left out
    left_out: Tuple[LeftOut, ...]
    main: Reach                    # INDEX_URL's answer

    @property
    def torch_index(self) -> str:
        """The index pip is told to take torch from (redacted): the torch index, else INDEX_URL."""
        return redact_urls(self.buildargs["TORCH_INDEX_URL"] or self.buildargs["INDEX_URL"])

    def lines(self) -> List[str]:
        """One progress line for each index left out."""
        main = redact_urls(self.buildargs["INDEX_URL"])
        note = PYPI_NOTE if urlsplit(self.buildargs["INDEX_URL"]).hostname == "pypi.org" else ""
        instead = {
            "torch": f"{self.buildargs['TORCH_SPEC']} comes from {main} instead, as pip would after its retries{note}",
            "extra": f"what it serves comes from {main} and the other indexes instead, as pip would after its retries",
        }
        return [f"{out.field} {out.url} is left out of this host's pip download ({out.reason}): "
                f"{instead['torch' if out.field.endswith('.index_url') else 'extra']}" for out in self.left_out]

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
