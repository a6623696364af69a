"""runner.files.write_atomic: whole or nothing, and readable as a plain open() would leave it."""
import os
import stat

from runner.files import write_atomic


def test_an_atomic_write_gets_the_mode_a_plain_write_would(tmp_path):
    # mkstemp's 0o600 locked a container running as another uid out of cells.json (docker e2e).
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "cells.json", b"{}")
        (tmp_path / "plain.json").write_bytes(b"{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "cells.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644
    assert (tmp_path / "cells.json").read_bytes() == b"{}"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cells.json", "plain.json"]   # no temp left


def test_an_atomic_write_replaces_the_old_content_whole(tmp_path):
    target = tmp_path / "record.json"
    target.write_bytes(b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and len(list(tmp_path.iterdir())) == 1
