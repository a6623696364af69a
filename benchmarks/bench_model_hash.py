"""A local model's files' hash with and without runner.hash_cache, on a generated weights file (default 1 GiB).

``runner.registry.local_model_hash`` runs at every matrix load on the host (validate, run, a dry run) and in
every cell process of a run (the runner refuses files changed since the run was planned). Without a cache each
call reads every byte of the weights; with one, a call on unchanged files stats them and reads the cache file.
Calls without the cache are timed twice: warm (the weights, just written, in the page cache: their best case) and
cold (this file's pages dropped from the page cache before each call with posix_fadvise DONTNEED, which touches no
other file: read from disk, as a checkpoint not read lately is). The file's mtime is set an hour back (files
changed within hash_cache.FRESH_NS of their hashing are not remembered).

    python benchmarks/bench_model_hash.py [--gib 1] [--calls 3] [--folder /tmp] [--out benchmarks/results]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, describe_contention, write_results  # noqa: E402

from runner.records import utc_now  # noqa: E402
from runner.registry import local_model_hash  # noqa: E402

BLOCK = 1 << 20


def make_model(folder, gib):
    """config.json and a ``gib`` GiB model.safetensors of random blocks (not a real checkpoint: only its bytes
    are read), both dated an hour back."""
    (folder / "config.json").write_text(json.dumps({"model_type": "vit"}))
    block = os.urandom(BLOCK)
    with open(folder / "model.safetensors", "wb") as handle:
        for index in range(int(gib * 1024)):
            handle.write(block[index % 256:] + block[:index % 256])   # not one block repeated
        handle.flush()
        os.fsync(handle.fileno())   # clean pages: DONTNEED can drop them
    past = time.time_ns() - 3600 * 10**9
    for path in folder.iterdir():
        os.utime(path, ns=(past, past))
    return str(folder / "config.json")


def timed(call):
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value


def drop_from_page_cache(path):
    """This file's pages out of the page cache (no other file's): its next read comes from disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cold(config):
    drop_from_page_cache(Path(config).parent / "model.safetensors")
    return timed(lambda: local_model_hash(config, "pretrained"))


def measure(config, cache, calls):
    from_disk = [cold(config) for _ in range(calls)]
    plain = [timed(lambda: local_model_hash(config, "pretrained")) for _ in range(calls)]
    first = timed(lambda: local_model_hash(config, "pretrained", cache))
    hits = [timed(lambda: local_model_hash(config, "pretrained", cache)) for _ in range(calls)]
    values = {value for _, value in from_disk + plain + [first] + hits}
    return {"without_cache_cold_s": [round(s, 4) for s, _ in from_disk],
            "without_cache_s": [round(s, 4) for s, _ in plain], "cache_first_s": round(first[0], 4),
            "cache_hit_s": [round(s, 6) for s, _ in hits], "same_hash": len(values) == 1, "hash": plain[0][1]}


def markdown(result):
    lines = [f"# A local model's files' hash: {result['gib']} GiB of weights, without and with the cache", "",
             describe(result["machine"]),
             f"Load average before {result['load_average']}, after {result['load_average_after']}; contention: "
             f"{describe_contention(result['contention'])}. Measured {result['measured_at']} "
             f"({result['seconds']:.0f} s in all).", "",
             "| call | seconds (median) | all |", "| --- | ---: | --- |",
             f"| without the cache, cold: from disk (every call, before) | "
             f"{statistics.median(result['without_cache_cold_s']):.3f} | {result['without_cache_cold_s']} |",
             f"| without the cache, warm: from the page cache (every call, before) | "
             f"{statistics.median(result['without_cache_s']):.3f} | {result['without_cache_s']} |",
             f"| with the cache, first call (hashes, remembers) | {result['cache_first_s']:.3f} | |",
             f"| with the cache, unchanged files (stat + cache read) | "
             f"{statistics.median(result['cache_hit_s']):.6f} | {result['cache_hit_s']} |", "",
             f"Same hash every call: {result['same_hash']} ({result['hash']}). Cold: the weights' pages dropped from "
             "the page cache before each call (posix_fadvise DONTNEED, this file only)."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--folder", default=tempfile.gettempdir())
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    started, load = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="matrixbench-bench-hash-", dir=args.folder) as folder:
        (Path(folder) / "model").mkdir()
        config = make_model(Path(folder) / "model", args.gib)
        result = measure(config, Path(folder) / "cache" / "model-hashes.json", args.calls)
    result.update(gib=args.gib, calls=args.calls, load_average_after=os.getloadavg(), measured_at=utc_now())
    write_results(Path(args.out), "model_hash", result, markdown, load=load, started=started)


if __name__ == "__main__":
    main()
