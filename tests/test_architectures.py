"""Stored weights go into the bare network (``mlms.zoo.architectures.with_weights``): built on the
meta device and given the stored tensors themselves where every tensor then has data, built for
real and loaded where the network keeps a buffer the weights do not hold. Either way the
network computes what the one it was saved from computes."""

from __future__ import annotations

import torch

from mlms.zoo.architectures import build, with_weights
from mlms.zoo.catalog import get_model


def _saved(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    source = get_model(name).source_for("torch")
    network = build(source.builder, 1)
    return network, {k: v.clone() for k, v in network.state_dict().items()}


def test_a_network_whose_state_is_whole_takes_the_stored_tensors() -> None:
    original, state = _saved("resnet18")
    loaded = with_weights(get_model("resnet18"), state).eval()
    # The stored tensors themselves: no initialisation, no copy.
    assert loaded.conv1.weight.data_ptr() == state["conv1.weight"].data_ptr()
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])
    batch = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), original(batch), rtol=0, atol=0)


def test_a_buffer_the_state_lacks_is_made_by_a_real_build() -> None:
    """LeViT's attention bias indices are buffers that are not saved: the meta build would
    leave them without data."""
    original, state = _saved("levit_128")
    network = get_model("levit_128")
    loaded = with_weights(network, state).eval()
    first = next(iter(state))
    assert loaded.state_dict()[first].data_ptr() != state[first].data_ptr()  # loaded, a copy
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])
    batch = torch.rand(1, *network.inputs[0].shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), original(batch), rtol=0, atol=0)
