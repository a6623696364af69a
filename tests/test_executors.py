"""executors/__init__: the one place that picks an executor and refuses what it would ignore; the
refusals derive from each option's declared scope (SCOPES), in both directions."""
import dataclasses

import pytest

from host_helpers import small_matrix_data, write_matrix
from matrixbench.build.images import BuildOptions
from matrixbench.errors import OptionConflictError
from matrixbench.executors import SCOPES, check_options, create_executor
from matrixbench.executors.ray.options import RayOptions
from matrixbench.executors.sequential import SequentialExecutor
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.run.command import RunOptions

SETTERS = {   # how a run gives each scoped option
    "--slots / slots": ({"slots": 2}, {}),
    "--slots 1 / slots: 1": ({"slots": 1}, {}),
    "--calibrate / calibrate": ({"calibrate": True}, {}),
    "--exclusive-timing / exclusive_timing": ({"exclusive_timing": True}, {}),
    "--gpu": ({}, {"gpu": "0"}),
    "--allow-busy-gpus": ({}, {"allow_busy_gpus": True}),
    "--ray-address": ({}, {"ray": RayOptions(address="10.0.0.1:6379")}),
    "registry": ({}, {"ray": RayOptions(registry="10.0.0.1:5000")}),
    "ca_bundle/index_url/extra_index_urls/base_image": ({}, {"build_options": BuildOptions(index_url="u")}),
}


def test_every_scope_has_a_way_to_give_it():
    assert sorted(scope.flag for scope in SCOPES) == sorted(SETTERS)


@pytest.mark.parametrize("scope", SCOPES, ids=lambda scope: scope.flag)
@pytest.mark.parametrize("executor", [None, "sequential", "slots", "ray"])
def test_an_option_is_refused_exactly_where_its_executor_ignores_it(tmp_path, scope, executor):
    settings, fields = SETTERS[scope.flag]
    matrix = load_matrix(write_matrix(tmp_path, dict(small_matrix_data(), **settings)))
    options = RunOptions(executor=executor, **fields)
    assert scope.given(matrix, options) and not scope.given(load_matrix(write_matrix(tmp_path)), RunOptions())
    if executor in scope.executors:
        check_options(matrix, options)
        return
    with pytest.raises(OptionConflictError, match=scope.flag.split(" ")[0]) as refused:
        check_options(matrix, options)
    one_machine = "ray" not in scope.executors   # refused by the executor that ignores it, naming that executor
    assert (f"not with --executor {executor}" if one_machine else "only with --executor ray") in str(refused.value)


def test_slots_auto_and_one_slot_stay_accepted_with_the_sequential_executor(tmp_path):
    """Only a count above 1 contradicts one runner at a time; auto means what the run has (none on a CPU run)."""
    for slots in ("auto", 1):
        matrix = load_matrix(write_matrix(tmp_path, dict(small_matrix_data(), slots=slots)))
        check_options(matrix, RunOptions(executor="sequential"))


def test_an_unknown_executor_names_the_valid_ones(tmp_path):
    with pytest.raises(OptionConflictError, match="--executor 'gpu': valid are sequential, slots, ray"):
        check_options(load_matrix(write_matrix(tmp_path)), RunOptions(executor="gpu"))


def test_without_gpus_an_unset_executor_is_sequential_and_slots_is_kept_when_asked(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path), Overrides())
    context = dict(matrix=matrix, gpus=False, environ={}, note=lambda line: None)
    assert isinstance(create_executor(None, RunOptions(), **context), SequentialExecutor)
    slots = create_executor(None, dataclasses.replace(RunOptions(), executor="slots"), **context)
    assert type(slots).__name__ == "SlotsExecutor" and len(slots.slot_plan.slots) >= 1
