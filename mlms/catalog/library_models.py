"""Every architecture timm and torchvision register, by name: ``timm:NAME`` and
``torchvision:NAME`` (docs/DESIGN.md, "Models by name").

Names, tasks and inputs come from the libraries' own registries, never from a list kept here:
timm's ``list_models`` and each architecture's default ``pretrained_cfg`` (input size, crop
fraction, mean and std; timm's models are image classifiers); torchvision's ``list_models`` per
submodule, which says the task, and for a classifier its default weights' evaluation transform
(read from the weights enum, nothing downloaded). A detector or segmenter resizes inside its
network, so its feed (input size, mean and std) and post-processing are the zoo table row that
builds the same network, under the library's name. Weights are seeded like the zoo's (the
manifest's builder is ``timm.NAME``, ``torchvision.NAME``, ``detection.NAME`` or
``segmentation.NAME``), and a classifier gets an ImageNet-1k head whatever classes its default
configuration has. The manifest's version is the library's: another release may build another
network, whose seeded weights are stored apart.

An architecture mlms cannot feed (video clips, optical flow's pairs of frames, torchvision's
quantized networks, which it builds only from trained weights, a non-square input, a detector
with no zoo row) is refused in one line saying why, and left out of the listing. Listing
instantiates no network; it imports the two libraries (and torch), so only ``mlms models --all``
and a model named this way pay for that.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from mlms.catalog import zoo
from mlms.errors import InvalidArgument, UnknownModel
from mlms.manifest import BuildSource, ModelManifest, manifest_from_data

#: The libraries whose architectures are named ``LIBRARY:NAME``.
LIBRARIES = ("timm", "torchvision")
#: Classes of the head a classifier is built with, and their label file.
IMAGENET_CLASSES = 1000
IMAGENET_LABELS = "imagenet1k"


def is_library_name(name: str) -> bool:
    """Whether ``name`` is ``LIBRARY:NAME`` for a library of ``LIBRARIES`` (checked without
    importing it)."""
    library, colon, architecture = name.partition(":")
    return bool(colon) and library in LIBRARIES and bool(architecture)


@dataclass(frozen=True)
class Architecture:
    """One registered architecture: how to make its manifest, or why mlms cannot feed it."""

    #: ``LIBRARY:NAME``.
    name: str
    #: What the library says it does, in mlms's task names where it has one.
    task: str
    #: Why mlms cannot feed it; empty when it can.
    refused: str = ""
    #: The manifest's data (validated on first use), for one it can feed.
    data: Callable[[], dict[str, Any]] | None = None


def library_manifest(name: str) -> ModelManifest:
    """The manifest of ``LIBRARY:NAME``; ``UnknownModel`` naming the closest registered names,
    ``InvalidArgument`` saying why mlms cannot feed an architecture the library has."""
    library = name.partition(":")[0]
    found = architectures(library).get(name)
    if found is None:
        close = difflib.get_close_matches(name, architectures(library), n=3, cutoff=0.6)
        hint = (
            f"closest: {', '.join(close)}"
            if close
            else f"'mlms models --all' lists the {len(architectures(library))} it has"
        )
        raise UnknownModel(f"unknown model {name!r}: {library} registers no such network; {hint}")
    if found.refused:
        raise InvalidArgument(f"model {name!r} cannot be evaluated: {found.refused}")
    return _manifest(name)


def library_manifests() -> list[ModelManifest]:
    """The manifest of every architecture of ``LIBRARIES`` that mlms can feed, by name."""
    return [
        _manifest(a.name)
        for library in LIBRARIES
        for a in architectures(library).values()
        if not a.refused
    ]


def refused_architectures() -> dict[str, str]:
    """``LIBRARY:NAME`` -> why mlms cannot feed it, for every such architecture."""
    return {
        a.name: a.refused
        for library in LIBRARIES
        for a in architectures(library).values()
        if a.refused
    }


@cache
def _manifest(name: str) -> ModelManifest:
    library = name.partition(":")[0]
    data = architectures(library)[name].data
    assert data is not None  # only an architecture that is not refused is asked for
    return manifest_from_data(data(), f"{library}'s registry: {name}")


def architectures(library: str) -> dict[str, Architecture]:
    """Every architecture ``library`` registers, by ``LIBRARY:NAME``."""
    return _REGISTRIES[library]()


@cache
def _timm() -> dict[str, Architecture]:
    import timm
    from timm.models import get_pretrained_cfg

    found = {}
    for network in timm.list_models():
        name = f"timm:{network}"
        config = get_pretrained_cfg(network)
        channels, height, width = config.input_size
        if height != width or channels not in (1, 3):
            found[name] = Architecture(
                name,
                "image_classification",
                refused=f"its default input is {channels}x{height}x{width}, and mlms feeds "
                "square crops of RGB or grey images",
            )
            continue
        found[name] = Architecture(
            name,
            "image_classification",
            data=_classifier_data(
                name,
                timm.__version__,
                f"timm.{network}",
                f"timm's {network} (its default configuration: {config.tag or 'untagged'})",
                shape=(channels, height),
                # timm's own eval transform: the crop is crop_pct of the resized image.
                resize=math.floor(height / config.crop_pct),
                mean=config.mean,
                std=config.std,
            ),
        )
    return found


#: torchvision's submodules whose networks mlms cannot feed, and why.
_TORCHVISION_REFUSED = {
    "video": "a video classifier takes clips of frames, which mlms does not feed",
    "optical_flow": "an optical-flow network takes pairs of frames and returns a flow field, "
    "which mlms does not feed",
    "quantization": "torchvision makes its quantized networks only from trained weights, "
    "and mlms builds seeded ones (its float version is torchvision:{float})",
}
#: torchvision's submodules of detectors and segmenters, by mlms's task.
_TORCHVISION_TASKS = {"detection": "object_detection", "segmentation": "semantic_segmentation"}


@cache
def _torchvision() -> dict[str, Architecture]:
    import torchvision

    models = torchvision.models
    version = torchvision.__version__
    found = {}
    for network in models.list_models(module=models):
        name = f"torchvision:{network}"
        found[name] = Architecture(
            name, "image_classification", data=_torchvision_classifier(network, version)
        )
    rows = _zoo_rows()
    for module, task in _TORCHVISION_TASKS.items():
        for network in models.list_models(module=getattr(models, module)):
            name = f"torchvision:{network}"
            row = rows.get(f"{module}.{network}")
            if row is None:
                found[name] = Architecture(
                    name,
                    task,
                    refused=f"no row of the zoo's {task} table builds {network}, and that row "
                    "is what says how mlms feeds the network and decodes its outputs",
                )
            else:
                found[name] = Architecture(name, task, data=_renamed(row, name, version))
    for module, why in _TORCHVISION_REFUSED.items():
        for network in models.list_models(module=getattr(models, module)):
            name = f"torchvision:{network}"
            reason = why.format(float=network.removeprefix("quantized_"))
            found[name] = Architecture(name, module, refused=reason)
    return found


_REGISTRIES: dict[str, Callable[[], dict[str, Architecture]]] = {
    "timm": _timm,
    "torchvision": _torchvision,
}


def _torchvision_classifier(network: str, version: str) -> Callable[[], dict[str, Any]]:
    import inspect

    from torchvision.models import get_model_weights

    entries = list(get_model_weights(network))
    default = get_model_weights(network).DEFAULT
    # The default weights' transform, unless those weights need a larger input than the
    # network built without them takes (ViT-H/14's SWAG weights: 518 pixels, the bare
    # network 224): then the entry with the smallest such need.
    weights = min(entries, key=lambda w: (tuple(w.meta["min_size"]), w is not default))
    transform = weights.transforms
    settings = {
        key: parameter.default
        for key, parameter in inspect.signature(transform.func).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    } | transform.keywords
    crop = settings["crop_size"]
    return _classifier_data(
        f"torchvision:{network}",
        version,
        f"torchvision.{network}",
        f"torchvision's {network} (the transform of its {weights.name} weights)",
        shape=(3, crop),
        resize=settings["resize_size"],
        mean=settings["mean"],
        std=settings["std"],
    )


def _classifier_data(
    name: str,
    version: str,
    builder: str,
    description: str,
    *,
    shape: tuple[int, int],
    resize: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
) -> Callable[[], dict[str, Any]]:
    channels, side = shape
    library = name.partition(":")[0]

    def data() -> dict[str, Any]:
        return {
            "name": name,
            "version": version,
            "task": "image_classification",
            "description": f"{description}; seeded weights, an ImageNet-1k head",
            "frameworks": [{"name": "torch", "version": ">=2.0"}],
            "inputs": [
                {
                    "name": "image",
                    "shape": [channels, side, side],
                    "dtype": "float32",
                    "layout": "CHW",
                    "preprocessing": {
                        "color": "RGB" if channels == 3 else "L",
                        "resize": resize,
                        "crop": side,
                        "scale": 255.0,
                        "mean": list(mean),
                        "std": list(std),
                    },
                }
            ],
            "outputs": [{"name": "logits", "type": "classification", "labels": IMAGENET_LABELS}],
            "sources": [{"kind": "build", "builder": builder, "seed": 0}],
            "attributes": {"library": library, "dataset": IMAGENET_LABELS},
        }

    return data


def _zoo_rows() -> dict[str, ModelManifest]:
    """The zoo's models by their builder (``detection.NAME``, ...)."""
    rows = {}
    for manifest in zoo.all_models():
        source = next((s for s in manifest.sources if isinstance(s, BuildSource)), None)
        if source is not None:
            rows.setdefault(source.builder, manifest)
    return rows


def _renamed(row: ModelManifest, name: str, version: str) -> Callable[[], dict[str, Any]]:
    def data() -> dict[str, Any]:
        library = name.partition(":")[0]
        return row.model_dump(mode="json") | {
            "name": name,
            "version": version,
            "description": f"{row.description} (the zoo's {row.name} under {library}'s name)",
            "attributes": {**row.attributes, "library": library},
        }

    return data
