"""The shipped models: name, hub id, task and classes, with their configs in runner/configs/.

Stdlib only, so the host can check a matrix against it (``validate``: a shipped model given the
wrong task) without importing torch; ``runner.models`` builds them.
"""
import dataclasses
from pathlib import Path
from typing import Optional

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
