"""Current architectures written as PyTorch modules with random weights, for the side-by-side
benchmark (benchmarks/zoo_side_by_side.py) and tests/test_arch_zoo.py.

`NAMES` maps a model's name to a builder returning (module in eval mode, example inputs);
`build(name)` seeds torch first, so a name always yields the same weights. Image models take
one 1×3×224×224 image (the detectors 1×3×320×320: SSDLite320's size), the language models
128 token ids.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from . import convnets, detection, mobile, segmentation, transformers
from .common import init_random

Example = tuple[torch.Tensor, ...]


def _image(size: int = 224) -> Example:
    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1)),)


def _tokens(vocab: int, mask: bool) -> Example:
    ids = torch.randint(0, vocab, (1, 128), generator=torch.Generator().manual_seed(1))
    return (ids, torch.ones(1, 128, dtype=torch.int64)) if mask else (ids,)


def _vision(
    cls: Callable[[], nn.Module], size: int = 224
) -> Callable[[], tuple[nn.Module, Example]]:
    return lambda: (init_random(cls()), _image(size))


NAMES: dict[str, Callable[[], tuple[nn.Module, Example]]] = {
    "mobilenet_v2": _vision(mobile.MobileNetV2),
    "mobilenet_v3_small": _vision(mobile.mobilenet_v3_small),
    "mobilenet_v3_large": _vision(mobile.mobilenet_v3_large),
    "efficientnet_b0": _vision(mobile.EfficientNetB0),
    "mnasnet1_0": _vision(mobile.MnasNet),
    "regnet_y_400mf": _vision(convnets.RegNetY400MF),
    "shufflenet_v2_x1_0": _vision(convnets.ShuffleNetV2),
    "convnext_tiny": _vision(convnets.ConvNeXtT),
    "vit_s16": _vision(transformers.ViT),
    "swin_t": _vision(transformers.SwinT),
    "bert_base_s128": lambda: (transformers.Bert().eval(), _tokens(30522, mask=True)),
    "gpt2_s128": lambda: (transformers.GPT2().eval(), _tokens(50257, mask=False)),
    "deeplabv3_resnet50": _vision(segmentation.DeepLabV3),
    "ssdlite320_mobilenet_v3": _vision(detection.SSDLite, 320),
    "fasterrcnn_mobilenet_v2": _vision(detection.FasterRCNN, 320),
}

# Several GFLOP or several hundred MB of weights per model: tests/test_arch_zoo.py marks these slow.
HEAVY = frozenset(
    (
        "convnext_tiny",
        "swin_t",
        "bert_base_s128",
        "gpt2_s128",
        "deeplabv3_resnet50",
        "fasterrcnn_mobilenet_v2",
        "vit_s16",
    )  # fmt: skip
)
DETECTORS = frozenset(("ssdlite320_mobilenet_v3", "fasterrcnn_mobilenet_v2"))


def build(name: str) -> tuple[nn.Module, Example]:
    torch.manual_seed(0)
    with torch.no_grad():
        return NAMES[name]()
