"""Every shipped model's tiny variant through eager and default: ok, valid, accurate."""
import pytest

from runner.driver import run_plan
from runner.models import SEED_MODELS
from runner.plan import Plan
from runner.schema import read_record, record_path
from runner_cells import assert_valid, settings, tiny_cell
from test_runner_compile import COMPILE_CACHE


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(SEED_MODELS))
def test_tiny_model_eager_and_default(tmp_path, model):
    cells = [tiny_cell(model, mode="eager"), tiny_cell(model, mode="default")]
    plan = Plan(settings=settings(iterations=3), cells=cells)
    run_plan(plan, tmp_path, log=lambda line: None, compile_cache_dir=COMPILE_CACHE)
    eager, compiled = (read_record(record_path(tmp_path, cell)) for cell in cells)
    for record in (eager, compiled):
        assert record["status"] == "ok", record["error"]
        assert_valid(record)
    assert eager["accuracy"]["status"] == "skipped" and eager["dynamo"] is None
    assert compiled["accuracy"]["status"] == "pass", compiled["accuracy"]
    assert compiled["dynamo"]["graphs"] >= 1
