"""Every transformer of the zoo on the transformers installed here (4.57 or 5.x, each through
what that version offers): built from its configuration with its seeded weights, one forward
of the full-size network, and its stored weights taken back by the loading path
(``mlms.assets.architectures.with_weights``: the meta device, or a build without initialising)
giving the very same logits. A larger configuration of another zoo transformer's layers
(gpt2_xl of gpt2_small's) is checked through that one (``tests/representatives.py``)."""

from __future__ import annotations

import pytest
import torch

from mlms.assets.architectures import build, from_transformers, with_weights
from mlms.catalog.zoo import all_models, get_model, labels_of
from mlms.tracer.layer_kinds import normalise_kind
from tests.representatives import assert_each_stands_for_the_larger

TRANSFORMERS = sorted(
    m.name
    for m in all_models()
    if m.origin == "zoo" and from_transformers(getattr(m.source_for("torch"), "builder", ""))
)
#: The zoo's larger configurations of another of its transformers' layers, and that one.
LARGER = {"bert_large": "bert_base", "gpt2_medium": "gpt2_small", "gpt2_large": "gpt2_small",
          "gpt2_xl": "gpt2_small", "tinyllama_1b": "llama_mini"}  # fmt: skip


def test_the_zoo_has_its_transformer_families() -> None:
    assert {"bert_base", "gpt2_xl", "t5_small", "marian_en_de", "albert_base"} <= set(TRANSFORMERS)


def test_a_larger_configuration_has_the_layers_of_the_one_that_stands_for_it() -> None:
    assert_each_stands_for_the_larger(LARGER)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(TRANSFORMERS) - LARGER.keys()))
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


@pytest.mark.parametrize(
    "name",
    # transformers 4.57 names its attention modules by their kernel, 5 by their role.
    ["BertSdpaSelfAttention", "BertSelfAttention", "AlbertSdpaAttention", "AlbertAttention",
     "DistilBertSdpaAttention", "DistilBertSelfAttention", "LlamaAttention"],
)  # fmt: skip
def test_attention_modules_of_both_majors_are_one_kind(name: str) -> None:
    assert normalise_kind(name) == "attention"


def test_a_record_names_the_transformers_release_that_built_the_model(store) -> None:
    from mlms.assets.transformers_import import import_transformers
    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.runner import evaluate

    request = EvaluationRequest(
        model="llama_mini", framework="torch", iterations=1, warmup=0, min_seconds=0.0, seq_len=8
    )
    record = evaluate(request, store=store)
    assert record.software["transformers"] == import_transformers().__version__
