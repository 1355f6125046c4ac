"""Zoo models that stand for larger ones in the tests that build, run or export at full size.

A model stands for another built of the very same layer classes, only more of them or wider
(resnet152 for resnet50's bottleneck blocks, gpt2_xl for gpt2_small's GPT-2 blocks): what
such a test checks (the export, the seeded build, the loading path) runs the same code on
both, and the larger one adds only time. Every zoo model is still built and run, on the meta
device, by ``tests/test_zoo_tables.py``.
"""

from __future__ import annotations

from mlms.assets.architectures import architecture_of
from mlms.catalog.zoo import get_model


def _layers_and_size(name: str) -> tuple[set[str], int]:
    """The layer classes of ``name``'s network and its number of parameters (built on the meta
    device: no weight allocated)."""
    import torch

    with torch.device("meta"):
        network = architecture_of(get_model(name))
    kinds = {f"{type(m).__module__}.{type(m).__qualname__}" for m in network.modules()}
    return kinds, sum(p.numel() for p in network.parameters())


def assert_each_stands_for_the_larger(larger: dict[str, str]) -> None:
    """Each ``larger`` model (key) has exactly its representative's (value) layer classes and
    more parameters."""
    for name, representative in larger.items():
        kinds, size = _layers_and_size(name)
        representative_kinds, representative_size = _layers_and_size(representative)
        assert kinds == representative_kinds, (name, representative, kinds ^ representative_kinds)
        assert size > representative_size, (name, size, representative, representative_size)
