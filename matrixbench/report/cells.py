"""The merged table as cells to look up: by device, image, batch size, row (model) and mode.

Tables and charts both read results through ``CellIndex``, so they agree on which cells
exist, in which order devices, images, models and modes come, and how a model is labelled.
"""

import math
from typing import Dict, List, Tuple

from scipy.stats import variation

from matrixbench.build.versions import public, release
from matrixbench.errors import ReportError
from matrixbench.matrix.comparisons import SPEEDUP, Baselines, ImageCells, Roles
from matrixbench.matrix.comparisons import comparisons as listed
from matrixbench.matrix.settings import BY_NAME
from matrixbench.report import host_notes
from matrixbench.report.published import MODEL_NAMES
from matrixbench.report.records import cell_fields, plain_value, settings_of, versions_of
from matrixbench.report.stats import Turns, cell_estimate
from runner import axes
from runner.core import MODES, TASKS

FIELDS = {"device": "device_name", "image": "image", "batch": "cell.batch_size", "row": "row_key",
          "mode": "mode_label"}
TASK_TITLES = {"image-classification": "Image Classification", "image-segmentation": "Image Segmentation",
               "object-detection": "Object Detection"}
SEED_LABELS = {short: label for label, short in MODEL_NAMES.items()}
SEED_ORDER = list(MODEL_NAMES.values())
STATUS_TEXT = {"oom": "OOM", "error": "ERR", "timeout": "TIMEOUT", "crashed": "CRASH"}
# Where a process ran (record field ``placement``, slot runs only): kept per process of a cell.
ENERGY_FIELDS = ("energy_j", "loop_s", "uncertain", "reason", "source")
BETWEEN_CV_THRESHOLD = float(BY_NAME["between_cv_threshold"].default)
PLACEMENT_COLUMNS = ("placement.slot", "placement.gpu_index", "placement.gpu_uuid", "placement.cores",
                     "placement.numa_node", "placement.busy_slots")


class CellIndex:
    """Rows of the merged table (plain dicts, NaN as None), looked up by their cell key."""

    def __init__(self, frame, image_order=(), aa_twins=None, margin_pct=None, attribution=None):
        self.attribution = attribution   # report.shares.Plan: the bridges, when a run derived them
        self.bridges = attribution.bridge_names if attribution else set()
        records = [{key: plain_value(value) for key, value in row.items()} for row in frame.to_dict("records")]
        self.rows = combine_repeats(records, self.key)
        # the equivalence margin (%) every verdict is made at: the runs' (records.margin_pct), else the default
        self.margin_pct = float(margin_pct or BY_NAME["margin_pct"].default)
        # {twin image: its original}: an A/A run's second name for one image (records.aa_twins)
        self.aa_twins = {twin: original for twin, original in (aa_twins or {}).items()
                         if any(row["image"] == twin for row in self.rows)}
        self._image_rank = _image_ranks(self.rows, list(image_order))
        self.image_labels = image_labels(self.rows)
        for row in self.rows:
            row["image_label"] = self.image_labels[row["image"]]
            row["margin_pct"] = self.margin_pct
        self._by_key = {self.key(row): row for row in self.rows}
        self._list_comparisons()

    def _list_comparisons(self):
        """matrixbench.matrix.comparisons' one list, per device (its images in report order): what every view
        judges, as the planner of repeats auto does."""
        self._cell_ids = {id(row): cell_of(row).id for row in self.rows}
        # a cell's rows: one, or one per settings where runs measured it with other settings (records.merge)
        self._by_id: Dict[Tuple[str, str, str], List[dict]] = {}
        for row in self.rows:
            self._by_id.setdefault((row["device_name"], row["image"], self._cell_ids[id(row)]), []).append(row)
        roles = Roles(self.aa_twins, self.attribution.bridges if self.attribution else {})
        self.comparisons, self._baselines = {}, {}
        for device in self.values("device"):
            images = [ImageCells(image, image, [cell_of(row) for row in self.select(device=device, image=image)])
                      for image in self.values("image", device=device)]
            self.comparisons[device] = listed([images], roles)
            self._baselines[device] = Baselines(self.comparisons[device])

    def baseline(self, row, kind):
        """The row ``row`` is judged against in a ``kind`` comparison (matrixbench.matrix.comparisons.SINGLE
        kinds); None when the list has no such comparison. Within one image (a speed-up, a mode change) only a row
        that ran under ``row``'s torch and transformers (records.versions_of); where the baseline cell has several
        rows (records.merge kept other settings or versions apart), the one measured with ``row``'s settings, and
        None when not exactly one was."""
        device = row["device_name"]
        found = self._baselines[device].of(kind, row["image"], self._cell_ids[id(row)])
        if found is None:
            return None
        rows = self._by_id[(device, found[0], found[1].id)]
        if found[0] == row["image"]:
            rows = [other for other in rows if versions_of(other) == versions_of(row)]
        if len(rows) == 1:
            return rows[0]
        same = [other for other in rows if settings_of(other) == settings_of(row)]
        return same[0] if len(same) == 1 else None

    def images(self):
        """Every image, in report (matrix) order."""
        return sorted(self._image_rank, key=self._image_rank.get)

    def compared_images(self, device):
        """The device's images that image-against-image comparisons chain, in matrix order: all
        but A/A twins (those are compared with their original only) and attribution's bridges (those
        split a mixed change, report.shares)."""
        return [image for image in self.values("image", device=device)
                if image not in self.aa_twins and image not in self.bridges]

    def previous_image(self, device, image):
        """The image an image-against-image comparison judges ``image`` against: the one before it
        in compared_images; None for the first image and for an A/A twin."""
        images = self.compared_images(device)
        return images[images.index(image) - 1] if image in images[1:] else None

    def torch_version(self, image):
        """The torch version an image's records ran (the first, if records disagree)."""
        return next(row["environment.torch"] for row in self.rows if row["image"] == image)

    @staticmethod
    def key(row):
        return tuple(row[column] for column in FIELDS.values())

    def get(self, device, image, batch, row, mode):
        return self._by_key.get((device, image, batch, row, mode))

    def speedup_baseline(self, row):
        """The eager cell ``row``'s speed-up is measured against (None: no speed-up)."""
        return self.baseline(row, SPEEDUP)

    def select(self, **where):
        """Rows whose fields (device, image, batch, row, mode) equal the given values."""
        return [row for row in self.rows if all(row[FIELDS[name]] == value for name, value in where.items())]

    def values(self, field, **where):
        """The distinct values of a field among the selected rows, in report order."""
        found = {row[FIELDS[field]] for row in self.select(**where)}
        return sorted(found, key=self._sort_key(field))

    def _sort_key(self, field):
        return {"image": self._image_rank.get, "row": self._row_rank, "mode": mode_rank}.get(field, _natural)

    def _row_rank(self, row_key):
        row = next(row for row in self.rows if row["row_key"] == row_key)
        task, model = row["cell.task"], row["cell.model"]
        seed_rank = SEED_ORDER.index(model) if model in SEED_ORDER else len(SEED_ORDER)
        return (TASKS.index(task) if task in TASKS else len(TASKS), seed_rank, row_label(row))


def _natural(value):
    return (str(type(value)), value)


def mode_rank(mode_label):
    base, _, fullgraph = mode_label.partition(" ")
    return (MODES.index(base) if base in MODES else len(MODES), fullgraph, base)


def _image_ranks(rows, manifest_order):
    """Images in matrix order where a run manifest gives it, else by torch version, then name."""
    versions = {row["image"]: row["environment.torch"] for row in rows}
    ordered = sorted(versions, key=lambda image: (
        manifest_order.index(image) if image in manifest_order else len(manifest_order),
        release(versions[image]), image))
    return {image: rank for rank, image in enumerate(ordered)}


def combine_repeats(records, key):
    """One row per cell from its processes' records (repeats), in first-seen order.

    A cell's row is its last ok process's, with ``timing.mean_ms`` the cell's one central estimate
    (stats.cell_estimate: the geometric mean of its ok processes' mean ms, what every comparison
    judges; one process: its mean) and, added to every row: ``processes`` (ok ones),
    ``process_placements`` (every process's PLACEMENT_COLUMNS, ok or not), ``gpu_uuids`` (the GPUs the
    ok processes ran on, each once, sorted: the runner's ``environment.gpu_uuid``, else the slot's;
    empty on the CPU),
    ``failed_processes``, ``process_means``, ``process_rounds`` (each ok process's (run, repeat),
    process_round), ``process_turns`` (each ok process's blocks in turns, as its rounds: process_turns),
    ``process_samples``, ``process_first_call_s`` (each ok
    process's first call, in repeat order: the first compiles cold unless the image's compile
    cache was warm, the later ones warm), ``between_cv`` (the CV of the
    process means; None with fewer than 2) and ``between_noisy`` (it exceeds the cell's
    ``between_cv_threshold``, the report's setting). A cell none of whose processes ran keeps its last record.
    """
    groups = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    return [_combined(group) for group in groups.values()]


def _combined(group):
    ok = [row for row in group if is_ok(row)]
    where = {"process_placements": [{column: row.get(column) for column in PLACEMENT_COLUMNS} for row in group],
             "gpu_uuids": gpu_uuids(ok or group), **process_costs(group, ok),
             "process_host": [host_notes.process_host(row) for row in sorted(ok, key=_repeat)],
             "process_pairs": [process_pairs(row) for row in sorted(ok, key=_repeat)]}
    if not ok:
        return {**group[-1], **where, "processes": 0, "failed_processes": len(group), "process_means": [],
                "process_rounds": [], "process_turns": [],
                "process_samples": [], "process_first_call_s": [], "between_cv": None, "between_noisy": False}
    samples = [row["timing.samples_ms"] or [row["timing.mean_ms"]] for row in ok]
    means = [row["timing.mean_ms"] for row in ok]
    row = {**ok[-1], **where, "processes": len(ok), "failed_processes": len(group) - len(ok),
           "process_means": means, "process_rounds": [process_round(process) for process in ok],
           "process_turns": [process_turns(process) for process in ok],
           "process_samples": samples, "between_cv": None, "between_noisy": False,
           "process_first_call_s": [process["timing.first_call_s"] for process in sorted(ok, key=_repeat)]}
    if len(ok) > 1:
        between_cv = float(variation(means, ddof=1))
        row.update({"timing.mean_ms": cell_estimate(require_positive(row)),
                    "timing.samples_ms": [value for values in samples for value in values],
                    "timing.noisy": any(bool(process["timing.noisy"]) for process in ok),
                    "timing.flags": _all_flags(ok),
                    "accuracy.status": _worst_accuracy(ok), "between_cv": between_cv,
                    "between_noisy": between_cv > BETWEEN_CV_THRESHOLD})
    return row


def process_round(row):
    """Which round of which run a process ran in: (run identity, repeat index). The executors run a cell's
    images round by round (executors.scheduler.rounds: repeat index r of every image of a model in turn,
    counterbalanced; run.json's ``order.positions`` gives each process's ``round``, its repeat index), so
    two images' processes of one run and one repeat index ran under the same machine state."""
    return (row.get("run_id"), row.get("repeat"))


def process_pairs(row):
    """One process's paired blocks (issue 32: ``timing.paired.pairs``, eager and compiled alternately in
    one process) as (eager_ms, compiled_ms) tuples; [] where the record has none (eager cells, --no-paired,
    records before schema 4) or a pair is not two positive finite numbers (the reader let it through)."""
    pairs = row.get("timing.paired.pairs")
    if not isinstance(pairs, list):
        return []
    found = []
    for pair in pairs:
        if not isinstance(pair, dict):
            return []
        values = (pair.get("eager_ms"), pair.get("compiled_ms"))
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                   for v in values):
            return []
        found.append((float(values[0]), float(values[1])))
    return found


def process_turns(row):
    """One process's blocks timed in turns with a partner process (``timing.turns``: docs/turns.md) as a
    stats.Turns; None where the record has none (a cell not run in turns, records before schema 5) or its
    fields are not what the runner writes (the reader let them through)."""
    image, key, partner = row.get("image"), row.get("timing.turns.pair_id"), row.get("timing.turns.partner")
    blocks, role = row.get("timing.turns.block_ms"), row.get("timing.turns.role")
    if not all(isinstance(value, str) and value for value in (image, key, partner)) or not isinstance(blocks, list):
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in blocks):
        return None
    cores = row.get("timing.turns.cores")
    pinned = (tuple(cores) if isinstance(cores, list) and cores
              and all(isinstance(core, int) and not isinstance(core, bool) for core in cores) else None)
    return Turns(image, key, partner, tuple(float(value) for value in blocks), role if isinstance(role, str) else None,
                 pinned)


def require_positive(row):
    """The combined row's process means, each a positive number of ms; else a ReportError naming its record."""
    means = row["process_means"]
    if not all(isinstance(mean, (int, float)) and math.isfinite(mean) and mean > 0 for mean in means):
        raise ReportError(f"{row['source']}: timing.mean_ms must be a positive number of ms, got "
                          f"{means!r} over the cell's processes; fix or remove the record")
    return means


def process_costs(group, ok):
    """What report.cost needs per process: every process's wall time (``process_duration_s``, ok
    or not: the bill) and each ok one's loop energy (``process_energy``: the record's
    ``timing.energy.*`` fields, None where the record predates them)."""
    energy = [{key: row.get(f"timing.energy.{key}") for key in ENERGY_FIELDS}
              | {"n": _counted_calls(row)} for row in sorted(ok, key=_repeat)]
    return {"process_duration_s": [row.get("duration_s") for row in group], "process_energy": energy}


def _counted_calls(row):
    """The calls the loop's energy covers: ``timing.energy.calls`` (schema v4: the loop may run past its first n
    calls, to a minimum duration), else ``timing.n``."""
    calls = row.get("timing.energy.calls")
    return int(calls) if isinstance(calls, (int, float)) and calls == calls and calls > 0 else row.get("timing.n")


def gpu_uuids(rows):
    """The GPUs the processes ran on (the runner's UUID, else the slot's), each once, sorted."""
    found = {row.get("environment.gpu_uuid") or row.get("placement.gpu_uuid") for row in rows}
    return sorted(uuid for uuid in found if uuid)


def _all_flags(rows):
    """Every process's timing flags, each once (None where no process recorded any list)."""
    lists = [row.get("timing.flags") for row in rows]
    if all(flags is None for flags in lists):
        return None
    return list(dict.fromkeys(flag for flags in lists for flag in flags or ()))


def _repeat(row):
    return row.get("repeat") or 0


def _worst_accuracy(rows):
    statuses = [row["accuracy.status"] for row in rows]
    return next((status for status in ("nan", "fail") if status in statuses), statuses[-1])




def image_labels(rows):
    """Image names with the torch versions their records ran, e.g. "stable (torch 2.0.1)"."""
    versions = {}
    for row in rows:
        found = versions.setdefault(row["image"], [])
        version = public(row["environment.torch"])
        if version not in found:
            found.append(version)
    return {image: f"{image} (torch {' / '.join(found)})" for image, found in versions.items()}


def row_label(row):
    """The seed's Task/Model label, e.g. "Image Classification/ViT", plus the row axes' words (runner.axes:
    size, dtype, ... when not the default)."""
    model = row["cell.model"]
    base = SEED_LABELS.get(model) or f"{TASK_TITLES.get(row['cell.task'], row['cell.task'])}/{model}"
    extras = axes.row_words(cell_fields(row))
    if row.get("settings_label"):   # two runs measured the cell with other settings (records.merge)
        extras = [*extras, row["settings_label"]]
    return f"{base} ({', '.join(extras)})" if extras else base


def cell_of(row):
    """A row's Cell (runner.axes: absent axes at their default)."""
    return axes.make_cell({name: value for name, value in cell_fields(row).items() if value is not None})


def is_ok(row):
    return row is not None and row["status"] == "ok" and row["timing.mean_ms"] is not None
