"""Transformer networks built from their configurations (``transformers``), never downloaded.

The configuration objects carry the published shapes (BERT-base: 12 layers, 768 wide, 12 heads;
GPT-2 small: 12 layers, 768 wide, 12 heads, 50257 tokens); the weights are the library's seeded
initialisation. Each network takes token ids (batch, sequence) and returns one row of logits per
sequence, like the zoo's classifiers, so that every framework and analysis treats it alike.
Attention runs through ``scaled_dot_product_attention`` (the library's default), what people
run today.
"""

from __future__ import annotations

import os
from typing import Any

import torch


def _transformers() -> Any:
    # transformers imports TensorFlow when it finds it installed; TensorFlow must not share a
    # process with torch's compiler stack (mlms.isolation).
    os.environ.setdefault("USE_TF", "0")
    import transformers

    return transformers


class SequenceClassifier(torch.nn.Module):
    """BERT-base encoder with a two-class head on the [CLS] token."""

    def __init__(self) -> None:
        super().__init__()
        transformers = _transformers()
        config = transformers.BertConfig(num_labels=2, attn_implementation="sdpa")
        self.bert = transformers.BertForSequenceClassification(config)

    @property
    def pretrained(self) -> Any:
        """The transformers model, whose ``save_pretrained`` folder other frameworks convert."""
        return self.bert

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids).logits


class NextTokenModel(torch.nn.Module):
    """GPT-2 small: logits for the token after each sequence; ``step`` decodes with a cache."""

    def __init__(self) -> None:
        super().__init__()
        transformers = _transformers()
        self.gpt = transformers.GPT2LMHeadModel(transformers.GPT2Config(attn_implementation="sdpa"))

    @property
    def pretrained(self) -> Any:
        """The transformers model, whose ``save_pretrained`` folder other frameworks convert."""
        return self.gpt

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # The head runs on the last position only: the others' logits would be thrown away.
        hidden = self.gpt.transformer(input_ids=input_ids, use_cache=False).last_hidden_state
        return self.gpt.lm_head(hidden[:, -1])

    def step(self, input_ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        """Next-token logits for ``input_ids`` after the cached ``past`` (None: a prompt), and
        the cache that includes them."""
        out = self.gpt(input_ids=input_ids, past_key_values=past, use_cache=True)
        return out.logits[:, -1], out.past_key_values


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
    transformers = _transformers()
    if task == "text_generation":
        return PretrainedNextToken(transformers.AutoModelForCausalLM.from_pretrained(folder))
    if task == "image_classification":
        model = transformers.AutoModelForImageClassification.from_pretrained(folder)
        return PretrainedLogits(model, "pixel_values")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    return PretrainedLogits(model, "input_ids")
