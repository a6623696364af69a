"""runner.core: Cell and Record to and from their JSON, one Status, v1 records converted on read."""
import json
from pathlib import Path

import jsonschema
import pytest

from host_helpers import make_record
from runner.core import SCHEMA_VERSION, STATUSES, Cell, Record, Status, cell_id, upgrade_record
from runner.schema import (
    CELL_SCHEMA,
    RECORD_SCHEMA,
    NewerRecordError,
    RecordError,
    load_record,
    read_record,
    write_record,
)

CELL = Cell(model="vit", task="image-classification", weights="random", size="tiny", batch_size=4,
            mode="default", fullgraph=True, dtype="bfloat16", model_id="google/vit-base-patch16-224")


def test_a_cell_round_trips_through_its_schema_valid_json():
    data = CELL.to_dict()
    jsonschema.validate(data, CELL_SCHEMA)
    assert Cell.from_dict(json.loads(json.dumps(data))) == CELL
    assert CELL.id == cell_id(data) == "vit-tiny_bs4_default_fullgraph_bfloat16"


def test_a_record_round_trips_and_its_json_is_what_the_schema_says(tmp_path):
    record = make_record(CELL, "oom")
    data = record.to_dict()
    jsonschema.validate(data, RECORD_SCHEMA)
    assert (data["schema_version"], data["status"], data["cell_id"]) == (SCHEMA_VERSION, "oom", CELL.id)
    assert data["error"] == {"type": "RuntimeError", "message": "boom", "traceback": None}
    assert load_record(write_record(tmp_path, record)) == record


def test_status_is_the_schemas_list_and_reads_as_its_value():
    assert RECORD_SCHEMA["properties"]["status"]["enum"] == list(STATUSES) == [s.value for s in Status]
    assert Status.OK == "ok" and f"{Status.TIMEOUT}" == "timeout" and json.dumps(Status.OOM) == '"oom"'


def test_fields_this_version_does_not_model_are_kept():
    data = dict(make_record(CELL).to_dict(), later_field={"x": 1})
    assert Record.from_dict(data).to_dict() == data


def _v1(record):
    data = record.to_dict()
    data["schema_version"] = 1
    data["cell"] = dict(data["cell"], fault=None)
    data["timing"] = {("compile_s" if key == "first_call_s" else key): value for key, value in data["timing"].items()}
    return data


def test_a_v1_record_is_converted_on_read(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_v1(make_record(CELL))))
    data = read_record(path)
    assert data["schema_version"] == SCHEMA_VERSION and "fault" not in data["cell"]
    assert data["timing"]["first_call_s"] == 3.0 and "compile_s" not in data["timing"]
    jsonschema.validate(data, RECORD_SCHEMA)
    assert load_record(path) == make_record(CELL)


def test_a_v2_fixture_record_loads_as_current_without_the_new_fields():
    """A record written before schema v3 (the committed CPU fixture run): it reads, validates, and
    has no energy or violation block (absent, never zero), nor v4's host, paired or extended blocks."""
    path = Path(__file__).parent / "fixtures" / "cpu-run" / "local" / "resnet-tiny_bs1_eager_float32.json"
    assert json.loads(path.read_text())["schema_version"] == 2
    data = read_record(path)
    assert data["schema_version"] == SCHEMA_VERSION == 5
    assert "energy" not in data["timing"] and "violations" not in data["timing"]
    assert not {"host", "paired", "extended"} & set(data["timing"])
    jsonschema.validate(data, RECORD_SCHEMA)


def test_the_h100_v3_records_load_as_v4_and_validate():
    """The first real GPU's records (schema v3, tests/data/gpu-evidence): they read as v4, validate (the v4
    settings paired, min_time_s, ... not required), and their host fields are unknown, not guessed."""
    from runner.host import host_view

    folder = Path(__file__).parent / "data" / "gpu-evidence" / "h100-2026-11-26" / "run-acc" / "acc" / "latest"
    paths = sorted(folder.glob("*.json"))
    assert len(paths) == 11
    for path in paths:
        assert json.loads(path.read_text())["schema_version"] == 3
        data = read_record(path)
        jsonschema.validate(data, RECORD_SCHEMA)
        view = host_view(data)
        assert view["launch_bound_share"] is None and view["steal_share"] is None and view["stalls"] is not None


def test_upgrading_leaves_the_input_alone():
    old = _v1(make_record(CELL))
    upgrade_record(old)
    assert old["schema_version"] == 1 and "fault" in old["cell"] and "compile_s" in old["timing"]


@pytest.mark.parametrize("version", [0, None, "2"])
def test_unknown_versions_are_refused(tmp_path, version):
    path = tmp_path / "future.json"
    path.write_text(json.dumps(dict(make_record(CELL).to_dict(), schema_version=version)))
    with pytest.raises(RecordError, match="is not supported"):
        read_record(path)


def test_a_record_of_a_newer_version_is_refused_as_newer_naming_the_file(tmp_path):
    path = tmp_path / "future.json"
    path.write_text(json.dumps(dict(make_record(CELL).to_dict(), schema_version=SCHEMA_VERSION + 1)))
    with pytest.raises(NewerRecordError, match=f"{path}: schema_version {SCHEMA_VERSION + 1} is newer"):
        read_record(path)


def test_an_incomplete_record_is_a_record_error(tmp_path):
    path = tmp_path / "part.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "cell": CELL.to_dict()}))
    with pytest.raises(RecordError, match="not a complete record"):
        load_record(path)


def test_mode_says_compiled_and_cudagraphs_once_for_every_mode():
    from runner.core import MODES, Mode
    from runner.cudagraphs import CUDAGRAPH_MODES

    assert MODES == ("eager", "default", "reduce-overhead", "max-autotune")
    assert [mode.value for mode in Mode if not mode.compiled] == ["eager"]
    assert CUDAGRAPH_MODES == ("reduce-overhead", "max-autotune")
    assert Mode("default") == "default" and str(Mode.MAX_AUTOTUNE) == "max-autotune"
    assert not Mode.EAGER.cudagraphs and not Mode.DEFAULT.cudagraphs
