"""Architectures the zoo can build locally: builder name -> seeded ``torch.nn.Module``.

No weights are downloaded: torchvision models are built with ``weights=None`` after seeding, so
the same seed gives the same weights. Other frameworks' artifacts are exported from these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlms.errors import ManifestError
from mlms.zoo.digits import build_digits_cnn

TORCHVISION = (
    "alexnet",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "vgg16",
    "vgg19",
    "mobilenet_v2",
    "densenet121",
    "squeezenet1_1",
    "inception_v3",
)


def _torchvision(name: str) -> Callable[[int], Any]:
    def build(seed: int) -> Any:
        import torch
        import torchvision

        torch.manual_seed(seed)
        extra = {"aux_logits": True, "init_weights": True} if name == "inception_v3" else {}
        return torchvision.models.get_model(name, weights=None, **extra).eval()

    return build


BUILDERS: dict[str, Callable[[int], Any]] = {name: _torchvision(name) for name in TORCHVISION}
BUILDERS["digits_cnn"] = build_digits_cnn


def build(builder: str, seed: int) -> Any:
    try:
        factory = BUILDERS[builder]
    except KeyError:
        raise ManifestError(
            f"unknown builder {builder!r}; expected one of: {', '.join(sorted(BUILDERS))}"
        ) from None
    return factory(seed)
