import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from runner import inputs  # noqa: E402
from runner.models import SEED_MODELS  # noqa: E402


def test_image_is_the_seed_coco_size_in_rgb():
    image = inputs.test_image()
    assert image.size == (640, 480)
    assert image.mode == "RGB"


def test_image_is_identical_every_call_and_a_fresh_object():
    first, second = inputs.test_image(), inputs.test_image()
    assert first.tobytes() == second.tobytes()
    first.putpixel((0, 0), (1, 2, 3))
    assert inputs.test_image().tobytes() == second.tobytes()


def test_image_has_gradients_and_shapes_not_a_flat_fill():
    colors = inputs.test_image().getcolors(maxcolors=640 * 480)
    assert len(colors) > 1000
    assert max(count for count, _ in colors) < 640 * 480 // 4


@pytest.mark.parametrize("type_name", ["ViTImageProcessor", "ViTFeatureExtractor", "ViTImageProcessorFast"])
def test_processor_class_prefers_the_pil_class(type_name):
    expected = getattr(transformers, "ViTImageProcessorPil", None) or transformers.ViTImageProcessor
    assert inputs.processor_class(type_name) is expected


def test_processor_class_rejects_an_unknown_type_by_name():
    with pytest.raises(inputs.InputError, match="NoSuchImageProcessor"):
        inputs.processor_class("NoSuchImageProcessor")


def test_make_processor_needs_a_type():
    with pytest.raises(inputs.InputError, match="image_processor_type"):
        inputs.make_processor({"size": {"height": 32, "width": 32}})


def test_make_processor_uses_the_config_values():
    processor = inputs.make_processor({"image_processor_type": "ViTImageProcessor",
                                       "size": {"height": 48, "width": 40}})
    encoded = inputs.image_inputs(processor, inputs.test_image())
    assert tuple(encoded["pixel_values"].shape) == (1, 3, 48, 40)


def test_replicate_repeats_images_and_text_queries_per_image():
    single = {"pixel_values": torch.rand(1, 3, 4, 4), "input_ids": torch.tensor([[1, 2], [3, 4]])}
    batch = inputs.replicate(single, 3)
    assert batch["pixel_values"].shape == (3, 3, 4, 4)
    assert all(torch.equal(image, single["pixel_values"][0]) for image in batch["pixel_values"])
    assert batch["input_ids"].tolist() == [[1, 2], [3, 4]] * 3


def test_to_device_casts_floats_and_keeps_integer_tensors():
    moved = inputs.to_device({"pixel_values": torch.rand(1, 3), "pixel_mask": torch.ones(1, 3, dtype=torch.long)},
                             "cpu", torch.bfloat16)
    assert moved["pixel_values"].dtype == torch.bfloat16
    assert moved["pixel_mask"].dtype == torch.long


def test_shipped_owlvit_tokens_are_the_seed_queries_padded_with_a_mask():
    text = inputs.load_text_inputs(SEED_MODELS["owlvit"].config_dir / "text_inputs.json")
    ids, mask = text["input_ids"], text["attention_mask"]
    assert ids.shape == mask.shape == (len(inputs.TEXT_QUERIES), 16)
    assert ids[0, 0] == ids[1, 0]  # the same start token
    for row, row_mask in zip(ids, mask):
        length = int(row_mask.sum())
        assert row_mask[:length].all() and not row_mask[length:].any()
        assert row[length - 1] == ids.max()  # CLIP's end token is the highest id; pooling relies on it
        assert (row[length:] == 0).all()  # OwlViT pads with "!", id 0
    assert ids[0, : int(mask[0].sum()) - 2].tolist() == ids[1, : int(mask[1].sum()) - 2].tolist()  # "a photo of a"
    assert ids[0].tolist() != ids[1].tolist()  # cat vs dog
