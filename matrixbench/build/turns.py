"""Taking turns across this machine's processes: two builds, a build and the tests, two users. A file lock
(``flock``, released by the kernel when its holder dies), and one line saying what a process waits for."""
import fcntl
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


@contextmanager
def taking_turns(lock_file: Path, *, waiting: str, say: Callable[[str], None]) -> Iterator[None]:
    """Held for the with block: one process at a time across the machine. A process that must wait says
    ``waiting`` once (through ``say``) and waits as long as the holder holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(waiting)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
