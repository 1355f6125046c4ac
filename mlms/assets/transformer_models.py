"""Transformer networks built from their configurations (``transformers``), never downloaded.

The configuration objects carry the published shapes (BERT-base: 12 layers, 768 wide, 12 heads;
GPT-2 small: 12 layers, 768 wide, 12 heads, 50257 tokens); the weights are the library's seeded
initialisation. Each network takes token ids (batch, sequence) and returns one row of logits per
sequence, like the zoo's classifiers, so that every framework and analysis treats it alike.
Attention runs through ``scaled_dot_product_attention`` (the library's default), what people
run today.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import torch

from mlms.assets.transformers_import import import_transformers
from mlms.errors import UnsupportedFramework


class SequenceClassifier(torch.nn.Module):
    """An encoder with a two-class head on its first token, kept as ``attribute`` (the layers'
    names start with it)."""

    def __init__(self, model: Any, attribute: str = "bert") -> None:
        super().__init__()
        self.attribute = attribute
        self.add_module(attribute, model)

    @property
    def pretrained(self) -> Any:
        """The transformers model, whose ``save_pretrained`` folder other frameworks convert."""
        return getattr(self, self.attribute)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.pretrained(input_ids=input_ids).logits


class NextTokenModel(torch.nn.Module):
    """A decoder (GPT-2, Llama): logits for the token after each sequence; ``step`` decodes
    with a cache. Kept as ``attribute`` (the layers' names start with it)."""

    def __init__(self, model: Any, attribute: str = "gpt") -> None:
        super().__init__()
        self.attribute = attribute
        self.add_module(attribute, model)

    @property
    def pretrained(self) -> Any:
        """The transformers model, whose ``save_pretrained`` folder other frameworks convert."""
        return getattr(self, self.attribute)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # The head runs on the last position only: the others' logits would be thrown away.
        model = self.pretrained
        hidden = model.base_model(input_ids=input_ids, use_cache=False).last_hidden_state
        return model.lm_head(hidden[:, -1])

    def step(self, input_ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        """Next-token logits for ``input_ids`` after the cached ``past`` (None: a prompt), and
        the cache that includes them."""
        out = self.pretrained(input_ids=input_ids, past_key_values=past, use_cache=True)
        return out.logits[:, -1], out.past_key_values


class Translator(torch.nn.Module):
    """An encoder-decoder (T5, Marian): the source sequence in, logits for the first target
    token out; ``step`` decodes further tokens with the encoder's output and the decoder's
    cache (``--generate``)."""

    def __init__(self, model: Any, attribute: str) -> None:
        super().__init__()
        self.attribute = attribute
        self.add_module(attribute, model)

    @property
    def pretrained(self) -> Any:
        return getattr(self, self.attribute)

    def _start(self, input_ids: torch.Tensor) -> torch.Tensor:
        start = self.pretrained.config.decoder_start_token_id
        return torch.full((input_ids.shape[0], 1), start, dtype=input_ids.dtype,
                          device=input_ids.device)  # fmt: skip

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.pretrained(
            input_ids=input_ids, decoder_input_ids=self._start(input_ids), use_cache=False
        )
        return out.logits[:, -1]

    def step(self, input_ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        """Logits for the next target token: for ``past`` None, ``input_ids`` is the source
        (encoded once, kept in the cache); else the last target token."""
        if past is None:
            encoded = self.pretrained.get_encoder()(input_ids=input_ids)
            out = self.pretrained(
                encoder_outputs=encoded, decoder_input_ids=self._start(input_ids), use_cache=True
            )
        else:
            encoded, cache = past
            out = self.pretrained(
                encoder_outputs=encoded,
                decoder_input_ids=input_ids,
                past_key_values=cache,
                use_cache=True,
            )
        return out.logits[:, -1], (encoded, out.past_key_values)


#: Builder name (after ``transformers.``) -> what wraps it, the transformers configuration and
#: model classes, the attribute it is kept as, and the published shapes over the configuration's
#: defaults.
CONFIGURED: dict[str, tuple[str, str, str, str, dict[str, Any]]] = {
    "bert_base": ("classifier", "BertConfig", "BertForSequenceClassification", "bert", {}),
    "bert_large": (
        "classifier",
        "BertConfig",
        "BertForSequenceClassification",
        "bert",
        {
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
    ),
    "distilbert_base": (
        "classifier",
        "DistilBertConfig",
        "DistilBertForSequenceClassification",
        "distilbert",
        {},
    ),
    "roberta_base": (
        "classifier",
        "RobertaConfig",
        "RobertaForSequenceClassification",
        "roberta",
        {"vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1},
    ),
    "albert_base": (
        "classifier",
        "AlbertConfig",
        "AlbertForSequenceClassification",
        "albert",
        {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    ),
    "gpt2_small": ("next_token", "GPT2Config", "GPT2LMHeadModel", "gpt", {}),
    "gpt2_medium": (
        "next_token",
        "GPT2Config",
        "GPT2LMHeadModel",
        "gpt",
        {"n_embd": 1024, "n_layer": 24, "n_head": 16},
    ),
    "gpt2_large": (
        "next_token",
        "GPT2Config",
        "GPT2LMHeadModel",
        "gpt",
        {"n_embd": 1280, "n_layer": 36, "n_head": 20},
    ),
    "gpt2_xl": (
        "next_token",
        "GPT2Config",
        "GPT2LMHeadModel",
        "gpt",
        {"n_embd": 1600, "n_layer": 48, "n_head": 25},
    ),
    # TinyLlama-1.1B's shapes (22 layers, 2048 wide, 32 heads sharing 4 key-value heads).
    "tinyllama_1b": (
        "next_token",
        "LlamaConfig",
        "LlamaForCausalLM",
        "llama",
        {
            "vocab_size": 32000,
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 22,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5,
        },
    ),
    # The same architecture at the size of a quick check (CI, --hw cpu --tensor-parallel 2).
    "llama_mini": (
        "next_token",
        "LlamaConfig",
        "LlamaForCausalLM",
        "llama",
        {
            "vocab_size": 32000,
            "hidden_size": 256,
            "intermediate_size": 704,
            "num_hidden_layers": 4,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "max_position_embeddings": 2048,
        },
    ),
    # T5Config's defaults are t5-small's; T5 starts its target with the padding token.
    "t5_small": (
        "translator",
        "T5Config",
        "T5ForConditionalGeneration",
        "t5",
        {"decoder_start_token_id": 0},
    ),
    # Helsinki-NLP's opus-mt-en-de shapes.
    "marian_en_de": (
        "translator",
        "MarianConfig",
        "MarianMTModel",
        "marian",
        {
            "vocab_size": 58101,
            "d_model": 512,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "encoder_attention_heads": 8,
            "decoder_attention_heads": 8,
            "encoder_ffn_dim": 2048,
            "decoder_ffn_dim": 2048,
            "max_position_embeddings": 512,
            "pad_token_id": 58100,
            "decoder_start_token_id": 58100,
            "scale_embedding": True,
            "activation_function": "swish",
        },
    ),
}


#: Where each transformers major keeps ``no_init_weights``: 5 in ``initialization``, 4 in
#: ``modeling_utils``; the first that has it is used.
NO_INIT_WEIGHTS = ("transformers.initialization", "transformers.modeling_utils")


def uninitialised() -> contextlib.AbstractContextManager:
    """transformers' switch that leaves new weights as allocated, for the whole process while it
    is on (``mlms.assets.architectures`` builds one network at a time): a model built inside it
    holds uninitialised memory until its stored weights are loaded."""
    transformers = import_transformers()
    for module in NO_INIT_WEIGHTS:
        try:
            switch = getattr(importlib.import_module(module), "no_init_weights", None)
        except ModuleNotFoundError:
            continue
        if switch is not None:
            return switch()
    raise UnsupportedFramework(
        f"transformers {transformers.__version__} has no no_init_weights in "
        f"{' or '.join(NO_INIT_WEIGHTS)}"
    )


def configured(name: str) -> torch.nn.Module:
    """The network ``CONFIGURED[name]`` describes, with the library's seeded initialisation."""
    kind, config_class, model_class, attribute, values = CONFIGURED[name]
    transformers = import_transformers()
    if kind != "translator":
        values = {"attn_implementation": "sdpa", **values}
    if kind == "classifier":
        values = {"num_labels": 2, **values}
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**values))
    if kind == "classifier":
        return SequenceClassifier(model, attribute)
    if kind == "next_token":
        return NextTokenModel(model, attribute)
    return Translator(model, attribute)


class PretrainedLogits(torch.nn.Module):
    """A transformers classifier loaded from a folder: its logits for one input tensor (token
    ids, or pixel values)."""

    def __init__(self, model: Any, input_name: str) -> None:
        super().__init__()
        self.model = model
        self.input_name = input_name

    @property
    def pretrained(self) -> Any:
        return self.model

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(**{self.input_name: batch}).logits


class PretrainedNextToken(torch.nn.Module):
    """A transformers causal language model loaded from a folder: logits for the token after
    each sequence; ``step`` decodes with a cache."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    @property
    def pretrained(self) -> Any:
        return self.model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits[:, -1]

    def step(self, input_ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        out = self.model(input_ids=input_ids, past_key_values=past, use_cache=True)
        return out.logits[:, -1], out.past_key_values


def pretrained_module(folder: str, task: str) -> torch.nn.Module:
    """The ``save_pretrained`` folder's model for ``task``, returning one row of logits per
    input, like the zoo's networks."""
    transformers = import_transformers()
    if task == "text_generation":
        return PretrainedNextToken(transformers.AutoModelForCausalLM.from_pretrained(folder))
    if task == "image_classification":
        model = transformers.AutoModelForImageClassification.from_pretrained(folder)
        return PretrainedLogits(model, "pixel_values")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    return PretrainedLogits(model, "input_ids")
