"""Stored weights go into the bare network (``mlms.assets.architectures.with_weights``): built on
the meta device and given the stored tensors themselves where every tensor then has data, built
for real and loaded where the network keeps a buffer the weights do not hold. Either way the
network computes what the one it was saved from computes."""

from __future__ import annotations

import torch

from mlms.assets.architectures import build, with_weights
from mlms.assets.transformers_import import import_transformers
from mlms.catalog.zoo import get_model


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


def test_a_transformer_is_built_for_real_without_initialising_its_weights(monkeypatch) -> None:
    """BERT's position ids are unsaved buffers, so it is built for real; its weights, all
    replaced by the stored ones, are left as allocated (transformers' own switch), and the
    switch is off again for the next seeded build."""
    bert = import_transformers().models.bert.modeling_bert.BertPreTrainedModel
    original, state = _saved("bert_base")
    initialised = []  # modules whose weights were initialised with data (not on the meta device)
    own = bert._init_weights

    def spy(self, module: torch.nn.Module) -> None:
        if any(not p.is_meta for p in module.parameters(recurse=False)):
            initialised.append(module)
        own(self, module)

    monkeypatch.setattr(bert, "_init_weights", spy)
    loaded = with_weights(get_model("bert_base"), state).eval()
    assert initialised == []
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])
    tokens = torch.randint(0, 1000, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), original(tokens), rtol=0, atol=0)
    again, _ = _saved("bert_base")
    assert initialised and all(torch.equal(again.state_dict()[k], v) for k, v in state.items())
