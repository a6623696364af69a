"""Where and when units run: one runner at a time (``sequential``), one per slot at once (``slots``),
or as tasks on a Ray cluster (``ray/``, the only package that imports Ray).

This is the one place that picks by name: ``create_environment`` (what starts each runner, as the
driver sees it: ``--backend``'s environment, or the Ray cluster's driver side) and ``create_executor``;
and the one place that refuses what an executor would ignore (``check_options``). ``run/command.py`` never
tests which executor or backend it got.
"""
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from matrixbench.environments import create_backend
from matrixbench.errors import OptionConflictError
from matrixbench.run.placement import AUTO

EXECUTORS = ("sequential", "slots", "ray")
RAY = "ray"


def _ray_module() -> Any:
    from matrixbench.executors.ray import executor  # imports Ray only when it connects

    return executor


def create_environment(options: Any) -> Any:
    """What starts the runners: ``--backend``'s environment; under --executor ray, the cluster's driver
    side, whose nodes each run ``--backend`` (docker or local)."""
    if options.executor != RAY:
        return create_backend(options.backend, build_options=options.build_options)
    return _ray_module().RayBackend(options.ray.address, node_backend=options.backend, registry=options.ray.registry,
                                    build_options=options.build_options)


def _sequential(environment: Any, options: Any, **context: Any) -> Any:
    from matrixbench.executors.sequential import SequentialExecutor

    return SequentialExecutor()


def _slots(environment: Any, options: Any, *, matrix: Any, gpus: bool, environ: Any,
           note: Callable[[str], None], required: bool = False) -> Any:
    """Slots where the run has them (``slots`` auto: one per GPU on a GPU run); else one runner at a time."""
    from matrixbench.executors import slots

    slot_plan = slots.plan(matrix, options, gpus, environ, note, required=required)
    return _sequential(environment, options) if slot_plan is None else slots.SlotsExecutor(slot_plan)


FACTORIES: Dict[Optional[str], Callable[..., Any]] = {
    None: _slots,
    "sequential": _sequential,
    "slots": lambda environment, options, **context: _slots(environment, options, required=True, **context),
    RAY: lambda environment, options, **context: _ray_module().RayExecutor(environment),
}


def create_executor(environment: Any, options: Any, **context: Any) -> Any:
    """``options.executor``'s executor (None: slots where the run has slots, else sequential)."""
    return FACTORIES[options.executor](environment, options, **context)


def check_gpu_types(matrix: Any, executor: Optional[str]) -> None:
    """The GPU-type axis needs an executor that places work on GPU types: only the ray executor does."""
    if matrix.gpu_types and executor != RAY:
        raise OptionConflictError(
            f"gpu_types {','.join(matrix.gpu_types)}: only --executor ray places work on GPU types (this is "
            f"--executor {executor or 'sequential/slots'}); drop --gpu-types / gpu_types, or run on a Ray cluster "
            "with --executor ray --ray-address HOST:PORT")


@dataclass(frozen=True)
class Scope:
    """Where an option has an effect: ``executors`` that use it (None: a run without --executor); ``given``
    says whether a run sets it. Refusals of options the chosen executor would ignore derive from these."""

    flag: str
    executors: Tuple[Optional[str], ...]
    given: Callable[[Any, Any], bool]


ONE_MACHINE: Tuple[Optional[str], ...] = (None, "sequential", "slots")
SCOPES = (
    Scope("--slots / slots", ONE_MACHINE, lambda matrix, options: matrix.slots != AUTO),
    Scope("--calibrate / calibrate", ONE_MACHINE, lambda matrix, options: matrix.calibrate),
    Scope("--exclusive-timing / exclusive_timing", ONE_MACHINE, lambda matrix, options: matrix.exclusive_timing),
    Scope("--gpu", ONE_MACHINE, lambda matrix, options: options.gpu is not None),
    Scope("--allow-busy-gpus", ONE_MACHINE, lambda matrix, options: options.allow_busy_gpus),
    Scope("--ray-address", (RAY,), lambda matrix, options: options.ray.address is not None),
    Scope("registry", (RAY,), lambda matrix, options: options.ray.registry is not None),
    Scope("ca_bundle/index_url/extra_index_urls/base_image", (RAY,),   # (and --backend venv, whose run builds)
          lambda matrix, options: options.build_options is not None and options.backend != "venv"),
)
WHY_NOT = {
    RAY: "not with --executor ray, which places each unit on one GPU Ray assigns, with that GPU's share of its "
         "node's cores; drop them, or run on one machine with --executor slots (docs/cluster.md)",
}


def check_options(matrix: Any, options: Any) -> None:
    """Refuse what the chosen executor would ignore (derived from SCOPES): the slot options under --executor
    ray (Ray gives each task one GPU and that GPU's share of its node's cores), the cluster options without it."""
    if options.executor not in (None, *EXECUTORS):
        raise OptionConflictError(f"--executor {options.executor!r}: valid are {', '.join(EXECUTORS)}")
    check_gpu_types(matrix, options.executor)
    ignored = [scope for scope in SCOPES if scope.given(matrix, options) and options.executor not in scope.executors]
    if ignored and options.executor in WHY_NOT:
        raise OptionConflictError(f"{', '.join(scope.flag for scope in ignored)}: {WHY_NOT[options.executor]}")
    if ignored:
        raise OptionConflictError(f"{', '.join(scope.flag for scope in ignored)}: only with --executor ray (this is "
                                  f"--executor {options.executor or 'sequential/slots'}); drop them, or add "
                                  "--executor ray")
    if options.executor == RAY:
        _check_ray_options(options)


def _check_ray_options(options: Any) -> None:
    """What the ray executor's own options need of --backend (the nodes')."""
    if options.ray.registry and options.backend != "docker":
        raise OptionConflictError(f"registry {options.ray.registry}: images go through a registry only to docker nodes "
                                  f"(this is --backend {options.backend}); drop the registry setting")
    if options.build_options and (options.ray.registry or options.backend != "docker"):
        raise OptionConflictError("ca_bundle, index_url, extra_index_urls, base_image: for the image builds on "
                                  "docker nodes without a registry; drop them")
