import json
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from runner import models  # noqa: E402
from runner.core import Cell  # noqa: E402
from runner.inputs import IMAGE_SIZE, TEXT_QUERIES  # noqa: E402

# Published parameter counts (millions): papers and model cards. Architecture facts, checked with 5%.
PUBLISHED_MILLIONS = {
    "vit": 86.6,  # ViT-B/16 with a 1000-class head
    "beit": 102.6,  # BEiT-base (86M) with a 21841-class head
    "convnext": 198,  # ConvNeXt-L, 224
    "resnet": 25.6,  # ResNet-50
    "segformer": 3.8,  # SegFormer-B0
    "mask2former": 47,  # Mask2Former Swin-T (COCO panoptic)
    "maskformer": 102,  # MaskFormer Swin-B (ADE20K)
    "mobilenet": 2.5,  # MobileNetV2 1.0 features (2.2M) + DeepLabV3 head (0.3M)
    "owlvit": 153,  # OWL-ViT B/32
    "detr-resnet-101": 60,  # DETR-R101
    "conditional-detr": 44,  # Conditional DETR-R50
    "detr": 41,  # DETR-R50
}


def cell(name, **overrides):
    spec = models.SEED_MODELS.get(name)
    values = {"model": name, "model_id": None, "config_path": None, "task": spec.task if spec else None,
              "weights": "random", "size": "full", "batch_size": 1, "mode": "eager", "fullgraph": False,
              "dtype": "float32"}
    values.update(overrides)
    return Cell(**values)


def shipped(name, filename):
    return json.loads((models.SEED_MODELS[name].config_dir / filename).read_text())


def construct(recipe):
    """Full-size construction without weights memory where this torch/transformers allows it."""
    try:
        with torch.device("meta"):
            return models.instantiate(recipe)
    except (NotImplementedError, RuntimeError):  # transformers 4.x calls .item() while building
        return models.instantiate(recipe)


def expected_image_hw(preprocessor):
    """(height, width) the processor's documented rules give the 640x480 test image."""
    size = preprocessor["size"]
    if preprocessor.get("do_center_crop"):
        return preprocessor["crop_size"]["height"], preprocessor["crop_size"]["width"]
    if "crop_pct" in preprocessor:  # ConvNeXt: resize to shortest_edge / crop_pct, centre-crop a square
        return size["shortest_edge"], size["shortest_edge"]
    if "height" in size:
        height, width = size["height"], size["width"]
    else:
        height, width = _shortest_edge_resize(IMAGE_SIZE[1], IMAGE_SIZE[0], size)
    divisor = preprocessor.get("size_divisibility") or 1
    return math.ceil(height / divisor) * divisor, math.ceil(width / divisor) * divisor


def _shortest_edge_resize(height, width, size):
    short, long = size["shortest_edge"], size.get("longest_edge")
    if long and max(height, width) / min(height, width) * short > long:
        short = int(round(long * min(height, width) / max(height, width)))
    if height <= width:
        return short, int(short * width / height)
    return int(short * height / width), short


def test_registry_has_the_eleven_seed_models_plus_detr():
    assert len(models.DEFAULT_MODELS) == 11
    assert "detr" in models.SEED_MODELS and "detr" not in models.DEFAULT_MODELS
    assert set(models.SEED_MODELS) == set(PUBLISHED_MILLIONS)


@pytest.mark.parametrize("name", sorted(models.SEED_MODELS))
def test_each_model_ships_its_configs_and_names_existing_classes(name):
    spec = models.SEED_MODELS[name]
    for filename in ("config.json", "preprocessor_config.json", "tiny.json"):
        assert (spec.config_dir / filename).is_file()
    assert spec.task in models.TASK_AUTO_CLASSES
    model_class = getattr(transformers, spec.model_class, None)   # getattr(...) "is not None" could never fail
    assert isinstance(model_class, type) and issubclass(model_class, transformers.PreTrainedModel), spec.model_class
    assert model_class.config_class.model_type == shipped(name, "config.json")["model_type"]
    assert shipped(name, "preprocessor_config.json")["image_processor_type"] == spec.processor_class


@pytest.mark.parametrize("name, depths", [("detr-resnet-101", [3, 4, 23, 3]), ("detr", [3, 4, 6, 3]),
                                          ("conditional-detr", [3, 4, 6, 3])])
def test_detr_family_builds_its_resnet_without_timm_or_downloads(name, depths):
    config = shipped(name, "config.json")
    assert config["use_timm_backbone"] is False and config["use_pretrained_backbone"] is False
    assert config["backbone"] is None
    assert config["backbone_config"]["model_type"] == "resnet"
    assert config["backbone_config"]["depths"] == depths


@pytest.mark.parametrize("name", sorted(models.SEED_MODELS))
def test_full_size_random_model_has_the_published_parameter_count(name):
    recipe = models.make_recipe(cell(name))
    model = construct(recipe)
    assert type(model).__name__ == models.SEED_MODELS[name].model_class
    count = sum(parameter.numel() for parameter in model.parameters())
    assert count / 1e6 == pytest.approx(PUBLISHED_MILLIONS[name], rel=0.05)


@pytest.mark.parametrize("name", sorted(models.SEED_MODELS))
def test_full_size_input_shapes_follow_the_shipped_preprocessor(name):
    preprocessor = shipped(name, "preprocessor_config.json")
    height, width = expected_image_hw(preprocessor)
    shapes = models.input_shapes(cell(name, batch_size=3))
    assert shapes["pixel_values"] == (3, 3, height, width)
    if "pixel_mask" in shapes:
        assert shapes["pixel_mask"] == (3, height, width)
    if "input_ids" in shapes:
        text_length = shipped(name, "config.json")["text_config"]["max_position_embeddings"]
        assert shapes["input_ids"] == shapes["attention_mask"] == (3 * len(TEXT_QUERIES), text_length)


def test_input_shapes_match_the_seed_scripts_known_sizes():
    """The seed's COCO image through the hub processors: a guard on the rules above."""
    assert models.input_shapes(cell("vit"))["pixel_values"] == (1, 3, 224, 224)
    assert models.input_shapes(cell("detr-resnet-101"))["pixel_values"] == (1, 3, 800, 1066)
    owlvit = models.input_shapes(cell("owlvit"))
    assert owlvit["pixel_values"] == (1, 3, 768, 768) and owlvit["input_ids"] == (2, 16)


@pytest.mark.parametrize("name", sorted(models.SEED_MODELS))
def test_tiny_variant_runs_eager_with_batch_two(name):
    built = models.build(cell(name, size="tiny", batch_size=2), "cpu", "float32")
    assert type(built.model).__name__ == models.SEED_MODELS[name].model_class
    assert not built.model.training
    assert sum(parameter.numel() for parameter in built.model.parameters()) < 2_000_000
    with torch.no_grad():
        output = built.model(**built.inputs)
    assert output[0].shape[0] == 2
    assert torch.isfinite(output[0]).all()


def test_build_casts_model_and_float_inputs_to_the_dtype():
    built = models.build(cell("owlvit", size="tiny", batch_size=2), "cpu", "bfloat16")
    assert {parameter.dtype for parameter in built.model.parameters()} == {torch.bfloat16}
    assert built.inputs["pixel_values"].dtype == torch.bfloat16
    assert built.inputs["input_ids"].dtype == torch.long
    assert built.inputs["input_ids"].shape == (4, 16)


def test_random_weights_are_the_same_every_build():
    first = models.build(cell("resnet", size="tiny"), "cpu", torch.float32).model
    second = models.build(cell("resnet", size="tiny"), "cpu", torch.float32).model
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))


def _local_config(tmp_path, name):
    config = models._merged(shipped(name, "config.json"), shipped(name, "tiny.json")["config"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_other_model_from_a_local_config_without_preprocessor_resizes_to_its_image_size(tmp_path):
    path = _local_config(tmp_path, "vit")
    other = cell("my-vit", task="image-classification", config_path=str(path), batch_size=2)
    built = models.build(other, "cpu", "float32")
    assert isinstance(built.model, transformers.ViTForImageClassification)
    assert built.inputs["pixel_values"].shape == (2, 3, 32, 32)


def test_other_model_from_a_local_config_uses_the_preprocessor_beside_it(tmp_path):
    path = _local_config(tmp_path, "segformer")
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "SegformerImageProcessor", "size": {"height": 48, "width": 64}}))
    other = cell("my-segformer", task="image-segmentation", config_path=str(path))
    assert models.input_shapes(other) == {"pixel_values": (1, 3, 48, 64)}
    assert isinstance(models.build(other, "cpu", "float32").model, transformers.SegformerForSemanticSegmentation)


def test_other_model_with_a_task_its_architecture_lacks_is_refused(tmp_path):
    path = _local_config(tmp_path, "vit")
    with pytest.raises(models.ModelError, match="object-detection"):
        models.make_recipe(cell("my-vit", task="object-detection", config_path=str(path)))


def test_unreachable_hub_model_names_the_model_id_and_the_fix():
    other = cell("somebody", task="image-classification", model_id="no-such-org/no-such-model")
    with pytest.raises(models.ModelError, match="(?s)no-such-org/no-such-model.*HF_HOME"):
        models.make_recipe(other)


@pytest.mark.parametrize("overrides, message", [
    ({"task": "object-detection"}, "task='object-detection'"),
    ({"size": "tiny", "weights": "pretrained"}, "weights=random"),
])
def test_seed_model_cell_mistakes_are_refused_with_the_fix(overrides, message):
    with pytest.raises(models.ModelError, match=message):
        models.make_recipe(cell("vit", **overrides))


def test_unknown_model_without_id_or_config_is_refused():
    with pytest.raises(models.ModelError, match="model_id.*config_path"):
        models.make_recipe(cell("not-a-model", task="image-classification"))


def test_tiny_exists_only_for_shipped_models(tmp_path):
    other = cell("my-vit", task="image-classification", config_path=str(_local_config(tmp_path, "vit")), size="tiny")
    with pytest.raises(models.ModelError, match="size=tiny"):
        models.make_recipe(other)


def test_tiny_of_a_shipped_name_given_another_model_says_so_without_contradiction():
    renamed = cell("vit", task="image-classification", model_id="someone/other-vit", size="tiny")
    with pytest.raises(models.ModelError, match="'vit' is given as 'someone/other-vit', not the shipped") as raised:
        models.make_recipe(renamed)
    assert "no tiny variant" not in str(raised.value)


def test_pretrained_weights_load_from_a_local_checkpoint_folder(tmp_path):
    saved = models.build(cell("resnet", size="tiny"), "cpu", "float32").model
    with torch.no_grad():
        for parameter in saved.parameters():
            parameter.add_(1.0)  # not what a fresh seeded init would give
    saved.save_pretrained(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        models._merged(shipped("resnet", "preprocessor_config.json"), shipped("resnet", "tiny.json")["preprocessor"])))
    local = cell("my-resnet", task="image-classification", config_path=str(tmp_path / "config.json"),
                 weights="pretrained", batch_size=2)
    built = models.build(local, "cpu", "float32")
    loaded = built.model.state_dict()
    assert all(torch.equal(value, loaded[key]) for key, value in saved.state_dict().items())
    assert built.inputs["pixel_values"].shape == (2, 3, 32, 32)


def test_a_local_model_whose_files_changed_since_the_run_was_planned_is_not_built(tmp_path):
    """The cell's model_hash is what its record will claim: files that hash otherwise are refused, not measured."""
    path = _local_config(tmp_path, "vit")
    planned = models.local_model_hash(str(path), "random")
    mine = cell("my-vit", task="image-classification", config_path=str(path), model_hash=planned)
    assert isinstance(models.build(mine, "cpu", "float32").model, transformers.ViTForImageClassification)
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_hidden_layers": 3}))
    with pytest.raises(models.ModelError, match=f"'my-vit': its files changed.*the cell says {planned}"):
        models.build(mine, "cpu", "float32")


def test_a_local_models_hash_covers_what_it_is_measured_from(tmp_path):
    path = _local_config(tmp_path, "vit")
    config_only = models.local_model_hash(str(path), "random")
    (tmp_path / "model.safetensors").write_bytes(b"one")
    assert models.local_model_hash(str(path), "random") == config_only        # random weights: no weights read
    with_weights = models.local_model_hash(str(path), "pretrained")
    (tmp_path / "model.safetensors").write_bytes(b"two")
    assert models.local_model_hash(str(path), "pretrained") != with_weights
    with_weights = models.local_model_hash(str(path), "pretrained")
    (tmp_path / "optimizer.pt").write_bytes(b"a Trainer's state")             # read by no measurement
    assert models.local_model_hash(str(path), "pretrained") == with_weights
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(shipped("vit", "preprocessor_config.json")))
    assert models.local_model_hash(str(path), "random") != config_only         # the inputs' preprocessing
    renamed = tmp_path / "mine.json"
    renamed.write_text(path.read_text())
    assert models.local_model_hash(str(renamed), "random") == models.local_model_hash(str(path), "random")


def test_a_local_folder_without_weights_says_to_save_them_not_to_mount_a_hub_cache(tmp_path):
    local = cell("my-vit", task="image-classification", config_path=str(_local_config(tmp_path, "vit")),
                 weights="pretrained")
    with pytest.raises(models.ModelError, match=r"holds no weights.*save_pretrained.*weights=random") as raised:
        models.make_recipe(local)
    assert "HF_HOME" not in str(raised.value) and "hub" not in str(raised.value)


def test_pretrained_seed_model_offline_without_cache_says_how_to_fix():
    with pytest.raises(models.ModelError, match="(?s)google/vit-base-patch16-224.*weights=random"):
        models.make_recipe(cell("vit", weights="pretrained"))


def test_a_hub_style_detr_config_that_needs_timm_says_what_to_change(tmp_path):
    if transformers.utils.is_timm_available():
        pytest.skip("timm is installed: the timm backbone builds")
    config = models._merged(shipped("detr", "config.json"), shipped("detr", "tiny.json")["config"])
    config.update({"use_timm_backbone": True, "backbone_config": None, "backbone": "resnet50"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    other = cell("hub-detr", task="object-detection", config_path=str(tmp_path / "config.json"))
    with pytest.raises(models.ModelError, match="use_timm_backbone=false"):
        models.build(other, "cpu", "float32")
