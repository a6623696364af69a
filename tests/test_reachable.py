"""Whether an index URL answers, asked before pip: real sockets on 127.0.0.1, an injected resolver for names."""
import socket
from urllib.parse import urlsplit

import pytest

from matrixbench.build.reachable import Checker, Reach, proxy_for, resolve
from matrixbench.build.reachable import connect as real_connect


@pytest.fixture
def listening():
    """A TCP port that accepts connections on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def closed_port():
    """A port nothing listens on: bound once for a free number, then closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def unresolved(*names):
    """A resolver that knows no ``names`` (as a DNS without them) and sends every other name to 127.0.0.1."""
    def resolver(host, port):
        if host in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve("127.0.0.1", port)
    return resolver


def test_a_listening_port_answers(listening):
    assert Checker().check(f"http://127.0.0.1:{listening}/simple", {}) == Reach(True)


def test_a_closed_port_does_not_and_says_where(closed_port):
    answer = Checker().check(f"https://127.0.0.1:{closed_port}/simple", {})
    assert not answer.ok
    assert answer.reason.startswith(f"cannot connect to 127.0.0.1:{closed_port} (")


def test_a_name_that_does_not_resolve_does_not_answer(listening):
    checker = Checker(resolver=unresolved("download.pytorch.org"))
    assert checker.check("https://download.pytorch.org/whl/cpu", {}) == Reach(
        False, "cannot resolve download.pytorch.org")
    assert checker.check(f"http://mirror.example:{listening}/simple", {}) == Reach(True)


def test_the_default_ports_are_443_and_80():
    asked = []
    checker = Checker(resolver=lambda host, port: asked.append(port) or [],
                      connector=lambda family, address, timeout: None)
    checker.check("https://a.example/simple", {})
    checker.check("http://b.example/simple", {})
    assert asked == [443, 80]


def test_each_host_is_asked_once_a_process(listening):
    asked = []

    def resolver(host, port):
        asked.append(host)
        return resolve("127.0.0.1", listening)
    checker = Checker(resolver=resolver)
    for url in ("https://download.pytorch.org/whl/cpu", "https://download.pytorch.org/whl/cu118",
                "https://pypi.org/simple"):
        assert checker.check(url, {}).ok
    assert asked == ["download.pytorch.org", "pypi.org"]


def test_a_connect_that_times_out_says_so():
    def connector(family, address, timeout):
        raise socket.timeout("timed out")
    checker = Checker(resolver=lambda host, port: [(socket.AF_INET, ("192.0.2.1", port))], connector=connector,
                      timeout=2)
    answer = checker.check("https://slow.example/simple", {})
    assert answer == Reach(False, "no answer from slow.example:443 within 2 s")


def test_a_real_connect_to_a_closed_port_raises(closed_port):
    with pytest.raises(OSError):
        real_connect(socket.AF_INET, ("127.0.0.1", closed_port), 2.0)


def test_file_urls_and_paths_are_checked_as_paths(tmp_path):
    checker = Checker(resolver=unresolved())
    assert checker.check(tmp_path.as_uri(), {}).ok and checker.check(str(tmp_path), {}).ok
    gone = tmp_path / "gone"
    assert checker.check(gone.as_uri(), {}) == Reach(False, f"no such file or folder {gone}")
    assert not checker.check(str(tmp_path / "gone"), {}).ok


def test_through_a_proxy_the_proxy_is_checked_not_the_index(listening, closed_port):
    """pip reaches the index through the proxy, which resolves its name: the index's own name is not looked up."""
    checker = Checker(resolver=unresolved("download.pytorch.org"))
    assert checker.check("https://download.pytorch.org/whl/cpu",
                         {"HTTPS_PROXY": f"http://127.0.0.1:{listening}"}).ok
    answer = checker.check("https://download.pytorch.org/whl/cpu", {"https_proxy": f"127.0.0.1:{closed_port}"})
    assert not answer.ok
    assert answer.reason.startswith(f"the proxy https_proxy: cannot connect to 127.0.0.1:{closed_port}")


def test_no_proxy_and_pip_proxy_decide_which_proxy_applies():
    url = urlsplit("https://download.pytorch.org/whl/cpu")
    assert proxy_for(url, {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,.pytorch.org"}) is None
    assert proxy_for(url, {"PIP_PROXY": "proxy:8080", "NO_PROXY": "*"}) == ("PIP_PROXY", "http://proxy:8080")
    assert proxy_for(url, {"http_proxy": "http://proxy:3128"}) is None   # an https URL
