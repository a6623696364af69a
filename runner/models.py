"""The model registry and ``build``: a cell's model on its device and dtype, with its real inputs.

A seed model (``SEED_MODELS``) with random weights is built from the config shipped in
``runner/configs/<name>/`` (the hub model's exact architecture and preprocessing; no network, no
timm, no backbone download). ``size="tiny"`` applies ``configs/<name>/tiny.json`` on top: the same
classes at toy dimensions, for fast CPU tests. Pretrained weights come from the hub or the HF
cache. Any other model is named by a hub id (``model_id``) or a local ``config_path`` plus a task.
"""
import copy
import dataclasses
import inspect
import json
import re
from pathlib import Path

import torch
import transformers

from runner import inputs as model_inputs
from runner.core import ATTENTION
from runner.registry import (  # noqa: F401
    CONFIG_DIR,
    DEFAULT_MODELS,
    SEED_MODELS,
    ModelSpec,
    local_model_hash,
    missing_weights,
    shipped_spec,
)
from runner.settings import BY_NAME

# Where a model of each task may live; the first auto class that knows the config wins.
TASK_AUTO_CLASSES = {
    "image-classification": ("AutoModelForImageClassification",),
    "image-segmentation": (
        "AutoModelForSemanticSegmentation",
        "AutoModelForUniversalSegmentation",
        "AutoModelForInstanceSegmentation",
        "AutoModelForImageSegmentation",
    ),
    "object-detection": ("AutoModelForObjectDetection", "AutoModelForZeroShotObjectDetection"),
}
# Text-conditioned models whose random-weight configs can use the shipped CLIP token ids.
CLIP_TEXT_MODEL_TYPES = ("owlvit", "owlv2")
USE_RANDOM = "use weights=random"
USE_LOCAL = "use a shipped model or a local config_path"
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Attention implementations (runner.core.ATTENTION). eager (the default) is the only one every
# image can run: transformers 4.43.4 has no SDPA path on torch < 2.1.1 (stable, nightly), so
# with "auto" stable/nightly run eager attention and latest SDPA, and an image-vs-image
# comparison would measure transformers, not torch. "sdpa" falls back to eager for models
# (or versions) without an SDPA path; the record says which ran (docs/attention.md).
DEFAULT_ATTENTION = BY_NAME["attention"].default
# transformers >= 4.36 builds a model with the attention implementation asked for by the
# ``attn_implementation`` keyword (4.4x ignores one set on the config: ``_from_config`` resets it to
# its own choice, SDPA on torch >= 2.1.1); before 4.36 (the seed's 4.31) the keyword is refused and
# every attention layer is the eager one.
CHOOSES_ATTENTION = "_attn_implementation" in dir(transformers.PretrainedConfig)
# What each asked-for implementation may turn out as: sdpa falls back to eager where there is no
# SDPA path; eager is eager; auto is transformers' own choice.
ALLOWED_ATTENTION = {"eager": {"eager"}, "sdpa": {"sdpa", "eager"}}


class ModelError(Exception):
    """A cell's model cannot be built: the message names the field and the fix."""


@dataclasses.dataclass
class Recipe:
    """Everything ``build`` needs, resolved from a cell, before any weights exist."""

    model_class: type
    config: object  # the transformers config the model is built from (or was saved with)
    pretrained_from: object  # hub id or local folder for from_pretrained; None for random weights
    processor: object
    text_inputs: object  # dict of batch-1 token tensors, or None for image-only models
    source: str  # where the architecture came from, for logs and records
    revision: object = None  # the hub revision every from_pretrained of ``pretrained_from`` gets (None: main)
    asked: object = None  # the revision the cell asked for (``revision`` is the commit it resolved to)
    commit: object = None  # the hub commit the config came from (config._commit_hash), None when not the hub


@dataclasses.dataclass
class Built:
    model: torch.nn.Module  # eval mode, on the device, in the dtype
    inputs: dict  # name -> tensor, batch replicated, on the device; ready for model(**inputs)
    source: str
    attention: object = None  # the attention implementation the model's layers run (attention_used)
    commit: object = None  # the hub commit the model's files came from (Recipe.commit)


def preload(names=DEFAULT_MODELS):
    """Import the model and processor classes of shipped models (transformers imports them lazily),
    so a worker that forks per cell pays for those imports once."""
    for name in names:
        spec = SEED_MODELS[name]
        getattr(transformers, spec.model_class)
        model_inputs.processor_class(spec.processor_class)


def build(cell, device, dtype, hashes=None):
    """The cell's model and its batch of real inputs, ready for ``model(**inputs)``; ``hashes``: the
    runner.hash_cache file a local model's files' hash is remembered in."""
    recipe = make_recipe(cell, hashes)
    torch_dtype = _torch_dtype(dtype)
    model = instantiate(recipe, requested_attention(cell)).to(device=device, dtype=torch_dtype).eval()
    batch = model_inputs.to_device(batch_inputs(recipe, cell.batch_size), device, torch_dtype)
    return Built(model=model, inputs=batch, source=recipe.source,
                 attention=checked_attention(requested_attention(cell), model), commit=recipe.commit)


def requested_attention(cell):
    """The cell's attention, or the setting's default for a cell that names none."""
    return cell.attention or DEFAULT_ATTENTION


def attention_used(model):
    """The attention implementation the model's layers run: "eager" where transformers has no choice
    (< 4.36); else what each config the model holds names (4.4x builds a layer class per
    implementation from it, 5.x dispatches on it at every call), joined by "+" when they differ."""
    if not CHOOSES_ATTENTION:
        return "eager"
    configs = {id(module.config): module.config for module in model.modules()
               if isinstance(getattr(module, "config", None), transformers.PretrainedConfig)}
    return "+".join(sorted({config._attn_implementation for config in configs.values()}))


def checked_attention(requested, model):
    """``attention_used(model)``, refused when it is not what was asked for (sdpa may fall back to eager):
    a record never claims an attention implementation it was not measured with."""
    used = attention_used(model)
    allowed = ALLOWED_ATTENTION.get(requested)
    if allowed is not None and not set(used.split("+")) <= allowed:
        raise ModelError(
            f"attention={requested!r}: transformers {transformers.__version__} built {type(model).__name__} with "
            f"{used!r} attention; use attention=auto to measure transformers' own choice, or another transformers")
    return used


def _torch_dtype(dtype):
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in TORCH_DTYPES:
        raise ModelError(f"dtype={dtype!r} is not one of {sorted(TORCH_DTYPES)}")
    return TORCH_DTYPES[dtype]


def input_shapes(cell):
    """What ``build`` would feed the model, as name -> shape, without building the model."""
    batch = batch_inputs(make_recipe(cell), cell.batch_size)
    return {name: tuple(value.shape) for name, value in batch.items()}


def batch_inputs(recipe, batch_size):
    """The test image (and text queries) through the model's processor, replicated to the batch size."""
    single = model_inputs.image_inputs(recipe.processor, model_inputs.test_image())
    single.update(recipe.text_inputs or {})
    return model_inputs.replicate(single, batch_size)


def instantiate(recipe, attention=DEFAULT_ATTENTION):
    """The model on CPU in float32: random weights (seeded) or loaded from pretrained, with the
    attention implementation asked for ("auto": transformers' own choice)."""
    if attention not in ATTENTION:
        raise ModelError(f"attention={attention!r} is not one of {list(ATTENTION)}")
    try:
        if attention != "sdpa":
            return _instantiate(recipe, attention)
        try:
            return _instantiate(recipe, "sdpa")
        except (ValueError, ImportError):   # "... does not support ... SDPA"; 4.4x: "... install torch>=2.1.1"
            return _instantiate(recipe, "eager")
    except ImportError as exc:  # e.g. timm for a hub DETR config, scipy for Mask(2)Former
        raise ModelError(
            f"{recipe.source}: {recipe.model_class.__name__} needs a package this image lacks ({exc}). Install "
            "it, or for DETR-style models use a config with use_timm_backbone=false and a backbone_config "
            "(see runner/configs/detr)"
        ) from exc


def _instantiate(recipe, attention):
    config = copy.deepcopy(recipe.config)
    kwargs = attention_kwargs(attention)
    if recipe.pretrained_from is not None:
        return _hub_call(lambda checkpoint, **hub: recipe.model_class.from_pretrained(checkpoint, config=config,
                                                                                      **hub, **kwargs),
                         recipe.pretrained_from, USE_RANDOM, recipe.revision, recipe.asked)
    torch.manual_seed(0)
    return recipe.model_class._from_config(config, **kwargs)


def attention_kwargs(attention):
    """How this transformers is asked for an attention implementation: the keyword where it has a choice
    (none for "auto": its own), nothing before 4.36 (eager only; checked_attention says what ran)."""
    if not CHOOSES_ATTENTION or attention == "auto":
        return {}
    return {"attn_implementation": attention}


def make_recipe(cell, hashes=None):
    """Resolve a cell to its model class, config or checkpoint, processor and text inputs."""
    spec = seed_spec(cell)
    if spec is not None:
        return _seed_recipe(spec, cell)
    if cell.size == "tiny":
        shipped = SEED_MODELS.get(cell.model)
        if shipped is not None:   # a shipped name given another model: the tiny variant is of the shipped one
            raise ModelError(
                f"size=tiny: model {cell.model!r} is given as {cell.model_id or cell.config_path!r}, not the "
                f"shipped {shipped.model_id!r} whose tiny variant exists; use that id, or size=full")
        raise ModelError(
            f"size=tiny: model {cell.model!r} has no tiny variant; tiny exists for the shipped models "
            f"{sorted(SEED_MODELS)}. Use size=full"
        )
    if cell.config_path:
        return _local_recipe(cell, hashes)
    if cell.model_id:
        return _hub_recipe(cell)
    raise ModelError(
        f"model {cell.model!r} is not a shipped model ({sorted(SEED_MODELS)}): give model_id (a hub id) "
        "or config_path (a local config.json), plus task"
    )


def seed_spec(cell):
    """The shipped spec a cell names, or None when it names another model."""
    spec = shipped_spec(cell.model, cell.model_id, cell.config_path)
    if spec is None:
        return None
    if cell.task not in (None, spec.task):
        raise ModelError(f"task={cell.task!r} does not fit model {spec.name!r}: its task is {spec.task!r}")
    return spec


def _seed_recipe(spec, cell):
    model_class = getattr(transformers, spec.model_class)
    tiny = cell.size == "tiny"
    if cell.weights == "pretrained":
        if tiny:
            raise ModelError(f"size=tiny has random weights only; model {spec.name!r}: use weights=random or size=full")
        return _pretrained_recipe(model_class, spec.model_id, f"{spec.model_id} (pretrained)", revision=cell.revision)
    overrides = _read_json(spec.config_dir / "tiny.json") if tiny else {}
    config_dict = _merged(_read_json(spec.config_dir / "config.json"), overrides.get("config", {}))
    preprocessor = _merged(_read_json(spec.config_dir / "preprocessor_config.json"), overrides.get("preprocessor", {}))
    config = model_class.config_class.from_dict(config_dict)
    return Recipe(
        model_class=model_class,
        config=config,
        pretrained_from=None,
        processor=model_inputs.make_processor(preprocessor),
        text_inputs=_shipped_text_inputs(model_class, config, spec.config_dir),
        source=f"runner/configs/{spec.name}{' tiny' if tiny else ''} (random weights)",
    )


def _pretrained_recipe(model_class, checkpoint, source, processor=None, revision=None, hub=True):
    """from_pretrained of a hub id (at ``revision``, pinned to the commit it resolves to) or local folder
    (``hub=False``); processor and tokenizer from the same place."""
    asked = revision
    commit, revision = hub_snapshot(checkpoint, revision, USE_RANDOM) if hub else (None, None)
    config = _hub_call(transformers.AutoConfig.from_pretrained, checkpoint, USE_RANDOM, revision)
    return Recipe(
        model_class=model_class,
        config=config,
        pretrained_from=checkpoint,
        processor=processor or _hub_processor(checkpoint, USE_RANDOM, revision),
        text_inputs=_tokenized_text_inputs(model_class, config, checkpoint, USE_RANDOM, revision),
        source=source,
        revision=revision,
        asked=asked,
        commit=commit,
    )


def _hub_recipe(cell):
    model_id = cell.model_id
    commit, revision = hub_snapshot(model_id, cell.revision, USE_LOCAL)
    config = _hub_call(transformers.AutoConfig.from_pretrained, model_id, USE_LOCAL, revision)
    model_class = task_model_class(config, cell.task)
    if cell.weights == "pretrained":
        return _pretrained_recipe(model_class, model_id, f"{model_id}{_at(cell.revision)} (pretrained)",
                                  revision=cell.revision)
    return Recipe(
        model_class=model_class,
        config=config,
        pretrained_from=None,
        processor=_hub_processor(model_id, USE_LOCAL, revision),
        text_inputs=_tokenized_text_inputs(model_class, config, model_id, USE_LOCAL, revision),
        source=f"{model_id}{_at(cell.revision)} config (random weights)",
        revision=revision,
        commit=commit,
    )


def _at(revision):
    return f"@{revision}" if revision else ""


def hub_snapshot(model_id, revision, instead):
    """(the commit, the revision to load every file at): the hub snapshot ``revision`` (None: main) resolves to,
    by where its config.json lies (``<cache>/models--org--name/snapshots/<commit>/``, online or offline), so
    the config, preprocessor, tokenizer and weights all come from that one commit and the record says which
    (``model_commit``). A snapshot not named by a commit (not the hub's cache layout): (None, ``revision``)."""
    path = _hub_call(lambda checkpoint, **hub: transformers.utils.cached_file(checkpoint, "config.json", **hub),
                     model_id, instead, revision)
    found = re.search(r"[/\\]snapshots[/\\]([0-9a-f]{40})[/\\]", str(path or ""))
    return (found.group(1), found.group(1)) if found else (None, revision)


def _local_recipe(cell, hashes=None):
    config_path = Path(cell.config_path)
    if not config_path.is_file():
        raise ModelError(f"config_path={str(config_path)!r} is not a file: point it at a config.json")
    _check_model_hash(cell, hashes)
    config = config_from_dict(_read_json(config_path))
    model_class = task_model_class(config, cell.task)
    if cell.weights == "pretrained":
        folder = str(config_path.parent)
        missing = missing_weights(folder, f"use weights=random for model {cell.model!r}")
        if missing:
            raise ModelError(missing)
        return _pretrained_recipe(model_class, folder, f"{folder} (pretrained)", _local_processor(config_path, config),
                                  hub=False)
    return Recipe(
        model_class=model_class,
        config=config,
        pretrained_from=None,
        processor=_local_processor(config_path, config),
        text_inputs=_shipped_text_inputs(model_class, config, SEED_MODELS["owlvit"].config_dir),
        source=f"{config_path} (random weights)",
    )


def _check_model_hash(cell, hashes=None):
    """A cell that names its local model's hash is measured from those files only: a record never claims a config
    or weights it was not measured with (the files edited after the host planned the run)."""
    if cell.model_hash is None:
        return
    found = local_model_hash(cell.config_path, cell.weights, hashes)
    if found != cell.model_hash:
        raise ModelError(
            f"model {cell.model!r}: its files changed since the run was planned ({cell.config_path}"
            f"{' and the weights beside it' if cell.weights == 'pretrained' else ''} hash to {found}, the cell "
            f"says {cell.model_hash}); rerun matrixbench run, which plans with the files as they are now")


def config_from_dict(config_dict):
    """A transformers config from a config.json dict, by its model_type."""
    model_type = config_dict.get("model_type")
    if model_type not in transformers.CONFIG_MAPPING:
        raise ModelError(
            f"config model_type={model_type!r} is unknown to transformers {transformers.__version__}: "
            "fix model_type in the config or use a transformers that has it"
        )
    return transformers.CONFIG_MAPPING[model_type].from_dict(config_dict)


def task_model_class(config, task):
    """The model class for a config and task, by the task's auto classes."""
    if task not in TASK_AUTO_CLASSES:
        raise ModelError(f"task={task!r} is not one of {sorted(TASK_AUTO_CLASSES)}")
    for auto_name in TASK_AUTO_CLASSES[task]:
        mapping = getattr(transformers, auto_name)._model_mapping
        if type(config) in mapping:
            return mapping[type(config)]
    raise ModelError(
        f"task={task!r}: transformers has no {task} head for model_type {config.model_type!r} "
        f"(looked in {', '.join(TASK_AUTO_CLASSES[task])}); pick the task the model was made for"
    )


def needs_text(model_class):
    return "input_ids" in inspect.signature(model_class.forward).parameters


def _shipped_text_inputs(model_class, config, config_dir):
    """Token ids of the text queries, from the shipped file: random weights have no tokenizer."""
    if not needs_text(model_class):
        return None
    if getattr(config, "model_type", None) not in CLIP_TEXT_MODEL_TYPES:
        raise ModelError(
            f"{model_class.__name__} needs text queries and random weights have no tokenizer; shipped CLIP "
            f"token ids fit only model types {CLIP_TEXT_MODEL_TYPES}: use weights=pretrained or a model_id"
        )
    text = model_inputs.load_text_inputs(config_dir / "text_inputs.json")
    max_length = config.text_config.max_position_embeddings
    if text["input_ids"].shape[-1] != max_length:
        raise ModelError(f"shipped token ids are {text['input_ids'].shape[-1]} long, the config wants {max_length}")
    return text


def _tokenized_text_inputs(model_class, config, checkpoint, instead, revision=None):
    if not needs_text(model_class):
        return None
    tokenizer = _hub_call(transformers.AutoTokenizer.from_pretrained, checkpoint, instead, revision)
    return model_inputs.tokenize_queries(tokenizer, config.text_config.max_position_embeddings)


def _hub_processor(checkpoint, instead, revision=None):
    settings, _ = _hub_call(transformers.ImageProcessingMixin.get_image_processor_dict, checkpoint, instead, revision)
    return model_inputs.make_processor(settings)


def _local_processor(config_path, config):
    """preprocessor_config.json beside the config, else a plain resize to the config's image size."""
    beside = config_path.parent / "preprocessor_config.json"
    if beside.is_file():
        return model_inputs.make_processor(_read_json(beside))
    side = getattr(config, "image_size", None)
    side = side if isinstance(side, int) else 224
    return model_inputs.make_processor({"image_processor_type": "ViTImageProcessor",
                                        "size": {"height": side, "width": side}})


def _hub_call(function, checkpoint, instead, revision=None, asked=None):
    """A from_pretrained-style call (at ``revision``: a hub id's branch, tag or commit, resolved from the cell's
    ``asked`` one; None: main); offline without the files it says what to do instead."""
    try:
        return function(checkpoint, **({"revision": revision} if revision else {}))
    except OSError as exc:
        at = _where(revision, asked)
        raise ModelError(
            f"cannot load {checkpoint!r}{at} ({exc}). Mount a Hugging Face cache that holds it (HF_HOME), "
            f"allow hub access, or {instead}"
        ) from exc


def _where(revision, asked):
    if not revision:
        return ""
    if asked and asked != revision:
        return f" at revision {asked!r} (commit {revision})"
    return f" at revision {revision!r}"


def _read_json(path):
    return json.loads(Path(path).read_text())


def _merged(base, overrides):
    """base with overrides applied; nested dicts (e.g. backbone_config) merge key by key."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key not in ("size", "crop_size"):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged
