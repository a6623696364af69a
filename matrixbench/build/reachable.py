"""Whether an index URL answers from this host, asked before pip is.

pip retries an index it cannot reach with backoff, for each requirement and each layer, then takes the
wheel from the next index with only its warnings to say so: minutes lost on a host where
``download.pytorch.org`` does not resolve. This asks once, in a few seconds at most: DNS, then a TCP
connect to host:port (443 for https, 80 for http), or to the proxy pip would use for the URL
(``PIP_PROXY``, ``https_proxy``/``http_proxy``/``all_proxy`` outside ``no_proxy``; a proxy set only in a pip
configuration file is not seen). A ``file:`` URL or a local path is checked as a path; another scheme is
left to pip. Answers are kept per host for the process: many images name one host.
"""
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import SplitResult, urlsplit
from urllib.request import url2pathname

TIMEOUT_S = 3.0
DEFAULT_PORTS = {"https": 443, "http": 80}
SockAddr = Tuple[object, ...]
Resolver = Callable[[str, int], List[Tuple[int, SockAddr]]]     # (host, port) -> [(family, sockaddr)]
Connector = Callable[[int, SockAddr, float], None]               # (family, sockaddr, timeout); OSError: refused


@dataclass(frozen=True)
class Reach:
    """One URL's answer: ``ok``, else why not ("cannot resolve download.pytorch.org")."""

    ok: bool
    reason: str = ""


def resolve(host: str, port: int) -> List[Tuple[int, SockAddr]]:
    """socket.getaddrinfo's TCP addresses of host:port."""
    return [(family, tuple(address))
            for family, _, _, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def connect(family: int, address: SockAddr, timeout: float) -> None:
    """Open and close a TCP connection to ``address``; OSError when none is made within ``timeout``."""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(address)


class Checker:
    """Checks URLs, each host:port once; ``resolver`` and ``connector`` replace the socket calls (tests)."""

    def __init__(self, resolver: Resolver = resolve, connector: Connector = connect,
                 timeout: float = TIMEOUT_S) -> None:
        self._resolver, self._connector, self._timeout = resolver, connector, timeout
        self._answers: Dict[Tuple[str, int], Reach] = {}

    def check(self, url: str, environ: Optional[Mapping[str, str]] = None) -> Reach:
        """Whether pip could reach ``url`` from here (``environ``: where proxies are read; os.environ by default)."""
        parts = urlsplit(url)
        if parts.scheme in DEFAULT_PORTS:
            return self._check_http(parts, os.environ if environ is None else environ)
        if parts.scheme == "file":
            return _check_path(Path(url2pathname(parts.path)))
        return _check_path(Path(url)) if not parts.scheme else Reach(True)

    def _check_http(self, parts: SplitResult, environ: Mapping[str, str]) -> Reach:
        proxy = proxy_for(parts, environ)
        target = urlsplit(proxy[1]) if proxy else parts
        if not target.hostname:
            return Reach(False, f"no host in {'the proxy ' + proxy[0] if proxy else 'the URL'}")
        try:
            port = target.port or DEFAULT_PORTS.get(target.scheme, 80)
        except ValueError:
            return Reach(False, f"a port that is not a number in {'the proxy ' + proxy[0] if proxy else 'the URL'}")
        answer = self._check_host(target.hostname, port)
        return answer if answer.ok or not proxy else Reach(False, f"the proxy {proxy[0]}: {answer.reason}")

    def _check_host(self, host: str, port: int) -> Reach:
        key = (host, port)
        if key not in self._answers:
            self._answers[key] = self._ask(host, port)
        return self._answers[key]

    def _ask(self, host: str, port: int) -> Reach:
        try:
            addresses = self._resolver(host, port)
        except (OSError, UnicodeError):
            return Reach(False, f"cannot resolve {host}")
        error: Optional[OSError] = None
        for family, address in addresses:
            try:
                self._connector(family, address, self._timeout)
                return Reach(True)
            except OSError as exc:
                error = exc
        if isinstance(error, (socket.timeout, TimeoutError)):   # socket.timeout: Python 3.9's
            return Reach(False, f"no answer from {host}:{port} within {self._timeout:g} s")
        why = (error.strerror or str(error)) if error else "no address"
        return Reach(False, f"cannot connect to {host}:{port} ({why})")


def _check_path(path: Path) -> Reach:
    return Reach(True) if path.exists() else Reach(False, f"no such file or folder {path}")


def proxy_for(parts: SplitResult, environ: Mapping[str, str]) -> Optional[Tuple[str, str]]:
    """The proxy pip would use for the URL ``parts``: (the variable that names it, its URL), or None."""
    names = ("PIP_PROXY", f"{parts.scheme}_proxy", f"{parts.scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY")
    name = next((name for name in names if environ.get(name)), None)
    if name is None or (name != "PIP_PROXY" and _bypassed(parts.hostname or "", environ)):
        return None
    value = environ[name]
    return name, value if "://" in value else f"http://{value}"


def _bypassed(host: str, environ: Mapping[str, str]) -> bool:
    """``no_proxy`` names the host, a domain above it, or "*"."""
    entries = [entry.strip().lstrip(".").lower()
               for entry in (environ.get("no_proxy") or environ.get("NO_PROXY") or "").split(",")]
    host = host.lower()
    return any(entry == "*" or host == entry or host.endswith(f".{entry}") for entry in entries if entry)


CHECKER = Checker()


def check(url: str, environ: Optional[Mapping[str, str]] = None) -> Reach:
    """``url``'s answer, asked of this process's one Checker (each host once)."""
    return CHECKER.check(url, environ)
