"""matrix.yaml: the shipped matrices, validation messages, overrides, cell expansion."""
from pathlib import Path

import jsonschema
import pytest

from host_helpers import small_matrix_data, write_matrix
from matrixbench.errors import MatrixError
from matrixbench.matrix import Overrides, cells_by_image, expand_cells, load_matrix, runner_settings
from runner.schema import CELL_SCHEMA, cell_id

ROOT = Path(__file__).resolve().parents[1]
SEED_MODELS = {
    "vit": ("google/vit-base-patch16-224", "image-classification"),
    "beit": ("microsoft/beit-base-patch16-224-pt22k-ft22k", "image-classification"),
    "convnext": ("facebook/convnext-large-224", "image-classification"),
    "resnet": ("microsoft/resnet-50", "image-classification"),
    "segformer": ("nvidia/segformer-b0-finetuned-ade-512-512", "image-segmentation"),
    "mask2former": ("facebook/mask2former-swin-tiny-coco-panoptic", "image-segmentation"),
    "maskformer": ("facebook/maskformer-swin-base-ade", "image-segmentation"),
    "mobilenet": ("google/deeplabv3_mobilenet_v2_1.0_513", "image-segmentation"),
    "owlvit": ("google/owlvit-base-patch32", "object-detection"),
    "detr-resnet-101": ("facebook/detr-resnet-101", "object-detection"),
    "conditional-detr": ("microsoft/conditional-detr-resnet-50", "object-detection"),
}


# --- the shipped matrices ------------------------------------------------------------------

def test_default_matrix_has_the_seed_models_and_settings():
    matrix = load_matrix(ROOT / "matrix.yaml")
    assert {name: (m.model_id, m.task) for name, m in matrix.models.items()} == SEED_MODELS
    assert matrix.batch_sizes == (1, 4, 16)
    assert matrix.modes == ("eager", "default", "reduce-overhead")
    assert matrix.iterations == 300
    assert matrix.dtypes == ("float32",)


def test_default_images_pin_the_seed_torch_versions():
    images = load_matrix(ROOT / "matrix.yaml").images
    assert list(images) == ["seed", "stable", "nightly", "latest"]
    assert (images["seed"].torch_version, images["seed"].transformers) == ("2.0.1", "transformers==4.31.0")
    assert images["seed"].published == "main"
    assert (images["stable"].torch_version, images["stable"].python) == ("2.0.1", "3.10")
    assert images["stable"].transformers.startswith("transformers==4.43.")
    assert images["nightly"].torch_version.startswith("2.1.")
    for name in ("seed", "stable", "nightly"):
        assert "numpy<2" in images[name].extra_pins
        assert images[name].base_image == f"python:{images[name].python}-slim-bookworm"


def test_cpu_smoke_matrix_is_tiny_and_short():
    matrix = load_matrix(ROOT / "matrix-cpu-smoke.yaml")
    assert matrix.size == "tiny"
    assert matrix.batch_sizes == (1,)
    assert set(matrix.modes) == {"eager", "default"}
    assert matrix.iterations < 100
    assert set(matrix.models) <= set(SEED_MODELS)


# --- validation ----------------------------------------------------------------------------

def _set(data, path, value):
    *parents, last = path
    for key in parents:
        data = data[key]
    if value is _DELETE:
        del data[last]
    else:
        data[last] = value


_DELETE = object()

BAD_FIELDS = [
    # (path, value, words the message must contain)
    (("images", "stable", "torch"), "pytorch==2.0", ["images.stable.torch", "torch==2.0.1"]),
    (("images", "stable", "torch"), 2.0, ["images.stable.torch", "2.0"]),
    (("images", "stable", "python"), 3.1, ["images.stable.python", "quoted"]),
    (("images", "stable", "index_url"), "download.pytorch.org", ["images.stable.index_url", "http"]),
    (("images", "stable", "transformers"), "4.43.4", ["images.stable.transformers", "transformers=="]),
    (("images", "stable", "extra_pins"), "numpy<2", ["images.stable.extra_pins", "a list"]),
    (("images", "stable", "env"), {"A": 1}, ["images.stable.env.A", "a string"]),
    (("images", "stable", "cuda"), "11.8", ["images.stable", "unknown key(s) cuda", "index_url"]),
    (("images", "stable", "python"), _DELETE, ["images.stable", "missing required key(s) python"]),
    (("images", "Stable!"), {"torch": "torch", "python": "3.10", "transformers": "transformers"},
     ["images", "'Stable!'", "lowercase"]),
    (("images",), {}, ["images must not be empty"]),
    (("models", "vit", "task"), "classification",
     ["models.vit.task", "image-classification, image-segmentation, object-detection"]),
    (("models", "vit", "weights"), "imagenet", ["models.vit.weights", "random, pretrained"]),
    (("models", "vit", "id"), _DELETE, ["models.vit", "needs `id`", "`config`"]),
    (("models", "vit", "revison"), "main", ["models.vit", "unknown key(s) revison"]),
    (("modes",), ["eager", "fast"], ["modes[1]", "eager, default, reduce-overhead, max-autotune", "'fast'"]),
    (("modes",), [], ["modes must not be empty"]),
    (("modes",), ["eager", "eager"], ["modes", "twice"]),
    (("batch_sizes",), [1, 0], ["batch_sizes[1]", ">= 1"]),
    (("batch_sizes",), [1, "4"], ["batch_sizes[1]", "an integer"]),
    (("dtypes",), ["float64"], ["dtypes[0]", "float32, float16, bfloat16"]),
    (("size",), "small", ["size", "full, tiny"]),
    (("weights",), "imagenet", ["weights", "random, pretrained"]),
    (("iterations",), 0, ["iterations", ">= 1"]),
    (("warmup",), -1, ["warmup", ">= 0"]),
    (("timeout_s",), 0, ["timeout_s", "> 0"]),
    (("fullgraph",), "yes", ["fullgraph", "true or false"]),
    (("repeat",), 3, ["top level", "unknown key(s) repeat", "batch_sizes"]),
    (("models",), _DELETE, ["top level", "missing required key(s) models"]),
]


def _field_id(path, value):
    """The test id of a bad field: no object address in it, so that every pytest-xdist worker collects the same."""
    return ".".join(path) + ("=<deleted>" if value is _DELETE else f"={value!r}")


@pytest.mark.parametrize("path, value, words", BAD_FIELDS, ids=[_field_id(p, v) for p, v, _ in BAD_FIELDS])
def test_every_bad_field_is_named_with_what_is_allowed(tmp_path, path, value, words):
    data = small_matrix_data()
    _set(data, path, value)
    with pytest.raises(MatrixError) as caught:
        load_matrix(write_matrix(tmp_path, data))
    for word in words:
        assert word in str(caught.value)


def test_errors_carry_the_line_and_column_of_the_field(tmp_path):
    path = tmp_path / "matrix.yaml"
    text = write_matrix(tmp_path).read_text().replace("task: object-detection", "task: detection")
    path.write_text(text)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "task: detection" in row)
    column = text.splitlines()[line - 1].index("detection") + 1
    with pytest.raises(MatrixError, match=rf"matrix.yaml:{line}:{column}: models.detr-resnet-101.task"):
        load_matrix(path)


def test_all_errors_are_listed_at_once(tmp_path):
    data = small_matrix_data()
    data["modes"] = ["fast"]
    data["iterations"] = 0
    with pytest.raises(MatrixError) as caught:
        load_matrix(write_matrix(tmp_path, data))
    assert "modes[0]" in str(caught.value) and "iterations" in str(caught.value)


def test_a_problem_jsonschema_reports_once_per_missing_key_is_listed_once(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text("images: {}\nmodels: {}\n")
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    lines = str(caught.value).splitlines()[1:]
    assert [line for line in lines if "missing required key(s)" in line] == [
        f"  {path}:1:1: top level: missing required key(s) batch_sizes, modes"]
    assert len(lines) == 3 and "images must not be empty" in lines[1] and "models must not be empty" in lines[2]


@pytest.mark.parametrize("overrides, where", [
    (Overrides(sets={"repeats_min": 5, "repeats_max": 2}), "--set repeats_max 2"),
    (Overrides(repeats_max=2, repeats_min=5), "--repeats-max 2"),
    (Overrides(sets={"repeats_min": 12}), "--set repeats_min 12"),   # repeats_max left at its default 10
])
def test_repeats_min_above_repeats_max_is_refused_naming_the_flag_and_the_fix(tmp_path, overrides, where):
    with pytest.raises(MatrixError) as caught:
        load_matrix(write_matrix(tmp_path), overrides)
    assert str(caught.value).startswith(f"{where} leaves repeats_min")
    assert "raise repeats_max to" in str(caught.value) and "or lower repeats_min to" in str(caught.value)


def test_repeats_min_above_repeats_max_in_the_file_names_repeats_maxs_line(tmp_path):
    data = dict(small_matrix_data(), repeats="auto", repeats_min=5, repeats_max=2)
    path = write_matrix(tmp_path, data)
    line = next(n for n, row in enumerate(path.read_text().splitlines(), 1) if row.startswith("repeats_max:"))
    with pytest.raises(MatrixError, match=rf"^{path}:{line}:14: repeats_max 2 leaves repeats_min 5 > repeats_max 2: "
                                          r".*raise repeats_max to 5 or more, or lower repeats_min to 2 or less$"):
        load_matrix(path)
    data.update(repeats_min=2)
    assert load_matrix(write_matrix(tmp_path, data)).repeats_max == 2   # equal is fine: a fixed count


@pytest.mark.parametrize("key, allowed", [("repeats", "'auto' or an integer >= 1 and <= 1,000"),
                                          ("slots", "'auto' or an integer >= 1")])
def test_a_value_of_no_allowed_form_is_told_the_forms(tmp_path, key, allowed):
    with pytest.raises(MatrixError) as caught:
        load_matrix(write_matrix(tmp_path), Overrides(sets={key: "abc"}))
    assert f"--set {key} must be {allowed}" in str(caught.value) and "got 'abc'" in str(caught.value)
    data = dict(small_matrix_data(), **{key: "abc"})
    with pytest.raises(MatrixError, match=rf"matrix.yaml:\d+:\d+: {key} must be {allowed}"):
        load_matrix(write_matrix(tmp_path, data))


def test_bad_yaml_gives_line_and_column(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text("images:\n  stable: {torch: torch\nmodes: [eager]\n")
    with pytest.raises(MatrixError, match=r"not valid YAML: line \d+, column \d+"):
        load_matrix(path)


def test_missing_and_empty_files_say_so(tmp_path):
    with pytest.raises(MatrixError, match="not found; pass --matrix"):
        load_matrix(tmp_path / "nope.yaml")
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    with pytest.raises(MatrixError, match="is empty"):
        load_matrix(tmp_path / "empty.yaml")


def test_a_local_config_resolves_relative_to_the_matrix_file(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.json").write_text('{"model_type": "vit"}')
    data = small_matrix_data()
    data["models"]["mine"] = {"config": "configs/mine.json", "task": "image-classification"}
    matrix = load_matrix(write_matrix(tmp_path, data))
    assert matrix.models["mine"].config_path == str(tmp_path / "configs" / "mine.json")
    assert matrix.models["mine"].model_id is None


def test_a_save_pretrained_folder_is_its_config_with_its_weights(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "vit"}')
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"weights")
    data = small_matrix_data()
    data["models"]["mine"] = {"path": "ckpt", "task": "image-classification"}
    data["models"]["mine-random"] = {"path": "ckpt", "task": "image-classification", "weights": "random"}
    matrix = load_matrix(write_matrix(tmp_path, data))
    assert matrix.models["mine"].config_path == str(tmp_path / "ckpt" / "config.json")
    assert (matrix.models["mine"].weights, matrix.models["mine-random"].weights) == ("pretrained", "random")


def test_a_local_model_carries_its_files_hash_and_a_hub_model_none(tmp_path):
    """What a local model is (not where): its cells and the matrix's hash follow its files' content."""
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "mine.json"
    config.write_text('{"model_type": "vit"}')
    data = small_matrix_data()
    data["models"]["mine"] = {"config": "configs/mine.json", "task": "image-classification"}
    before = load_matrix(write_matrix(tmp_path, data))
    assert before.models["mine"].model_hash.startswith("sha256:") and before.models["vit"].model_hash is None
    hashes = {cell.model_hash for cell in expand_cells(before) if cell.model == "mine"}
    assert hashes == {before.models["mine"].model_hash}
    assert "model_hash" not in before.to_dict()["models"]["vit"]
    config.write_text('{"model_type": "vit", "num_hidden_layers": 4}')
    after = load_matrix(write_matrix(tmp_path, data))
    assert after.models["mine"].model_hash != before.models["mine"].model_hash
    assert after.content_hash() != before.content_hash()


def test_a_folder_without_weights_run_with_its_own_is_refused_saying_how_to_fix(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "vit"}')
    data = small_matrix_data()
    data["models"]["mine"] = {"path": "ckpt", "task": "image-classification"}
    path = write_matrix(tmp_path, data)
    with pytest.raises(MatrixError, match=r"models.mine.path: .*ckpt holds no weights \(model.safetensors, .*"
                                          r"model.save_pretrained\(folder\), or set weights: random on models.mine"):
        load_matrix(path)
    data["models"]["mine"]["weights"] = "random"
    assert load_matrix(write_matrix(tmp_path, data)).models["mine"].weights == "random"
    data["models"]["mine"] = {"config": "ckpt/config.json", "task": "image-classification"}
    with pytest.raises(MatrixError, match=r"models.mine.config: .*holds no weights.*or give --weights random"):
        load_matrix(write_matrix(tmp_path, data), Overrides(weights="pretrained"))
    (tmp_path / "ckpt" / "model.safetensors.index.json").write_text("{}")    # a sharded checkpoint
    assert load_matrix(write_matrix(tmp_path, data), Overrides(weights="pretrained")).models["mine"].weights == (
        "pretrained")


@pytest.mark.parametrize("entry, key", [
    ({"config": "configs/mine.json", "task": "image-classification"}, "config configs/mine.json"),
    ({"path": "configs", "task": "image-classification", "weights": "random"}, "path configs"),
    ({"id": "google/vit-large-patch16-224", "task": "image-classification"}, "id google/vit-large-patch16-224"),
])
def test_another_model_under_a_shipped_models_name_is_refused(tmp_path, entry, key):
    """The report labels rows by name and compares the shipped models with the published tables: another
    model named vit would pass for google/vit-base-patch16-224."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.json").write_text('{"model_type": "vit"}')
    (tmp_path / "configs" / "config.json").write_text('{"model_type": "vit"}')
    data = small_matrix_data()
    data["models"]["vit"] = entry
    with pytest.raises(MatrixError) as caught:
        load_matrix(write_matrix(tmp_path, data))
    assert (f"models.vit: 'vit' is the shipped model google/vit-base-patch16-224's name, but this entry gives {key};"
            in str(caught.value))
    assert "Name it otherwise (e.g. my-vit)" in str(caught.value)
    data["models"]["my-vit"] = data["models"].pop("vit")
    assert load_matrix(write_matrix(tmp_path, data)).models["my-vit"].task == "image-classification"


def test_size_tiny_refuses_only_the_local_models_that_models_selects(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "vit"}')
    data = small_matrix_data()
    data["models"]["mine"] = {"path": "ckpt", "task": "image-classification", "weights": "random"}
    path = write_matrix(tmp_path, data)
    with pytest.raises(MatrixError, match="models.mine: --size tiny cannot be combined with a model given by "
                                          "`config` or `path`"):
        load_matrix(path, Overrides(size="tiny"))
    assert list(load_matrix(path, Overrides(size="tiny", models=["vit"])).models) == ["vit"]


def test_a_path_that_names_the_config_file_says_to_give_its_folder(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "vit"}')
    data = small_matrix_data()
    data["models"]["mine"] = {"path": "ckpt/config.json", "task": "image-classification", "weights": "random"}
    with pytest.raises(MatrixError, match=r"models.mine.path: ckpt/config.json is a file; `path` takes the "
                                          r"save_pretrained folder \(here ckpt\), and a config.json alone is "
                                          r"`config: ckpt/config.json`"):
        load_matrix(write_matrix(tmp_path, data))


def test_a_missing_local_config_is_named(tmp_path):
    data = small_matrix_data()
    data["models"]["mine"] = {"config": "configs/absent.json", "task": "image-classification"}
    with pytest.raises(MatrixError, match=r"models.mine.config: configs/absent.json not found"):
        load_matrix(write_matrix(tmp_path, data))


def test_defaults_fill_optional_keys(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path))
    assert (matrix.size, matrix.dtypes, matrix.fullgraph) == ("full", ("float32",), False)
    assert {m.weights for m in matrix.models.values()} == {"random"}
    assert matrix.images["latest"].index_url is None


def test_image_hash_follows_build_inputs_not_description(tmp_path):
    data = small_matrix_data()
    before = load_matrix(write_matrix(tmp_path, data)).images["stable"].content_hash()
    data["images"]["stable"]["description"] = "words"
    assert load_matrix(write_matrix(tmp_path, data)).images["stable"].content_hash() == before
    data["images"]["stable"]["torch"] = "torch==2.0.0"
    assert load_matrix(write_matrix(tmp_path, data)).images["stable"].content_hash() != before


# --- overrides -----------------------------------------------------------------------------

@pytest.fixture
def matrix_file(tmp_path):
    return write_matrix(tmp_path)


@pytest.fixture
def matrix(matrix_file):
    return load_matrix(matrix_file)


def test_overrides_select_and_order_images_and_models(matrix_file):
    changed = load_matrix(matrix_file, Overrides(images=["latest", "stable", "latest"], models=["vit"]))
    assert list(changed.images) == ["latest", "stable"]
    assert list(changed.models) == ["vit"]
    assert list(load_matrix(matrix_file).models) == ["vit", "detr-resnet-101"]


def test_overrides_replace_settings(matrix_file):
    changed = load_matrix(matrix_file, Overrides(batch_sizes=[16], modes=["max-autotune"], dtypes=["float16"],
                                                 iterations=7, warmup=0, timeout_s=30.0, weights="pretrained"))
    assert (changed.batch_sizes, changed.modes, changed.dtypes) == ((16,), ("max-autotune",), ("float16",))
    assert (changed.iterations, changed.warmup, changed.timeout_s) == (7, 0, 30.0)
    assert {m.weights for m in changed.models.values()} == {"pretrained"}


@pytest.mark.parametrize("overrides, words", [
    (Overrides(images=["stable", "nightly"]), ["--images", "nightly", "valid: stable, latest"]),
    (Overrides(models=["detr"]), ["--models", "detr", "valid: vit, detr-resnet-101"]),
    (Overrides(models=[]), ["--models is empty"]),
    (Overrides(modes=["eager", "turbo"]), ["--modes", "'turbo'", "eager, default, reduce-overhead, max-autotune"]),
    (Overrides(modes=[]), ["--modes must not be empty"]),
    (Overrides(dtypes=["int8"]), ["--dtypes", "float32, float16, bfloat16"]),
    (Overrides(batch_sizes=[0]), ["--batch-sizes", ">= 1"]),
    (Overrides(timeout_s=0), ["--timeout", "> 0"]),
    (Overrides(size="huge"), ["--size", "full, tiny"]),
    (Overrides(weights="imagenet"), ["--weights", "random, pretrained"]),
    (Overrides(iterations=0), ["--iterations", ">= 1"]),
    (Overrides(size="tiny", weights="pretrained"), ["--weights pretrained", "tiny"]),
])
def test_bad_overrides_name_the_flag_and_valid_values(matrix_file, overrides, words):
    with pytest.raises(MatrixError) as caught:
        load_matrix(matrix_file, overrides)
    for word in words:
        assert word in str(caught.value)
    assert "matrix.yaml:" not in str(caught.value)  # an override's problem is not the file's


def test_the_file_and_its_overrides_are_validated_together(tmp_path):
    data = small_matrix_data()
    data["iterations"] = 0
    path = write_matrix(tmp_path, data)
    with pytest.raises(MatrixError, match=r"matrix.yaml:\d+:\d+: iterations must be >= 1"):
        load_matrix(path)
    assert load_matrix(path, Overrides(iterations=3)).iterations == 3


# --- cells ---------------------------------------------------------------------------------

def test_cells_are_the_product_of_models_dtypes_batch_sizes_and_modes(matrix_file):
    matrix = load_matrix(matrix_file, Overrides(dtypes=["float32", "bfloat16"]))
    cells = expand_cells(matrix)
    assert len(cells) == 2 * 2 * 2 * 2
    assert len({cell_id(cell) for cell in cells}) == len(cells)
    assert {(c.model, c.dtype, c.batch_size, c.mode) for c in cells} == {
        (m, d, b, mode) for m in ("vit", "detr-resnet-101") for d in ("float32", "bfloat16")
        for b in (1, 4) for mode in ("eager", "default")
    }
    assert [c.mode for c in cells[:2]] == ["eager", "default"]  # eager next to its compiled twin


def test_cells_follow_the_runner_cell_schema(matrix):
    for cell in expand_cells(matrix):
        jsonschema.validate(cell.to_dict(), CELL_SCHEMA)
    detr = next(c for c in expand_cells(matrix) if c.model == "detr-resnet-101")
    assert (detr.model_id, detr.task, detr.size) == ("facebook/detr-resnet-101", "object-detection", "full")


def test_every_image_gets_the_same_cells(matrix):
    by_image = cells_by_image(matrix)
    assert list(by_image) == ["stable", "latest"]
    assert by_image["stable"] == by_image["latest"] == expand_cells(matrix)


def test_tiny_with_pretrained_weights_in_the_file_is_refused_not_made_random(tmp_path):
    data = small_matrix_data()
    data["weights"] = "pretrained"
    with pytest.raises(MatrixError, match="weights: pretrained .* cannot be combined with --size tiny"):
        load_matrix(write_matrix(tmp_path, data), Overrides(size="tiny"))


def test_fullgraph_applies_to_compiled_modes_only(tmp_path):
    data = small_matrix_data()
    data["fullgraph"] = True
    cells = expand_cells(load_matrix(write_matrix(tmp_path, data)))
    assert {(c.mode, c.fullgraph) for c in cells} == {("eager", False), ("default", True)}


def test_runner_settings_carry_the_matrix_and_device(matrix):
    settings = runner_settings(matrix, "cpu")
    # issue 32's loop settings ride along with their defaults: paired blocks on, the minimum duration
    # "auto" (the energy counter's 10% bound), no noise stop, the extension capped at 10 s
    assert settings == {"iterations": 5, "warmup": 1, "timeout_s": 900, "device": "cpu",
                        "accuracy_tolerance": None, "cv_threshold": 0.1, "paired": True, "min_time_s": "auto",
                        "target_stdrel": None, "max_time_s": 10.0}


def test_build_settings_are_no_part_of_what_is_measured(tmp_path):
    plain = load_matrix(write_matrix(tmp_path))
    mirrored = load_matrix(write_matrix(tmp_path, dict(small_matrix_data(), index_url="https://mirror/simple",
                                                       registry="10.0.0.1:5000"), name="mirrored.yaml"))
    assert "build" not in plain.to_dict() and mirrored.to_dict()["build"]["index_url"] == "https://mirror/simple"
    assert plain.content_hash() == mirrored.content_hash()
    assert mirrored.build.given() == ("index_url", "registry")


# --- turns: on by default since the H200 A/A (docs/turns.md) ----------------------------------------

def _without_turns_keys():
    data = small_matrix_data()
    data.pop("turns", None)   # the tests' matrix says turns: false; a user's says nothing
    return data


def test_a_matrix_that_says_nothing_of_turns_runs_image_changes_in_turns_pinned_to_one_core(tmp_path):
    from matrixbench.executors import check_options
    from matrixbench.run.command import RunOptions

    matrix = load_matrix(write_matrix(tmp_path, _without_turns_keys()))
    assert (matrix.turns, matrix.turns_cores) == (True, 1)
    assert matrix.to_dict()["turns"] is True and matrix.to_dict()["turns_cores"] == 1   # run.json says so
    check_options(matrix, RunOptions())
    shipped = load_matrix(ROOT / "matrix.yaml"), load_matrix(ROOT / "matrix-cpu-smoke.yaml")
    assert [(m.turns, m.turns_cores) for m in shipped] == [(True, 1), (True, 1)]


@pytest.mark.parametrize("given, expected", [
    ({"turns": False}, (False, 0)),                            # auto: no pinning without turns, and no refusal
    ({"turns": True, "turns_cores": 0}, (True, 0)),            # turns, unpinned
    ({"turns_cores": "auto"}, (True, 1)),
    ({"turns": False, "turns_cores": "auto"}, (False, 0)),
    ({"turns_cores": 2}, (True, 2)),
])
def test_turns_cores_auto_is_one_core_with_turns_and_none_without(tmp_path, given, expected):
    from matrixbench.executors import check_options
    from matrixbench.run.command import RunOptions

    matrix = load_matrix(write_matrix(tmp_path, {**_without_turns_keys(), **given}))
    assert (matrix.turns, matrix.turns_cores) == expected
    if matrix.turns_cores <= 1:
        check_options(matrix, RunOptions())
    if not matrix.turns:   # off: the matrix hashes as before turns existed
        assert "turns" not in matrix.to_dict() and "turns_cores" not in matrix.to_dict()


def test_turns_off_with_set_and_a_bad_turns_cores_named(tmp_path):
    path = write_matrix(tmp_path, _without_turns_keys())
    off = load_matrix(path, Overrides(sets={"turns": False}))
    assert (off.turns, off.turns_cores) == (False, 0)
    with pytest.raises(MatrixError, match="turns_cores"):
        load_matrix(write_matrix(tmp_path, {**_without_turns_keys(), "turns_cores": "one"}))
