"""The shipped models: name, hub id, task and classes, with their configs in runner/configs/.

Stdlib only, so the host can check a matrix against it (``validate``: a shipped model given the
wrong task) without importing torch; ``runner.models`` builds them.
"""
import dataclasses
import hashlib
import os
from pathlib import Path
from typing import List, Optional, Tuple, Union

from runner import hash_cache

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model the repository ships a config for."""

    name: str
    model_id: str
    task: str
    model_class: str  # transformers class name, e.g. "ViTForImageClassification"
    processor_class: str  # image processor class name without the Pil suffix
    in_default_matrix: bool = True

    @property
    def config_dir(self):
        return CONFIG_DIR / self.name


SEED_MODELS = {
    spec.name: spec
    for spec in (
        ModelSpec("vit", "google/vit-base-patch16-224", "image-classification",
                  "ViTForImageClassification", "ViTImageProcessor"),
        ModelSpec("beit", "microsoft/beit-base-patch16-224-pt22k-ft22k", "image-classification",
                  "BeitForImageClassification", "BeitImageProcessor"),
        ModelSpec("convnext", "facebook/convnext-large-224", "image-classification",
                  "ConvNextForImageClassification", "ConvNextImageProcessor"),
        ModelSpec("resnet", "microsoft/resnet-50", "image-classification",
                  "ResNetForImageClassification", "ConvNextImageProcessor"),
        ModelSpec("segformer", "nvidia/segformer-b0-finetuned-ade-512-512", "image-segmentation",
                  "SegformerForSemanticSegmentation", "SegformerImageProcessor"),
        ModelSpec("mask2former", "facebook/mask2former-swin-tiny-coco-panoptic", "image-segmentation",
                  "Mask2FormerForUniversalSegmentation", "Mask2FormerImageProcessor"),
        ModelSpec("maskformer", "facebook/maskformer-swin-base-ade", "image-segmentation",
                  "MaskFormerForInstanceSegmentation", "MaskFormerImageProcessor"),
        ModelSpec("mobilenet", "google/deeplabv3_mobilenet_v2_1.0_513", "image-segmentation",
                  "MobileNetV2ForSemanticSegmentation", "MobileNetV2ImageProcessor"),
        ModelSpec("owlvit", "google/owlvit-base-patch32", "object-detection",
                  "OwlViTForObjectDetection", "OwlViTImageProcessor"),
        ModelSpec("detr-resnet-101", "facebook/detr-resnet-101", "object-detection",
                  "DetrForObjectDetection", "DetrImageProcessor"),
        ModelSpec("conditional-detr", "microsoft/conditional-detr-resnet-50", "object-detection",
                  "ConditionalDetrForObjectDetection", "ConditionalDetrImageProcessor"),
        # The seed table's "Object Detection / DETR" row; not in the default matrix.
        ModelSpec("detr", "facebook/detr-resnet-50", "object-detection",
                  "DetrForObjectDetection", "DetrImageProcessor", in_default_matrix=False),
    )
}
DEFAULT_MODELS = tuple(name for name, spec in SEED_MODELS.items() if spec.in_default_matrix)


def shipped_spec(name: str, model_id: Optional[str] = None,
                 config_path: Optional[str] = None) -> Optional[ModelSpec]:
    """The shipped spec a model entry names (its name, and its hub id if given), or None."""
    spec = SEED_MODELS.get(name)
    if spec is None or config_path or model_id not in (None, spec.model_id):
        return None
    return spec


# What a local model is made of, beside its config.json: the preprocessing read from the config's folder, and with
# weights=pretrained the files from_pretrained and a tokenizer read from it (weights, their shard index, tokenizer
# files); not a Trainer's optimizer.pt / scheduler.pt / rng_state.pth, which no measurement reads.
PREPROCESSOR_FILE = "preprocessor_config.json"
CHECKPOINT_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".model")
HASH_CHUNK = 1 << 20
# The weights from_pretrained loads into a torch model from a folder (one file, or the index of its shards).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def missing_weights(folder: str, random_instead: str) -> Optional[str]:
    """Why ``folder`` cannot give a model its own weights (no WEIGHT_FILES in it), with the fixes (``random_instead``:
    how to ask for random weights instead, e.g. "set weights: random on models.mine"); None when it has them."""
    if any((Path(folder) / name).is_file() for name in WEIGHT_FILES):
        return None
    return (f"{folder} holds no weights ({', '.join(WEIGHT_FILES)}), and weights=pretrained measures the model with "
            f"the folder's own; write them there with model.save_pretrained(folder), or {random_instead} to measure "
            "its architecture with random weights")


def local_model_files(config_path: str, weights: str) -> List[Path]:
    """The files a model given by a local config.json (or save_pretrained folder) is measured from, sorted: the
    config itself, the preprocessor config beside it, and with ``weights`` "pretrained" the folder's weight and
    tokenizer files (top level, not hidden)."""
    config = Path(config_path)
    folder = config.parent
    if weights != "pretrained":
        found = [config, folder / PREPROCESSOR_FILE]
    else:
        found = [config, *(path for path in folder.iterdir()
                            if path.name.endswith(CHECKPOINT_SUFFIXES) and not path.name.startswith("."))]
    return sorted({path for path in found if path.is_file()}, key=lambda path: path.name)


def local_model_hash(config_path: str, weights: str, cache: Optional[Union[str, Path]] = None) -> str:
    """A short sha256 of what ``local_model_files`` names, each file by its name and content: a record of a local
    model says which config (and weights) it measured, and a resume can tell that they changed since. OSError
    when a file cannot be read. ``cache``: a runner.hash_cache file that remembers it by each file's (path, size,
    mtime_ns, inode), so unchanged files are not read again."""
    files = [("config" if path == Path(config_path) else path.name, path)   # the config's own name is no part of it
             for path in local_model_files(config_path, weights)]
    key = hash_cache.file_key(weights, files) if cache is not None else None
    if cache is not None and key is not None:
        remembered = hash_cache.lookup(cache, key[0])
        if remembered is not None:
            return remembered
    value = _hash_files(files)
    if cache is not None and key is not None and hash_cache.file_key(weights, files) == key:   # unchanged meanwhile
        hash_cache.remember(cache, key[0], value, key[1])
    return value


def _hash_files(files: List[Tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    for label, path in files:
        with open(path, "rb") as handle:
            digest.update(f"{label}\0{os.fstat(handle.fileno()).st_size}\0".encode())
            for chunk in iter(lambda: handle.read(HASH_CHUNK), b""):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()[:16]}"
