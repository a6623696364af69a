"""results/<run>/run.json: what a run was asked to do, by which command, when, and how it ended.

Each invocation writes the top-level fields; earlier invocations of the same run (resumes)
move to ``history`` whole, so nothing an invocation recorded is overwritten; one that was
killed (still "running" when the next one took the lock) is marked "killed" there. ``note``
says why the run is what it is (``make matrix`` writes its fallback reason there) and the
report shows it.
"""
import os
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, List, Mapping, Optional, Set

from matrixbench.errors import ManifestError
from matrixbench.redact import redact_data, remember, secrets
from matrixbench.run.layout import CALIBRATION_DIRNAME, MANIFEST_FILENAME, NOT_RECORDS, PathLike, manifest_path
from matrixbench.run.results_files import Unvouched, check_manifest, read_manifest_file
from matrixbench.words import count
from runner.schema import write_json_atomic

MANIFEST_VERSION = 1
SUPPORTED_MANIFEST_VERSIONS = (1,)
ORDER_SCHEME = ("counterbalanced: images take turns repeat by repeat, in matrix order on even repeats and "
                "reversed on odd ones; each model's modes likewise (order_seed's order, reversed on odd repeats)")


def now_iso():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def start_manifest(run_path, *, run_name, matrix, backend, device, gpus, note, command, order_seed=None):
    """Write run.json with status "running"; return the manifest dict."""
    for image in matrix.images.values():   # an image's env secrets are hidden by value too (in --note, ...)
        remember(secrets(getattr(image, "env", None) or {}))
    previous = read_manifest(run_path)
    manifest = {
        "schema_version": MANIFEST_VERSION,
        "run": run_name,
        "matrix_path": str(matrix.path) if matrix.path else None,
        "matrix_hash": matrix.content_hash(),
        "matrix": matrix.to_dict(),
        "images": list(matrix.images),
        "image_hashes": {name: image.content_hash() for name, image in matrix.images.items()},
        "backend": backend,
        "device": device,
        "gpus": gpus,
        "note": note,
        "command": list(command),
        "order_seed": order_seed,   # the run order's seed (matrixbench.run.pending.interleaved)
        "started_at": now_iso(),
        "ended_at": None,
        "status": "running",
        "cells": None,
        "history": _history(previous),
    }
    twins = {name: image.build_of for name, image in matrix.images.items() if image.build_of}
    if twins:
        manifest["aa_twins"] = twins   # A/A twin -> its original (matrixbench.matrix.aa): the report's false-alarm line
    write_manifest(run_path, manifest)
    return manifest


def record_order(run_path, manifest, placed):
    """Add ``placed`` (``scheduler.positions``: record -> its round, image and mode position) to
    the manifest's ``order`` and write it; return the manifest."""
    order = manifest.get("order") or {"scheme": ORDER_SCHEME, "positions": {}}
    return update_manifest(run_path, manifest, order={**order, "positions": {**order["positions"], **placed}})


def update_manifest(run_path, manifest, **fields):
    """The manifest with ``fields`` set, written; return it."""
    manifest = {**manifest, **fields}
    write_manifest(run_path, manifest)
    return manifest


def finish_manifest(run_path, manifest, status, cells=None, stopped_by=None):
    """How the invocation ended; ``stopped_by``: the signal that interrupted it (SIGINT, SIGTERM, SIGHUP)."""
    manifest = {**manifest, "status": status, "ended_at": now_iso(), "cells": cells}
    if stopped_by:
        manifest["stopped_by"] = stopped_by
    write_manifest(run_path, manifest)
    return manifest


def _history(previous):
    """Every earlier invocation, as it recorded itself (nothing it said is overwritten). One
    still "running" was killed: the caller holds the run's lock, so it is not running."""
    if previous is None:
        return []
    entry = {key: value for key, value in previous.items() if key != "history"}
    if entry.get("status") == "running":
        entry["status"] = "killed"
    return previous.get("history", []) + [entry]


UNREADABLE_FIXES = {   # an unreadable run.json: each command's way out (errors.ManifestError.worded_for)
    "run": "move it aside or use another --run name",
    "report": "move it aside (the records stay and are reported) or leave its run's folder out of the report",
}


def read_manifest(run_path):
    """The run's manifest as a dict, or None when the run has none; the only reader of run.json.

    ManifestError when the file is not a JSON object or carries an unknown ``schema_version``.
    """
    path = manifest_path(run_path)
    if not os.path.lexists(path):
        return None
    try:
        manifest = read_manifest_file(path)
    except Unvouched as exc:
        raise ManifestError(exc.line(), UNREADABLE_FIXES) from None
    version = manifest.get("schema_version")
    if version not in SUPPORTED_MANIFEST_VERSIONS or isinstance(version, bool):
        shown = repr(version) if len(repr(version)) <= 60 else repr(version)[:60] + "..."
        raise ManifestError(f"{path}: run manifest schema_version {shown} is not supported; this "
                            f"matrixbench reads versions {list(SUPPORTED_MANIFEST_VERSIONS)}. Upgrade matrixbench or "
                            "rerun.")
    try:
        check_manifest(manifest, path)
    except Unvouched as exc:
        raise ManifestError(f"{exc.line()}; fix it by hand, or move run.json aside (the records stay)") from None
    return manifest


def write_manifest(run_path, manifest):
    """run.json, secrets hidden (matrixbench.redact): an image's env tokens, index URLs' credentials."""
    return write_json_atomic(manifest_path(run_path), redact_data(manifest))


FINISHED_STATUSES = ("finished", "failed")   # a run that ended on its own; any other status left cells to run
STATUS_WORDS = {"running": "still running, or killed before it recorded its end"}


@dataclass(frozen=True)
class Unfinished:
    """A run whose run.json says it did not finish (still running, interrupted, killed, incomplete) or says
    nothing (``status`` None): its folder and name, how it stopped, its processes planned so far (run.json's
    ``order``, which each wave of repeats extends, and the records already there) and those with a record, and
    the command that resumes it (run.json's ``command``; None where it has none)."""

    folder: Path
    name: str
    status: Optional[str]
    stopped_by: Optional[str]
    planned: int
    recorded: int
    command: Optional[str]

    def line(self) -> str:
        """The warning ``report`` prints on stderr."""
        if self.status is None:
            return (f"{self.folder}: run.json records no status (an older matrixbench, or written by hand), so whether "
                    "the run finished is not known; the report covers the records it has")
        return (f"{self.folder}: the run is {self.status} (run.json), not finished; the report covers the records it "
                "has: rerun the same `matrixbench run` to finish it")

    def note(self) -> str:
        """The report's note for a run that says it did not finish: a reader of the report alone learns that
        part of the run's plan is missing, and how to finish it."""
        how = STATUS_WORDS.get(self.status or "", self.status or "of no status")
        how += f" by {self.stopped_by}" if self.stopped_by else ""
        have = "has a record" if self.recorded == 1 else "have records"
        rerun = f"`{self.command}`" if self.command else "the same `matrixbench run`"
        return (f"Run {self.name} did not finish: it is {how} (run.json). {self.recorded} of its "
                f"{count(self.planned, 'planned process', 'planned processes')} {have}; this report shows only "
                f"those. To finish it, rerun {rerun} (from the folder it ran in): it runs only what has no record "
                f"yet. Folder: {self.folder}.")


def unfinished(folder: Path, manifest: Mapping[str, object]) -> Optional[Unfinished]:
    """The run in ``folder`` (its run.json ``manifest``) as Unfinished; None when it finished."""
    status = manifest.get("status")
    if status in FINISHED_STATUSES:
        return None
    order = manifest.get("order")
    positions = order.get("positions") if isinstance(order, dict) else None
    recorded = _records_in(folder)
    planned = set(positions if isinstance(positions, dict) else ()) | recorded
    command = manifest.get("command")
    stopped_by = manifest.get("stopped_by")
    return Unfinished(folder, str(manifest.get("run") or folder.name), None if status is None else str(status),
                      stopped_by if isinstance(stopped_by, str) else None, len(planned), len(recorded),
                      shlex.join(map(str, command)) if isinstance(command, list) and command else None)


def _records_in(folder: Path) -> Set[str]:
    """The records of the run in ``folder`` as run.json's ``order`` names them: ``[<gpu type>/]<image>/<record
    stem>`` (calibration records, slot folders' and hidden folders' files are no process of the plan)."""
    found = set()
    for path in [*folder.glob("*/*.json"), *folder.glob("*/*/*.json")]:
        parts = path.relative_to(folder).parts
        skipped = any(part.startswith((".", "slot-")) or part == CALIBRATION_DIRNAME for part in parts[:-1])
        if path.name in NOT_RECORDS or skipped:
            continue
        found.add("/".join([*parts[:-1], path.name[:-len(".json")]]))
    return found


def unfinished_in(results_dirs: Iterable[PathLike]) -> List[Unfinished]:
    """Every run under ``results_dirs`` whose run.json says it did not finish, or says nothing, each once
    (a folder given twice, or inside another given, is said once)."""
    found, seen = [], set()
    for folder in map(Path, results_dirs):
        for path in sorted(folder.rglob(MANIFEST_FILENAME)):
            if os.path.realpath(path) in seen:
                continue
            seen.add(os.path.realpath(path))
            run = unfinished(path.parent, read_manifest(path.parent) or {})
            if run is not None:
                found.append(run)
    return found


def unfinished_runs(results_dirs):
    """One line per run folder under ``results_dirs`` whose run.json says it did not finish (still
    running, interrupted, killed, incomplete): its report covers only the records it has."""
    return [run.line() for run in unfinished_in(results_dirs)]
