"""``run --aa IMAGE``: an A/A run, one image twice under two names, to measure what a star is worth.

The matrix keeps only IMAGE and gains its twin ``IMAGE-aa`` (``twin_name``): the same entry
(``Image.build_of`` = IMAGE), so it runs in IMAGE's build (the same Docker image, the same venv;
nothing is built twice) while its records carry the twin's name. The two take turns like any two
images (the scheduler's counterbalanced rounds), so every comparison between them is a no-change
comparison: run.json's ``aa_twins`` ({twin: original}) tells the report, which prints "On this
machine, N of M no-change (A/A) comparisons were starred". The cells are the matrix's, narrowed as
usual (--models, --batch-sizes, --modes; a few short cells are enough); repeats must be 2 or more
(or auto). The run is named ``aa-IMAGE`` unless --run names it, so it never mixes with a real run.
"""
import dataclasses

from matrixbench.errors import MatrixError

TWIN_SUFFIX = "-aa"


def twin_name(image_name):
    return f"{image_name}{TWIN_SUFFIX}"


def default_run_name(image_name):
    return f"aa-{image_name}"


def aa_matrix(matrix, image_name):
    """``matrix`` with only ``image_name`` and its twin, in that order."""
    if image_name not in matrix.images:
        raise MatrixError(f"--aa {image_name}: no such image in {matrix.path}; choose one of "
                          f"{', '.join(matrix.images)}")
    twin = twin_name(image_name)
    if twin in matrix.images:
        raise MatrixError(f"--aa {image_name}: the matrix already has an image named {twin}; rename it")
    if matrix.repeats != "auto" and matrix.repeats < 2:
        raise MatrixError(f"--aa {image_name}: an A/A comparison needs 2 or more processes a cell (repeats is "
                          f"{matrix.repeats}); add --repeats 3 (or --repeats auto)")
    original = matrix.images[image_name]
    copy = dataclasses.replace(original, name=twin, build_of=image_name,
                               description=f"A/A twin of {image_name}: the same build under another name")
    return dataclasses.replace(matrix, images={image_name: original, twin: copy})
