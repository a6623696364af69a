"""runner.compile_cache: a compiled module in the shared compile cache that cannot be loaded (left empty by a
process killed while compiling) is removed by the failing cell's process, only inside its cache folders, and the
driver runs the repeat once more; the record kept says so. The last test is real: a compiled cell, its cache's
modules emptied, run again."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner import compile_cache
from runner.compile_cache import FLAG, REPAIRED, broken_named, mark_repaired, note_repair, repair, within
from runner.core import CellError, Record, Status
from runner.schema import CELLS_SCHEMA_VERSION, read_record, record_path
from runner_cells import settings, tiny_cell

ROOT = Path(__file__).resolve().parents[1]
OLD = time.time() - 3600   # a file left by an earlier process, not one being written now
ELF = b"\x7fELF" + b"\0" * 60


def _file(path, content=b"", mtime=OLD):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.utime(path, (mtime, mtime))
    return path


def _too_short(path):
    return f"torch._inductor.exc.InductorError: ImportError: {path}: file too short\n"


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache" / "inductor"


def test_a_message_naming_an_empty_module_in_the_cache_names_that_path(cache):
    module = _file(cache / "pz" / "cpzd6h.main.so")
    assert broken_named(_too_short(module), [str(cache)]) == [str(module)]


def test_a_module_the_loader_calls_too_short_is_broken_even_with_an_elf_header(cache):
    module = _file(cache / "ab" / "cab.main.so", ELF)
    assert broken_named(_too_short(module), [str(cache)]) == [str(module)]
    assert broken_named(f"ImportError: {module}: undefined symbol: foo", [str(cache)]) == []


def test_a_module_outside_the_cache_folders_is_never_removed(tmp_path, cache):
    cache.mkdir(parents=True)
    outside = _file(tmp_path / "elsewhere" / "c.main.so")
    assert broken_named(_too_short(outside), [str(cache)]) == []
    assert repair(_too_short(outside), [str(cache)]) == [] and outside.exists()


def test_a_symlink_in_the_cache_is_never_followed_or_removed(tmp_path, cache):
    target = _file(tmp_path / "elsewhere" / "c.main.so")
    link = cache / "li" / "c.main.so"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    assert within(str(link), [str(cache)]) is None
    assert repair(_too_short(link), [str(cache)]) == []
    assert link.is_symlink() and target.exists()


def test_a_path_climbing_out_of_the_cache_with_dotdot_is_refused(tmp_path, cache):
    cache.mkdir(parents=True)
    outside = _file(tmp_path / "cache" / "c.main.so")
    climbing = f"{cache}/../c.main.so"
    assert within(climbing, [str(cache)]) is None
    assert repair(_too_short(climbing), [str(cache)]) == [] and outside.exists()


def test_repair_removes_every_settled_empty_or_non_elf_module_but_not_a_fresh_one_or_a_good_one(cache):
    named = _file(cache / "pz" / "named.main.so")
    probe = _file(cache / "th" / "isa.so")                       # named by no error (the vector-ISA probe)
    garbage = _file(cache / "gg" / "garbage.so", b"not elf at all")
    fresh = _file(cache / "fr" / "fresh.main.so", mtime=time.time())   # maybe being written by another process
    good = _file(cache / "ok" / "good.main.so", ELF)
    source = _file(cache / "pz" / "named.main.cpp")
    removed = repair(_too_short(named), [str(cache), None])
    assert sorted(r.path for r in removed) == sorted(str(p) for p in (named, probe, garbage))
    assert {r.reason for r in removed} == {"empty", "not an ELF file"}
    assert fresh.exists() and good.exists() and source.exists()


def _record(error=None, timing=None):
    cell = tiny_cell(mode="default")
    return Record(cell=cell, device="cpu", settings={}, precision={}, environment={}, started_at="now",
                  status=Status.ERROR if error else Status.OK, error=error, timing=timing)


def test_a_record_whose_process_repaired_the_cache_says_which_file_its_size_and_the_original_error(cache):
    module = _file(cache / "pz" / "cpzd6h.main.so")
    try:
        raise ImportError(f"{module}: file too short")
    except ImportError as exc:
        record = _record(CellError("torch._inductor.exc.InductorError", f"ImportError: {module}: file too short",
                                   "Traceback ..."))
        removed = mark_repaired(record, exc, {"TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": None})
    assert [r.path for r in removed] == [str(module)] and not module.exists()
    assert compile_cache.was_repaired(record) and record.error.type == REPAIRED
    message = record.error.message
    assert str(module) in message and "(0 bytes, empty)" in message and "file too short" in message
    assert "InductorError" in message and record.error.traceback == "Traceback ..."


def test_a_failure_with_nothing_to_repair_stays_as_it_was(cache):
    cache.mkdir(parents=True)
    error = CellError("RuntimeError", "boom")
    record = _record(error)
    assert mark_repaired(record, RuntimeError("boom"), {"TORCHINDUCTOR_CACHE_DIR": str(cache)}) == []
    assert record.error == error


def test_the_rerun_record_says_a_first_attempt_repaired_the_cache():
    failed = note_repair(_record(CellError("RuntimeError", "boom")), "removed /c/x.so")
    assert failed.error.message.startswith("boom") and "repaired the compile cache: removed /c/x.so" in \
        failed.error.message
    ok = note_repair(_record(timing={"flags": ["throttled"]}), "removed /c/x.so")
    assert ok.timing["flags"] == ["throttled", FLAG]
    untouched = note_repair(_record(timing={"flags": []}), None)
    assert untouched.timing["flags"] == []


@pytest.mark.parametrize("in_turns", [False, True])
def test_a_repaired_repeat_runs_once_more_and_alone_if_it_was_in_turns(in_turns):
    """The rerun after a repair: one more attempt, never in turns (the partner went on without this repeat)."""
    from runner.driver import _rerun_if_repaired

    calls, lines = [], []
    first = _record(CellError(REPAIRED, "removed /c/x.so"))
    again = _record(CellError("RuntimeError", "second failure"))
    found = _rerun_if_repaired(first, "[1/1] cell", lambda **kwargs: calls.append(kwargs) or again, lines.append,
                               in_turns=in_turns)
    assert found is again and calls == [{"pairing": None, "repaired": "removed /c/x.so"}]
    assert ("alone (its partner in turns went on without it)" in lines[0]) is in_turns
    other = _record(CellError("RuntimeError", "boom"))
    assert _rerun_if_repaired(other, "[1/1] cell", lambda **kwargs: pytest.fail("ran again"), lines.append) is other


# A hang guard, not a speed target: a cold compile of the tiny cell took over 300 s at load 13 on 2 cores (CI,
# stop 20). The cell's own limit is CELL_TIMEOUT_S; a run may take two attempts (the repair's rerun).
CELL_TIMEOUT_S = 900


def _run(cells, out, cache):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
               TRITON_CACHE_DIR=str(cache / "triton"))
    done = subprocess.run([sys.executable, "-m", "runner", "--cells", str(cells), "--out", str(out)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=2 * CELL_TIMEOUT_S + 300)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.slow
def test_a_cache_of_emptied_modules_is_repaired_and_the_cell_rerun(tmp_path):
    """Real: a compiled tiny cell fills a cache; every .so in it is emptied (and dated an hour back, as one left by
    an earlier run); the next run's first attempt fails on them and removes them, its rerun is ok."""
    cell = tiny_cell(mode="default")
    cells = tmp_path / "cells.json"
    cells.write_text(json.dumps({"schema_version": CELLS_SCHEMA_VERSION, "image_name": "repair",
                                 "settings": settings(iterations=3, warmup=1, timeout_s=CELL_TIMEOUT_S, paired=False),
                                 "cells": [cell.to_dict()]}))
    cache = tmp_path / "compile"
    _run(cells, tmp_path / "first", cache)
    modules = sorted((cache / "inductor").rglob("*.so"))
    assert modules
    for module in modules:
        _file(module)
    log = _run(cells, tmp_path / "second", cache)
    record = read_record(record_path(tmp_path / "second", cell))
    assert record["status"] == "ok", log
    assert "the compile cache held unloadable compiled modules, now removed: running the repeat once more" in log
    assert "rerun after a first attempt repaired the compile cache" in log
    assert FLAG in record["timing"]["flags"]
    assert all(module.stat().st_size > 0 for module in modules if module.exists())
    assert any(module.exists() for module in modules)
