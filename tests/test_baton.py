"""runner.baton: two real processes take turns; a dead or silent partner is a BatonLost, not a hang."""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner.baton import Baton, BatonLost

ROOT = Path(__file__).resolve().parents[1]

SIDE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from runner.baton import Baton
    folder, role, turns, log = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    with Baton(folder, role, timeout_s=30) as baton:
        for index in baton.take(2 * turns):
            with log.open("a") as out:
                out.write(f"{index} {role} start\\n")
            time.sleep(0.02)              # the block: the other side must not write meanwhile
            with log.open("a") as out:
                out.write(f"{index} {role} end\\n")
""")


def side(folder, role, turns, log):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", SIDE, str(folder), role, str(turns), str(log)], env=env)


def test_two_processes_alternate_and_never_overlap(tmp_path):
    # a folder whose socket path is longer than a Unix socket address may be (about 100 bytes)
    folder = tmp_path / ("deep-" * 25)
    folder.mkdir()
    log = tmp_path / "log"
    second = side(folder, "second", 6, log)     # the second may start first: it dials until the first listens
    time.sleep(0.2)
    first = side(folder, "first", 6, log)
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    lines = log.read_text().split("\n")[:-1]
    expected = [f"{i} {'first' if i % 2 == 0 else 'second'} {what}" for i in range(12) for what in ("start", "end")]
    assert lines == expected
    assert not (folder / "baton.sock").exists()      # the first side removes its socket


def test_a_partner_that_dies_is_reported_not_waited_for(tmp_path):
    log = tmp_path / "log"
    second = side(tmp_path, "second", 50, log)
    with Baton(tmp_path, "first", timeout_s=30) as baton:
        baton.give()
        second.kill()
        second.wait()
        started = time.monotonic()
        with pytest.raises(BatonLost, match="closed"):
            baton.wait()
        assert time.monotonic() - started < 10


def test_a_silent_partner_times_out(tmp_path, monkeypatch):
    import socket
    monkeypatch.chdir(tmp_path)       # a relative address: a Unix socket's path is limited to about 100 bytes
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)     # a partner that listens and never answers
    listener.bind("baton.sock")
    listener.listen(1)
    try:
        dialer = Baton(tmp_path, "second", timeout_s=0.5).connect()
        with pytest.raises(BatonLost, match="no turn within"):
            dialer.wait()
        dialer.close()
    finally:
        listener.close()


def test_no_partner_at_all(tmp_path):
    with pytest.raises(BatonLost, match="no partner connected"):
        Baton(tmp_path, "first", timeout_s=0.3).connect()
    with pytest.raises(BatonLost, match="no partner listening"):
        Baton(tmp_path, "second", timeout_s=0.3).connect()
    with pytest.raises(ValueError, match="role"):
        Baton(tmp_path, "third")


def test_a_side_stops_waiting_to_meet_a_partner_the_host_says_ended(tmp_path):
    """A partner whose runner ended (its container never started) never comes: each role, listening or dialling,
    goes on at the host's ended marker, not after its timeout_s (it waited the whole timeout_s before)."""
    import threading

    from runner.baton import ROLES, ended_marker, partner_of

    for role in ROLES:
        folder = tmp_path / role / "repeat"
        folder.mkdir(parents=True)
        marker = ended_marker(folder.parent, partner_of(role))
        threading.Timer(0.5, marker.touch).start()
        started = time.monotonic()
        with pytest.raises(BatonLost, match="partner's runner ended before it met this one"):
            Baton(folder, role, timeout_s=60, partner_ended=marker).connect()
        assert 0.4 < time.monotonic() - started < 10
