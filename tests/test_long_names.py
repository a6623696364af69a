"""Over-long names (issue 33, item 6): a run, image, model or GPU type name too long for a folder or a record's
file name is refused before anything runs, in the dry run as in the real run, with a shorter name to use
that is no other run's folder and no other name of the matrix: a name cut short could be one (two long
names that start alike, or the run a rerun would then resume); a path too long for the file system says
which part is too long, and never proposes another --run."""
import errno
import re

import pytest
import yaml
from click.testing import CliRunner

from host_helpers import RecordingBackend, small_matrix_data, use_backend
from matrixbench.cli import main
from matrixbench.errors import describe_os_error
from matrixbench.matrix.schema import NAME_PATTERN
from matrixbench.run.layout import MAX_NAME, MAX_RUN_NAME, RUN_NAME_PATTERN, shorter_name

COMMANDS = [("run", "--dry-run"), ("run",)]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    backend = use_backend(monkeypatch, RecordingBackend(gpus=False))
    return tmp_path, backend


def invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    return result.output


def suggested(output, prefix):
    """Every name the error line proposes after ``prefix``."""
    return re.findall(re.escape(prefix) + r"([A-Za-z0-9][A-Za-z0-9_.-]*)", output)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_over_long_run_name_proposes_a_name_no_run_has_not_the_one_cut_short(here, command):
    folder, backend = here
    (folder / "m.yaml").write_text(yaml.safe_dump(small_matrix_data(), sort_keys=False))
    long_name = "nightly-" + "x" * 300
    taken = {long_name[:MAX_RUN_NAME], long_name[:MAX_RUN_NAME - 9] + "-0",
             shorter_name(long_name, MAX_RUN_NAME)}     # other runs: the cut-short name, and the first suggestion
    for name in taken:
        (folder / "results" / name).mkdir(parents=True)
    output = invoke(*command, "--matrix", "m.yaml", "--backend", "local", "--images", "stable", "--run", long_name)
    [name] = suggested(output, "--run ")
    assert len(name) <= MAX_RUN_NAME and re.match(RUN_NAME_PATTERN, name), output
    assert name not in taken and not (folder / "results" / name).exists(), output
    assert sorted(p.name for p in (folder / "results").iterdir()) == sorted(taken), "nothing written"
    assert backend.requests == []


@pytest.mark.parametrize("key", ["images", "models"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_two_over_long_names_that_start_alike_get_two_names_no_other_name_of_the_matrix_has(here, key, command):
    folder, backend = here
    data = small_matrix_data()
    entry = next(iter(data[key].values()))
    start = "a" * (MAX_NAME - 9)
    # what a cut to MAX_NAME, or to MAX_NAME minus a hash, would name: taken by a third entry already
    names = [start + "-first-" + "y" * 200, start + "-second-" + "y" * 200, (start + "-first-" + "y" * 200)[:MAX_NAME]]
    data[key] = {name: entry for name in names}
    (folder / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    output = invoke(*command, "--matrix", "m.yaml", "--backend", "local", "--device", "cpu")
    proposed = suggested(output, "e.g. ")
    assert len(proposed) == 2 and len(set(proposed)) == 2, output
    for name in proposed:
        assert len(name) <= MAX_NAME and re.match(NAME_PATTERN, name) and name not in names, output
    assert "--run" not in output, output
    assert not (folder / "results").exists() and backend.requests == []


def test_a_path_too_long_names_the_part_to_shorten_and_proposes_no_run(tmp_path):
    long_part = "d" * 300
    too_long_part = OSError(errno.ENAMETOOLONG, "File name too long", str(tmp_path / long_part / "default"))
    line = describe_os_error(too_long_part)
    assert "--run" not in line and "300 bytes" in line and "--results" in line, line
    deep = "/".join(["d" * 200] * 30)
    too_long_path = OSError(errno.ENAMETOOLONG, "File name too long", str(tmp_path / deep))
    line = describe_os_error(too_long_path)
    assert "--run" not in line and "for a path" in line and "--results" in line, line


def test_a_real_run_under_a_deep_results_folder_says_what_is_too_long_and_writes_nothing(here):
    folder, backend = here
    (folder / "m.yaml").write_text(yaml.safe_dump(small_matrix_data(), sort_keys=False))
    output = invoke("run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable",
                    "--results", str(folder / ("r" * 300)))
    assert "--run" not in output.replace("--results", ""), output
    assert "300 bytes" in output and backend.requests == [], output


def test_an_over_long_gpu_type_is_refused_without_a_name_to_use_instead(tmp_path):
    """A GPU type is Ray's name for it (A100, H100): refused, but no other name is proposed."""
    from matrixbench.errors import MatrixError
    from matrixbench.matrix import load_matrix

    data = small_matrix_data()
    data["gpu_types"] = ["A100", "H" * 120]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(MatrixError) as refused:
        load_matrix(tmp_path / "m.yaml")
    assert "gpu_types" in str(refused.value) and "120 characters" in str(refused.value)
    assert "e.g." not in str(refused.value)
