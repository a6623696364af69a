"""The host's settings: the runner's declarations (``runner.settings``) and the host-only ones, declared
once each with the runner's ``Setting`` class.

The matrix JSON Schema (``matrixbench.matrix.schema``), the matrix's defaults (``matrixbench.matrix``)
and the CLI override options (``matrixbench.cli``) derive from ``SETTINGS``. Host-only settings live
here, not in ``runner/``: their help texts are no part of the runner's sources, so editing one leaves
every image's runner hash (``images.runner_hash``) as it was.
"""
from typing import Any, Dict, Tuple

from runner import settings as runner_settings
from runner.settings import Setting

HOST_SETTINGS: Tuple[Setting, ...] = (
    Setting("repeats", "Processes per cell (repeats), each its own fresh process and record; 3 for a "
            "comparison that should survive a rerun; auto: repeats_min per cell, then more processes only "
            "for cells in comparisons still undecided, up to repeats_max (matrixbench.executors.adaptive).",
            "integer", default=1, minimum=1, maximum=1000, auto=True, flag="--repeats"),
    Setting("repeats_min", "With repeats auto: the processes every cell starts with.",
            "integer", default=3, minimum=2, maximum=1000, flag="--repeats-min"),
    Setting("repeats_max", "With repeats auto: the most processes a cell gets while its comparisons stay "
            "undecided.", "integer", default=10, minimum=2, maximum=1000, flag="--repeats-max"),
    Setting("slots", "Runners at once: auto (one per GPU on a GPU run, one on a CPU run) or a count; "
            "each slot gets its own GPU and a disjoint set of CPU cores (matrixbench.run.placement).",
            "integer", default="auto", minimum=1, maximum=1024, auto=True, flag="--slots"),
    Setting("calibrate", "Measure the slots' interference before the matrix (matrixbench.executors.calibration): the "
            "calibration cells run on each slot alone, then on every slot at once, once per repeat; the "
            "report's calibration table gives loaded / alone per cell with its interval. Needs 2 or more slots.",
            "boolean", default=False, flag="--calibrate"),
    Setting("calibration_models", "The models --calibrate runs, comma-separated, each at batch size 1, eager "
            "and default, in the matrix's size and first dtype: a model of the matrix, or a shipped one (resnet "
            "is ResNet-50; tiny with size tiny).",
            "string", default=("resnet",), many=True, flag="--calibration-models"),
    Setting("exclusive_timing", "With slots: compile in parallel but time one slot at a time (the run's "
            "timing board, runner.timing_board), for zero interference between slots at some wall time; "
            "the wait counts against timeout_s. Records say which mode they ran under.",
            "boolean", default=False, flag="--exclusive-timing"),
    Setting("turns", "Image changes in turns (docs/turns.md): in each round the two images of an image comparison "
            "run their runners at once and take turns over a baton (each cell's own part, then alternating blocks), "
            "so the host's state falls on both sides; the report judges those rounds \"in turns\". On by default "
            "since an H200 A/A met issue 34's goal with it (benchmarks/results/gpu/NVIDIA-H200-20261128-pinned); "
            "false runs the images one after the other (both models are then never in memory at once).",
            "boolean", default=True),
    Setting("turns_cores", "With turns: pin both runners of a pair to this many CPU cores (the same ones: the last of "
            "the cores this run may use) for their blocks in turns, each with as many torch threads, so that both "
            "sides' blocks run where the other's ran; 0: not pinned; auto: 1 with turns, 0 without (docs/turns.md). "
            "The own part (the compile) stays unpinned.", "integer", default="auto", minimum=0, maximum=1024,
            auto=True),
    Setting("attribution", "Split each change between two images that differ in torch and in transformers into "
            "torch's share and transformers' share: derives and runs bridge images (the torch of one side with "
            "the transformers of the other; matrixbench.matrix.attribution). `run --dry-run` prints what it costs.",
            "boolean", default=False, flag="--attribution"),
    Setting("gpu_types", "GPU types to run every cell on, comma-separated, as Ray names them (A100, V100, "
            "T4, H100, ...): a matrix axis, only with --executor ray; records land in "
            "results/<run>/<gpu_type>/<image>/.",
            "string", default=(), many=True, min_items=0, flag="--gpu-types"),
    # The report's: how it judges records (matrixbench.report), not how a run measures them.
    Setting("margin_pct", "Equivalence margin m, in %: a comparison whose 95% interval of candidate / baseline "
            "lies inside [1/(1+m), 1+m] is \"no change\" (docs/verdicts.md). The report uses the run's (run.json's "
            "matrix), else this default; repeats auto adds processes until each comparison is decided at it.",
            "number", default=3.0, minimum=0, exclusive_minimum=True, maximum=100, flag="--margin-pct"),
    Setting("between_cv_threshold", "The report's between-process flag (¶): the coefficient of variation of a "
            "cell's per-process means above which the cell is marked noisy between processes.",
            "number", default=0.05, minimum=0, exclusive_minimum=True, maximum=10, matrix=False),
)
# The build scope: where pip and Docker fetch from when images (or venvs) are built -- by `matrixbench build`
# (whose flags override them), by `run --backend auto` and on the nodes of `run --executor ray`. Keys of
# matrix.yaml (and --set); never flags of `run` (matrixbench.cli refuses them there, naming this home).
BUILD_SETTINGS: Tuple[Setting, ...] = (
    Setting("index_url", "pip index URL for everything but torch (each image's own index_url is torch's) "
            "[default: PyPI]; credentials in it (https://user:TOKEN@host/simple) are never printed or recorded.",
            "string", nullable=True, flag="--index-url"),
    Setting("extra_index_urls", "Extra pip index URLs for every image, besides each image's own.",
            "string", default=(), many=True, min_items=0, flag="--extra-index-url"),
    Setting("base_image", "Base image for every Docker build, in place of each image's (e.g. a mirror of "
            "python:{python}-slim-bookworm; {python} is replaced).", "string", nullable=True, flag="--base-image"),
    Setting("ca_bundle", "CA bundle (PEM) for pip behind a TLS-inspecting proxy; in matrix.yaml or --set a "
            "path relative to the matrix file. Ray nodes get its bytes.", "string", nullable=True, flag="--ca-bundle"),
    Setting("registry", "HOST:PORT of a Docker registry: `run --executor ray` with docker nodes pushes the images "
            "built here to it once, and each node pulls them (instead of building them).", "string", nullable=True),
)
SETTINGS: Tuple[Setting, ...] = runner_settings.SETTINGS + HOST_SETTINGS + BUILD_SETTINGS
BY_NAME: Dict[str, Setting] = {setting.name: setting for setting in SETTINGS}
RUNNER_SETTINGS: Tuple[Setting, ...] = runner_settings.RUNNER_SETTINGS
MATRIX_SETTINGS: Tuple[Setting, ...] = tuple(s for s in SETTINGS if s.matrix)
OVERRIDES: Tuple[Setting, ...] = tuple(s for s in SETTINGS if s.flag and s not in BUILD_SETTINGS)   # validate/run
BUILD_FLAGS: Tuple[Setting, ...] = tuple(s for s in BUILD_SETTINGS if s.flag)   # `matrixbench build`'s overrides


def matrix_defaults() -> Dict[str, Any]:
    """Optional matrix.yaml keys and the value they take when left out (lists as lists)."""
    return {s.name: list(s.default) if s.many else s.default
            for s in MATRIX_SETTINGS if not s.required}
