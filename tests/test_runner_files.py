"""runner.files.write_atomic: whole or nothing, and readable as a plain open() would leave it; the room a
cell's record is written with when the disk fills (runner.files.Room; for real: tests/test_full_disk_local.py)."""
import errno
import json
import os
import stat
from unittest import mock

import pytest

from host_helpers import make_record
from runner.core import Cell
from runner.files import ROOM_BYTES, ROOM_PREFIX, Room, write_atomic
from runner.schema import UNWRITTEN_MARK, read_record, write_record_in


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


def _full_disk(*args, code=errno.ENOSPC):
    raise OSError(code, os.strerror(code), "record.json")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_room_taken_before_measuring_takes_the_record_when_the_disk_is_full(tmp_path, code):
    old = os.umask(0o022)
    try:
        room = Room.take(tmp_path)
        assert room.path.name.startswith(ROOM_PREFIX) and room.path.stat().st_blocks * 512 >= ROOM_BYTES
        with mock.patch("runner.files.write_atomic", lambda *args: _full_disk(code=code)):   # as the disk says it
            room.write(tmp_path / "record.json", b'{"a": 1}\n')
    finally:
        os.umask(old)
    assert (tmp_path / "record.json").read_bytes() == b'{"a": 1}\n'   # whole: no tail of the room's zeros
    assert stat.S_IMODE((tmp_path / "record.json").stat().st_mode) == 0o644 and not room.path.exists()
    with Room.take(tmp_path) as other:
        other.write(tmp_path / "other.json", b"{}")   # room to spare: an ordinary write, the room given back
    assert sorted(path.name for path in tmp_path.iterdir()) == ["other.json", "record.json"]


def test_a_record_the_disk_refuses_even_so_goes_whole_to_stderr_and_reads_back(tmp_path, capsys):
    cell = Cell(model="resnet", task="image-classification", weights="random", size="tiny", batch_size=1,
                mode="eager", fullgraph=False, dtype="float32", model_id="microsoft/resnet-50")
    record = make_record(cell)
    room = Room.take(tmp_path)

    room.release()   # the room is gone too (a disk that frees nothing back, a quota)
    with mock.patch("runner.files.write_atomic", _full_disk), pytest.raises(OSError):
        write_record_in(room, tmp_path, record)
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith(UNWRITTEN_MARK)]
    (tmp_path / "kept.json").write_text(line[len(UNWRITTEN_MARK):])
    assert read_record(tmp_path / "kept.json") == json.loads(json.dumps(record.to_dict()))   # whole and valid
    assert not list(tmp_path.glob(ROOM_PREFIX + "*"))



def test_a_filesystem_that_cannot_allocate_ahead_still_measures(tmp_path):
    def unsupported(fd, offset, size):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
    with mock.patch("os.posix_fallocate", unsupported):
        room = Room.take(tmp_path)   # no refusal: only a full disk or quota stops a cell before it runs
    room.write(tmp_path / "record.json", b"{}")
    room.release()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["record.json"]
    with mock.patch("os.posix_fallocate", lambda *args: _full_disk()), pytest.raises(OSError) as full:
        Room.take(tmp_path)
    assert full.value.filename == str(tmp_path) and sorted(path.name for path in tmp_path.iterdir()) == ["record.json"]
