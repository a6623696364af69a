"""``python -m runner --check``: build every model of a cells file on the meta device.

No memory, no weights, no timing: each distinct model is resolved (config, classes, processor)
and instantiated on torch's meta device, so a broken config.json, an unknown model_type or a
task that does not fit is found before anything is measured. The answer goes to
``<out>/check.json`` (runner.schema.CHECK_SCHEMA, with its own version, this torch's and this
transformers' versions): one entry per model with the error, or null when it builds.
"""
import torch
import transformers

from runner.hash_cache import runner_cache
from runner.models import make_recipe
from runner.schema import CHECK_FILENAME, CHECK_SCHEMA_VERSION, write_json_atomic

MAX_ERROR_CHARS = 4000   # an exception's message can quote a whole config: the start says what is wrong


def check_models(cells, hashes=None):
    """[{"model", "size", "weights", "error"}] for each distinct model of ``cells`` (``hashes``: the
    runner.hash_cache file a local model's files' hash is remembered in)."""
    results, seen = [], set()
    for cell in cells:
        key = (cell.model, cell.model_id, cell.config_path, cell.task, cell.size, cell.weights)
        if key not in seen:
            seen.add(key)
            results.append({"model": cell.model, "size": cell.size, "weights": cell.weights,
                            "error": build_error(cell, hashes)})
    return results


def build_error(cell, hashes=None):
    """Why the cell's model cannot be built, or None when it builds on the meta device."""
    try:
        recipe = make_recipe(cell, hashes)
        with torch.device("meta"):
            recipe.model_class._from_config(recipe.config)
    except Exception as exc:  # every failure is the answer, not a crash
        error = f"{type(exc).__name__}: {exc}"
        return error if len(error) <= MAX_ERROR_CHARS else error[:MAX_ERROR_CHARS] + "..."
    return None


def write_check(cells_file, out_dir):
    return write_json_atomic(f"{out_dir}/{CHECK_FILENAME}",
                             {"schema_version": CHECK_SCHEMA_VERSION, "image_name": cells_file.image_name,
                              "torch": torch.__version__, "transformers": transformers.__version__,
                              "models": check_models(cells_file.cells, runner_cache(out_dir))})
