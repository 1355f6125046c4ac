"""Every transformer of the zoo on the transformers installed here (4.57 or 5.x, each through
what that version offers): built from its configuration with its seeded weights, one forward
of the full-size network, and its stored weights taken back by the loading path
(``mlms.zoo.architectures.with_weights``: the meta device, or a build without initialising)
giving the very same logits."""

from __future__ import annotations

import pytest
import torch

from mlms.zoo.architectures import build, from_transformers, with_weights
from mlms.zoo.catalog import all_models, get_model, labels_of

TRANSFORMERS = sorted(
    m.name
    for m in all_models()
    if m.origin == "zoo" and from_transformers(getattr(m.source_for("torch"), "builder", ""))
)


def test_the_zoo_has_its_transformer_families() -> None:
    assert {"bert_base", "gpt2_xl", "t5_small", "marian_en_de", "albert_base"} <= set(TRANSFORMERS)


@pytest.mark.slow
@pytest.mark.parametrize("name", TRANSFORMERS)
def test_a_zoo_transformer_builds_runs_and_loads_its_weights(name: str) -> None:
    manifest = get_model(name)
    source = manifest.source_for("torch")
    network = build(source.builder, source.seed)
    spec = manifest.inputs[0]
    tokens = torch.randint(0, spec.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = network(tokens)
    if manifest.outputs[0].type == "next_token":
        assert logits.shape == (2, spec.vocab_size)
    else:
        assert logits.shape == (2, len(labels_of(manifest)))
    assert torch.isfinite(logits).all() and logits.max() > logits.min()
    loaded = with_weights(manifest, network.state_dict()).eval()
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), logits, rtol=0, atol=0)
