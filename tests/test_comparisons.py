"""The one list of comparisons (matrixbench.matrix.comparisons): what ``repeats: auto`` plans for is what the
report judges, for any matrix (axes on and off, fullgraph, A/A twins, attribution's bridges)."""
import dataclasses
import random

import pytest

from host_helpers import make_record, small_matrix_data, write_matrix
from matrixbench.build.versions import pinned_version
from matrixbench.executors import adaptive
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.matrix.aa import twin_name
from matrixbench.report import records, shares
from matrixbench.report.cells import CellIndex
from matrixbench.report.comparisons import comparisons as report_rows
from matrixbench.report.document import image_sources
from matrixbench.report.published import load_published
from matrixbench.run.manifest import start_manifest
from matrixbench.run.pending import pending_work
from runner.schema import write_record

JUDGED = ("speedup", "mode_change", "image_change", "aa_change")   # comparisons.csv's kinds of two cells
METADATA = {  # transformers' METADATA header, enough for attribution to derive both corners
    "4.43.4": "Metadata-Version: 2.1\nName: transformers\nVersion: 4.43.4\nRequires-Python: >=3.8.0\n",
    "5.23.0": "Metadata-Version: 2.1\nName: transformers\nVersion: 5.23.0\nRequires-Python: >=3.8.0\n",
}


def _metadata(spec):
    return METADATA.get(spec.split("==")[-1])


def _run(tmp_path, matrix, mean=lambda cell, image: 2.0):
    """Every cell of every image recorded ok (one process), run.json as a run writes it; the works."""
    run = tmp_path / "results" / "r"
    works = pending_work(matrix, run)
    start_manifest(run, run_name="r", matrix=matrix, backend="local", device="cpu", gpus=[], note=None,
                   command=[])
    for work in works:
        image = matrix.images[work.image_name]
        for cell in work.cells:
            record = make_record(cell, mean_ms=mean(cell, work.image_name))
            versions = {"torch": pinned_version(image.torch), "transformers": pinned_version(image.transformers)}
            record.environment = dict(record.environment, image_name=work.image_name, **versions)
            write_record(work.out_dir, record)
    return run, works


def _report(run):
    frame = records.load_results([run])
    manifests = records.read_manifests([run])
    cells = CellIndex(frame, records.image_order(manifests), records.aa_twins(manifests),
                      records.margin_pct(manifests), shares.plan_of(manifests))
    rows = report_rows(cells, load_published(), image_sources(cells, {}))
    return cells, {(row["kind"], row["image"], row["model"], row["batch_size"], row["mode"], row["against"])
                   for row in rows if row["kind"] in JUDGED}


def _mode_label(cell):
    return cell.mode + (" fullgraph" if cell.fullgraph else "")


def _row_key(cell):
    return cell.model + ("-tiny" if cell.size == "tiny" else "") + ("" if cell.dtype == "float32" else f" {cell.dtype}")


def _as_report_row(comparison):
    """A planned comparison as comparisons.csv keys it (kind, image, model, batch size, mode, against)."""
    (before, baseline), (after, candidate) = comparison.baseline, comparison.candidate
    against = _mode_label(baseline) if comparison.kind in ("speedup", "mode_change") else before
    return (comparison.kind, after, _row_key(candidate), candidate.batch_size, _mode_label(candidate), against)


def test_with_fullgraph_the_planner_and_the_report_make_the_same_comparisons(tmp_path):
    """Issue 31: with fullgraph, repeats auto planned mode changes against "default fullgraph" that the report
    never made and none of its speed-ups, and the report dropped its mode changes."""
    data = dict(small_matrix_data(), modes=["eager", "default", "reduce-overhead", "max-autotune"], fullgraph=True)
    matrix = load_matrix(write_matrix(tmp_path, data), Overrides(images=["stable"]))
    run, works = _run(tmp_path, matrix)
    planned = {_as_report_row(c) for c in adaptive.comparisons(works)}
    _, judged = _report(run)
    assert planned == judged
    kinds = sorted(row[0] for row in judged)
    # 2 models x 2 batch sizes: 3 speed-ups and 2 mode changes each
    assert kinds.count("speedup") == 12 and kinds.count("mode_change") == 8
    assert {row[5] for row in judged if row[0] == "mode_change"} == {"default fullgraph"}
    assert {row[5] for row in judged if row[0] == "speedup"} == {"eager"}


def _random_matrix(tmp_path, rng):
    data = small_matrix_data()
    data["images"]["nightly"] = {"torch": "torch==2.13.0", "python": "3.12", "transformers": "transformers==4.43.4"}
    data["modes"] = ["eager"] + rng.sample(["default", "reduce-overhead", "max-autotune"], rng.randint(0, 3))
    data["dtypes"] = rng.sample(["float32", "float16", "bfloat16"], rng.randint(1, 2))
    data["batch_sizes"] = rng.sample([1, 2, 4], rng.randint(1, 2))
    data["fullgraph"] = rng.random() < 0.5
    data["size"] = rng.choice(["full", "tiny"])
    images = rng.sample(["stable", "latest", "nightly"], rng.randint(1, 3))
    data["attribution"] = rng.random() < 0.5 and {"stable", "latest"} <= set(images)
    matrix = load_matrix(write_matrix(tmp_path, data), Overrides(images=images), metadata=_metadata)
    if rng.random() < 0.4:   # an A/A twin of one image (run --aa), beside the others
        original = matrix.images[rng.choice(images)]
        twin = dataclasses.replace(original, name=twin_name(original.name), build_of=original.name)
        matrix = dataclasses.replace(matrix, images={**matrix.images, twin.name: twin})
    return matrix


SEEDS = range(12)


def _features(matrix):
    from matrixbench.matrix.comparisons import roles_of

    return {name for name, on in (("bridges", matrix.bridges), ("fullgraph", matrix.fullgraph),
                                  ("aa", roles_of(matrix).twins), ("images>1", len(matrix.images) > 1)) if on}


@pytest.mark.parametrize("seed", SEEDS)
def test_for_any_matrix_what_the_planner_plans_is_what_the_report_judges(tmp_path, seed):
    from matrixbench.matrix.comparisons import roles_of  # here: the fullgraph test above runs on 6caf100 too

    rng = random.Random(seed)
    matrix = _random_matrix(tmp_path, rng)
    run, works = _run(tmp_path, matrix, mean=lambda cell, image: rng.uniform(1.0, 3.0))
    planned = adaptive.comparisons(works, roles_of(matrix))
    cells, judged = _report(run)
    assert {_as_report_row(c) for c in planned if c.kind in JUDGED} == judged
    listed = [c for found in cells.comparisons.values() for c in found]
    assert {c.key() for c in planned} == {c.key() for c in listed}
    if matrix.bridges:
        assert any(c.kind == "bridge_step" for c in planned)
    if any(image.build_of for image in matrix.images.values()):
        assert any(c.kind == "aa_change" for c in planned)


def test_the_random_matrices_covered_fullgraph_twins_and_bridges(tmp_path):
    """The seeds of the property test above, drawn again here (no state shared between tests: under xdist they
    run on any worker), cover every feature at least once."""
    covered = set()
    for seed in SEEDS:
        covered |= _features(_random_matrix(tmp_path, random.Random(seed)))
    assert covered >= {"bridges", "fullgraph", "aa", "images>1"}
