"""runner.settings: one declaration per setting; the schema, the defaults and the checks derive from it."""
import jsonschema
import pytest

from matrixbench.matrix import Matrix
from matrixbench.matrix.schema import DEFAULTS, MATRIX_SCHEMA
from matrixbench.matrix.settings import BY_NAME, RUNNER_SETTINGS, SETTINGS
from runner.cells_file import validate_settings
from runner.settings import DEFAULT_SETTINGS


def test_every_setting_has_help_and_a_default_its_own_rules_allow():
    for setting in SETTINGS:
        assert setting.help
        default = list(setting.default) if setting.many else setting.default
        assert setting.problem(default) is None, setting.name
        jsonschema.validate(default, setting.json_schema())


def test_the_matrix_schema_and_defaults_come_from_the_declarations():
    for setting in SETTINGS:
        if setting.matrix:
            assert MATRIX_SCHEMA["properties"][setting.name] == setting.json_schema()
            assert (setting.name in MATRIX_SCHEMA["required"]) == setting.required
        else:
            assert setting.name not in MATRIX_SCHEMA["properties"]
    assert DEFAULTS["iterations"] == BY_NAME["iterations"].default == Matrix.iterations


def test_the_runner_defaults_are_the_declared_ones():
    assert validate_settings({}) == DEFAULT_SETTINGS == {s.name: s.default for s in RUNNER_SETTINGS}


@pytest.mark.parametrize("name, value", [
    ("iterations", 0), ("iterations", 10**7), ("iterations", 1.5), ("batch_sizes", [4097]),
    ("iterations", True), ("warmup", -1), ("timeout_s", 0),
    ("device", "tpu"), ("accuracy_tolerance", -0.1), ("cv_threshold", 0), ("modes", []),
    ("modes", ["fast"]), ("batch_sizes", [0]), ("fullgraph", "yes"),
])
def test_the_stdlib_check_and_the_json_schema_agree(name, value):
    setting = BY_NAME[name]
    assert setting.problem(value) is not None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, setting.json_schema())


@pytest.mark.parametrize("name, value", [
    ("accuracy_tolerance", None), ("accuracy_tolerance", 0), ("timeout_s", 0.5), ("modes", ["eager"]),
])
def test_allowed_values_pass_both(name, value):
    setting = BY_NAME[name]
    assert setting.problem(value) is None
    jsonschema.validate(value, setting.json_schema())


def test_problems_say_what_is_allowed():
    assert BY_NAME["iterations"].problem(0) == "must be an integer >= 1 and <= 1,000,000, got 0"
    assert BY_NAME["cv_threshold"].problem(0) == "must be a number > 0, got 0"
    assert "one of [auto, cuda, cpu]" in BY_NAME["device"].problem("tpu")


def test_host_settings_live_outside_the_runner_so_their_help_is_not_in_the_runner_hash():
    from pathlib import Path

    import runner
    from matrixbench.matrix.settings import HOST_SETTINGS
    from runner.settings import BY_NAME as RUNNER_BY_NAME

    runner_sources = "".join(path.read_text() for path in Path(runner.__file__).parent.glob("*.py"))
    assert {"repeats", "slots", "calibrate", "gpu_types"} <= {s.name for s in HOST_SETTINGS}
    for setting in HOST_SETTINGS:
        assert setting.name not in RUNNER_BY_NAME and not setting.runner
        assert setting.help[:40] not in runner_sources, setting.name
    assert SETTINGS[:len(RUNNER_BY_NAME)] == tuple(RUNNER_BY_NAME.values())
