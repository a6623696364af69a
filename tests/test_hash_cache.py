"""runner.hash_cache: a local model's files' hash remembered by each file's (path, size, mtime_ns, inode), so an
unchanged checkpoint is not read again; a changed, replaced or touched file is hashed again, and a corrupt or
foreign cache is ignored, never trusted."""
import json
import os
import time

import pytest

from runner import hash_cache, registry

OLD_NS = time.time_ns() - 3600 * 10**9   # an hour ago: past hash_cache.FRESH_NS


def _model(folder, weights=b"w" * 4096):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "vit"}))
    (folder / "model.safetensors").write_bytes(weights)
    for path in folder.iterdir():
        os.utime(path, ns=(OLD_NS, OLD_NS))
    return str(folder / "config.json")


@pytest.fixture
def reads(monkeypatch):
    """How many times the files' bytes were read through (registry._hash_files)."""
    count = []
    real = registry._hash_files
    monkeypatch.setattr(registry, "_hash_files", lambda files: count.append(files) or real(files))
    return count


def test_an_unchanged_model_is_read_once_and_hashes_as_without_the_cache(tmp_path, reads):
    config, cache = _model(tmp_path / "m"), tmp_path / "cache.json"
    plain = registry.local_model_hash(config, "pretrained")
    assert registry.local_model_hash(config, "pretrained", cache) == plain
    assert registry.local_model_hash(config, "pretrained", cache) == plain
    assert len(reads) == 2   # the plain hash, then the cache's first: the third is the cache's answer
    assert json.loads(cache.read_text())["version"] == hash_cache.VERSION


@pytest.mark.parametrize("change", ["same size, new mtime", "replaced, same size and mtime", "another size"])
def test_a_changed_file_is_hashed_again_never_taken_from_the_cache(tmp_path, reads, change):
    config, cache = _model(tmp_path / "m"), tmp_path / "cache.json"
    before = registry.local_model_hash(config, "pretrained", cache)
    weights = tmp_path / "m" / "model.safetensors"
    if change == "same size, new mtime":
        weights.write_bytes(b"x" * 4096)
        os.utime(weights, ns=(OLD_NS + 10**9, OLD_NS + 10**9))
    elif change == "replaced, same size and mtime":   # another inode (cp -p of other bytes, a checkout)
        other = tmp_path / "other"
        other.write_bytes(b"x" * 4096)
        os.utime(other, ns=(OLD_NS, OLD_NS))
        os.replace(other, weights)
    else:
        weights.write_bytes(b"x" * 4097)
        os.utime(weights, ns=(OLD_NS, OLD_NS))
    after = registry.local_model_hash(config, "pretrained", cache)
    assert after != before and after == registry.local_model_hash(config, "pretrained")
    assert len(reads) == 3


@pytest.mark.parametrize("content", [
    b"not json", b"[]", json.dumps({"version": 2, "entries": []}).encode(),
    json.dumps({"version": 1, "entries": {"a": "b"}}).encode(), b"\xff\xfe",
    b"[" * 100000,
])
def test_a_corrupt_or_foreign_cache_is_ignored_and_replaced(tmp_path, content):
    config, cache = _model(tmp_path / "m"), tmp_path / "cache.json"
    cache.write_bytes(content)
    assert registry.local_model_hash(config, "pretrained", cache) == registry.local_model_hash(config, "pretrained")
    assert json.loads(cache.read_text())["version"] == hash_cache.VERSION   # rewritten as a cache of its own


def test_an_entry_that_is_no_hash_is_never_answered(tmp_path, reads):
    """A cache whose entry for exactly these files says something that is not a hash: hashed, not believed."""
    config, cache = _model(tmp_path / "m"), tmp_path / "cache.json"
    files = [("config", tmp_path / "m" / "config.json"), ("model.safetensors", tmp_path / "m" / "model.safetensors")]
    key, _ = hash_cache.file_key("pretrained", files)
    cache.write_text(json.dumps({"version": 1, "entries": [[key, "sha256:; rm -rf /"], [key, 7]]}))
    assert registry.local_model_hash(config, "pretrained", cache) == registry.local_model_hash(config, "pretrained")
    assert len(reads) == 2


def test_a_fifo_or_an_oversized_cache_is_not_read(tmp_path):
    config = _model(tmp_path / "m")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert hash_cache.lookup(fifo, "key") is None                         # no wait on a FIFO
    assert registry.local_model_hash(config, "random", fifo) == registry.local_model_hash(config, "random")
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (hash_cache.MAX_BYTES + 1))
    assert hash_cache.lookup(huge, "key") is None


def test_files_changed_within_the_last_seconds_are_not_remembered(tmp_path, reads):
    config, cache = _model(tmp_path / "m"), tmp_path / "cache.json"
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "vit", "x": 1}))   # mtime: now
    registry.local_model_hash(config, "random", cache)
    registry.local_model_hash(config, "random", cache)
    assert len(reads) == 2 and not cache.exists()


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path):
    config = _model(tmp_path / "m")
    (tmp_path / "file").write_text("")
    assert registry.local_model_hash(config, "random", tmp_path / "file" / "cache.json") == \
        registry.local_model_hash(config, "random")


def test_the_cache_keeps_its_newest_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(hash_cache, "MAX_ENTRIES", 2)
    cache = tmp_path / "cache.json"
    for name in ("a", "b", "c"):
        registry.local_model_hash(_model(tmp_path / name), "random", cache)
    kept = json.loads(cache.read_text())["entries"]
    assert len(kept) == 2 and ["/b/" in key for key, _ in kept] == [True, False] and "/c/" in kept[1][0]


def test_the_runner_refuses_files_changed_since_planning_with_its_cache_too(tmp_path):
    from runner import models
    from runner.core import Cell

    config = _model(tmp_path / "m")
    planned = registry.local_model_hash(config, "random")
    cell = Cell(model="mine", task="image-classification", weights="random", size="full", batch_size=1,
                mode="eager", fullgraph=False, dtype="float32", config_path=config, model_hash=planned)
    hashes = hash_cache.runner_cache(tmp_path / "out")
    models.make_recipe(cell, hashes)
    assert hashes.is_file()                                           # remembered in the runner's folder
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 48}))
    with pytest.raises(models.ModelError, match="its files changed since the run was planned"):
        models.make_recipe(cell, hashes)
