"""SIGTERM and SIGHUP stop a command as Ctrl-C does; SIGINT works even when inherited as ignored."""
import json
import os
import signal

import pytest
from click.testing import CliRunner

from host_helpers import RecordingBackend, use_backend, write_matrix
from matrixbench.cli import main
from matrixbench.run.signals import Stopped, exit_code, stop_signals


@pytest.mark.parametrize("sig, raised", [("SIGINT", KeyboardInterrupt), ("SIGTERM", Stopped), ("SIGHUP", Stopped)])
def test_inside_stop_signals_each_stop_signal_raises_and_the_old_handler_comes_back(sig, raised):
    number = getattr(signal, sig)
    previous = signal.signal(number, signal.SIG_IGN)   # as a background job inherits SIGINT
    try:
        with pytest.raises(raised) as caught, stop_signals():
            os.kill(os.getpid(), number)
        assert exit_code(caught.value) == 128 + number
        assert signal.getsignal(number) is signal.SIG_IGN
    finally:
        signal.signal(number, previous)


class SignallingBackend(RecordingBackend):
    """Records the first request's cells, then the host gets ``sig`` (as from `kill`)."""

    def __init__(self, sig):
        super().__init__()
        self.sig = sig

    def run(self, request):
        code = super().run(request)
        if request.work.check:   # the run's model check: the signal comes while cells run
            return code
        os.kill(os.getpid(), self.sig)
        return code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_run_stopped_by_a_signal_keeps_its_records_and_run_json_names_the_signal(tmp_path, monkeypatch, sig):
    monkeypatch.chdir(tmp_path)
    write_matrix(tmp_path)
    backend = use_backend(monkeypatch, SignallingBackend(sig))
    result = CliRunner().invoke(main, ["run", "--backend", "local", "--images", "stable"])
    assert result.exit_code == 128 + sig, result.output
    assert f"interrupted ({signal.Signals(sig).name})" in result.output
    manifest = json.loads((tmp_path / "results" / "default" / "run.json").read_text())
    assert (manifest["status"], manifest["stopped_by"]) == ("interrupted", signal.Signals(sig).name)
    recorded = {path.stem for path in (tmp_path / "results" / "default" / "stable").glob("*.json")} - {"cells"}
    assert recorded == {repeat.id for repeat in backend.requests[0].repeats()}
    assert signal.getsignal(sig) is not signal.default_int_handler   # the command's handlers are gone
