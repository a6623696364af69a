"""Real inputs for a cell: the test image, the seed's text queries, and the model's own processor.

The image is generated, not downloaded: a 640x480 RGB picture (the size of the seed's COCO image)
made with integer arithmetic only, so every call, machine and library version gives the same
pixels. Processors are built offline from a preprocessor config dict, preferring the PIL
classes (transformers 5.x names them ``<X>ImageProcessorPil``; its default classes need
torchvision) and falling back to ``<X>ImageProcessor`` (transformers 4.x).
"""
import json

import torch
import transformers
from PIL import Image

IMAGE_SIZE = (640, 480)  # width, height of the seed's COCO val2017 image 000000039769.jpg
TEXT_QUERIES = ("a photo of a cat", "a photo of a dog")  # the seed's OwlViT queries

# (centre x, centre y, radius, RGB) and (left, top, right, bottom, RGB): a few flat shapes so the
# picture has edges and regions, not only gradients.
_DISCS = ((170, 150, 90, (230, 80, 40)), (470, 300, 120, (40, 160, 90)), (330, 90, 45, (250, 230, 60)))
_BOXES = ((60, 320, 260, 440, (60, 70, 200)), (400, 40, 600, 140, (200, 200, 210)))
_CHECKER = (260, 200, 380, 300, 8)  # left, top, right, bottom, cell size in pixels


class InputError(Exception):
    """The inputs of a model cannot be made: the message says which setting and what to do."""


def test_image():
    """The deterministic 640x480 RGB test image (a new PIL image each call, same pixels)."""
    width, height = IMAGE_SIZE
    y = torch.arange(height).view(-1, 1).expand(height, width)
    x = torch.arange(width).view(1, -1).expand(height, width)
    rgb = torch.stack(_background(x, y, width, height), dim=-1)
    for cx, cy, radius, color in _DISCS:
        rgb[(x - cx) ** 2 + (y - cy) ** 2 <= radius**2] = torch.tensor(color)
    for left, top, right, bottom, color in _BOXES:
        rgb[top:bottom, left:right] = torch.tensor(color)
    rgb = _checker(rgb, x, y)
    data = bytes(rgb.to(torch.uint8).flatten().tolist())
    return Image.frombytes("RGB", IMAGE_SIZE, data)


def _background(x, y, width, height):
    """Smooth integer gradients: red across, green down, blue a triangle wave along a diagonal."""
    red = x * 255 // (width - 1)
    green = y * 255 // (height - 1)
    phase = (3 * x + 2 * y) % 512
    blue = torch.where(phase < 256, phase, 511 - phase)
    return red, green, blue


def _checker(rgb, x, y):
    left, top, right, bottom, cell = _CHECKER
    inside = (x >= left) & (x < right) & (y >= top) & (y < bottom)
    dark = ((x // cell + y // cell) % 2 == 0) & inside
    light = inside & ~dark
    rgb[dark] = torch.tensor((20, 20, 20))
    rgb[light] = torch.tensor((240, 240, 240))
    return rgb


def processor_class(type_name):
    """The image processor class for a hub ``image_processor_type`` / ``feature_extractor_type``."""
    base = _base_processor_name(type_name)
    for candidate in (base + "Pil", base):
        cls = getattr(transformers, candidate, None)
        if cls is not None:
            return cls
    raise InputError(
        f"image processor {type_name!r}: this transformers {transformers.__version__} has neither "
        f"{base}Pil nor {base}; set image_processor_type in the preprocessor config to a class it has"
    )


def _base_processor_name(type_name):
    name = type_name.replace("FeatureExtractor", "ImageProcessor")
    for suffix in ("Fast", "Pil"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def make_processor(preprocessor):
    """An image processor built offline from a preprocessor config dict."""
    type_name = preprocessor.get("image_processor_type") or preprocessor.get("feature_extractor_type")
    if not type_name:
        raise InputError(
            "preprocessor config has no image_processor_type (nor feature_extractor_type): "
            "add one, e.g. \"image_processor_type\": \"ViTImageProcessor\""
        )
    settings = {k: v for k, v in preprocessor.items() if k not in ("image_processor_type", "feature_extractor_type")}
    return processor_class(type_name).from_dict(settings)


def image_inputs(processor, image):
    """The processor's tensors for one image (batch size 1), e.g. pixel_values and pixel_mask."""
    encoded = processor(images=image, return_tensors="pt")
    return {name: value for name, value in encoded.items() if isinstance(value, torch.Tensor)}


def load_text_inputs(path):
    """Token ids shipped for offline text queries (see tools/make_owlvit_tokens.py)."""
    record = json.loads(path.read_text())
    if tuple(record["texts"]) != TEXT_QUERIES:
        raise InputError(f"{path} tokenizes {record['texts']}, not {list(TEXT_QUERIES)}: "
                         "rerun tools/make_owlvit_tokens.py")
    return {name: torch.tensor(record[name], dtype=torch.long) for name in ("input_ids", "attention_mask")}


def tokenize_queries(tokenizer, max_length):
    """The text queries as an OwlViT-style processor pads them: to max_length, with a mask."""
    encoded = tokenizer(list(TEXT_QUERIES), padding="max_length", max_length=max_length, return_tensors="pt")
    return {name: encoded[name] for name in ("input_ids", "attention_mask")}


def replicate(inputs, batch_size):
    """The batch-1 inputs repeated along dim 0 (text queries repeat per image, as the processor does)."""
    return {name: value.repeat(batch_size, *([1] * (value.dim() - 1))) for name, value in inputs.items()}


def to_device(inputs, device, dtype):
    """Inputs moved to the device; floating tensors cast to dtype, integer ones (ids, masks) kept."""
    return {
        name: value.to(device=device, dtype=dtype) if value.is_floating_point() else value.to(device=device)
        for name, value in inputs.items()
    }
