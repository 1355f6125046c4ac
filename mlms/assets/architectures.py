"""Architectures the zoo can build locally, as ``torch.nn.Module``.

No weights are downloaded: ``build`` seeds, constructs the torchvision or timm network with
no pretrained weights, the detector or segmenter (``vision_tasks``) or the transformer from its
configuration (``transformer_models``) (the same seed gives the same weights) and trains the few
that have a trainer (digits). Other frameworks' artifacts are exported from these weights;
``architecture`` gives the bare network that stored weights are loaded into.

A builder is a name in ``ARCHITECTURES`` or ``LIBRARY.NAME``: ``torchvision.NAME`` and
``timm.NAME`` (image classifiers), ``detection.NAME`` and ``segmentation.NAME`` (torchvision's),
``transformers.NAME`` (``transformer_models.CONFIGURED``), so that a manifest table names its
networks as data.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from mlms.assets.digits import digits_network, train_digits_cnn
from mlms.errors import ManifestError
from mlms.manifest import BuildSource, ModelManifest

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
    "vit_b_16",
)


def _torchvision(name: str) -> Callable[[], Any]:
    def network() -> Any:
        import torchvision

        extra = {"aux_logits": True, "init_weights": True} if name == "inception_v3" else {}
        model = torchvision.models.get_model(name, weights=None, **extra)
        if name.startswith("vit_"):
            import torch

            # torchvision zero-initialises ViT's classifier (for fine-tuning), which would make
            # every seeded logit 0 and every prediction a tie.
            torch.nn.init.trunc_normal_(model.heads.head.weight, std=0.02)
        return model

    return network


#: Builder name -> the network with freshly initialised weights.
ARCHITECTURES: dict[str, Callable[[], Any]] = {name: _torchvision(name) for name in TORCHVISION}
ARCHITECTURES["digits_cnn"] = digits_network


def _unknown(library: str, name: str, known: list[str]) -> ManifestError:
    return ManifestError(
        f"unknown builder {library}.{name}: {library} has no network {name!r} "
        f"(it has e.g. {', '.join(sorted(known)[:5])})"
    )


def _timm(name: str) -> Any:
    import timm

    if not timm.is_model(name):
        raise _unknown("timm", name, timm.list_models("resnet*"))
    # An ImageNet-1k head whatever the default configuration's classes (none, for a feature
    # extractor such as CLIP's towers): the zoo's classifiers share one label set.
    return timm.create_model(name, pretrained=False, num_classes=1000)


def _configured(name: str) -> Any:
    from mlms.assets.transformer_models import CONFIGURED, configured

    if name not in CONFIGURED:
        raise _unknown("transformers", name, list(CONFIGURED))
    return configured(name)


def _vision(library: str, name: str) -> Any:
    import torchvision

    module = {"torchvision": torchvision.models}.get(library) or getattr(
        torchvision.models, library
    )
    known = torchvision.models.list_models(module=module)
    if name not in known:
        raise _unknown(library, name, known)
    if library == "torchvision":
        return _torchvision(name)()
    from mlms.tasks.vision_tasks import Detector, Segmenter

    return Detector(name) if library == "detection" else Segmenter(name)


#: ``LIBRARY.NAME`` builders: the library's constructor for NAME.
LIBRARIES: dict[str, Callable[[str], Any]] = {
    "torchvision": lambda name: _vision("torchvision", name),
    "timm": _timm,
    "detection": lambda name: _vision("detection", name),
    "segmentation": lambda name: _vision("segmentation", name),
    "transformers": _configured,
}
#: Builders that are ``transformers.NAME`` under a name of their own.
TRANSFORMER_ALIASES = ("bert_base", "gpt2_small")
ARCHITECTURES.update({name: partial(_configured, name) for name in TRANSFORMER_ALIASES})


def from_transformers(builder: str) -> bool:
    """Whether ``builder`` makes its network from a transformers configuration."""
    return builder.startswith("transformers.") or builder in TRANSFORMER_ALIASES


#: One network constructed at a time in a process: a construction that skips initialising its
#: weights turns torch's initialisers off for the whole process (transformers' switch), which
#: must not reach a seeded build in another thread.
_CONSTRUCTING = threading.RLock()

#: Builders whose weights are trained at build time rather than left at their seeded init.
TRAINERS: dict[str, Callable[[Any, int], None]] = {"digits_cnn": train_digits_cnn}


def architecture(builder: str, *, initialise: bool = True) -> Any:
    """The untrained network, to load stored weights into. ``initialise=False``, for weights
    that are all replaced at once: a transformers network leaves its weights as allocated (the
    library's own switch, which its ``from_pretrained`` uses); other libraries initialise
    theirs as usual. Buffers are made either way."""
    factory = ARCHITECTURES.get(builder)
    library, _, name = builder.partition(".")
    if factory is None and (library not in LIBRARIES or not name):
        raise ManifestError(
            f"unknown builder {builder!r}; expected one of: {', '.join(sorted(ARCHITECTURES))}, "
            f"or LIBRARY.NAME with LIBRARY one of {', '.join(LIBRARIES)}"
        )
    skip = not initialise and from_transformers(builder)
    with _CONSTRUCTING, _uninitialised() if skip else contextlib.nullcontext():
        return factory() if factory is not None else LIBRARIES[library](name)


def _uninitialised() -> contextlib.AbstractContextManager:
    from mlms.assets.transformer_models import uninitialised

    return uninitialised()


def architecture_of(manifest: ModelManifest, *, initialise: bool = True) -> Any:
    """The manifest's network, untrained: stored weights are loaded into it (``architecture``
    says what ``initialise`` does)."""
    source = next((s for s in manifest.sources if isinstance(s, BuildSource)), None)
    if source is None:
        raise ManifestError(
            f"model {manifest.name!r}: the torch predictor needs a 'build' "
            "source naming the architecture"
        )
    return architecture(source.builder, initialise=initialise)


def with_weights(manifest: ModelManifest, state: dict[str, Any]) -> Any:
    """The manifest's network holding ``state`` (a stored torch asset's tensors): built on the
    meta device and given the stored tensors, which skips initialising weights that are
    replaced at once (seconds for the large networks, at every load); built for real where
    that leaves a tensor without data (a buffer the state does not hold) or the network cannot
    be built on the meta device, then without initialising what the library lets it skip."""
    import torch

    try:
        with torch.device("meta"):
            network = architecture_of(manifest)
        network.load_state_dict(state, assign=True)
        if not any(t.is_meta for t in [*network.parameters(), *network.buffers()]):
            return network
    except (RuntimeError, NotImplementedError):
        pass
    network = architecture_of(manifest, initialise=False)
    network.load_state_dict(state)
    return network


def build(builder: str, seed: int) -> Any:
    """The network with its canonical weights: seeded, and trained where it has a trainer."""
    import torch

    torch.manual_seed(seed)
    module = architecture(builder)
    trainer = TRAINERS.get(builder)
    if trainer is not None:
        trainer(module, seed)
    return module.eval()
