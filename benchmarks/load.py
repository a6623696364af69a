"""A competing CPU load of known timing, for the benchmarks that switch one on and off (issue 32's and 34's CPU
experiments): ``count`` busy Python loops started here, stopped and continued by pid (SIGSTOP / SIGCONT) at random
dwells until closed. ``switches`` logs each switch as (unix time, on); ``on_share(start, end)`` is the share of
a window the load was on."""
import os
import random
import signal
import subprocess
import sys
import threading
import time

BUSY = "while True:\n    pass\n"


class Load:
    """Busy loops switched together; they start stopped. ``dwell(rng)``: the seconds until the next switch
    (default: a uniform 2-6 s)."""

    def __init__(self, seed, count=1, dwell=None):
        self.rng = random.Random(seed)
        self.dwell = dwell or (lambda rng: rng.uniform(2.0, 6.0))
        self.switches = []   # (unix time, on)
        self._stop = threading.Event()
        self.processes = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(count)]
        self._send(signal.SIGSTOP)
        self.switches.append((time.time(), False))
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def pids(self):
        return [process.pid for process in self.processes]

    def start(self):
        self._thread.start()
        return self

    def _send(self, sig):
        for pid in self.pids:
            os.kill(pid, sig)

    def _run(self):
        on = False
        while not self._stop.wait(self.dwell(self.rng)):
            on = not on
            self._send(signal.SIGCONT if on else signal.SIGSTOP)
            self.switches.append((time.time(), on))

    def close(self):
        self._stop.set()
        self._thread.join()
        self._send(signal.SIGCONT)
        for process in self.processes:
            process.kill()
            process.wait()
        self.switches.append((time.time(), False))

    def on_share(self, start, end):
        """The share of [start, end] (unix times) the load was on."""
        if end <= start:
            return 0.0
        total, switches = 0.0, self.switches + [(float("inf"), False)]
        for (at, on), (until, _) in zip(switches, switches[1:]):
            if on:
                total += max(0.0, min(end, until) - max(start, at))
        return total / (end - start)
